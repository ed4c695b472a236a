"""PooledActor: a pykka actor that holds a thread of its pool only while it has messages, and is otherwise pykka's."""

from __future__ import annotations

import contextvars
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pykka
import pytest

from hermes_actors.runtime.actors import ActorPool, PooledActor

WAIT_S = 10.0

_bound: contextvars.ContextVar[str | None] = contextvars.ContextVar("test_pooled_bound", default=None)


def _ask(ref: pykka.ActorRef[Any], message: Any) -> Any:
    return ref.ask(message, block=True, timeout=WAIT_S)


def _pool_threads(name: str) -> list[threading.Thread]:
    """The workers of the pool ``name`` (not its starter, which stays)."""
    return [t for t in threading.enumerate() if t.name.startswith(f"{name}-") and not t.name.endswith("-starter")]


class _Recorder(PooledActor):
    """Answers ("got", message, what its context holds); counts how many of its messages run at once."""

    pool = ActorPool("test-pooled-recorder", idle_timeout_s=0.2)

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.started = 0
        self.running = 0
        self.most_at_once = 0
        self.seen: list[Any] = []
        self.stopped = threading.Event()

    def on_start(self) -> None:
        self.started += 1
        _bound.set(self.name)

    def on_receive(self, message: Any) -> Any:
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            if isinstance(message, threading.Event):  # hold the worker until the test sets it
                assert message.wait(WAIT_S)
            if message == "raise":
                raise ValueError("asked to raise")
            self.seen.append(message)
            return ("got", message, _bound.get(), self.started, self.most_at_once)
        finally:
            self.running -= 1

    def on_stop(self) -> None:
        self.stopped.set()


class _Failing(PooledActor):
    pool = ActorPool("test-pooled-failing")

    def __init__(self, failed: threading.Event) -> None:
        super().__init__()
        self.failed = failed

    def on_receive(self, message: Any) -> Any:
        raise ValueError(f"no {message}")

    def on_failure(self, exception_type: Any, exception_value: Any, traceback: Any) -> None:
        self.failed.set()


@pytest.fixture
def refs() -> Iterator[list[pykka.ActorRef[Any]]]:
    started: list[pykka.ActorRef[Any]] = []
    yield started
    for ref in started:
        ref.stop(block=False)


def test_an_idle_pooled_actor_holds_no_thread_and_answers_when_asked_again(
    refs: list[pykka.ActorRef[Any]],
) -> None:
    refs.extend(_Recorder.start(f"actor {i}") for i in range(20))
    assert [_ask(ref, "first")[:2] for ref in refs] == [("got", "first")] * 20
    done = threading.Event()
    checker = threading.Thread(target=lambda: _wait_until_no_pool_threads(done))
    checker.start()
    checker.join(WAIT_S)
    assert done.is_set(), f"pool threads still running: {_pool_threads('test-pooled-recorder')}"
    # Every actor is alive without a thread, and the pool starts what is needed again.
    assert [_ask(ref, "again")[:2] for ref in refs] == [("got", "again")] * 20
    assert all(ref.is_alive() for ref in refs)


def _wait_until_no_pool_threads(done: threading.Event) -> None:
    """Idle workers end after the pool's idle timeout (0.2 s); watch their threads go by joining them (a worker
    still being started joins the watch when it appears)."""
    deadline = time.monotonic() + WAIT_S
    while (workers := _pool_threads("test-pooled-recorder")) and time.monotonic() < deadline:
        for thread in workers:
            thread.join(max(0.0, deadline - time.monotonic()))
    if not _pool_threads("test-pooled-recorder"):
        done.set()


def test_messages_of_one_actor_run_one_at_a_time_in_the_order_sent(refs: list[pykka.ActorRef[Any]]) -> None:
    ref = _Recorder.start("ordered")
    refs.append(ref)

    def send(sender: int) -> list[Any]:
        futures = [ref.ask((sender, i), block=False) for i in range(200)]
        return [future.get(timeout=WAIT_S) for future in futures]

    with ThreadPoolExecutor(4) as senders:
        answers = list(senders.map(send, range(4)))
    for sender, got in enumerate(answers):
        assert [a[1] for a in got] == [(sender, i) for i in range(200)]
    assert max(a[4] for got in answers for a in got) == 1  # never two of its messages at once


