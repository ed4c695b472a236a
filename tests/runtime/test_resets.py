from __future__ import annotations

import math
import queue
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from zoneinfo import ZoneInfo

from hermes_actors.agents.base import EchoAgent, Memory
from hermes_actors.lifecycle.policy import decode_reset_config
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.protocol import TurnOutcome
from hermes_actors.store import MessageRecord, Store
from hermes_actors.testing import FakeClock
from tests.runtime.conftest import MakeGateway
from tests.runtime.test_lifecycle import RecordingAgent

KEY = "agent:main:fake:dm:chat-1"
UTC = ZoneInfo("UTC")


class Ends:
    """Collects the outcomes of ended sessions, to wait on them without sleeping."""

    def __init__(self) -> None:
        self.ended: queue.SimpleQueue[str] = queue.SimpleQueue()

    def __call__(self, outcome: TurnOutcome) -> None:
        if outcome.ended:
            self.ended.put(outcome.session_id)

    def next(self, timeout: float = 5.0) -> str:
        return self.ended.get(timeout=timeout)


def idle(minutes: int = 10, **fields: object) -> object:
    return decode_reset_config({"mode": "idle", "idle_minutes": minutes, **fields})


def test_an_idle_session_resets_strictly_after_its_deadline_with_memories_saved_first(
    make_gateway: MakeGateway,
) -> None:
    clock = FakeClock()
    ends = Ends()
    agent = RecordingAgent()
    gateway, fake = make_gateway(agent=agent, clock=clock, reset=idle(10), on_turn=ends, tz=UTC)
    fake.push("remember that I like green tea")
    fake.pop()
    assert gateway.wait_idle()
    old = gateway.session_for(KEY)
    clock.advance(600)  # exactly at the deadline: not yet idle
    gateway.timers.poke()
    assert gateway.wait_idle()
    assert ends.ended.empty()
    clock.advance(0.001)
    gateway.timers.poke()
    assert ends.next() == old
    notice = fake.pop().text
    assert notice.startswith("This conversation was reset after 10 minutes without messages.")
    fake.push("hello again")
    assert fake.pop().text == "echo: hello again"
    assert gateway.wait_idle()
    assert agent.prompts_seen[-1] == "Known about the user:\n- I like green tea"  # in the next session's prompt
    with gateway.read() as store:
        assert old is not None
        assert store.get_session(old).end_reason == "idle"
        assert gateway.session_for(KEY) != old
        assert store.memories.for_user("fake:user-1") == ["I like green tea"]


def test_activity_moves_the_deadline(make_gateway: MakeGateway) -> None:
    clock = FakeClock()
    ends = Ends()
    gateway, fake = make_gateway(clock=clock, reset=idle(10), on_turn=ends)
    fake.push("one")
    fake.pop()
    clock.advance(500)
    fake.push("two")
    fake.pop()
    assert gateway.wait_idle()
    clock.advance(200)  # 700 s after the first message, 200 s after the last
    gateway.timers.poke()
    assert gateway.wait_idle()
    assert ends.ended.empty()
    assert gateway.timers.pending()[f"reset:{gateway.session_for(KEY)}"] > clock.now


def test_excluded_platforms_and_notify_false_get_no_notice(make_gateway: MakeGateway) -> None:
    clock = FakeClock()
    ends = Ends()
    gateway, fake = make_gateway(
        clock=clock, reset=idle(1, notify_exclude_platforms=["fake"]), on_turn=ends, platform="fake"
    )
    fake.push("hi")
    fake.pop()
    assert gateway.wait_idle()
    clock.advance(61)
    gateway.timers.poke()
    ends.next()
    assert gateway.wait_idle()
    assert [m.text for m in fake.sent] == ["echo: hi"]


def test_a_platform_override_can_switch_resets_off(make_gateway: MakeGateway) -> None:
    clock = FakeClock()
    config = decode_reset_config({"mode": "idle", "idle_minutes": 1, "platforms": {"fake": {"mode": "none"}}})
    gateway, fake = make_gateway(clock=clock, reset=config)
    fake.push("hi")
    fake.pop()
    assert gateway.wait_idle()
    assert set(gateway.timers.pending()) == {
        "passivation",
        "queue-prune",
        "inbox-released",
    }  # the recurring ticks: no reset armed


class BackgroundAgent(EchoAgent):
    def __init__(self, started_at: float | None) -> None:
        self.started_at = started_at

    def background_started_at(self, session_id: str) -> float | None:
        return self.started_at


class ReportingBackgroundAgent(BackgroundAgent):
    """Also reports when the process ends, as :class:`BackgroundEndReportingAgent`."""

    def __init__(self, started_at: float | None) -> None:
        super().__init__(started_at)
        self.callbacks: list[Callable[[str], None]] = []

    def on_background_ended(self, callback: Callable[[str], None]) -> None:
        self.callbacks.append(callback)

    def end_process(self, session_id: str) -> None:
        self.started_at = None
        for callback in self.callbacks:
            callback(session_id)


def hold_off_once(gateway: Gateway, clock: FakeClock, name: str, seconds: float) -> None:
    """Advance ``seconds`` and wait until the reset timer ``name`` has fired and been handled once more."""
    fired = gateway.timers.fire_count(name)
    clock.advance(seconds)
    gateway.timers.poke()
    # Until the handler has returned, the deadline still reads the one that fired.
    assert gateway.timers.wait_fired(name, fired + 1, timeout=10)
    assert gateway.wait_idle()


