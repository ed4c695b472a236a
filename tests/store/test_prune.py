from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

import pytest

from hermes_actors.errors import StoreError
from hermes_actors.store import EndReason, NewMessage, Role, Store, StoreInterface
from hermes_actors.store.prune import (
    LAST_AUTO_PRUNE_KEY,
    PruneFilter,
    PruneResult,
    prune_sessions,
)
from hermes_actors.testing import FakeClock
from tests.store.support import count_rows, sqlite_connection

DAY = 86_400.0
HOUR = 3_600.0


def user(text: str) -> NewMessage:
    return NewMessage(role=Role.USER, content=text)


def make_session(
    store: StoreInterface,
    clock: FakeClock,
    *,
    days_ago: float,
    ended: bool = True,
    source: str = "telegram",
    texts: tuple[str, ...] = ("hello",),
    parent: str | None = None,
    reason: EndReason = EndReason.NEW_SESSION,
) -> str:
    """Create a session started and (if ``ended``) ended ``days_ago`` days before the clock's time."""
    at = clock() - days_ago * DAY
    record = store.create_session(source, started_at=at, parent_session_id=parent)
    if texts:
        store.append_messages(record.id, [user(t) for t in texts], at=at)
    if ended:
        store.end_session(record.id, reason, at=at)
    return record.id


def count(store: StoreInterface, table: str) -> int:
    return count_rows(store, table)


def check_fts_integrity(store: StoreInterface) -> None:
    sqlite_connection(store).execute("INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1)")
    # The trigram index holds CJK messages only, so it can be checked against itself but not against `messages`.
    sqlite_connection(store).execute(
        "INSERT INTO messages_fts_cjk (messages_fts_cjk, rank) VALUES ('integrity-check', 0)"
    )


def indexed_rowids(store: StoreInterface, table: str, query: str) -> list[int]:
    return [
        rowid for (rowid,) in sqlite_connection(store).execute(f"SELECT rowid FROM {table}(?) ORDER BY rowid", (query,))
    ]


def test_only_ended_sessions_older_than_the_cut_are_deleted(store: StoreInterface, clock: FakeClock) -> None:
    old_ended = make_session(store, clock, days_ago=100)
    old_live = make_session(store, clock, days_ago=100, ended=False)
    young_ended = make_session(store, clock, days_ago=10)

    result = store.prune_sessions(PruneFilter(older_than_days=90), now=clock())

    assert result.sessions_deleted == 1
    assert result.messages_deleted == 1
    assert result.session_ids == [old_ended]
    assert store.find_session(old_ended) is None
    assert store.find_session(old_live) is not None
    assert store.find_session(young_ended) is not None
    assert not result.vacuumed
    assert not result.dry_run


def test_the_cut_is_judged_by_ended_at_not_by_last_activity(store: StoreInterface, clock: FakeClock) -> None:
    record = store.create_session("cli", started_at=clock() - 200 * DAY)
    store.end_session(record.id, EndReason.USER_EXIT, at=clock() - 30 * DAY)

    assert store.prune_sessions(PruneFilter(older_than_days=90), now=clock()).sessions_deleted == 0
    assert store.prune_sessions(PruneFilter(older_than_days=20), now=clock()).session_ids == [record.id]


def test_the_source_filter_keeps_sessions_of_other_platforms(store: StoreInterface, clock: FakeClock) -> None:
    telegram = make_session(store, clock, days_ago=100, source="telegram")
    slack = make_session(store, clock, days_ago=100, source="slack")

    result = store.prune_sessions(PruneFilter(source="slack"), now=clock())

    assert result.session_ids == [slack]
    assert store.find_session(telegram) is not None


def test_sessions_go_oldest_first(store: StoreInterface, clock: FakeClock) -> None:
    newer = make_session(store, clock, days_ago=95)
    older = make_session(store, clock, days_ago=120)

    assert store.prune_sessions(PruneFilter(), now=clock()).session_ids == [older, newer]


def test_children_are_orphaned_and_keep_their_rows(store: StoreInterface, clock: FakeClock) -> None:
    parent = make_session(store, clock, days_ago=100, texts=("parent words",), reason=EndReason.COMPRESSION)
    child = make_session(store, clock, days_ago=100, ended=False, texts=("child words",), parent=parent)
    store.set_route("agent:main:telegram:dm:1", parent)
    store.set_route("agent:main:telegram:dm:2", child)
    store.leases.acquire(parent, "host:1:a", ttl_s=60)
    store.leases.acquire(child, "host:1:a", ttl_s=60)

    store.prune_sessions(PruneFilter(), now=clock())

    orphan = store.get_session(child)
    assert orphan.parent_session_id is None
    assert [m.content for m in store.load_transcript(child)] == ["child words"]
    assert store.routes_to(child) == ["agent:main:telegram:dm:2"]
    assert store.get_route("agent:main:telegram:dm:1") is None
    assert count(store, "leases") == 1
    assert count(store, "messages") == 1


