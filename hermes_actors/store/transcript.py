"""Transcripts: appending and loading the messages of sessions, and the totals over them, written once.

What differs between the stores is how a message row is written and read back (:class:`MessageRows`): SQLite's
triggers index what is inserted (:class:`SqliteMessageRows`), while PostgreSQL's search columns are computed in
Python at insert and its text cannot hold NUL (:class:`~hermes_actors.store.pg.transcript.PgMessageRows`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NoReturn, Protocol

import msgspec

from hermes_actors.errors import SessionClosedError, SessionNotFoundError, StoreError
from hermes_actors.store.records import MessageRecord, MessageRow, NewMessage, SourceCount, StoreStats
from hermes_actors.store.sql import SqlDb, SqlTable
from hermes_actors.store.sqlite_db import SqliteDb

__all__ = ["FENCED_APPEND_MAX", "MESSAGE_INSERT", "AppendWrite", "MessageRows", "SqliteMessageRows", "Transcript"]

MESSAGE_INSERT = (
    "INSERT INTO messages (session_ref, role, content, tool_calls, tool_name, tool_call_id, token_count, created_at, "
    "platform_message_id"
)
"""The start of a statement inserting message rows: the columns both stores have, without the closing parenthesis
(PostgreSQL adds its search columns)."""

FENCED_APPEND_MAX = 1000
"""The most messages a fence's statement appends (:class:`AppendWrite`); a turn with more appends after the fence."""

# A transcript query puts the session id back as :sid (messages refer to their session by sessions.ref).
_MESSAGE_COLUMNS = ", ".join(":sid" if f == "session_id" else f for f in MessageRecord.__struct_fields__)
_tool_calls_decoder = msgspec.json.Decoder(list[Any])


class MessageRows(Protocol):
    """How a store writes message rows, with whatever its search index needs, and reads their content back."""

    def insert(self, ref: int, rows: Sequence[MessageRow]) -> list[int]:
        """Insert ``rows`` into the session whose ``ref`` is given; their ids, in order."""
        ...

    def append(self, counts: str, params: Sequence[Any], rows: Sequence[MessageRow]) -> list[int] | None:
        """Run ``counts`` (an ``UPDATE sessions ... RETURNING ref``) and insert ``rows`` into the session it
        returned; their ids in order, or ``None`` when it returned none (nothing inserted)."""
        ...

    def fenced_append(self, name: str, counts: str, rows: Sequence[MessageRow]) -> tuple[str, dict[str, Any]]:
        """:meth:`append` as ``WITH`` queries for a fence's statement (:class:`AppendWrite`): ``{name}_counted``
        (``counts``, whose named parameters the caller gives) and ``name`` (the insert, returning the ids); with the
        rows' parameters. Only a store whose fences carry writes (PostgreSQL's) is asked."""
        ...

    @property
    def read_content(self) -> Callable[[Any], str | None] | None:
        """What turns a stored ``content`` back into the message's (``None``: it is stored as it is)."""
        ...


def counted_then_inserted(
    db: SqlDb, rows: MessageRows, counts: str, params: Sequence[Any], messages: Sequence[MessageRow]
) -> list[int] | None:
    """:meth:`MessageRows.append` as two statements: the counters, then the rows."""
    found = db.execute(counts, tuple(params))
    return None if not found else rows.insert(int(found[0][0]), messages)