def test_on_start_runs_once_before_the_first_message_in_a_context_of_the_actor_s_own(
    refs: list[pykka.ActorRef[Any]],
) -> None:
    first, second = _Recorder.start("first"), _Recorder.start("second")
    refs += [first, second]
    for _ in range(3):
        assert _ask(first, "x")[2:4] == ("first", 1)
        assert _ask(second, "x")[2:4] == ("second", 1)
    assert _bound.get() is None  # nothing leaks into the caller's context


def test_an_actor_blocked_in_a_message_holds_up_no_other_actor(refs: list[pykka.ActorRef[Any]]) -> None:
    blocked, free = _Recorder.start("blocked"), _Recorder.start("free")
    refs += [blocked, free]
    release = threading.Event()
    held = blocked.ask(release, block=False)
    queued = blocked.ask("after the release", block=False)
    assert _ask(free, "meanwhile")[1] == "meanwhile"
    release.set()
    assert held.get(timeout=WAIT_S)[0] == "got"
    assert queued.get(timeout=WAIT_S)[1] == "after the release"


def test_stop_runs_on_stop_and_answers_later_asks_with_actor_dead_error() -> None:
    ref = _Recorder.start("stopping")
    release = threading.Event()
    held = ref.ask(release, block=False)
    stopping = ref.stop(block=False)
    behind_the_stop = ref.ask("behind the stop", block=False)
    release.set()
    assert held.get(timeout=WAIT_S)[0] == "got"
    assert stopping.get(timeout=WAIT_S) is True
    with pytest.raises(pykka.ActorDeadError):
        behind_the_stop.get(timeout=WAIT_S)
    with pytest.raises(pykka.ActorDeadError):
        _ask(ref, "after")
    with pytest.raises(pykka.ActorDeadError):
        ref.tell("after")
    assert not ref.is_alive()


def test_an_ask_that_raises_returns_the_error_and_the_actor_goes_on(refs: list[pykka.ActorRef[Any]]) -> None:
    ref = _Recorder.start("raising")
    refs.append(ref)
    with pytest.raises(ValueError, match="asked to raise"):
        _ask(ref, "raise")
    assert _ask(ref, "still here")[1] == "still here"


def test_a_told_message_that_raises_runs_on_failure_and_stops_the_actor() -> None:
    failed = threading.Event()
    ref = _Failing.start(failed)
    ref.tell("message")
    assert failed.wait(WAIT_S)
    with pytest.raises(pykka.ActorDeadError):
        _ask(ref, "another")


def test_a_pool_starts_a_worker_for_each_job_that_finds_none_idle() -> None:
    pool = ActorPool("test-pool-grows", idle_timeout_s=0.2)
    release = threading.Event()
    entered = [threading.Event() for _ in range(3)]
    names: list[str] = []

    def job(i: int) -> None:
        names.append(threading.current_thread().name)
        entered[i].set()
        assert release.wait(WAIT_S)

    for i in range(3):
        pool.run(lambda i=i: job(i))  # type: ignore[misc]
    try:
        assert all(e.wait(WAIT_S) for e in entered)  # three jobs blocked at once: three workers
        assert len(set(names)) == 3
        assert all(name.startswith("test-pool-grows-") for name in names)
    finally:
        release.set()


def test_a_pooled_actor_s_stop_flag_wakes_whoever_waits_on_it() -> None:
    ref = _Recorder.start("waited on")
    assert ref.actor_stopped.wait(0.01) is False  # a timed wait on a live actor times out
    with ThreadPoolExecutor(1) as waiter:
        waited = waiter.submit(ref.actor_stopped.wait, WAIT_S)
        assert ref.stop(block=True, timeout=WAIT_S) is True
        assert waited.result(WAIT_S) is True
    assert ref.actor_stopped.is_set()
    assert ref.actor_stopped.wait(0) is True


def test_pooled_actors_have_distinct_urns_in_uuid_form(refs: list[pykka.ActorRef[Any]]) -> None:
    refs.extend(_Recorder.start(f"urn {i}") for i in range(3))
    urns = [ref.actor_urn for ref in refs]
    assert len(set(urns)) == 3
    assert all(uuid.UUID(urn).urn == urn for urn in urns)
