"""Transcripts: appending and loading the messages of sessions, full-text search over them, and totals."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from hermes_actors.errors import SessionClosedError, SessionNotFoundError, StoreError
from hermes_actors.store import fts, maintenance
from hermes_actors.store.migrations import schema_version
from hermes_actors.store.records import (
    FtsResult,
    MessageRecord,
    MessageRow,
    NewMessage,
    SourceCount,
    StoreStats,
)
from hermes_actors.store.sessions import SessionRows

__all__ = ["TranscriptRows"]

# Messages refer to their session by sessions.ref; a transcript query puts the session id back as ?1.
_MESSAGE_COLUMNS = ", ".join("?1" if f == "session_id" else f for f in MessageRecord.__struct_fields__)
_tool_calls_decoder = msgspec.json.Decoder(list[Any])


def _message(row: tuple[Any, ...]) -> MessageRecord:
    return MessageRecord(**dict(zip(MessageRecord.__struct_fields__, row, strict=True)))


def _count_tool_calls(message: NewMessage) -> int:
    if message.tool_calls is None:
        return 0
    try:
        return len(_tool_calls_decoder.decode(message.tool_calls))
    except msgspec.DecodeError as exc:
        raise StoreError(f"tool_calls must be a JSON array of calls: {exc}; nothing was appended") from exc


def _as_int(value: object) -> int:
    if not isinstance(value, int | float):
        raise StoreError(f"expected a number from the database, got {value!r}")
    return int(value)


class TranscriptRows(SessionRows):
    """The ``messages`` table and its search indexes (implements :class:`~.interface.Transcripts`); the sessions
    and routes of :class:`SessionRows` come with it, since every message belongs to a session."""

    def append_messages(self, session_id: str, messages: Sequence[NewMessage], *, at: float | None = None) -> list[int]:
        """Append ``messages`` to a live session in one transaction; return their ids in order.

        Updates the session's message, tool-call and token counters (a message with ``tokens_estimated`` marks the
        session's counts as estimates, for good) and its last activity. Raises
        :class:`SessionNotFoundError` or :class:`SessionClosedError`, appending nothing.
        """
        now = self._clock() if at is None else at
        tool_calls = sum(_count_tool_calls(m) for m in messages)
        with self._atomic():
            row = self._db.execute(
                "SELECT ref, ended_at IS NOT NULL FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            if row is None:
                raise SessionNotFoundError(f"cannot append to {session_id!r}: no such session")
            ref, ended = row
            if ended:
                raise SessionClosedError(
                    f"session {session_id} has ended; reopen it or start a new one before appending"
                )
            self._db.executemany(
                "INSERT INTO messages (session_ref, role, content, tool_calls, tool_name, tool_call_id, "
                "token_count, created_at, platform_message_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        ref,
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
            # One connection writes, and AUTOINCREMENT hands out ids in order: the batch's ids are consecutive.
            last = self._db.last_insert_rowid()
            ids = list(range(last - len(messages) + 1, last + 1)) if messages else []
            self._db.execute(
                "UPDATE sessions SET message_count = message_count + ?, tool_call_count = tool_call_count + ?, "
                "input_tokens = input_tokens + ?, output_tokens = output_tokens + ?, "
                "tokens_estimated = max(tokens_estimated, ?), last_active_at = max(last_active_at, ?) WHERE ref = ?",
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
        """Store what goes before the session's conversation: the exact system message (``None``: none is sent)
        and the tool list (JSON). A session created before schema version 6 gets them on its next turn; the
        runtime never changes them afterwards (a new prefix means a new session)."""
        with self._atomic():
            self._db.execute(
                "UPDATE sessions SET system_prompt = ?, tools = ? WHERE id = ?", (system_prompt, tools, session_id)
            )
            if self._db.changes() == 0:
                raise SessionNotFoundError(f"cannot freeze the prompt of {session_id!r}: no such session")

    def insert_messages(self, session_id: str, rows: Sequence[MessageRow]) -> None:
        """Append message rows as they are to a session, live or ended (an import); its counters are left alone
        (see :meth:`add_counts`)."""
        if not rows:
            return
        with self._atomic():
            ref = self._db.execute("SELECT ref FROM sessions WHERE id = ?", (session_id,)).get
            self._db.executemany(
                "INSERT INTO messages (session_ref, role, content, tool_calls, tool_name, tool_call_id, "
                "token_count, created_at, platform_message_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(ref, *row) for row in rows],
            )

    def add_counts(
        self,
        session_id: str,
        *,
        messages: int,
        tool_calls: int,
        last_active_at: float,
        tokens: tuple[int, int] | None = None,
    ) -> None:
        """Count messages written by :meth:`insert_messages` on the session; ``tokens`` replaces its (input, output)
        token counts."""
        with self._atomic():
            self._db.execute(
                "UPDATE sessions SET message_count = message_count + ?, tool_call_count = tool_call_count + ?, "
                "last_active_at = max(last_active_at, ?), input_tokens = coalesce(?, input_tokens), "
                "output_tokens = coalesce(?, output_tokens) WHERE id = ?",
                (messages, tool_calls, last_active_at, *(tokens or (None, None)), session_id),
            )

    def last_message_id(self, session_id: str) -> int:
        """Return the highest message id of the session (0: no messages, or no such session)."""
        tail = self._db.execute(
            "SELECT max(id) FROM messages WHERE session_ref = (SELECT ref FROM sessions WHERE id = ?)", (session_id,)
        ).get
        return int(tail or 0)

    def load_transcript(self, session_id: str) -> list[MessageRecord]:
        """Return the session's messages in id order; raise :class:`SessionNotFoundError` for an unknown id."""
        rows = self._db.execute(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages "
            "WHERE session_ref = (SELECT ref FROM sessions WHERE id = ?1) ORDER BY id",
            (session_id,),
        ).fetchall()
        if not rows:
            self.get_session(session_id)
        return [_message(row) for row in rows]

    # -- search and statistics ---------------------------------------------------------------------------------

    def fts_query(
        self,
        query: str,
        *,
        limit: int = 20,
        roles: Sequence[str] | None = None,
        session_id: str | None = None,
        order: fts.Order = "relevance",
    ) -> FtsResult:
        """Run a full-text query over messages; never raises for a malformed query (see :mod:`.fts`)."""
        return fts.query_messages(self._db, query, limit=limit, roles=roles, session_id=session_id, order=order)

    def stats(self) -> StoreStats:
        """Return session and message totals, per-source counts and the database size on disk."""
        rows = self._db.execute(
            "SELECT source, count(*), total(message_count), sum(ended_at IS NULL) FROM sessions "
            "GROUP BY source ORDER BY count(*) DESC, source"
        ).fetchall()
        by_source = [SourceCount(source=str(s), sessions=_as_int(n), messages=_as_int(m)) for s, n, m, _ in rows]
        size = maintenance.file_bytes(str(self._db.filename))
        return StoreStats(
            sessions=sum(c.sessions for c in by_source),
            live_sessions=sum(_as_int(live) for *_, live in rows),
            messages=_as_int(self._db.execute("SELECT count(*) FROM messages").get),
            by_source=by_source,
            database_bytes=size,
            schema_version=schema_version(self._db),
        )
