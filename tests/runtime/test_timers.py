from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_actors.runtime.timers import TimerService
from hermes_actors.store import Store, StoreInterface
from hermes_actors.store.writer import StoreWriter
from hermes_actors.testing import FakeClock


@pytest.fixture
def writer(db_path: Path) -> Iterator[StoreWriter]:
    started = StoreWriter(Store.open(db_path))
    yield started
    started.stop()


def test_a_durable_deadline_fires_when_the_clock_passes_it(writer: StoreWriter) -> None:
    clock = FakeClock()
    fired: list[tuple[str, bytes | None]] = []
    done = threading.Event()
    timers = TimerService(writer=writer, clock=clock)

    def handle(name: str, payload: bytes | None) -> None:
        fired.append((name, payload))
        done.set()

    timers.on("reset:", handle)
    timers.start()
    try:
        timers.schedule("reset:s1", clock.now + 60, b"idle")
        timers.poke()
        assert not done.wait(0.05)
        clock.advance(60)
        timers.poke()
        assert done.wait(5)
        assert fired == [("reset:s1", b"idle")]
    finally:
        timers.stop()
    writer.call(lambda store: None)  # let the removal of the fired row commit
    assert writer.call(lambda store: store.timers.all()) == []


def test_moving_or_cancelling_a_deadline_replaces_the_old_one(writer: StoreWriter) -> None:
    clock = FakeClock()
    fired: list[str] = []
    done = threading.Event()
    timers = TimerService(writer=writer, clock=clock)

    def handle(name: str, payload: bytes | None) -> None:
        fired.append(name)
        done.set()

    timers.on("", handle)
    timers.start()
    try:
        timers.schedule("a", clock.now + 10)
        timers.schedule("a", clock.now + 100)  # moved later
        timers.schedule("b", clock.now + 20)
        timers.cancel("b")
        timers.schedule("c", clock.now + 30)
        clock.advance(50)
        timers.poke()
        assert done.wait(5)
        assert timers.pending() == {"a": clock.now + 50}
        assert fired == ["c"]
    finally:
        timers.stop()


def test_durable_deadlines_are_stored_for_the_next_start(writer: StoreWriter) -> None:
    clock = FakeClock()
    timers = TimerService(writer=writer, clock=clock)
    timers.schedule("reset:s9", clock.now + 3600, b"daily")
    writer.call(lambda store: None)
    rows = writer.call(lambda store: store.timers.all())
    assert [(r.name, r.due_at, r.payload) for r in rows] == [("reset:s9", clock.now + 3600, b"daily")]


def test_deadline_changes_queued_behind_a_commit_are_stored_by_one_write_with_the_latest_of_each(
    writer: StoreWriter,
) -> None:
    # A session's deadline moves at every turn: 300 moves must not cost 300 writer jobs.
    clock = FakeClock()
    timers = TimerService(writer=writer, clock=clock)
    entered, release = threading.Event(), threading.Event()

    def hold(store: StoreInterface) -> None:
        entered.set()
        assert release.wait(10)

    writer.submit(hold)
    assert entered.wait(10)
    before = writer.statistics().writes
    for turn in range(100):
        for session in range(3):
            timers.schedule(f"reset:s{session}", clock.now + 60 + turn, b"idle")
    timers.cancel("reset:s2")
    release.set()
    rows = writer.call(lambda store: store.timers.all())
    assert [(r.name, r.due_at, r.payload) for r in rows] == [
        ("reset:s0", clock.now + 159, b"idle"),
        ("reset:s1", clock.now + 159, b"idle"),
    ]
    assert writer.statistics().writes - before == 3  # the held job, one flush of 301 changes, the read
    assert timers.pending() == {"reset:s0": clock.now + 159, "reset:s1": clock.now + 159}


def test_recurring_ticks_repeat_at_their_interval() -> None:
    clock = FakeClock()
    ticks = threading.Semaphore(0)
    timers = TimerService(clock=clock)
    timers.every("tick", 5, ticks.release)
    timers.start()
    try:
        for _ in range(3):
            clock.advance(5)
            timers.poke()
            assert ticks.acquire(timeout=5)
    finally:
        timers.stop()


@pytest.mark.slow
def test_a_one_shot_callback_fires_once_moves_when_armed_again_and_is_never_stored(writer: StoreWriter) -> None:
    clock = FakeClock()
    calls: list[float] = []
    fired = threading.Semaphore(0)
    timers = TimerService(writer=writer, clock=clock)
    timers.start()

    def wake() -> None:
        calls.append(clock.now)
        fired.release()

    try:
        timers.once("retry", clock.now + 10, wake)
        timers.once("retry", clock.now + 20, wake)  # moved later
        timers.once("gone", clock.now + 5, wake)
        timers.cancel("gone")
        clock.advance(15)
        timers.poke()
        assert not fired.acquire(timeout=0.2)
        clock.advance(10)
        timers.poke()
        assert fired.acquire(timeout=5)
        clock.advance(100)
        timers.poke()
        assert not fired.acquire(timeout=0.2)
        assert len(calls) == 1
        assert timers.pending() == {}
    finally:
        timers.stop()
    assert writer.call(lambda store: store.timers.all()) == []
