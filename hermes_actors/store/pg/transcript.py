"""Transcripts on PostgreSQL: appending and loading messages with their search columns, full-text queries, totals.

Each message is written with its index columns (:func:`~hermes_actors.store.pg.text.index_text`), computed here in
Python: the ``words`` and ``cjk`` tsvectors and the token count. The rules are those of
:class:`~hermes_actors.store.transcript.TranscriptRows`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from hermes_actors.errors import SessionClosedError, SessionNotFoundError, StoreError
from hermes_actors.store.fts import Order
from hermes_actors.store.pg import fts
from hermes_actors.store.pg.db import Database
from hermes_actors.store.pg.migrations import schema_version
from hermes_actors.store.pg.sessions import PgSessionRows
from hermes_actors.store.pg.text import from_db, index_text, to_db
from hermes_actors.store.records import FtsResult, MessageRecord, MessageRow, NewMessage, SourceCount, StoreStats

__all__ = ["PgTranscriptRows", "insert_rows"]

_INSERT = (
    "INSERT INTO messages (session_ref, role, content, tool_calls, tool_name, tool_call_id, token_count, created_at, "
    "platform_message_id, words, cjk, n_tokens) VALUES "
)
_ROW = "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s::tsvector, %s::tsvector, %s)"
_MESSAGE_COLUMNS = ", ".join("%(sid)s" if f == "session_id" else f for f in MessageRecord.__struct_fields__)
_BATCH = 1000  # rows per INSERT: 12 parameters each, well under PostgreSQL's 65,535
_tool_calls_decoder = msgspec.json.Decoder(list[Any])


def _message_values(ref: int, row: MessageRow) -> tuple[Any, ...]:
    """The parameters of one message row (its index columns computed here)."""
    role, content, *rest = row
    indexed = index_text(content)
    return (ref, role, to_db(content), *rest, indexed.words, indexed.cjk, indexed.n_tokens)


def insert_rows(db: Database, ref: int, rows: Sequence[MessageRow]) -> list[int]:
    """Insert message rows of session ``ref``, :data:`_BATCH` per statement; their ids, in order (identity values
    are drawn in the order of the VALUES list)."""
    ids: list[int] = []
    for start in range(0, len(rows), _BATCH):
        batch = rows[start : start + _BATCH]
        values = [value for row in batch for value in _message_values(ref, row)]
        found = db.execute(_INSERT + ", ".join([_ROW] * len(batch)) + " RETURNING id", values)
        ids.extend(sorted(int(i) for (i,) in found))
    return ids


def _count_tool_calls(message: NewMessage) -> int:
    if message.tool_calls is None:
        return 0
    try:
        return len(_tool_calls_decoder.decode(message.tool_calls))
    except msgspec.DecodeError as exc:
        raise StoreError(f"tool_calls must be a JSON array of calls: {exc}; nothing was appended") from exc


class PgTranscriptRows(PgSessionRows):
    """The ``messages`` table and its search columns (implements :class:`~.interface.Transcripts`)."""

    def append_messages(self, session_id: str, messages: Sequence[NewMessage], *, at: float | None = None) -> list[int]:
        """Append ``messages`` to a live session in one transaction; their ids in order."""
        now = self._clock() if at is None else at
        tool_calls = sum(_count_tool_calls(m) for m in messages)
        with self._atomic():
            rows = self._db.execute(
                "SELECT ref, ended_at IS NOT NULL FROM sessions WHERE id = %s FOR UPDATE", (session_id,)
            )
            if not rows:
                raise SessionNotFoundError(f"cannot append to {session_id!r}: no such session")
            ref, ended = rows[0]
            if ended:
                raise SessionClosedError(
                    f"session {session_id} has ended; reopen it or start a new one before appending"
                )
            ids = insert_rows(
                self._db,
                int(ref),
                [
                    (
                        m.role.value,
                        m.content,
                        m.tool_calls,
                        m.tool_name,
                        m.tool_call_id,
                        m.token_count,
                        now if m.created_at is None else m.created_at,
                        m.platform_message_id,
                    )
                    for m in messages
                ],
            )
            self._db.execute(
                "UPDATE sessions SET message_count = message_count + %s, tool_call_count = tool_call_count + %s, "
                "input_tokens = input_tokens + %s, output_tokens = output_tokens + %s, "
                "tokens_estimated = greatest(tokens_estimated, %s), last_active_at = greatest(last_active_at, %s) "
                "WHERE ref = %s",
                (
                    len(messages),
                    tool_calls,
                    sum(m.input_tokens for m in messages),
                    sum(m.output_tokens for m in messages),
                    int(any(m.tokens_estimated for m in messages)),
                    now,
                    ref,
                ),
            )
        return ids

    def freeze_prefix(self, session_id: str, *, system_prompt: str | None, tools: str) -> None:
        """Store the exact system message and the tool list the session's turns go out with."""
        changed = self._db.count(
            "UPDATE sessions SET system_prompt = %s, tools = %s WHERE id = %s", (system_prompt, tools, session_id)
        )
        if changed == 0:
            raise SessionNotFoundError(f"cannot freeze the prompt of {session_id!r}: no such session")

    def insert_messages(self, session_id: str, rows: Sequence[MessageRow]) -> None:
        """Append message rows as they are (an import), counters untouched."""
        if not rows:
            return
        with self._atomic():
            ref = self._db.value("SELECT ref FROM sessions WHERE id = %s", (session_id,))
            if ref is None:
                raise SessionNotFoundError(f"cannot insert messages into {session_id!r}: no such session")
            insert_rows(self._db, int(ref), rows)

    def add_counts(
        self,
        session_id: str,
        *,
        messages: int,
        tool_calls: int,
        last_active_at: float,
        tokens: tuple[int, int] | None = None,
    ) -> None:
        """Count rows written by :meth:`insert_messages` on their session."""
        self._db.execute(
            "UPDATE sessions SET message_count = message_count + %s, tool_call_count = tool_call_count + %s, "
            "last_active_at = greatest(last_active_at, %s), input_tokens = coalesce(%s, input_tokens), "
            "output_tokens = coalesce(%s, output_tokens) WHERE id = %s",
            (messages, tool_calls, last_active_at, *(tokens or (None, None)), session_id),
        )

    def last_message_id(self, session_id: str) -> int:
        """The highest message id of the session (0: none)."""
        tail = self._db.value(
            "SELECT max(id) FROM messages WHERE session_ref = (SELECT ref FROM sessions WHERE id = %s)", (session_id,)
        )
        return int(tail or 0)

    def load_transcript(self, session_id: str) -> list[MessageRecord]:
        """The session's messages in id order (:class:`SessionNotFoundError` for an unknown id)."""
        rows = self._db.execute(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages "
            "WHERE session_ref = (SELECT ref FROM sessions WHERE id = %(sid)s) ORDER BY id",
            {"sid": session_id},
        )
        if not rows:
            self.get_session(session_id)
        records = []
        for row in rows:
            fields = dict(zip(MessageRecord.__struct_fields__, row, strict=True))
            records.append(MessageRecord(**{**fields, "content": from_db(fields["content"])}))
        return records

    def fts_query(
        self,
        query: str,
        *,
        limit: int = 20,
        roles: Sequence[str] | None = None,
        session_id: str | None = None,
        order: Order = "relevance",
    ) -> FtsResult:
        """Run a full-text query over messages; never raises for a malformed query (see :mod:`.fts`)."""
        return fts.query_messages(self._db, query, limit=limit, roles=roles, session_id=session_id, order=order)

    def stats(self) -> StoreStats:
        """Session and message totals, per-source counts and the database's size."""
        rows = self._db.execute(
            "SELECT source, count(*), coalesce(sum(message_count), 0), count(*) FILTER (WHERE ended_at IS NULL) "
            "FROM sessions GROUP BY source ORDER BY count(*) DESC, source"
        )
        by_source = [SourceCount(source=str(s), sessions=int(n), messages=int(m)) for s, n, m, _ in rows]
        return StoreStats(
            sessions=sum(c.sessions for c in by_source),
            live_sessions=sum(int(live) for *_, live in rows),
            messages=int(self._db.value("SELECT count(*) FROM messages") or 0),
            by_source=by_source,
            database_bytes=int(self._db.value("SELECT pg_database_size(current_database())") or 0),
            schema_version=schema_version(self._db),
        )