def test_deleted_messages_leave_the_full_text_indexes(store: StoreInterface, clock: FakeClock) -> None:
    make_session(store, clock, days_ago=100, texts=("zebra crossing", "斑马线上的猫"))
    kept = make_session(store, clock, days_ago=1, texts=("zebra stripes",))
    assert len(store.fts_query("zebra").hits) == 2
    assert len(store.fts_query("斑马线").hits) == 1

    store.prune_sessions(PruneFilter(), now=clock())

    check_fts_integrity(store)
    kept_ids = [m.id for m in store.load_transcript(kept)]
    assert indexed_rowids(store, "messages_fts", "zebra") == kept_ids
    assert indexed_rowids(store, "messages_fts_cjk", '"斑马线"') == []
    assert [hit.session_id for hit in store.fts_query("zebra").hits] == [kept]
    assert store.fts_query("crossing").hits == []
    assert store.fts_query("斑马线").hits == []


def test_a_dry_run_changes_nothing_and_reports_what_would_go(store: StoreInterface, clock: FakeClock) -> None:
    old = make_session(store, clock, days_ago=100, texts=("one", "two", "three"))
    make_session(store, clock, days_ago=100, ended=False)
    calls: list[tuple[int, int]] = []

    result = store.prune_sessions(PruneFilter(), dry_run=True, vacuum=True, progress=lambda *a: calls.append(a))

    assert result == PruneResult(
        sessions_deleted=1,
        messages_deleted=3,
        bytes_before=result.bytes_before,
        bytes_after=result.bytes_before,
        session_ids=[old],
        dry_run=True,
    )
    assert store.find_session(old) is not None
    assert count(store, "messages") == 4
    assert calls == []


@pytest.mark.slow
def test_vacuum_shrinks_the_database_file(sqlite_store: Store, clock: FakeClock, db_path: Path) -> None:
    make_session(sqlite_store, clock, days_ago=100, texts=tuple(f"{i} " + "lorem ipsum " * 800 for i in range(200)))
    make_session(sqlite_store, clock, days_ago=1)
    sqlite_store._connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    file_before = os.path.getsize(db_path)

    result = prune_sessions(sqlite_store, PruneFilter(), vacuum=True, now=clock())

    assert result.vacuumed
    assert result.bytes_after < result.bytes_before / 4
    assert os.path.getsize(db_path) < file_before / 4
    check_fts_integrity(sqlite_store)


def test_without_vacuum_the_freed_pages_stay_in_the_file(store: StoreInterface, clock: FakeClock) -> None:
    make_session(store, clock, days_ago=100, texts=tuple("lorem ipsum " * 800 for _ in range(20)))

    result = store.prune_sessions(PruneFilter(), now=clock())

    assert not result.vacuumed
    assert result.bytes_after == result.bytes_before


def test_vacuum_is_skipped_when_nothing_was_deleted(store: StoreInterface, clock: FakeClock) -> None:
    make_session(store, clock, days_ago=1)

    assert not store.prune_sessions(PruneFilter(), vacuum=True, now=clock()).vacuumed


def test_vacuum_inside_a_transaction_is_refused_before_anything_is_deleted(
    store: StoreInterface, clock: FakeClock
) -> None:
    old = make_session(store, clock, days_ago=100)

    with store.transaction(), pytest.raises(StoreError, match="VACUUM cannot run inside a transaction"):
        store.prune_sessions(PruneFilter(), vacuum=True, now=clock())

    assert store.find_session(old) is not None


def test_each_batch_commits_before_progress_is_reported(store: StoreInterface, clock: FakeClock, db_path: Path) -> None:
    ids = [make_session(store, clock, days_ago=100 + i) for i in range(5)]
    calls: list[tuple[int, int, int]] = []

    # PostgreSQL: count_rows reads on another connection of the pool, which sees only what has committed.
    opened = Store.open(db_path, readonly=True) if isinstance(store, Store) else contextlib.nullcontext(store)
    with opened as reader:

        def progress(done: int, total: int) -> None:
            calls.append((done, total, count(reader, "sessions")))

        result = store.prune_sessions(PruneFilter(), progress=progress, now=clock(), batch_size=2)

    assert calls == [(2, 5, 3), (4, 5, 1), (5, 5, 0)]
    assert result.session_ids == ids[::-1]


