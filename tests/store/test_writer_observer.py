"""The store writer's commit observer: one call per transaction, with its writes, its duration and whether it
committed; an observer that fails does not stop the writer."""

from __future__ import annotations

import functools
import queue
import threading
from pathlib import Path

import pytest

from hermes_actors.store import SessionRecord, Store, StoreInterface
from hermes_actors.store.writer import StoreWriter

Seen = queue.SimpleQueue[tuple[int, float, bool]]


def _observer(seen: Seen, writes: int, seconds: float, *, committed: bool) -> None:
    seen.put((writes, seconds, committed))


def create(store: StoreInterface, *, session_id: str) -> SessionRecord:
    return store.create_session("cli", session_id=session_id)


def test_each_transaction_is_reported_with_its_writes_and_duration(db_path: Path) -> None:
    seen: Seen = queue.SimpleQueue()
    writer = StoreWriter(Store.open(db_path), observer=functools.partial(_observer, seen))
    try:
        writer.call(functools.partial(create, session_id="lone"))
        writes, seconds, committed = seen.get(timeout=10)
        assert (writes, committed) == (1, True)
        assert seconds >= 0

        entered, release = threading.Event(), threading.Event()

        def hold(store: StoreInterface) -> None:
            entered.set()
            assert release.wait(10)

        first = writer.submit(hold)
        assert entered.wait(10)
        futures = [writer.submit(functools.partial(create, session_id=f"s{i}")) for i in range(5)]
        release.set()
        first.result(10)
        for future in futures:
            future.result(10)
        assert seen.get(timeout=10)[::2] == (1, True)  # the held write, alone
        assert seen.get(timeout=10)[::2] == (5, True)  # the five queued behind it, in one commit

        with pytest.raises(ValueError, match="refused"):
            writer.call(lambda store: (_ for _ in ()).throw(ValueError("refused")))
        assert seen.get(timeout=10)[::2] == (1, False)
    finally:
        writer.stop()


def test_an_observer_that_raises_is_logged_and_the_writer_goes_on(
    db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(writes: int, seconds: float, *, committed: bool) -> None:
        raise RuntimeError("observer bug")

    writer = StoreWriter(Store.open(db_path), observer=broken)
    try:
        assert writer.call(functools.partial(create, session_id="a")).id == "a"
        assert writer.call(functools.partial(create, session_id="b")).id == "b"
    finally:
        writer.stop()
    assert "the store writer's commit observer failed" in caplog.text