class SqliteMessageRows:
    """SQLite's message rows: inserted as they are (the FTS triggers index them), their ids consecutive."""

    __slots__ = ("_db",)

    _SQL = f"{MESSAGE_INSERT}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"

    def __init__(self, db: SqliteDb) -> None:
        self._db = db

    def append(self, counts: str, params: Sequence[Any], rows: Sequence[MessageRow]) -> list[int] | None:
        """:func:`counted_then_inserted` (two statements: SQLite pays no round trip)."""
        return counted_then_inserted(self._db, self, counts, params, rows)

    def fenced_append(self, name: str, counts: str, rows: Sequence[MessageRow]) -> tuple[str, dict[str, Any]]:
        """Never asked: SQLite checks a lease with a statement of its own, then runs the writes
        (:meth:`AppendWrite.alone`); it has no data-modifying ``WITH`` queries to carry them in."""
        raise StoreError("SQLite cannot write inside a fence's statement; the append runs after the check")

    @property
    def read_content(self) -> None:
        """Content is stored as it is."""
        return None

    def insert(self, ref: int, rows: Sequence[MessageRow]) -> list[int]:
        """Insert ``rows`` (one prepared statement for all); their ids."""
        if not rows:
            return []
        self._db.executemany(self._SQL, [(ref, *row) for row in rows])
        # One connection writes, and AUTOINCREMENT hands out ids in order: the batch's ids are consecutive.
        last = self._db.connection.last_insert_rowid()
        return list(range(last - len(rows) + 1, last + 1))


def _count_tool_calls(message: NewMessage) -> int:
    if message.tool_calls is None:
        return 0
    try:
        return len(_tool_calls_decoder.decode(message.tool_calls))
    except msgspec.DecodeError as exc:
        raise StoreError(f"tool_calls must be a JSON array of calls: {exc}; nothing was appended") from exc


