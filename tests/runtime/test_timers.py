from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_actors.store import Store
from hermes_actors.store.writer import StoreWriter
from hermes_actors.testing import FakeClock
from hermes_actors.timers import TimerService


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
