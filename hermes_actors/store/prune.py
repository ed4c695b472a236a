"""Pruning: delete ended sessions older than a cut, by hand (``hermesctl sessions prune``) or on a schedule.

Only ended sessions are ever deleted, judged by ``ended_at`` (when the conversation stopped, not when it was last
read). A deleted session takes its messages (and their full-text index rows), attachments, routes and lease with
it; its children stay, without a parent; outbox rows and memories keep their text and lose the link. Sessions go in
batches, one transaction each, so a large prune never holds the write lock for long; after each batch commits, the
media files its attachments named and no remaining row names are removed.

Written once for both stores (:class:`PrunedTables`); what a size is and what a vacuum does are the dialect's
(:func:`~.maintenance.database_bytes`, :func:`~.maintenance.reclaim`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import msgspec

from hermes_actors.errors import StoreError
from hermes_actors.store.attachments import Attachments
from hermes_actors.store.cursors import KeyValues
from hermes_actors.store.maintenance import database_bytes, reclaim
from hermes_actors.store.sql import Dialect, SqlDb

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "LAST_AUTO_PRUNE_KEY",
    "MAX_LISTED_IDS",
    "PruneFilter",
    "PruneResult",
    "PrunedTables",
    "auto_prune",
    "prune_sessions",
]

DEFAULT_BATCH_SIZE = 200
LAST_AUTO_PRUNE_KEY = "last_auto_prune"  # the meta key Hermes uses: epoch seconds as text
MAX_LISTED_IDS = 1000

_DAY = 86_400.0
_HOUR = 3_600.0
_ELIGIBLE = "ended_at IS NOT NULL AND ended_at < ?"

_log = logging.getLogger(__name__)


class PrunedTables(Protocol):
    """What a prune uses of a store (both stores have it): its database, attachments and meta keys."""

    @property
    def sql(self) -> SqlDb:
        """The database."""
        ...

    @property
    def attachments(self) -> Attachments:
        """The ``attachments`` table, whose files go with their sessions."""
        ...

    @property
    def kv(self) -> KeyValues:
        """The ``meta`` table, where :func:`auto_prune` records its last run."""
        ...


class PruneFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which ended sessions to prune: those that ended more than ``older_than_days`` ago, of ``source`` if given."""

    older_than_days: float = 90
    source: str | None = None


class PruneResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a prune deleted (or, with ``dry_run``, would delete).

    ``bytes_before``/``bytes_after`` are the database's size in pages (free pages included); only a VACUUM gives
    free pages back. ``session_ids`` lists at most :data:`MAX_LISTED_IDS` of the sessions, oldest first.
    """

    sessions_deleted: int
    messages_deleted: int
    bytes_before: int
    bytes_after: int
    session_ids: list[str]
    vacuumed: bool = False
    dry_run: bool = False
    files_deleted: int = 0  # media files of the deleted attachments that no other row named


def _require_no_transaction(db: SqlDb) -> None:
    if db.in_transaction:
        raise StoreError("VACUUM cannot run inside a transaction; prune with vacuum outside store.transaction()")


def _candidates(db: SqlDb, criteria: PruneFilter, cutoff: float) -> list[str]:
    sql = f"SELECT id FROM sessions WHERE {_ELIGIBLE}"
    params: list[object] = [cutoff]
    if criteria.source is not None:
        sql += " AND source = ?"
        params.append(criteria.source)
    return [str(sid) for (sid,) in db.execute(sql + " ORDER BY ended_at, id", params)]


def _count_messages(db: SqlDb, ids: Sequence[str]) -> int:
    refs = f"SELECT ref FROM sessions WHERE {db.dialect.member('id')}"
    return int(db.value(f"SELECT count(*) FROM messages WHERE session_ref IN ({refs})", (db.dialect.members(ids),)))


def _delete_batch(store: PrunedTables, ids: Sequence[str], cutoff: float) -> tuple[list[str], int, int]:
    """Delete the still-eligible sessions of ``ids``; return them, their message count and media files removed."""
    db = store.sql
    eligible = f"FROM sessions WHERE {db.dialect.member('id')} AND {_ELIGIBLE}"
    params = (db.dialect.members(ids), cutoff)
    with db.transaction():
        # Nothing may reopen a session between the re-check here and the deletes below: SQLite's transaction holds
        # the write lock from its start; PostgreSQL locks the batch's rows first.
        if db.dialect is Dialect.POSTGRES:
            db.execute(f"SELECT ref {eligible}{db.dialect.for_update}", params)
        # Messages go before their sessions, so SQLite's FTS triggers run row by row.
        files = store.attachments.delete_for_sessions(f"SELECT ref {eligible}", params)
        messages = db.count(f"DELETE FROM messages WHERE session_ref IN (SELECT ref {eligible})", params)
        found = {str(sid) for (sid,) in db.execute(f"DELETE {eligible} RETURNING id", params)}
    return [sid for sid in ids if sid in found], messages, store.attachments.remove_unreferenced(files)


def _bytes_after(db: SqlDb, before: int, vacuumed: bool) -> int:
    """The size after a prune. PostgreSQL's files keep their size until a VACUUM (and its size counts the maps a
    concurrent autovacuum writes), so without one the size before stands."""
    return database_bytes(db) if vacuumed or db.dialect is Dialect.SQLITE else before


def prune_sessions(
    store: PrunedTables,
    filter: PruneFilter,
    *,
    dry_run: bool = False,
    vacuum: bool = False,
    progress: Callable[[int, int], None] | None = None,
    now: float | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> PruneResult:
    """Delete the ended sessions ``filter`` selects, oldest first, ``batch_size`` per transaction.

    ``now`` defaults to the current time. ``progress(done, total)`` is called after each committed batch.
    ``vacuum`` runs VACUUM afterwards when something was deleted; it needs the store outside a transaction.
    ``dry_run`` changes nothing and reports what would go. A session reopened meanwhile is skipped.
    """
    if filter.older_than_days < 0:
        raise ValueError(f"older_than_days must be 0 or more, got {filter.older_than_days}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    db = store.sql
    if vacuum and not dry_run:
        _require_no_transaction(db)
    cutoff = (time.time() if now is None else now) - filter.older_than_days * _DAY
    bytes_before = database_bytes(db)
    ids = _candidates(db, filter, cutoff)
    if dry_run:
        return PruneResult(
            sessions_deleted=len(ids),
            messages_deleted=_count_messages(db, ids),
            bytes_before=bytes_before,
            bytes_after=bytes_before,
            session_ids=ids[:MAX_LISTED_IDS],
            dry_run=True,
        )
    listed: list[str] = []
    sessions = messages = files = 0
    for start in range(0, len(ids), batch_size):
        deleted, batch_messages, batch_files = _delete_batch(store, ids[start : start + batch_size], cutoff)
        sessions += len(deleted)
        messages += batch_messages
        files += batch_files
        listed.extend(deleted[: MAX_LISTED_IDS - len(listed)])
        if progress is not None:
            progress(min(start + batch_size, len(ids)), len(ids))
    vacuumed = vacuum and sessions > 0
    if vacuumed:
        reclaim(db)
    return PruneResult(
        sessions_deleted=sessions,
        messages_deleted=messages,
        bytes_before=bytes_before,
        bytes_after=_bytes_after(db, bytes_before, vacuumed),
        session_ids=listed,
        vacuumed=vacuumed,
        files_deleted=files,
    )


def _last_auto_prune(store: PrunedTables) -> float | None:
    raw = store.kv.get_meta(LAST_AUTO_PRUNE_KEY)
    if raw is None:
        return None
    try:
        last = float(raw)
    except ValueError:
        last = math.nan
    if not math.isfinite(last):
        _log.warning("meta %s holds %r, not a time; treating auto-prune as never run", LAST_AUTO_PRUNE_KEY, raw)
        return None
    return last


def auto_prune(
    store: PrunedTables,
    *,
    enabled: bool,
    retention_days: float = 90,
    vacuum_after_prune: bool = True,
    min_interval_hours: float = 24,
    now: float,
) -> PruneResult | None:
    """Prune ended sessions older than ``retention_days`` unless disabled or the last run is recent.

    Returns ``None``, doing nothing, when ``enabled`` is false or the last run (meta ``last_auto_prune``) was
    less than ``min_interval_hours`` before ``now``. Otherwise prunes, records ``now`` as the last run, then
    vacuums when ``vacuum_after_prune`` and something was deleted. A last run that is not a time, or lies in the
    future (the clock went back), counts as never.
    """
    if not enabled:
        return None
    last = _last_auto_prune(store)
    if last is not None and 0 <= now - last < min_interval_hours * _HOUR:
        return None
    if vacuum_after_prune:
        _require_no_transaction(store.sql)
    result = prune_sessions(store, PruneFilter(older_than_days=retention_days), now=now)
    # Recorded before the VACUUM: a failed VACUUM must not make every start retry the prune.
    store.kv.set_meta(LAST_AUTO_PRUNE_KEY, str(now))
    if vacuum_after_prune and result.sessions_deleted > 0:
        reclaim(store.sql)
        result = msgspec.structs.replace(result, vacuumed=True, bytes_after=database_bytes(store.sql))
    _log.info(
        "auto-prune deleted %d sessions and %d messages older than %g days",
        result.sessions_deleted,
        result.messages_deleted,
        retention_days,
    )
    return result