class Transcript(SqlTable):
    """The ``messages`` table (``store.transcript``), and the counters it keeps on ``sessions``."""

    __slots__ = ("_append_counts", "_append_find", "_fenced_counts", "_rows")

    def __init__(self, db: SqlDb, clock: Callable[[], float], rows: MessageRows) -> None:
        super().__init__(db, clock)
        self._rows = rows
        greatest = db.dialect.greatest
        # Only when the counters' update found no live session: which of the two errors it is.
        self._append_find = "SELECT ended_at IS NOT NULL FROM sessions WHERE id = ?"
        # The counters first, on a live session only: the same statement finds the session's ref (and locks its
        # row, as a SELECT ... FOR UPDATE did), one statement a turn fewer.
        self._append_counts = (
            "UPDATE sessions SET message_count = message_count + ?, tool_call_count = tool_call_count + ?, "
            "input_tokens = input_tokens + ?, output_tokens = output_tokens + ?, "
            f"tokens_estimated = {greatest('tokens_estimated', '?')}, "
            f"last_active_at = {greatest('last_active_at', '?')} WHERE id = ? AND ended_at IS NULL RETURNING ref"
        )
        # The same update in a fence's statement (AppendWrite): named parameters, written only under the lease.
        self._fenced_counts = (
            "UPDATE sessions SET message_count = message_count + :msg_n, "
            "tool_call_count = tool_call_count + :msg_calls, input_tokens = input_tokens + :msg_in, "
            "output_tokens = output_tokens + :msg_out, "
            f"tokens_estimated = {greatest('tokens_estimated', ':msg_estimated')}, "
            f"last_active_at = {greatest('last_active_at', ':msg_at')} WHERE id = :msg_session AND ended_at IS NULL "
            "AND EXISTS (SELECT FROM renewed) RETURNING ref"
        )

    def append(self, session_id: str, messages: Sequence[NewMessage], *, at: float | None = None) -> list[int]:
        """Append ``messages`` to a live session in one transaction; their ids in order.

        Updates the session's message, tool-call and token counters (a message with ``tokens_estimated`` marks the
        session's counts as estimates, for good) and its last activity. Raises :class:`SessionNotFoundError` or
        :class:`SessionClosedError`, appending nothing.
        """
        counts, rows = self._counted(session_id, messages, at)
        with self._db.transaction(savepoint=False):
            ids = self._rows.append(self._append_counts, counts, rows)
            if ids is None:
                self.refuse(session_id)
            return ids

    def appending(self, session_id: str, messages: Sequence[NewMessage], *, at: float | None = None) -> AppendWrite:
        """:meth:`append` as a write a session lease's fence carries (:class:`AppendWrite`): in the fence's
        statement on a shard host, after the check elsewhere."""
        return AppendWrite(self, session_id, messages, at)

    def fenced_append(
        self, name: str, session_id: str, messages: Sequence[NewMessage], at: float | None
    ) -> tuple[str, dict[str, Any]]:
        """:meth:`append` as a fence's ``WITH`` queries (:meth:`MessageRows.fenced_append`, the last named ``name``)
        and their parameters."""
        counts, rows = self._counted(session_id, messages, at)
        query, params = self._rows.fenced_append(name, self._fenced_counts, rows)
        names = ("msg_n", "msg_calls", "msg_in", "msg_out", "msg_estimated", "msg_at", "msg_session")
        return query, {**dict(zip(names, counts, strict=True)), **params}

    def refuse(self, session_id: str) -> NoReturn:
        """An append found no live session ``session_id``: raise the error that says which way."""
        ended = self._db.value(self._append_find, (session_id,))
        if ended is None:
            raise SessionNotFoundError(f"cannot append to {session_id!r}: no such session")
        raise SessionClosedError(f"session {session_id} has ended; reopen it or start a new one before appending")

    def _counted(
        self, session_id: str, messages: Sequence[NewMessage], at: float | None
    ) -> tuple[tuple[Any, ...], list[MessageRow]]:
        """The parameters of the counters' update (:attr:`_append_counts`, the session id last) and the rows of an
        append."""
        now = self._clock() if at is None else at
        tool_calls = sum(_count_tool_calls(m) for m in messages)
        counts = (
            len(messages),
            tool_calls,
            sum(m.input_tokens for m in messages),
            sum(m.output_tokens for m in messages),
            int(any(m.tokens_estimated for m in messages)),
            now,
            session_id,
        )
        rows = [
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
        ]
        return counts, rows

    def freeze_prefix(self, session_id: str, *, system_prompt: str | None, tools: str) -> None:
        """Store what goes before the session's conversation: the exact system message (``None``: none is sent)
        and the tool list (JSON). A session created before schema version 6 gets them on its next turn; the
        runtime never changes them afterwards (a new prefix means a new session)."""
        sql = "UPDATE sessions SET system_prompt = ?, tools = ? WHERE id = ?"
        if self._db.count(sql, (system_prompt, tools, session_id)) == 0:
            raise SessionNotFoundError(f"cannot freeze the prompt of {session_id!r}: no such session")

    def insert_rows(self, ref: int, rows: Sequence[MessageRow]) -> list[int]:
        """Insert message rows as they are into the session ``ref`` (an import); their ids in order."""
        return self._rows.insert(ref, rows)

    def insert(self, session_id: str, rows: Sequence[MessageRow]) -> None:
        """Append message rows as they are to a session, live or ended (an import); its counters are left alone
        (see :meth:`add_counts`)."""
        if not rows:
            return
        with self._db.transaction(savepoint=False):
            ref = self._db.value("SELECT ref FROM sessions WHERE id = ?", (session_id,))
            if ref is None:
                raise SessionNotFoundError(f"cannot insert messages into {session_id!r}: no such session")
            self._rows.insert(int(ref), rows)

    def add_counts(
        self,
        session_id: str,
        *,
        messages: int,
        tool_calls: int,
        last_active_at: float,
        tokens: tuple[int, int] | None = None,
    ) -> None:
        """Count messages written by :meth:`insert` on the session; ``tokens`` replaces its (input, output) token
        counts."""
        self._db.execute(
            "UPDATE sessions SET message_count = message_count + ?, tool_call_count = tool_call_count + ?, "
            f"last_active_at = {self._db.dialect.greatest('last_active_at', '?')}, "
            "input_tokens = coalesce(?, input_tokens), output_tokens = coalesce(?, output_tokens) WHERE id = ?",
            (messages, tool_calls, last_active_at, *(tokens or (None, None)), session_id),
        )

    def last_id(self, session_id: str) -> int:
        """The highest message id of the session (0: no messages, or no such session)."""
        tail = self._db.value(
            "SELECT max(id) FROM messages WHERE session_ref = (SELECT ref FROM sessions WHERE id = ?)", (session_id,)
        )
        return int(tail or 0)

    def load(self, session_id: str) -> list[MessageRecord]:
        """The session's messages in id order; :class:`SessionNotFoundError` for an unknown id."""
        rows = self._db.execute(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages "
            "WHERE session_ref = (SELECT ref FROM sessions WHERE id = :sid) ORDER BY id",
            {"sid": session_id},
        )
        return self.records(rows, session_id)

    def records(self, rows: Sequence[Sequence[Any]], session_id: str) -> list[MessageRecord]:
        """Messages of session ``session_id`` read as ``MessageRecord`` columns, their content as stored turned
        back; :class:`SessionNotFoundError` when there are none and no such session."""
        if not rows and self._db.value("SELECT 1 FROM sessions WHERE id = ?", (session_id,)) is None:
            raise SessionNotFoundError(f"no session has id {session_id!r}; list them with 'hermesctl sessions list'")
        fields = MessageRecord.__struct_fields__
        read = self._rows.read_content
        if read is None:
            return [MessageRecord(**dict(zip(fields, row, strict=True))) for row in rows]
        records = []
        for row in rows:
            values = dict(zip(fields, row, strict=True))
            records.append(MessageRecord(**{**values, "content": read(values["content"])}))
        return records

    def stats(self, *, database_bytes: int, schema_version: int) -> StoreStats:
        """Session and message totals, per-source counts, with the store's size and schema version."""
        rows = self._db.execute(
            "SELECT source, count(*), coalesce(sum(message_count), 0), "
            "coalesce(sum(CASE WHEN ended_at IS NULL THEN 1 ELSE 0 END), 0) "
            "FROM sessions GROUP BY source ORDER BY count(*) DESC, source"
        )
        by_source = [SourceCount(source=str(s), sessions=int(n), messages=int(m)) for s, n, m, _ in rows]
        return StoreStats(
            sessions=sum(c.sessions for c in by_source),
            live_sessions=sum(int(live) for *_, live in rows),
            messages=int(self._db.value("SELECT count(*) FROM messages") or 0),
            by_source=by_source,
            database_bytes=database_bytes,
            schema_version=schema_version,
        )


