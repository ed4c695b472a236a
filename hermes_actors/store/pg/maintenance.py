"""Maintenance of the PostgreSQL store: pruning, export and import, health checks and compaction.

Pruning follows :mod:`hermes_actors.store.prune` (ended sessions older than a cut, oldest first, a transaction per
batch, a session reopened meanwhile skipped); sizes are ``pg_database_size``; a vacuum is PostgreSQL's ``VACUUM``
of the tables a prune shrinks. ``check_integrity`` runs the checks PostgreSQL has no built-in command for here:
rows whose references dangle (constraints make them impossible; a count proves it), and the search columns of a
sample of messages against their content.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from hermes_actors.errors import StoreError
from hermes_actors.store.export import PAGE_SIZE, AttachmentRow, SessionExport
from hermes_actors.store.pg.text import from_db, index_text
from hermes_actors.store.prune import (
    DEFAULT_BATCH_SIZE,
    LAST_AUTO_PRUNE_KEY,
    MAX_LISTED_IDS,
    PruneFilter,
    PruneResult,
)
from hermes_actors.store.records import MessageRecord, MessageRow, OptimizeResult, SessionRecord

if TYPE_CHECKING:
    from hermes_actors.store.pg.store import PostgresStore

__all__ = [
    "auto_prune",
    "check_integrity",
    "check_search_indexes",
    "child_session_ids",
    "count_exports",
    "insert_session_export",
    "iter_exports",
    "optimize",
    "prune_sessions",
    "reindex_messages",
]

_DAY = 86_400.0
_HOUR = 3_600.0
_ELIGIBLE = "ended_at IS NOT NULL AND ended_at < %s"
_VACUUMED = ("messages", "attachments", "sessions", "routes", "leases")
_SEARCH_SAMPLE = 1000
_log = logging.getLogger(__name__)
_prune_log = logging.getLogger("hermes_actors.store.prune")  # the SQLite store's words, under the same logger


def _database_bytes(store: PostgresStore) -> int:
    return int(store.database.value("SELECT pg_database_size(current_database())") or 0)


def _require_no_transaction(store: PostgresStore) -> None:
    if store.database.in_transaction:
        raise StoreError("VACUUM cannot run inside a transaction; prune with vacuum outside store.transaction()")


def _vacuum(store: PostgresStore) -> None:
    for table in _VACUUMED:
        store.database.execute(f"VACUUM (ANALYZE) {table}")


def _candidates(store: PostgresStore, criteria: PruneFilter, cutoff: float) -> list[str]:
    sql = f"SELECT id FROM sessions WHERE {_ELIGIBLE}"
    params: list[Any] = [cutoff]
    if criteria.source is not None:
        sql += " AND source = %s"
        params.append(criteria.source)
    return [str(sid) for (sid,) in store.database.execute(sql + " ORDER BY ended_at, id", params)]


def _delete_batch(store: PostgresStore, ids: Sequence[str], cutoff: float) -> tuple[list[str], int, int]:
    db = store.database
    eligible_refs = f"SELECT ref FROM sessions WHERE id = ANY(%s) AND {_ELIGIBLE}"
    with store.transaction():
        # Lock the batch's rows first: nothing can reopen a session between the check and the delete.
        db.execute(f"SELECT ref FROM sessions WHERE id = ANY(%s) AND {_ELIGIBLE} FOR UPDATE", (list(ids), cutoff))
        files = store.attachments.delete_for_sessions(eligible_refs.replace("%s", "?"), (list(ids), cutoff))
        messages = db.count(f"DELETE FROM messages WHERE session_ref IN ({eligible_refs})", (list(ids), cutoff))
        found = {
            str(sid)
            for (sid,) in db.execute(
                f"DELETE FROM sessions WHERE id = ANY(%s) AND {_ELIGIBLE} RETURNING id", (list(ids), cutoff)
            )
        }
    return [sid for sid in ids if sid in found], messages, store.attachments.remove_unreferenced(files)


def prune_sessions(
    store: PostgresStore,
    filter: PruneFilter,
    *,
    dry_run: bool = False,
    vacuum: bool = False,
    progress: Callable[[int, int], None] | None = None,
    now: float | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> PruneResult:
    """Delete the ended sessions ``filter`` selects, oldest first (as :func:`.prune.prune_sessions` does)."""
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
        counted = store.database.value(
            "SELECT count(*) FROM messages WHERE session_ref IN (SELECT ref FROM sessions WHERE id = ANY(%s))", (ids,)
        )
        return PruneResult(
            sessions_deleted=len(ids),
            messages_deleted=int(counted or 0),
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
        listed.extend(deleted[: max(0, _max_listed() - len(listed))])
        if progress is not None:
            progress(min(start + batch_size, len(ids)), len(ids))
    vacuumed = vacuum and sessions > 0
    if vacuumed:
        _vacuum(store)
    return PruneResult(
        sessions_deleted=sessions,
        messages_deleted=messages,
        bytes_before=bytes_before,
        bytes_after=bytes_before if not vacuumed else _database_bytes(store),
        session_ids=listed,
        vacuumed=vacuumed,
        files_deleted=files,
    )


def _max_listed() -> int:
    from hermes_actors.store import prune  # read at call time: tests lower it

    return prune.MAX_LISTED_IDS


def _last_auto_prune(store: PostgresStore) -> float | None:
    raw = store.kv.get_meta(LAST_AUTO_PRUNE_KEY)
    if raw is None:
        return None
    try:
        last = float(raw)
    except ValueError:
        last = math.nan
    if not math.isfinite(last):
        _prune_log.warning("meta %s holds %r, not a time; treating auto-prune as never run", LAST_AUTO_PRUNE_KEY, raw)
        return None
    return last


def auto_prune(
    store: PostgresStore,
    *,
    enabled: bool,
    retention_days: float,
    vacuum_after_prune: bool,
    min_interval_hours: float,
    now: float,
) -> PruneResult | None:
    """Prune by retention unless disabled or the last run is recent (as :func:`.prune.auto_prune` does)."""
    if not enabled:
        return None
    last = _last_auto_prune(store)
    if last is not None and 0 <= now - last < min_interval_hours * _HOUR:
        return None
    if vacuum_after_prune:
        _require_no_transaction(store)
    result = prune_sessions(store, PruneFilter(older_than_days=retention_days), now=now)
    store.kv.set_meta(LAST_AUTO_PRUNE_KEY, str(now))
    if vacuum_after_prune and result.sessions_deleted > 0:
        _vacuum(store)
        result = msgspec.structs.replace(result, vacuumed=True, bytes_after=_database_bytes(store))
    _log.info("auto-prune deleted %d sessions and %d messages", result.sessions_deleted, result.messages_deleted)
    return result


# -- export and import ---------------------------------------------------------------------------------------------

_SESSION_COLUMNS = ", ".join(SessionRecord.__struct_fields__)
_MESSAGE_COLUMNS = ", ".join("%(sid)s" if f == "session_id" else f for f in MessageRecord.__struct_fields__)


def _where(source: str | None, session_id: str | None) -> tuple[str, list[Any]]:
    clauses, params = [], []
    if source is not None:
        clauses.append("source = %s")
        params.append(source)
    if session_id is not None:
        clauses.append("id = %s")
        params.append(session_id)
    return "".join(f" AND {c}" for c in clauses), params


def count_exports(store: PostgresStore, *, source: str | None = None, session_id: str | None = None) -> int:
    """How many sessions :func:`iter_exports` yields."""
    where, params = _where(source, session_id)
    return int(store.database.value(f"SELECT count(*) FROM sessions WHERE TRUE{where}", params) or 0)


def iter_exports(
    store: PostgresStore, *, source: str | None = None, session_id: str | None = None
) -> Iterator[SessionExport]:
    """Every session (of ``source``, or just ``session_id``) with its messages, in the order they were created."""
    where, params = _where(source, session_id)
    after = 0
    while True:
        page = store.database.execute(
            f"SELECT ref, {_SESSION_COLUMNS} FROM sessions WHERE ref > %s{where} ORDER BY ref LIMIT {PAGE_SIZE}",
            [after, *params],
        )
        for row in page:
            session = SessionRecord(**dict(zip(SessionRecord.__struct_fields__, row[1:], strict=True)))
            messages = store.database.execute(
                f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE session_ref = %(ref)s ORDER BY id",
                {"sid": session.id, "ref": row[0]},
            )
            records = []
            for message in messages:
                fields = dict(zip(MessageRecord.__struct_fields__, message, strict=True))
                records.append(MessageRecord(**{**fields, "content": from_db(fields["content"])}))
            yield SessionExport(
                session=session, messages=records, attachments=store.attachments.for_session(session.id)
            )
        if len(page) < PAGE_SIZE:
            return
        after = int(page[-1][0])


def insert_session_export(
    store: PostgresStore, record: SessionRecord, messages: Sequence[tuple[MessageRow, Sequence[AttachmentRow]]]
) -> None:
    """Insert ``record`` as it is, then its messages in order with their files (an import)."""
    from hermes_actors.store.pg.transcript import insert_rows  # transcript builds on the store's tables

    with store.transaction():
        store.insert_session(record)
        ref = int(store.database.value("SELECT ref FROM sessions WHERE id = %s", (record.id,)))
        ids = insert_rows(store.database, ref, [row for row, _ in messages])
        files = [
            (message_id, *msgspec.structs.astuple(file))
            for message_id, (_, attached) in zip(ids, messages, strict=True)
            for file in attached
        ]
        store.database.executemany(
            "INSERT INTO attachments (message_id, kind, created_at, mime_type, size, path, sha256, source_url, "
            "name, error) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            files,
        )


def child_session_ids(store: PostgresStore, session_id: str) -> list[str]:
    """The ids of the sessions whose parent is ``session_id``, oldest first."""
    rows = store.database.execute(
        "SELECT id FROM sessions WHERE parent_session_id = %s ORDER BY started_at, id", (session_id,)
    )
    return [str(sid) for (sid,) in rows]


# -- health and compaction -------------------------------------------------------------------------------------------

_DANGLING = {
    "messages without a session": "SELECT count(*) FROM messages m WHERE NOT EXISTS "
    "(SELECT 1 FROM sessions s WHERE s.ref = m.session_ref)",
    "routes to a missing session": "SELECT count(*) FROM routes r WHERE NOT EXISTS "
    "(SELECT 1 FROM sessions s WHERE s.id = r.session_id)",
    "attachments without a message": "SELECT count(*) FROM attachments a WHERE NOT EXISTS "
    "(SELECT 1 FROM messages m WHERE m.id = a.message_id)",
}


def check_integrity(store: PostgresStore, progress: Callable[[str], None]) -> list[str]:
    """Rows whose references dangle, one line per kind found."""
    problems = []
    for name, sql in _DANGLING.items():
        progress(name)
        found = int(store.database.value(sql) or 0)
        if found:
            problems.append(f"{found} {name}")
    return problems


def check_search_indexes(store: PostgresStore, progress: Callable[[str], None]) -> list[str]:
    """The search columns of the newest :data:`_SEARCH_SAMPLE` messages against their content; one line if stale."""
    progress("search columns")
    rows = store.database.execute(
        "SELECT content, words::text, cjk::text, n_tokens FROM messages ORDER BY id DESC LIMIT %s", (_SEARCH_SAMPLE,)
    )
    expected = [index_text(from_db(content)) for content, *_ in rows]
    # The expected literals normalised by PostgreSQL itself, in one statement.
    normalised = store.database.execute(
        "SELECT w::tsvector::text, c::tsvector::text FROM unnest(%s::text[], %s::text[]) AS e(w, c)",
        ([e.words for e in expected], [e.cjk for e in expected]),
    )
    stale = sum(
        1
        for (_, words, cjk, n_tokens), (want_words, want_cjk), e in zip(rows, normalised, expected, strict=True)
        if (words, cjk, n_tokens) != (want_words, want_cjk, e.n_tokens)
    )
    if not stale:
        return []
    return [f"messages search columns: {stale} of the newest {len(rows)} are stale; run 'hermesctl db optimize'"]


def reindex_messages(store: PostgresStore, *, batch: int = 1000) -> int:
    """Recompute every message's search columns from its content, ``batch`` per transaction; how many."""
    done = after = 0
    while True:
        rows = store.database.execute(
            "SELECT id, content FROM messages WHERE id > %s ORDER BY id LIMIT %s", (after, batch)
        )
        if not rows:
            return done
        with store.transaction():
            updates = []
            for message_id, content in rows:
                indexed = index_text(from_db(content))
                updates.append((indexed.words, indexed.cjk, indexed.n_tokens, message_id))
            store.database.executemany(
                "UPDATE messages SET words = %s::tsvector, cjk = %s::tsvector, n_tokens = %s WHERE id = %s", updates
            )
        done += len(rows)
        after = int(rows[-1][0])


def optimize(store: PostgresStore, progress: Callable[[str], None]) -> OptimizeResult:
    """Recompute the search columns, then vacuum and analyze the tables."""
    before = _database_bytes(store)
    progress("search columns")
    indexed = reindex_messages(store)
    cjk = int(store.database.value("SELECT count(*) FROM messages WHERE cjk <> ''::tsvector") or 0)
    progress("vacuum")
    _vacuum(store)
    return OptimizeResult(
        messages_indexed=indexed,
        cjk_indexed=cjk,
        wal_kept=False,
        bytes_before=before,
        bytes_after=_database_bytes(store),
    )
