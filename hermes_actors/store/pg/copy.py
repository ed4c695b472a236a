"""Copying a SQLite home's store into an empty PostgreSQL database (``hermesctl db copy``).

Every table of ``schema.sql`` is copied row for row with its ids (sessions keep their ``ref``, messages their
``id``, so attachments, inbox and outbox rows still point at the right rows), through PostgreSQL's ``COPY`` in
batches of ``batch_size`` rows read by keyset from one SQLite read snapshot (statements over each store's database
seam; the rows go in through psycopg's ``COPY``). Messages get their search columns computed on the way
(:func:`~hermes_actors.store.pg.text.index_text`). The whole copy is one PostgreSQL
transaction: it lands completely or not at all, so a failed copy leaves the target empty and can be run again.
A target that already holds rows is refused before anything is written. Afterwards the identity sequences are
moved past the copied ids.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import msgspec

from hermes_actors.errors import StoreError
from hermes_actors.store.interface import StoreInterface
from hermes_actors.store.pg.store import PostgresStore
from hermes_actors.store.pg.text import index_text, to_db

__all__ = ["COPIED_TABLES", "CopyCounts", "copy_store"]

DEFAULT_BATCH_SIZE = 2000


def _columns(names: str) -> tuple[str, ...]:
    return tuple(names.split(", "))


# table -> (the columns, the keyset column (copied or not) or None for a small table read whole). Parents before
# the rows that refer to them.
COPIED_TABLES: dict[str, tuple[Sequence[str], str | None]] = {
    "sessions": (
        _columns(
            "ref, id, source, user_id, user_name, chat_id, chat_type, chat_name, thread_id, scope_id, account_id, "
            "routing_key, model, title, system_prompt, parent_session_id, started_at, ended_at, end_reason, "
            "message_count, tool_call_count, input_tokens, output_tokens, last_active_at, tools, tokens_estimated, "
            "agent"
        ),
        "ref",
    ),
    "messages": (
        _columns(
            "id, session_ref, role, content, tool_calls, tool_name, tool_call_id, token_count, created_at, "
            "platform_message_id"
        ),
        "id",
    ),
    "attachments": (
        _columns("id, message_id, kind, mime_type, size, path, sha256, source_url, name, error, created_at"),
        "id",
    ),
    "routes": (("routing_key", "session_id", "updated_at"), "routing_key"),
    "inbox": (
        _columns(
            "id, platform, account_id, platform_message_id, routing_key, session_id, payload, received_at, state, "
            "completed_at, owner, kind"
        ),
        "id",
    ),
    "outbox": (
        _columns(
            "id, session_id, platform, account_id, chat_id, thread_id, payload, created_at, attempts, "
            "next_attempt_at, sent_at, platform_message_id, last_error, abandoned_at"
        ),
        "id",
    ),
    "poll_cursors": (("platform", "account_id", "cursor", "updated_at"), None),
    "home_channels": (
        _columns("platform, account_id, chat_id, thread_id, set_by, set_at, chat_type, scope_id"),
        None,
    ),
    "memories": (("id", "user_key", "content", "source_session_id", "created_at"), "id"),
    "leases": (("session_id", "owner", "acquired_at", "expires_at", "epoch"), None),
    "timers": (("name", "due_at", "payload"), "name"),
    # In rowid order, so that PostgreSQL's seq orders a scope's responses as SQLite's rowid did.
    "api_responses": (
        _columns("id, session_id, scope, conversation, previous_id, instructions, status, body, created_at"),
        "rowid",
    ),
    "api_conversations": (("id", "session_id", "scope", "metadata", "created_at"), "id"),
    "dead_letters": (
        _columns("id, inbox_id, outbox_id, platform, session_id, reason, created_at, replay_requested_at, replayed_at"),
        "id",
    ),
    "approvals": (
        _columns(
            "id, session_id, message_id, source, calls, state, created_at, expires_at, decided_at, "
            "decided_by, reason, results, resumed_at"
        ),
        "id",
    ),
    "jobs": (
        _columns(
            "id, owner, prompt, schedule, spec, tz, target, session_id, chat, missed, state, next_due_at, runs, "
            "skipped, last_run_at, last_inbox_id, created_at, created_by"
        ),
        "id",
    ),
    "meta": (("key", "value"), None),
}
_IDENTITIES = (
    "sessions.ref",
    "messages.id",
    "attachments.id",
    "inbox.id",
    "outbox.id",
    "memories.id",
    "dead_letters.id",
    "approvals.id",
)
_PG_ONLY_META = ("schema_version",)  # the PostgreSQL schema's own version; SQLite keeps its in PRAGMA user_version


class CopyCounts(msgspec.Struct, frozen=True, kw_only=True):
    """Rows copied, per table, in the order they were copied."""

    tables: dict[str, int]


Progress = Callable[[str, int, int], None]  # (table, rows done, rows in all)


def _batches(source: StoreInterface, table: str, batch_size: int) -> Iterator[list[tuple[Any, ...]]]:
    """The rows of ``table``, ``batch_size`` at a time in key order (a table without a key: all at once)."""
    columns, key = COPIED_TABLES[table]
    db = source.sql
    if key is None:
        yield db.execute(f"SELECT {', '.join(columns)} FROM {table}")
        return
    select = f"SELECT {', '.join(columns)}, {key} FROM {table}"  # the key last, whether it is copied or not
    after: Any = None
    while True:
        where = "" if after is None else f" WHERE {key} > ?"
        params = ([] if after is None else [after]) + [batch_size]
        page = db.execute(f"{select}{where} ORDER BY {key} LIMIT ?", params)
        if not page:
            return
        after = page[-1][-1]
        yield [row[:-1] for row in page]


_PARENT = COPIED_TABLES["sessions"][0].index("parent_session_id")
_CONTENT = COPIED_TABLES["messages"][0].index("content")


def _pg_row(table: str, row: tuple[Any, ...]) -> tuple[Any, ...]:
    if table == "sessions":  # parents are set once every session is in (a second pass): any order goes
        return (*row[:_PARENT], None, *row[_PARENT + 1 :])
    if table == "messages":  # the content as stored, and the search columns computed from it
        content = row[_CONTENT]
        indexed = index_text(content)
        return (
            *row[:_CONTENT],
            to_db(content),
            *row[_CONTENT + 1 :],
            indexed.words,
            indexed.cjk,
            indexed.n_tokens,
        )
    return row


def _refuse_non_empty(target: PostgresStore) -> None:
    found = {}
    for table in COPIED_TABLES:
        where, params = (" WHERE key <> ALL(?)", [list(_PG_ONLY_META)]) if table == "meta" else ("", [])
        held = int(target.sql.value(f"SELECT count(*) FROM {table}{where}", params) or 0)
        if held:
            found[table] = held
    if found:
        listed = ", ".join(f"{count} {table}" for table, count in found.items())
        raise StoreError(
            f"the PostgreSQL database {target.path} is not empty (it holds {listed}); copy into an empty database: "
            "create a new one (createdb) or drop and recreate this one, then run the copy again"
        )


def copy_store(
    source: StoreInterface,
    target: PostgresStore,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: Progress | None = None,
) -> CopyCounts:
    """Copy every row of ``source`` into the empty ``target`` in one transaction; the rows copied per table."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    _refuse_non_empty(target)
    counts: dict[str, int] = {}
    db = target.sql
    with source.transaction(), db.transaction():
        for table, (columns, _) in COPIED_TABLES.items():
            total = int(source.sql.value(f"SELECT count(*) FROM {table}") or 0)
            pg_columns = ", ".join([*columns, "words", "cjk", "n_tokens"] if table == "messages" else columns)
            statement = f"COPY {table} ({pg_columns}) FROM STDIN".encode()
            done = 0
            if progress is not None:
                progress(table, done, total)
            for page in _batches(source, table, batch_size):
                rows = [_pg_row(table, row) for row in page if table != "meta" or row[0] not in _PG_ONLY_META]
                with target.database.cursor() as cursor, cursor.copy(statement) as copy:
                    for row in rows:
                        copy.write_row(row)
                done += len(rows)
                if progress is not None:
                    progress(table, done, total)
            counts[table] = done
        parents = source.sql.execute("SELECT id, parent_session_id FROM sessions WHERE parent_session_id IS NOT NULL")
        db.executemany("UPDATE sessions SET parent_session_id = ? WHERE id = ?", [(p, s) for s, p in parents])
        for identity in _IDENTITIES:
            table, column = identity.split(".")
            db.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), "
                f"(SELECT coalesce(max({column}), 0) + 1 FROM {table}), false)"
            )
    return CopyCounts(tables=counts)