class AppendWrite:
    """Messages appended under a session lease's fence (:meth:`Transcript.appending`), a
    :class:`~hermes_actors.store.term_guard.FencedWrite`: the counters' update and the rows' insert in the fence's
    own statement where the store carries it as one (PostgreSQL, a shard host), else :meth:`Transcript.append` after
    the check. :attr:`ids`: the new message ids, in order."""

    __slots__ = ("_at", "_messages", "_session_id", "_transcript", "ids")

    def __init__(
        self, transcript: Transcript, session_id: str, messages: Sequence[NewMessage], at: float | None
    ) -> None:
        self._transcript = transcript
        self._session_id = session_id
        self._messages = messages
        self._at = at
        self.ids: list[int] = []

    def fenced(self, name: str) -> tuple[str, dict[str, Any]]:
        """The counters' update and the rows' insert as a fence's ``WITH`` queries (the last returns the ids), and
        their parameters."""
        return self._transcript.fenced_append(name, self._session_id, self._messages, self._at)

    def took(self, rows: list[dict[str, Any]]) -> None:
        """The ids the fence's statement inserted; none: the session is gone or ended (raises, as :meth:`append`)."""
        if not rows:
            self._transcript.refuse(self._session_id)
        self.ids = sorted(int(row["id"]) for row in rows)

    def alone(self) -> None:
        """:meth:`Transcript.append`."""
        self.ids = self._transcript.append(self._session_id, self._messages, at=self._at)
