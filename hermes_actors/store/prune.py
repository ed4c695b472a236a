"""Pruning: delete ended sessions older than a cut, by hand (``hermesctl sessions prune``) or on a schedule.

Only ended sessions are ever deleted, judged by ``ended_at`` (when the conversation stopped, not when it was last
read). A deleted session takes its messages (and their full-text index rows), attachments, routes and lease with
it; its children stay, without a parent; outbox rows and memories keep their text and lose the link. Sessions go in
batches, one transaction each, so a large prune never holds the write lock for long; after each batch commits, the
media files its attachments named and no remaining row names are removed.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import msgspec

from hermes_actors.errors import StoreError

if TYPE_CHECKING:
    from hermes_actors.store.store import Store

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "LAST_AUTO_PRUNE_KEY",
    "MAX_LISTED_IDS",
    "PruneFilter",
    "PruneResult",
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


def _number(store: Store, sql: str, params: Sequence[object] = ()) -> int:
    value = store._connection.execute(sql, params).get
    if not isinstance(value, int):
        raise StoreError(f"expected a number from {sql!r}, got {value!r}")
    return value


def _database_bytes(store: Store) -> int:
    return _number(store, "PRAGMA page_size") * _number(store, "PRAGMA page_count")


def _require_no_transaction(store: Store) -> None:
    if store._connection.in_transaction:
        raise StoreError("VACUUM cannot run inside a transaction; prune with vacuum outside store.transaction()")


def _vacuum(store: Store) -> None:
    store._connection.execute("VACUUM")
    # VACUUM writes the compacted database to the WAL; the checkpoint moves it back and shortens the file.
    store._connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()


def _marks(values: Sequence[object]) -> str:
    return ", ".join("?" * len(values))


def _candidates(store: Store, criteria: PruneFilter, cutoff: float) -> list[str]:
    sql = f"SELECT id FROM sessions WHERE {_ELIGIBLE}"
    params: list[object] = [cutoff]
    if criteria.source is not None:
        sql += " AND source = ?"
        params.append(criteria.source)
    return [str(sid) for (sid,) in store._connection.execute(sql + " ORDER BY ended_at, id", params)]


def _count_messages(store: Store, ids: Sequence[str]) -> int:
    total = 0
    for start in range(0, len(ids), DEFAULT_BATCH_SIZE):
        chunk = ids[start : start + DEFAULT_BATCH_SIZE]
        refs = f"SELECT ref FROM sessions WHERE id IN ({_marks(chunk)})"
        total += _number(store, f"SELECT count(*) FROM messages WHERE session_ref IN ({refs})", chunk)
    return total


def _delete_batch(store: Store, ids: Sequence[str], cutoff: float) -> tuple[list[str], int, int]:
    """Delete the still-eligible sessions of ``ids``; return them, their message count and media files removed."""
    db = store._connection
    eligible = f"SELECT id FROM sessions WHERE id IN ({_marks(ids)}) AND {_ELIGIBLE}"
    eligible_refs = f"SELECT ref FROM sessions WHERE id IN ({_marks(ids)}) AND {_ELIGIBLE}"
    with store.transaction():
        # A write first takes the write lock at once, so nothing can reopen a session between the re-check
        # here and the delete below. Deleting messages before sessions runs the FTS triggers row by row.
        files = store.attachments.delete_for_sessions(eligible_refs, (*ids, cutoff))
        db.execute(f"DELETE FROM messages WHERE session_ref IN ({eligible_refs})", (*ids, cutoff))
        messages = db.changes()
        found = {str(sid) for (sid,) in db.execute(eligible, (*ids, cutoff))}
        deleted = [sid for sid in ids if sid in found]
        if deleted:
            db.execute(f"DELETE FROM sessions WHERE id IN ({_marks(deleted)})", deleted)
    return deleted, messages, store.attachments.remove_unreferenced(files)


def prune_sessions(
    store: Store,
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
    if vacuum and not dry_run:
        _require_no_transaction(store)
    cutoff = (time.time() if now is None else now) - filter.older_than_days * _DAY
    bytes_before = _database_bytes(store)
    ids = _candidates(store, filter, cutoff)
    if dry_run:
        return PruneResult(
            sessions_deleted=len(ids),
            messages_deleted=_count_messages(store, ids),
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
        _vacuum(store)
    return PruneResult(
        sessions_deleted=sessions,
        messages_deleted=messages,
        bytes_before=bytes_before,
        bytes_after=_database_bytes(store),
        session_ids=listed,
        vacuumed=vacuumed,
        files_deleted=files,
    )


def _last_auto_prune(store: Store) -> float | None:
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
    store: Store,
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
        _require_no_transaction(store)
    result = prune_sessions(store, PruneFilter(older_than_days=retention_days), now=now)
    # Recorded before the VACUUM: a failed VACUUM must not make every start retry the prune.
    store.kv.set_meta(LAST_AUTO_PRUNE_KEY, str(now))
    if vacuum_after_prune and result.sessions_deleted > 0:
        _vacuum(store)
        result = msgspec.structs.replace(result, vacuumed=True, bytes_after=_database_bytes(store))
    _log.info(
        "auto-prune deleted %d sessions and %d messages older than %g days",
        result.sessions_deleted,
        result.messages_deleted,
        retention_days,
    )
    return result
