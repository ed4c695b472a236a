"""The store: sessions, transcripts, titles and the routing directory over one APSW connection.

A plain synchronous library. The connection belongs to the thread that uses it; the daemon gives its writing
``Store`` to one actor and opens read-only ``Store`` objects elsewhere. Every method that writes runs in one
transaction; :meth:`Store.transaction` nests them (as savepoints) when a turn must commit several together.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import apsw
import msgspec

from hermes_actors.errors import (
    AmbiguousSessionError,
    SessionClosedError,
    SessionNotFoundError,
    StoreError,
    TitleInUseError,
)
from hermes_actors.ids import SessionKind, new_session_id
from hermes_actors.routing import SessionSource
from hermes_actors.store import fts, maintenance
from hermes_actors.store.attachments import Attachments
from hermes_actors.store.connection import (
    DEFAULT_BUSY_TIMEOUT_MS,
    Synchronous,
    Transaction,
    check_writable,
    open_connection,
)
from hermes_actors.store.durable import HomeChannels, Inbox, KeyValues, Leases, Memories, Outbox, Timers
from hermes_actors.store.migrations import migrate, schema_version
from hermes_actors.store.records import (
    EndReason,
    FtsResult,
    MessageRecord,
    MessageRow,
    NewMessage,
    OptimizeResult,
    SessionFilter,
    SessionRecord,
    SourceCount,
    StoreStats,
)
from hermes_actors.titles import lineage_base, lineage_number, next_lineage_title, sanitize_title

__all__ = ["Store"]

_SESSION_COLUMNS = ", ".join(f for f in SessionRecord.__struct_fields__)
# Messages refer to their session by sessions.ref; a transcript query puts the session id back as ?1.
_MESSAGE_COLUMNS = ", ".join("?1" if f == "session_id" else f for f in MessageRecord.__struct_fields__)
_PREFIX_CANDIDATES = 11
_tool_calls_decoder = msgspec.json.Decoder(list[Any])


def _session(row: tuple[Any, ...]) -> SessionRecord:
    return SessionRecord(**dict(zip(SessionRecord.__struct_fields__, row, strict=True)))


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


class Store:
    """Sessions, messages, titles and routes in one SQLite database.

    Open with :meth:`open`; it migrates a writable database to the current schema.
    """

    def __init__(self, connection: apsw.Connection, *, clock: Callable[[], float] = time.time) -> None:
        self._db = connection
        self._clock = clock
        self.inbox = Inbox(connection, clock)
        self.outbox = Outbox(connection, clock)
        self.leases = Leases(connection, clock)
        self.timers = Timers(connection, clock)
        self.kv = KeyValues(connection, clock)
        self.homes = HomeChannels(connection, clock)
        self.memories = Memories(connection, clock)
        self.attachments = Attachments(connection, clock)

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        readonly: bool = False,
        synchronous: Synchronous | str = Synchronous.NORMAL,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        clock: Callable[[], float] = time.time,
    ) -> Store:
        """Open (and, unless ``readonly``, create and migrate) the database at ``path``."""
        connection = open_connection(path, readonly=readonly, synchronous=synchronous, busy_timeout_ms=busy_timeout_ms)
        try:
            if not readonly:
                migrate(connection)
        except BaseException:
            connection.close()
            raise
        return cls(connection, clock=clock)

    @property
    def _connection(self) -> apsw.Connection:
        """The underlying connection: for the store package's own modules (and white-box tests) only."""
        return self._db

    @property
    def path(self) -> str:
        """The database file name."""
        return str(self._db.filename)

    def close(self) -> None:
        """Close the connection; the store is unusable afterwards."""
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def transaction(self) -> Transaction:
        """Return a context manager running its block in one transaction (a savepoint when nested).

        An exception leaving the block rolls it back and propagates. Inside it, the store's methods add no
        savepoints of their own: a method that raises may leave part of its writes, so let its exception leave
        the block rather than catch it inside.
        """
        return Transaction(self._db)

    def _atomic(self) -> Transaction:
        """A method's own transaction, or nothing extra inside an enclosing one (see :meth:`transaction`)."""
        return Transaction(self._db, savepoint=False)

    # -- sessions ----------------------------------------------------------------------------------------------

    def create_session(
        self,
        source: SessionSource | str,
        *,
        session_id: str | None = None,
        kind: SessionKind = SessionKind.GATEWAY,
        routing_key: str | None = None,
        model: str | None = None,
        title: str | None = None,
        system_prompt: str | None = None,
        parent_session_id: str | None = None,
        started_at: float | None = None,
    ) -> SessionRecord:
        """Insert a live session and return it. ``source`` is a :class:`SessionSource` or a platform name.

        Raises :class:`TitleInUseError` when another session holds ``title`` (after sanitising).
        """
        now = self._clock() if started_at is None else started_at
        origin = source if isinstance(source, SessionSource) else SessionSource(platform=source)
        record = SessionRecord(
            id=session_id or new_session_id(kind),
            source=origin.platform,
            started_at=now,
            last_active_at=now,
            user_id=origin.user_id_alt or origin.user_id,
            user_name=origin.user_name,
            chat_id=origin.chat_id,
            chat_type=origin.chat_type,
            chat_name=origin.chat_name,
            thread_id=origin.thread_id,
            scope_id=origin.scope_id,
            account_id=origin.account_id,
            routing_key=routing_key,
            model=model,
            title=sanitize_title(title),
            system_prompt=system_prompt,
            parent_session_id=parent_session_id,
        )
        values = msgspec.structs.astuple(record)
        placeholders = ", ".join("?" * len(values))
        with self._atomic():
            self._check_title_free(record.title, record.id)
            try:
                self._db.execute(f"INSERT INTO sessions ({_SESSION_COLUMNS}) VALUES ({placeholders})", values)
            except apsw.ConstraintError as exc:
                if self.find_session(record.id) is not None:
                    raise StoreError(f"a session with id {record.id} already exists; pick another id") from exc
                raise StoreError(f"cannot create session {record.id}: {exc}") from exc
        return record

    def insert_session(self, record: SessionRecord) -> None:
        """Insert ``record`` exactly as it is (times, end, counters), for an import: its title must be free."""
        values = msgspec.structs.astuple(record)
        placeholders = ", ".join("?" * len(values))
        with self._atomic():
            try:
                self._db.execute(f"INSERT INTO sessions ({_SESSION_COLUMNS}) VALUES ({placeholders})", values)
            except apsw.ConstraintError as exc:
                raise StoreError(f"cannot insert session {record.id}: {exc}") from exc

    def find_session(self, session_id: str) -> SessionRecord | None:
        """Return the session with exactly this id, or ``None``."""
        row = self._db.execute(f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)).get
        return _session(row) if row is not None else None

    def get_session(self, session_id: str) -> SessionRecord:
        """Return the session with exactly this id; raise :class:`SessionNotFoundError` if there is none."""
        record = self.find_session(session_id)
        if record is None:
            raise SessionNotFoundError(f"no session has id {session_id!r}; list them with 'hermesctl sessions list'")
        return record

    def end_session(self, session_id: str, reason: EndReason | str, *, at: float | None = None) -> SessionRecord:
        """End a live session with ``reason``; a session that already ended keeps its first reason."""
        reason = EndReason(reason)
        with self._atomic():
            self._db.execute(
                "UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL",
                (self._clock() if at is None else at, reason.value, session_id),
            )
            return self.get_session(session_id)

    def reopen_session(self, session_id: str) -> SessionRecord:
        """Make an ended session live again (``/resume`` of an ended session)."""
        with self._atomic():
            self._db.execute(
                "UPDATE sessions SET ended_at = NULL, end_reason = NULL, last_active_at = ? WHERE id = ?",
                (self._clock(), session_id),
            )
            return self.get_session(session_id)

    def delete_session(self, session_id: str) -> bool:
        """Delete a session, its messages, attachments and routes; its children stay, without a parent.

        Return whether it existed. Once the deletion has committed, the media files of its attachments that no
        other row names are removed (see :mod:`hermes_actors.store.attachments`).
        """
        refs = "SELECT ref FROM sessions WHERE id = ?"
        with self._atomic():
            files = self.attachments.delete_for_sessions(refs, (session_id,))
            # Deleting the messages first runs the FTS triggers row by row before the cascade.
            self._db.execute(f"DELETE FROM messages WHERE session_ref = ({refs})", (session_id,))
            self._db.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
            existed = self._db.changes() > 0
        self.attachments.remove_unreferenced(files)
        return existed

    def list_sessions(
        self,
        *,
        source: str | None = None,
        ended: bool | None = None,
        limit: int | None = 20,
        order: Literal["last_active", "started"] = "last_active",
        visible: SessionFilter | None = None,
    ) -> list[SessionRecord]:
        """Return sessions, most recently active (or started) first.

        ``ended=True`` keeps ended sessions only, ``False`` live ones only; ``limit=None`` returns all;
        ``visible`` keeps the sessions a caller may see.
        """
        clauses: list[str] = []
        params: list[Any] = []
        if visible is not None:
            condition, values = visible.sql()
            clauses.append(condition)
            params.extend(values)
        if source is not None:
            clauses.append("source = ?")
            params.append(source)
        if ended is not None:
            clauses.append("ended_at IS NOT NULL" if ended else "ended_at IS NULL")
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        column = "last_active_at" if order == "last_active" else "started_at"
        params.append(-1 if limit is None else limit)
        sql = f"SELECT {_SESSION_COLUMNS} FROM sessions {where} ORDER BY {column} DESC, id DESC LIMIT ?"
        return [_session(row) for row in self._db.execute(sql, params)]

    # -- messages ----------------------------------------------------------------------------------------------

    def append_messages(self, session_id: str, messages: Sequence[NewMessage], *, at: float | None = None) -> list[int]:
        """Append ``messages`` to a live session in one transaction; return their ids in order.

        Updates the session's message, tool-call and token counters and its last activity. Raises
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
                "last_active_at = max(last_active_at, ?) WHERE ref = ?",
                (
                    len(messages),
                    tool_calls,
                    sum(m.input_tokens for m in messages),
                    sum(m.output_tokens for m in messages),
                    now,
                    ref,
                ),
            )
        return ids

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

    # -- titles and resolution ---------------------------------------------------------------------------------

    def title_holder(self, title: str) -> str | None:
        """Return the id of the session holding exactly ``title`` (no sanitising), or ``None``."""
        holder = self._db.execute("SELECT id FROM sessions WHERE title = ?", (title,)).get
        return None if holder is None else str(holder)

    def _check_title_free(self, title: str | None, session_id: str) -> None:
        if title is None:
            return
        holder = self.title_holder(title)
        if holder is not None and holder != session_id:
            raise TitleInUseError(title, holder)

    def set_title(self, session_id: str, title: str | None) -> str | None:
        """Sanitise and set the title (``None`` or blank clears it); return what was stored.

        Raises :class:`TitleError` for an over-long title and :class:`TitleInUseError` when another session holds
        it.
        """
        clean = sanitize_title(title)
        with self._atomic():
            self._check_title_free(clean, session_id)
            self._db.execute("UPDATE sessions SET title = ? WHERE id = ?", (clean, session_id))
            if self._db.changes() == 0:
                self.get_session(session_id)
        return clean

    def lineage_titles(self, base: str) -> list[str]:
        """Return ``base`` and every title that starts with ``"<base> #"`` that a session holds."""
        # A range scan on the title index.
        rows = self._db.execute(
            "SELECT title FROM sessions WHERE title = ? OR (title >= ? AND title < ?)",
            (base, base + " #", base + " $"),
        )
        return [str(title) for (title,) in rows]

    def next_lineage_title(self, title: str) -> str:
        """Return the title a compression child of a session titled ``title`` should take (``"t #N"``)."""
        return next_lineage_title(title, self.lineage_titles(lineage_base(title)))

    def find_by_title(self, title: str, *, visible: SessionFilter | None = None) -> SessionRecord | None:
        """Return the session titled ``title``, preferring the newest numbered variant of its lineage.

        With ``visible``, only sessions that pass it count: another principal's title is not found.
        """
        clean = sanitize_title(title)
        if clean is None:
            return None
        lineage = sorted(
            (t for t in self.lineage_titles(clean) if lineage_base(t) == clean), key=lineage_number, reverse=True
        )
        for candidate in lineage or [clean]:
            holder = self.title_holder(candidate)
            record = self.find_session(holder) if holder is not None else None
            if record is not None and (visible is None or visible.matches(record)):
                return record
        return None

    def resolve_session(self, reference: str, *, visible: SessionFilter | None = None) -> SessionRecord:
        """Find the session a user typed: exact id, then unique id prefix, then title.

        Raises :class:`AmbiguousSessionError` (naming the candidates) for a prefix of several ids and
        :class:`SessionNotFoundError` when nothing matches. With ``visible``, sessions that do not pass it are
        not there at all: they match nothing and are never named as candidates.
        """
        text = reference.strip()
        if not text:
            raise SessionNotFoundError("an empty session reference matches nothing; give an id, prefix or title")
        exact = self.find_session(text)
        if exact is not None and (visible is None or visible.matches(exact)):
            return exact
        condition, values = (visible or SessionFilter()).sql()
        prefixed = [
            str(sid)
            for (sid,) in self._db.execute(
                f"SELECT id FROM sessions WHERE id >= ? AND id < ? AND {condition} ORDER BY id LIMIT ?",
                (text, text + "\U0010ffff", *values, _PREFIX_CANDIDATES),
            )
        ]
        if len(prefixed) == 1:
            return self.get_session(prefixed[0])
        if prefixed:
            raise AmbiguousSessionError(text, prefixed)
        titled = self.find_by_title(text, visible=visible)
        if titled is not None:
            return titled
        raise SessionNotFoundError(
            f"no session matches {text!r} by id, id prefix or title; list them with 'hermesctl sessions list'"
        )

    # -- routing directory -------------------------------------------------------------------------------------

    def get_route(self, routing_key: str) -> str | None:
        """Return the session id ``routing_key`` points at, or ``None``."""
        row = self._db.execute("SELECT session_id FROM routes WHERE routing_key = ?", (routing_key,)).get
        return None if row is None else str(row)

    def set_route(self, routing_key: str, session_id: str, *, at: float | None = None) -> None:
        """Point ``routing_key`` at ``session_id`` (creating or replacing the entry), dated ``at`` or now."""
        try:
            with self._atomic():
                self._db.execute(
                    "INSERT INTO routes (routing_key, session_id, updated_at) VALUES (?, ?, ?) "
                    "ON CONFLICT (routing_key) DO UPDATE SET session_id = excluded.session_id, "
                    "updated_at = excluded.updated_at",
                    (routing_key, session_id, self._clock() if at is None else at),
                )
        except apsw.ConstraintError as exc:
            raise SessionNotFoundError(f"cannot route {routing_key!r} to {session_id!r}: no such session") from exc

    def unbind_route(self, routing_key: str) -> bool:
        """Remove the entry for ``routing_key``; return whether there was one."""
        with self._atomic():
            self._db.execute("DELETE FROM routes WHERE routing_key = ?", (routing_key,))
            return self._db.changes() > 0

    def unbind_session(self, session_id: str) -> list[str]:
        """Remove every route to ``session_id``; return the keys that pointed at it."""
        with self._atomic():
            keys = self.routes_to(session_id)
            self._db.execute("DELETE FROM routes WHERE session_id = ?", (session_id,))
        return keys

    def routes_to(self, session_id: str) -> list[str]:
        """Return every routing key pointing at ``session_id``."""
        rows = self._db.execute(
            "SELECT routing_key FROM routes WHERE session_id = ? ORDER BY routing_key", (session_id,)
        )
        return [str(key) for (key,) in rows]

    def repoint_routes(self, from_session_id: str, to_session_id: str) -> int:
        """Move every route of ``from_session_id`` to ``to_session_id`` (compression); return how many moved."""
        with self._atomic():
            self.get_session(to_session_id)
            self._db.execute(
                "UPDATE routes SET session_id = ?, updated_at = ? WHERE session_id = ?",
                (to_session_id, self._clock(), from_session_id),
            )
            return self._db.changes()

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
        size = maintenance.file_bytes(self.path)
        return StoreStats(
            sessions=sum(c.sessions for c in by_source),
            live_sessions=sum(_as_int(live) for *_, live in rows),
            messages=_as_int(self._db.execute("SELECT count(*) FROM messages").get),
            by_source=by_source,
            database_bytes=size,
            schema_version=schema_version(self._db),
        )

    # -- maintenance -------------------------------------------------------------------------------------------

    def schema_version(self) -> int:
        """Return the database's schema version (0 for a new file); :class:`StoreError` if it cannot be read."""
        try:
            return schema_version(self._db)
        except apsw.Error as exc:
            raise StoreError(f"cannot read {self.path}: {exc}; is it a hermes-actors database?") from exc

    def check_writable(self) -> None:
        """Raise :class:`StoreUnwritableError` naming the problem and the fix unless the database takes a write now.

        See :func:`hermes_actors.store.connection.check_writable`; run it where the store's owner runs.
        """
        check_writable(self._db)

    def check_integrity(self) -> list[str]:
        """Run SQLite's integrity and foreign key checks; return one line per problem (none: healthy)."""
        return maintenance.check_integrity(self._db)

    def check_search_indexes(self) -> list[str]:
        """Check both full-text indexes against the messages (needs a writable store); one line per stale index."""
        return maintenance.check_search_indexes(self._db)

    def optimize(self) -> OptimizeResult:
        """Rebuild both search indexes, refresh the planner's statistics, vacuum and checkpoint the file.

        It holds the write lock throughout; :class:`StoreBusyError` names the step at which another process's
        lock outlasted the busy timeout.
        """
        return maintenance.optimize(self._db)

    def free_bytes(self) -> int:
        """Return the bytes of free pages in the file (reused by new data; a VACUUM gives them back)."""
        return maintenance.free_bytes(self._db)
