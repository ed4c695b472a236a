"""Keeping the database healthy: integrity checks, rebuilding the search indexes, compaction and its size on disk.

SQLite's own checks and compaction are functions over one APSW connection, behind ``Store.check_integrity``,
``Store.check_search_indexes``, ``Store.optimize`` and ``Store.free_bytes`` (PostgreSQL's are in
:mod:`hermes_actors.store.pg.maintenance`); ``hermesctl db`` and ``hermesctl sessions prune`` are thin shells over
them. What a prune needs on either store, a size and a vacuum, is :func:`database_bytes` and :func:`reclaim` over
the database seam. The long ones take a :data:`PhaseProgress` callback, called with the name of each phase as it
starts (the return ends the last), since on a large database each phase runs for seconds without another sign of
life.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

import apsw

from hermes_actors.errors import StoreBusyError, StoreError
from hermes_actors.store.migrations import CJK_GLOB
from hermes_actors.store.records import OptimizeResult
from hermes_actors.store.sql import Dialect, SqlDb

__all__ = [
    "PhaseProgress",
    "check_integrity",
    "check_search_indexes",
    "database_bytes",
    "file_bytes",
    "fold_wal",
    "free_bytes",
    "optimize",
    "rebuild_search_indexes",
    "reclaim",
]

PhaseProgress = Callable[[str], None]
"""Called with the name of each phase of a long operation as it starts ("integrity check", "vacuuming")."""


def _no_progress(phase: str) -> None:
    """A :data:`PhaseProgress` that reports nothing."""


_SEARCH_INDEXES = (("messages_fts", 1), ("messages_fts_cjk", 0))
"""Each FTS index with the integrity-check rank it takes: rank 1 also compares an index with the messages table;
the CJK index holds CJK messages only, so it is checked for internal consistency (rank 0)."""


def file_bytes(path: str) -> int:
    """The database's size on disk: the main file and its WAL."""
    size = 0
    for suffix in ("", "-wal"):
        with contextlib.suppress(OSError):
            size += os.path.getsize(path + suffix)
    return size


_RECLAIMED = ("messages", "attachments", "sessions", "routes", "leases")
"""The PostgreSQL tables a prune shrinks, which :func:`reclaim` vacuums."""


def _number(db: SqlDb, sql: str) -> int:
    value = db.value(sql)
    if not isinstance(value, int):
        raise StoreError(f"expected a number from {sql!r}, got {value!r}")
    return value


def database_bytes(db: SqlDb) -> int:
    """The database's size: SQLite's pages (free ones included; only a VACUUM gives those back), PostgreSQL's
    ``pg_database_size``."""
    if db.dialect is Dialect.SQLITE:
        return _number(db, "PRAGMA page_size") * _number(db, "PRAGMA page_count")
    return int(db.value("SELECT pg_database_size(current_database())") or 0)


def reclaim(db: SqlDb) -> None:
    """Give back the space of deleted rows (outside a transaction): SQLite's VACUUM of the file, then a checkpoint,
    since VACUUM writes the compacted database to the WAL and the checkpoint moves it back and shortens the file;
    PostgreSQL's ``VACUUM (ANALYZE)`` of the tables a prune shrinks."""
    if db.dialect is Dialect.SQLITE:
        db.execute("VACUUM")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return
    for table in _RECLAIMED:
        db.execute(f"VACUUM (ANALYZE) {table}")


def free_bytes(db: apsw.Connection) -> int:
    """The bytes of free pages inside the file: space new data reuses, and that a VACUUM gives back to the disk."""
    return int(db.execute("PRAGMA freelist_count").get) * int(db.execute("PRAGMA page_size").get)


def check_integrity(db: apsw.Connection, progress: PhaseProgress = _no_progress) -> list[str]:
    """Run SQLite's integrity and foreign key checks; return one line per problem (none: healthy)."""
    progress("integrity check")
    problems = [str(row[0]) for row in db.execute("PRAGMA integrity_check") if row[0] != "ok"]
    progress("foreign key check")
    problems += [f"foreign key: {row}" for row in db.execute("PRAGMA foreign_key_check")]
    return problems


def check_search_indexes(db: apsw.Connection, progress: PhaseProgress = _no_progress) -> list[str]:
    """Check both full-text indexes (it needs a writable connection); return one line per stale index."""
    problems = []
    for table, rank in _SEARCH_INDEXES:
        progress(f"search index {table}")
        try:
            db.execute(f"INSERT INTO {table} ({table}, rank) VALUES ('integrity-check', {rank})")
        except apsw.Error as exc:  # CorruptError for a stale index
            problems.append(f"{table}: {exc}; rebuild it with 'hermesctl db optimize'")
    return problems


def rebuild_search_indexes(db: apsw.Connection) -> tuple[int, int]:
    """Rebuild both FTS indexes from ``messages``; return how many messages each now holds.

    The word index takes every message, so FTS5's own 'rebuild' fits it. The trigram index holds only messages
    with CJK text (its triggers choose them), and its 'rebuild' would read every message; it is emptied and
    refilled with the rows the triggers would have chosen instead.
    """
    db.execute("INSERT INTO messages_fts (messages_fts) VALUES ('rebuild')")
    db.execute("INSERT INTO messages_fts_cjk (messages_fts_cjk) VALUES ('delete-all')")
    db.execute(
        "INSERT INTO messages_fts_cjk (rowid, content) SELECT id, content FROM messages WHERE content GLOB ?",
        (CJK_GLOB,),
    )
    cjk = db.changes()
    for table, _ in _SEARCH_INDEXES:
        db.execute(f"INSERT INTO {table} ({table}) VALUES ('optimize')")  # merge the segments into one
    words = int(db.execute("SELECT count(*) FROM messages WHERE content IS NOT NULL").get)
    return words, cjk


def optimize(db: apsw.Connection, progress: PhaseProgress = _no_progress) -> OptimizeResult:
    """Rebuild the search indexes, refresh the planner's statistics, vacuum and checkpoint, holding the write lock.

    Raises :class:`StoreBusyError` naming the step when another connection holds the database past the busy
    timeout; the rebuild and analysis commit together or not at all.
    """
    step = "waiting for the write lock"
    progress(step)
    before = file_bytes(db.filename)
    try:
        db.execute("BEGIN IMMEDIATE")  # the write lock first: a stale read snapshot could not upgrade later
        try:
            progress(step := "rebuilding the search indexes")
            words, cjk = rebuild_search_indexes(db)
            progress(step := "analyzing")
            db.execute("ANALYZE")
            db.execute("PRAGMA optimize")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        progress(step := "vacuuming")
        db.execute("VACUUM")
        progress(step := "checkpointing")
        readers_in_the_way = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()[0][0]
    except apsw.BusyError as exc:
        raise StoreBusyError(step) from exc
    return OptimizeResult(
        messages_indexed=words,
        cjk_indexed=cjk,
        wal_kept=bool(readers_in_the_way),
        bytes_before=before,
        bytes_after=file_bytes(db.filename),
    )


FOLD_BUSY_TIMEOUT_MS = 1_000


def fold_wal(db: apsw.Connection) -> bool:
    """Copy the WAL back into the database file and empty it (``wal_checkpoint(TRUNCATE)``), so the file alone is
    the whole database; return whether it did. Another process reading or writing right now keeps it from that
    (it then waits at most :data:`FOLD_BUSY_TIMEOUT_MS`): its own clean exit folds the WAL instead."""
    db.set_busy_timeout(FOLD_BUSY_TIMEOUT_MS)
    try:
        busy = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()[0][0]
    except apsw.BusyError:
        return False
    return not busy