def test_a_session_reopened_during_the_prune_is_skipped(store: StoreInterface, clock: FakeClock) -> None:
    ids = [make_session(store, clock, days_ago=100 + i) for i in range(4)]
    newest = ids[0]

    def reopen_once(done: int, total: int) -> None:
        if done == 2:
            store.reopen_session(newest)

    result = store.prune_sessions(PruneFilter(), progress=reopen_once, now=clock(), batch_size=2)

    assert result.sessions_deleted == 3
    assert newest not in result.session_ids
    assert store.get_session(newest).is_live


def test_the_listed_ids_are_capped(store: StoreInterface, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("hermes_actors.store.prune.MAX_LISTED_IDS", 2)
    for i in range(3):
        make_session(store, clock, days_ago=100 + i, texts=())

    result = store.prune_sessions(PruneFilter(), now=clock(), batch_size=1)

    assert result.sessions_deleted == 3
    assert len(result.session_ids) == 2


def test_bad_arguments_are_refused(store: StoreInterface) -> None:
    with pytest.raises(ValueError, match="older_than_days must be 0 or more"):
        store.prune_sessions(PruneFilter(older_than_days=-1))
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        store.prune_sessions(PruneFilter(), batch_size=0)


# -- auto-prune -------------------------------------------------------------------------------------------------


def test_disabled_auto_prune_does_nothing(store: StoreInterface, clock: FakeClock) -> None:
    old = make_session(store, clock, days_ago=100)

    assert store.auto_prune(enabled=False, now=clock()) is None
    assert store.find_session(old) is not None
    assert store.kv.get_meta(LAST_AUTO_PRUNE_KEY) is None


def test_the_first_auto_prune_runs_and_records_its_time(store: StoreInterface, clock: FakeClock) -> None:
    old = make_session(store, clock, days_ago=100)
    young = make_session(store, clock, days_ago=20)

    result = store.auto_prune(enabled=True, retention_days=30, now=clock())

    assert result is not None
    assert result.session_ids == [old]
    assert result.vacuumed
    assert store.find_session(young) is not None
    assert store.kv.get_meta(LAST_AUTO_PRUNE_KEY) == str(clock())


def test_auto_prune_within_the_interval_is_skipped_and_after_it_runs(store: StoreInterface, clock: FakeClock) -> None:
    assert store.auto_prune(enabled=True, now=clock()) is not None
    old = make_session(store, clock, days_ago=100)

    clock.advance(23 * HOUR)
    assert store.auto_prune(enabled=True, now=clock()) is None
    assert store.find_session(old) is not None

    clock.advance(1 * HOUR)
    result = store.auto_prune(enabled=True, now=clock())
    assert result is not None
    assert result.session_ids == [old]
    assert store.kv.get_meta(LAST_AUTO_PRUNE_KEY) == str(clock())


def test_auto_prune_without_vacuum_leaves_the_pages(store: StoreInterface, clock: FakeClock) -> None:
    make_session(store, clock, days_ago=100)

    result = store.auto_prune(enabled=True, vacuum_after_prune=False, now=clock())

    assert result is not None
    assert result.sessions_deleted == 1
    assert not result.vacuumed


@pytest.mark.parametrize("value", ["yesterday", "", "nan", "inf"])
def test_a_corrupt_last_run_counts_as_never(
    store: StoreInterface, clock: FakeClock, caplog: pytest.LogCaptureFixture, value: str
) -> None:
    store.kv.set_meta(LAST_AUTO_PRUNE_KEY, value)
    old = make_session(store, clock, days_ago=100)

    with caplog.at_level(logging.WARNING, logger="hermes_actors.store.prune"):
        result = store.auto_prune(enabled=True, now=clock())

    assert result is not None
    assert result.session_ids == [old]
    assert f"meta last_auto_prune holds {value!r}, not a time" in caplog.text
    assert store.kv.get_meta(LAST_AUTO_PRUNE_KEY) == str(clock())


def test_a_last_run_in_the_future_counts_as_never(store: StoreInterface, clock: FakeClock) -> None:
    store.kv.set_meta(LAST_AUTO_PRUNE_KEY, str(clock() + DAY))

    assert store.auto_prune(enabled=True, now=clock()) is not None
