"""Sessions, their titles and the routing directory: the ``sessions`` and ``routes`` tables.

:class:`SessionRows` is the root of :class:`~hermes_actors.store.Store`: it holds the connection and clock every
concern of the store shares, and gives each method its transaction (:meth:`SessionRows._atomic`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import apsw
import msgspec

from hermes_actors.errors import SessionNotFoundError, StoreError
from hermes_actors.ids import SessionKind
from hermes_actors.routing import SessionSource
from hermes_actors.store.attachments import Attachments, media_dir_for
from hermes_actors.store.connection import Transaction
from hermes_actors.store.lineage import chain_on
from hermes_actors.store.records import EndReason, SessionFilter, SessionRecord
from hermes_actors.store.resolution import SessionResolution
from hermes_actors.store.sqlite_db import SqliteDb
from hermes_actors.titles import sanitize_title

__all__ = ["SessionRows"]

SESSION_COLUMNS = ", ".join(f for f in SessionRecord.__struct_fields__)
_ID_BATCH = 500  # ids per query, well under SQLite's limit on parameters


def _session(row: tuple[Any, ...]) -> SessionRecord:
    return SessionRecord(**dict(zip(SessionRecord.__struct_fields__, row, strict=True)))


class SessionRows(SessionResolution):
    """Sessions, titles and routes over one connection (implements :class:`~.interface.SessionDirectory`)."""

    def __init__(self, connection: apsw.Connection, clock: Callable[[], float]) -> None:
        self._db = connection
        self._clock = clock
        self.sql = SqliteDb(connection)
        self.attachments = Attachments(self.sql, clock, media_dir_for(connection.filename or ""))

    def _atomic(self) -> Transaction:
        """A method's own transaction, or nothing extra inside an enclosing one (see ``Store.transaction``)."""
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
        agent: str | None = None,
    ) -> SessionRecord:
        """Insert a live session and return it. ``source`` is a :class:`SessionSource` or a platform name.

        Raises :class:`TitleInUseError` when another session holds ``title`` (after sanitising).
        """
        record = self.new_record(
            source,
            now=self._clock() if started_at is None else started_at,
            session_id=session_id,
            kind=kind,
            routing_key=routing_key,
            model=model,
            title=title,
            system_prompt=system_prompt,
            parent_session_id=parent_session_id,
            agent=agent,
        )
        values = msgspec.structs.astuple(record)
        placeholders = ", ".join("?" * len(values))
        with self._atomic():
            self._check_title_free(record.title, record.id)
            try:
                self._db.execute(f"INSERT INTO sessions ({SESSION_COLUMNS}) VALUES ({placeholders})", values)
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
                self._db.execute(f"INSERT INTO sessions ({SESSION_COLUMNS}) VALUES ({placeholders})", values)
            except apsw.ConstraintError as exc:
                raise StoreError(f"cannot insert session {record.id}: {exc}") from exc

    def find_session(self, session_id: str) -> SessionRecord | None:
        """Return the session with exactly this id, or ``None``."""
        row = self._db.execute(f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)).get
        return _session(row) if row is not None else None

    def find_sessions(self, session_ids: Sequence[str]) -> list[SessionRecord]:
        """Return the sessions with these ids in the order given; an id no session has is left out."""
        found: dict[str, SessionRecord] = {}
        wanted = list(dict.fromkeys(session_ids))
        for start in range(0, len(wanted), _ID_BATCH):
            batch = wanted[start : start + _ID_BATCH]
            marks = ", ".join("?" * len(batch))
            for row in self._db.execute(f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id IN ({marks})", batch):
                record = _session(row)
                found[record.id] = record
        return [found[sid] for sid in wanted if sid in found]

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

    def set_principal(self, session_id: str, *, source: str, scope_id: str | None, account_id: str | None) -> None:
        """Set the platform, workspace and bot account ``session_id`` belongs to (:class:`SessionNotFoundError` when
        there is no such session)."""
        with self._atomic():
            self._db.execute(
                "UPDATE sessions SET source = ?, scope_id = ?, account_id = ? WHERE id = ?",
                (source, scope_id, account_id, session_id),
            )
            if self._db.changes() == 0:
                self.get_session(session_id)

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
        offset: int = 0,
    ) -> list[SessionRecord]:
        """Return sessions, most recently active (or started) first.

        ``ended=True`` keeps ended sessions only, ``False`` live ones only; ``limit=None`` returns all, after
        skipping the first ``offset``; ``visible`` keeps the sessions a caller may see.
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
        params.extend([-1 if limit is None else limit, max(offset, 0)])
        sql = f"SELECT {SESSION_COLUMNS} FROM sessions {where} ORDER BY {column} DESC, id DESC LIMIT ? OFFSET ?"
        return [_session(row) for row in self._db.execute(sql, params)]

    # -- titles and resolution ---------------------------------------------------------------------------------

    def title_holder(self, title: str) -> str | None:
        """Return the id of the session holding exactly ``title`` (no sanitising), or ``None``."""
        holder = self._db.execute("SELECT id FROM sessions WHERE title = ?", (title,)).get
        return None if holder is None else str(holder)

    def set_title(self, session_id: str, title: str | None) -> str | None:
        """Sanitise and set the title (``None`` or blank clears it); return what was stored.

        Raises :class:`TitleError` for an over-long title or one ending in a lineage's ``" #N"`` that is not the
        session's own (``#N`` is for lineages), and :class:`TitleInUseError` when another session holds it.
        """
        clean = sanitize_title(title)
        with self._atomic():
            self._check_chosen_title(clean, session_id)
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

    def _ids_with_prefix(self, prefix: str, visible: SessionFilter, limit: int) -> list[str]:
        condition, values = visible.sql()
        rows = self._db.execute(
            f"SELECT id FROM sessions WHERE id >= ? AND id < ? AND {condition} ORDER BY id LIMIT ?",
            (prefix, prefix + "\U0010ffff", *values, limit),
        )
        return [str(sid) for (sid,) in rows]

    def _chain(self, session_id: str) -> list[str]:
        return chain_on(self._db, session_id)

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