def test_a_young_background_process_keeps_the_session_until_it_is_too_old(make_gateway: MakeGateway) -> None:
    clock = FakeClock()
    ends = Ends()
    agent = BackgroundAgent(started_at=clock.now)
    gateway, fake = make_gateway(agent=agent, clock=clock, reset=idle(10, bg_process_max_age_hours=1), on_turn=ends)
    fake.push("start a devbox")
    fake.pop()
    assert gateway.wait_idle()
    session = gateway.session_for(KEY)
    name = f"reset:{session}"
    hold_off_once(gateway, clock, name, 601)
    assert ends.ended.empty()
    # Held off: checked again one idle interval later (not only when the process is too old). An idle deadline
    # fires at the next float after it (idle is due strictly after its deadline: resets._firing_time), so a
    # re-arm by the turn's activity and the hold-off's own retry differ by that one step at most.
    due = gateway.timers.pending()[name]
    assert clock.now + 600 <= due <= math.nextafter(clock.now + 600, math.inf)
    clock.advance(3600)
    gateway.timers.poke()
    assert ends.next() == session


def test_a_reset_held_off_by_a_background_process_runs_at_the_next_check_after_it_ended(
    make_gateway: MakeGateway,
) -> None:
    clock = FakeClock()
    ends = Ends()
    agent = BackgroundAgent(started_at=clock.now)
    gateway, fake = make_gateway(agent=agent, clock=clock, reset=idle(10), on_turn=ends)  # max age 24 h
    fake.push("start a long build")
    fake.pop()
    assert gateway.wait_idle()
    session = gateway.session_for(KEY)
    name = f"reset:{session}"
    start = clock.now
    hold_off_once(gateway, clock, name, 601)
    while clock.now < start + 2 * 3600:  # checked at every idle interval while the process runs
        assert ends.ended.empty()
        assert gateway.timers.pending()[name] <= clock.now + 600
        hold_off_once(gateway, clock, name, 600)
    assert ends.ended.empty()
    agent.started_at = None  # the build ended at +2 h; this agent does not report it
    clock.advance(600)
    gateway.timers.poke()
    assert ends.next() == session  # at the next check, not at start + 24 h
    assert clock.now <= start + 2 * 3600 + 1201


def test_a_reset_held_off_runs_as_soon_as_the_agent_reports_the_process_ended(make_gateway: MakeGateway) -> None:
    clock = FakeClock()
    ends = Ends()
    agent = ReportingBackgroundAgent(started_at=clock.now)
    gateway, fake = make_gateway(agent=agent, clock=clock, reset=idle(10), on_turn=ends)
    fake.push("start a long build")
    fake.pop()
    assert gateway.wait_idle()
    session = gateway.session_for(KEY)
    assert session is not None
    name = f"reset:{session}"
    hold_off_once(gateway, clock, name, 601)
    assert ends.ended.empty()
    agent.end_process(session)  # the clock does not move: the report alone triggers the check
    gateway.timers.poke()
    assert ends.next() == session
    with gateway.read() as store:
        assert store.get_session(session).end_reason == "idle"


def test_sessions_without_an_actor_are_reset_from_the_store_at_start(make_gateway: MakeGateway, db_path: Path) -> None:
    clock = FakeClock()
    with Store.open(db_path, clock=clock) as store:
        old = store.create_session(SessionSource(platform="fake", chat_id="chat-1"), routing_key=KEY)
        store.set_route(KEY, old.id)
    clock.advance(3600)
    ends = Ends()
    gateway, _ = make_gateway(clock=clock, reset=idle(10), on_turn=ends)
    assert ends.next() == old.id
    assert gateway.wait_idle()
    with gateway.read() as store:
        assert store.get_session(old.id).end_reason == "idle"
        assert store.get_route(KEY) is None


class SlowMemoryAgent(EchoAgent):
    def __init__(self) -> None:
        self.saving = threading.Event()
        self.release = threading.Event()

    def save_memories(self, history: Sequence[MessageRecord], *, timeout_s: float) -> list[Memory]:
        self.saving.set()
        assert self.release.wait(10)
        return []


def test_a_message_during_a_reset_lands_in_the_new_session(make_gateway: MakeGateway) -> None:
    clock = FakeClock()
    ends = Ends()
    agent = SlowMemoryAgent()
    gateway, fake = make_gateway(agent=agent, clock=clock, reset=idle(1, notify=False), on_turn=ends)
    fake.push("before")
    fake.pop()
    assert gateway.wait_idle()
    old = gateway.session_for(KEY)
    clock.advance(61)
    gateway.timers.poke()
    assert agent.saving.wait(5)  # the save-memory turn is running
    fake.push("during the reset")
    agent.release.set()
    assert ends.next() == old
    assert fake.pop().text == "echo: during the reset"
    assert gateway.wait_idle()
    with gateway.read() as store:
        assert old is not None
        assert [m.content for m in store.load_transcript(old)] == ["before", "echo: before"]
        new = gateway.session_for(KEY)
        assert new is not None
        assert new != old
        assert [m.content for m in store.load_transcript(new)] == ["during the reset", "echo: during the reset"]
