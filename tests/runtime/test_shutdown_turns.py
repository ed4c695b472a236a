"""A gateway stopped while turns wait for the agent: the stop takes the drain and no more, the turns commit and send
nothing (their late answers are dropped), and their inbox rows stay pending for the next start. ``/stop`` is another
matter: ``test_turns.test_stop_invalidates_the_running_turn_so_its_late_result_is_dropped``.

The restart that runs them again is a real ``hermesd``'s: ``tests/daemon/test_shutdown_turns.py``."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from hermes_actors.agents.base import AgentReply, EchoAgent, TurnInput
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.testing import open_fake_gateway, poll_until

DRAIN_S = 0.2
MARGIN_S = 2.0  # the stop of every actor, the store's checkpoint: well under the 5 s an actor stop may take


class HeldAgent(EchoAgent):
    """An echo agent whose calls wait for ``release`` (60 s at most); ``entered`` counts the calls begun, ``left``
    is set once every begun call has returned."""

    runs_inline = False

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)
        self.calls = 0
        self.returned = 0
        self.left = threading.Event()
        self._lock = threading.Lock()

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        with self._lock:
            self.calls += 1
        self.entered.release()
        self.release.wait(60)
        try:
            return super().run_turn(turn, timeout_s=timeout_s)
        finally:
            with self._lock:
                self.returned += 1
                if self.returned == self.calls:
                    self.left.set()


def _stop_timed(gateway: Gateway) -> float:
    started = time.monotonic()
    gateway.stop(timeout=DRAIN_S)
    return time.monotonic() - started


def _stored(path: Path) -> tuple[list[str], list[str], int]:
    """(the texts of every stored message, the texts of the pending inbox rows, the outbox's row count)."""
    from hermes_actors.messages import decode_inbound
    from hermes_actors.store import Store

    with Store.open(path, readonly=True) as store:
        messages = [m.content or "" for s in store.list_sessions() for m in store.load_transcript(s.id)]
        pending = [decode_inbound(row.payload).text for row in store.inbox.pending()]
        outbox = len(store.outbox.unsent(limit=100))
    return messages, pending, outbox


def test_a_stop_during_an_agent_call_takes_the_drain_and_leaves_the_turn_uncommitted_and_pending(
    db_path: Path,
) -> None:
    agent = HeldAgent()
    with open_fake_gateway(db_path, agent=agent, auto_titles=False) as (gateway, fake):
        fake.push("a long job")
        assert agent.entered.acquire(timeout=10)
        elapsed = _stop_timed(gateway)
    assert elapsed < DRAIN_S + MARGIN_S, f"the stop took {elapsed:.1f} s with a {DRAIN_S} s drain"
    assert _stored(db_path) == ([], ["a long job"], 0)
    agent.release.set()  # the model answers after all: its answer goes nowhere
    assert agent.left.wait(10)
    assert fake.sent == []
    assert _stored(db_path) == ([], ["a long job"], 0)


def test_a_call_still_queued_for_a_busy_pool_at_the_stop_is_given_up_too_not_reported_as_a_crash(
    db_path: Path,
) -> None:
    agent = HeldAgent()
    with open_fake_gateway(db_path, agent=agent, auto_titles=False, max_concurrent_agent_calls=1) as (gateway, fake):
        fake.push("first chat", chat_id="c1")
        assert agent.entered.acquire(timeout=10)
        fake.push("second chat", chat_id="c2")  # its call waits for the pool's one thread
        pool = gateway._runtime.agent_pool  # the calls submitted and not finished: the barrier
        poll_until(lambda: pool.running() == 2, 10, what="the second call queued")
        elapsed = _stop_timed(gateway)
    assert elapsed < DRAIN_S + MARGIN_S, f"the stop took {elapsed:.1f} s with a {DRAIN_S} s drain"
    agent.release.set()
    assert agent.left.wait(10)
    assert agent.calls == 1  # the queued call never ran
    assert fake.sent == []  # no "the agent failed unexpectedly (CancelledError)"
    messages, pending, outbox = _stored(db_path)
    assert (messages, sorted(pending), outbox) == ([], ["first chat", "second chat"], 0)
