from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_actors.errors import StoreError, StoreFault
from hermes_actors.store import NewMessage, Role, SessionRecord, Store, StoreInterface
from hermes_actors.store.writer import StoreWriter, WriterClosedError


@pytest.fixture
def writer(db_path: Path) -> Iterator[StoreWriter]:
    started = StoreWriter(Store.open(db_path))
    yield started
    started.stop()


def test_a_lone_write_is_committed_at_once(writer: StoreWriter, db_path: Path) -> None:
    session = writer.call(lambda store: store.create_session("cli"))
    with Store.open(db_path, readonly=True) as reader:
        assert reader.get_session(session.id) == session
    assert writer.statistics().commits == 1


def create(store: StoreInterface, *, session_id: str) -> SessionRecord:
    return store.create_session("cli", session_id=session_id)


def test_writes_queued_behind_a_commit_share_the_next_one(writer: StoreWriter) -> None:
    entered = threading.Event()
    release = threading.Event()

    def slow(store: StoreInterface) -> None:
        entered.set()
        assert release.wait(10)

    first = writer.submit(slow)
    assert entered.wait(10)
    futures = [writer.submit(functools.partial(create, session_id=f"s{i}")) for i in range(50)]
    release.set()
    first.result(10)
    assert [f.result(10).id for f in futures] == [f"s{i}" for i in range(50)]
    stats = writer.statistics()
    assert (stats.writes, stats.commits, stats.largest_batch) == (51, 2, 50)


def test_a_failing_write_rolls_back_only_itself(writer: StoreWriter) -> None:
    entered = threading.Event()
    release = threading.Event()

    def hold(store: StoreInterface) -> None:
        entered.set()
        assert release.wait(10)

    def fail(store: StoreInterface) -> None:
        store.create_session("cli", session_id="doomed")
        raise ValueError("this write is wrong")

    writer.submit(hold)
    assert entered.wait(10)
    before = writer.submit(lambda store: store.create_session("cli", session_id="before"))
    failing = writer.submit(fail)
    after = writer.submit(lambda store: store.create_session("cli", session_id="after"))
    release.set()
    assert before.result(10).id == "before"
    assert after.result(10).id == "after"
    with pytest.raises(ValueError, match="this write is wrong"):
        failing.result(10)
    assert writer.call(lambda store: store.find_session("doomed")) is None


def test_a_full_database_fails_the_write_with_the_fix_and_keeps_earlier_writes(writer: StoreWriter) -> None:
    session = writer.call(lambda store: store.create_session("cli"))
    writer.call(lambda store: store.append_messages(session.id, [NewMessage(role=Role.USER, content="kept")]))

    def cap(store: StoreInterface) -> None:
        pages = store.sql.value("PRAGMA page_count")
        store.sql.execute(f"PRAGMA max_page_count = {pages}")

    writer.call(cap)
    with pytest.raises(StoreError, match=r"full; nothing of this write was saved.*Free disk space"):
        writer.call(
            lambda store: store.append_messages(session.id, [NewMessage(role=Role.USER, content="x" * 200_000)])
        )
    transcript = writer.call(lambda store: store.load_transcript(session.id))
    assert [m.content for m in transcript] == ["kept"]


def test_a_full_database_says_so_in_the_errors_fault(writer: StoreWriter) -> None:
    session = writer.call(lambda store: store.create_session("cli"))

    def cap(store: StoreInterface) -> None:
        store.sql.execute(f"PRAGMA max_page_count = {store.sql.value('PRAGMA page_count')}")

    writer.call(cap)
    with pytest.raises(StoreError) as refused:
        writer.call(
            lambda store: store.append_messages(session.id, [NewMessage(role=Role.USER, content="x" * 200_000)])
        )
    assert refused.value.fault is StoreFault.FULL


def test_a_stopped_writer_refuses_new_writes(db_path: Path) -> None:
    writer = StoreWriter(Store.open(db_path))
    pending = writer.submit(lambda store: store.create_session("cli", session_id="last"))
    writer.stop()
    assert pending.result(1).id == "last"  # queued before the stop: committed
    with pytest.raises(WriterClosedError, match="no more writes"):
        writer.submit(lambda store: None)


def test_then_runs_after_the_commit_in_commit_order_and_its_failure_fails_only_its_write(
    writer: StoreWriter, db_path: Path
) -> None:
    entered = threading.Event()
    release = threading.Event()
    seen: list[tuple[str, bool]] = []

    def hold(store: StoreInterface) -> None:
        entered.set()
        assert release.wait(10)

    def committed(record: SessionRecord) -> None:
        with Store.open(db_path, readonly=True) as reader:  # durable by now: another connection sees it
            seen.append((record.id, reader.find_session(record.id) is not None))

    def refuse(record: SessionRecord) -> None:
        raise RuntimeError(f"could not hand {record.id} on")

    writer.submit(hold)
    assert entered.wait(10)
    futures = [writer.submit(functools.partial(create, session_id=f"t{i}"), then=committed) for i in range(5)]
    refused = writer.submit(functools.partial(create, session_id="refused"), then=refuse)
    failed = writer.submit(lambda store: store.create_session("cli", session_id="t0"), then=committed)
    release.set()
    assert [f.result(10).id for f in futures] == [f"t{i}" for i in range(5)]
    assert seen == [(f"t{i}", True) for i in range(5)]  # a failed write (t0 again) runs no then
    with pytest.raises(RuntimeError, match="could not hand refused on"):
        refused.result(10)
    with pytest.raises(Exception, match=r"UNIQUE|exists"):
        failed.result(10)
    assert writer.call(lambda store: store.find_session("refused")) is not None  # committed; only then failed


def _held_batch(writer: StoreWriter) -> threading.Event:
    """Hold the writer inside a lone write until the returned event is set: what is submitted meanwhile commits as
    one batch."""
    entered = threading.Event()
    release = threading.Event()

    def hold(store: StoreInterface) -> None:
        entered.set()
        assert release.wait(10)

    writer.submit(hold)
    assert entered.wait(10)
    return release


def test_an_atomic_write_whose_statement_fails_leaves_the_batch_s_other_writes(writer: StoreWriter) -> None:
    writer.call(lambda store: store.create_session("cli", session_id="taken"))
    release = _held_batch(writer)
    before = writer.submit(lambda store: store.create_session("cli", session_id="before"), atomic=True)
    refused = writer.submit(lambda store: store.create_session("cli", session_id="taken"), atomic=True)
    after = writer.submit(lambda store: store.create_session("cli", session_id="after"))
    release.set()
    assert before.result(10).id == "before"
    assert after.result(10).id == "after"
    with pytest.raises(StoreError, match="already exists"):  # SQLite undid the one statement that failed
        refused.result(10)
    assert writer.statistics().largest_batch == 3


def test_an_atomic_write_that_fails_after_changing_rows_fails_its_whole_batch(writer: StoreWriter) -> None:
    def half(store: StoreInterface) -> None:
        store.create_session("cli", session_id="half")
        raise ValueError("raised after a write")

    release = _held_batch(writer)
    before = writer.submit(lambda store: store.create_session("cli", session_id="before"))
    broken = writer.submit(half, atomic=True)
    release.set()
    for future in (before, broken):
        with pytest.raises(StoreError, match="submitted as atomic changed rows and then failed"):
            future.result(10)
    assert writer.call(lambda store: (store.find_session("before"), store.find_session("half"))) == (None, None)
