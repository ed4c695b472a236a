"""Sessions and their titles: the ``sessions`` table, written once over the database seam for both stores.

:class:`Sessions` inserts, finds, ends, reopens and deletes sessions, and keeps a title with one session (and a
lineage's ``" #N"`` titles with their lineage). Finding a session by what a user typed builds on it
(:mod:`.resolution`), as the routing directory does (:mod:`.routes`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import apsw
import msgspec

from hermes_actors.errors import SessionNotFoundError, StoreError, TitleInUseError
from hermes_actors.store.attachments import Attachments
from hermes_actors.store.records import EndReason, SessionFilter, SessionOwnerRow, SessionRecord
from hermes_actors.store.sql import SqlDb, SqlTable
from hermes_actors.titles import check_chosen_title, lineage_number, next_lineage_title, sanitize_title

__all__ = ["SESSION_COLUMNS", "Sessions", "session_record"]

SESSION_COLUMNS = ", ".join(SessionRecord.__struct_fields__)
_INSERT = (
    f"INSERT INTO sessions ({SESSION_COLUMNS}) VALUES ({', '.join('?' * len(SessionRecord.__struct_fields__))}) "
    "ON CONFLICT DO NOTHING"
)


def session_record(row: Sequence[Any]) -> SessionRecord:
    """A ``sessions`` row read as :data:`SESSION_COLUMNS`."""
    return SessionRecord(**dict(zip(SessionRecord.__struct_fields__, row, strict=True)))


class Sessions(SqlTable):
    """The ``sessions`` table (``store.sessions``); deleting a session takes its attachments' files along."""

    __slots__ = ("_attachments",)

    def __init__(self, db: SqlDb, clock: Callable[[], float], attachments: Attachments) -> None:
        super().__init__(db, clock)
        self._attachments = attachments

    def create(self, record: SessionRecord) -> SessionRecord:
        """Insert the new session ``record`` and return it; :class:`TitleInUseError` when another session holds its
        title."""
        with self._db.transaction(savepoint=False):
            self.check_title_free(record.title, record.id)
            if not self._insert(record, "create"):
                if self.find(record.id) is not None:
                    raise StoreError(f"a session with id {record.id} already exists; pick another id")
                raise StoreError(f"cannot create session {record.id}: its title was taken meanwhile")
        return record

    def insert(self, record: SessionRecord) -> None:
        """Insert ``record`` exactly as it is (times, end, counters), for an import: its id and title must be free."""
        if not self._insert(record, "insert"):
            raise StoreError(f"cannot insert session {record.id}: its id or title is taken")

    def _insert(self, record: SessionRecord, doing: str) -> bool:
        try:
            return self._db.count(_INSERT, msgspec.structs.astuple(record)) > 0
        except apsw.ConstraintError as exc:  # SQLite's own error for a missing parent (PostgreSQL's is a StoreError)
            raise StoreError(f"cannot {doing} session {record.id}: {exc}") from exc

    def find(self, session_id: str) -> SessionRecord | None:
        """The session with exactly this id, or ``None``."""
        rows = self._db.execute(f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,), keyed=True)
        return session_record(rows[0]) if rows else None

    def owner(self, session_id: str, routing_key: str | None = None) -> SessionOwnerRow | None:
        """Whose session ``session_id`` is, and (``routing_key``) the session that key leads to now, in one
        statement of a few columns; ``None`` when there is no such session."""
        route = "NULL" if routing_key is None else "(SELECT session_id FROM routes WHERE routing_key = ?)"
        rows = self._db.execute(
            f"SELECT source, scope_id, ended_at IS NULL, user_id, {route} FROM sessions WHERE id = ?",
            (session_id,) if routing_key is None else (routing_key, session_id),
            keyed=True,
        )
        if not rows:
            return None
        source, scope_id, live, user_id, found = rows[0]
        return SessionOwnerRow(source=source, scope_id=scope_id, live=bool(live), user_id=user_id, route=found)

    def get(self, session_id: str) -> SessionRecord:
        """The session with exactly this id; :class:`SessionNotFoundError` if there is none."""
        record = self.find(session_id)
        if record is None:
            raise SessionNotFoundError(f"no session has id {session_id!r}; list them with 'hermesctl sessions list'")
        return record

    def find_many(self, session_ids: Sequence[str]) -> list[SessionRecord]:
        """The sessions with these ids in the order given; an id no session has is left out."""
        wanted = list(dict.fromkeys(session_ids))
        if not wanted:
            return []
        dialect = self._db.dialect
        rows = self._db.execute(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE {dialect.member('id')}", (dialect.members(wanted),)
        )
        found = {record.id: record for record in map(session_record, rows)}
        return [found[sid] for sid in wanted if sid in found]

    def end(self, session_id: str, reason: EndReason | str, *, at: float | None = None) -> SessionRecord:
        """End a live session with ``reason``; a session that already ended keeps its first reason."""
        reason = EndReason(reason)
        with self._db.transaction(savepoint=False):
            self._db.execute(
                "UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL",
                (self._clock() if at is None else at, reason.value, session_id),
            )
            return self.get(session_id)

    def reopen(self, session_id: str) -> SessionRecord:
        """Make an ended session live again (``/resume`` of an ended session)."""
        with self._db.transaction(savepoint=False):
            self._db.execute(
                "UPDATE sessions SET ended_at = NULL, end_reason = NULL, last_active_at = ? WHERE id = ?",
                (self._clock(), session_id),
            )
            return self.get(session_id)

    def set_principal(self, session_id: str, *, source: str, scope_id: str | None, account_id: str | None) -> None:
        """Set the platform, workspace and bot account ``session_id`` belongs to (:class:`SessionNotFoundError` when
        there is no such session)."""
        sql = "UPDATE sessions SET source = ?, scope_id = ?, account_id = ? WHERE id = ?"
        if self._db.count(sql, (source, scope_id, account_id, session_id)) == 0:
            self.get(session_id)

    def delete(self, session_id: str) -> bool:
        """Delete a session, its messages, attachments and routes; its children stay, without a parent. Whether it
        existed. Once the deletion has committed, the media files no other row names are removed (see
        :mod:`hermes_actors.store.attachments`)."""
        refs = "SELECT ref FROM sessions WHERE id = ?"
        with self._db.transaction(savepoint=False):
            files = self._attachments.delete_for_sessions(refs, (session_id,))
            # Deleting the messages first runs SQLite's FTS triggers row by row before the cascade.
            self._db.execute(f"DELETE FROM messages WHERE session_ref = ({refs})", (session_id,))
            existed = self._db.count("DELETE FROM sessions WHERE id = ?", (session_id,)) > 0
        self._attachments.remove_unreferenced(files)
        return existed

    def recent(
        self,
        *,
        source: str | None = None,
        ended: bool | None = None,
        limit: int | None = 20,
        order: Literal["last_active", "started"] = "last_active",
        visible: SessionFilter | None = None,
        offset: int = 0,
    ) -> list[SessionRecord]:
        """Sessions, most recently active (or started) first: ``ended=True`` the ended ones only, ``False`` the live
        ones; ``limit=None`` all of them after the first ``offset``; ``visible`` those a caller may see."""
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
        params.extend([self._db.dialect.limit(limit), max(offset, 0)])
        sql = f"SELECT {SESSION_COLUMNS} FROM sessions {where} ORDER BY {column} DESC, id DESC LIMIT ? OFFSET ?"
        return [session_record(row) for row in self._db.execute(sql, params)]

    # -- titles ------------------------------------------------------------------------------------------------

    def title_holder(self, title: str) -> str | None:
        """The id of the session holding exactly ``title`` (no sanitising), or ``None``."""
        holder = self._db.value("SELECT id FROM sessions WHERE title = ?", (title,))
        return None if holder is None else str(holder)

    def set_title(self, session_id: str, title: str | None) -> str | None:
        """Sanitise and set the title (``None`` or blank clears it); the title stored.

        Raises :class:`TitleError` for an over-long title or one ending in a lineage's ``" #N"`` that is not the
        session's own (``#N`` is for lineages), and :class:`TitleInUseError` when another session holds it.
        """
        clean = sanitize_title(title)
        with self._db.transaction(savepoint=False):
            self._check_chosen_title(clean, session_id)
            self.check_title_free(clean, session_id)
            if self._db.count("UPDATE sessions SET title = ? WHERE id = ?", (clean, session_id)) == 0:
                self.get(session_id)
        return clean

    def claim_title(self, session_id: str, title: str) -> str | None:
        """Give ``session_id`` the title ``title`` (sanitised and checked as :meth:`set_title` does) if the session is
        untitled and no session holds the title, in one statement; the title stored, or ``None`` when the session is
        gone, has a title, or the title is taken (an automatic title's first try: it never replaces a title)."""
        clean = sanitize_title(title)
        if clean is None:
            return None
        self._check_chosen_title(clean, session_id)
        claimed = self._db.count(
            "UPDATE sessions SET title = ? WHERE id = ? AND title IS NULL "
            "AND NOT EXISTS (SELECT 1 FROM sessions held WHERE held.title = ?)",
            (clean, session_id, clean),
        )
        return clean if claimed else None

    def lineage_titles(self, base: str) -> list[str]:
        """``base`` and every title starting with ``"<base> #"`` that a session holds."""
        # A range scan on the title index.
        rows = self._db.execute(
            "SELECT title FROM sessions WHERE title = ? OR (title >= ? AND title < ?)",
            (base, base + " #", base + " $"),
        )
        return [str(title) for (title,) in rows]

    def ids_with_prefix(self, prefix: str, visible: SessionFilter, limit: int) -> list[str]:
        """Up to ``limit`` ids starting with ``prefix`` of sessions ``visible`` passes, in id order."""
        condition, values = visible.sql()
        rows = self._db.execute(
            f"SELECT id FROM sessions WHERE id >= ? AND id < ? AND {condition} ORDER BY id LIMIT ?",
            (prefix, prefix + "\U0010ffff", *values, limit),
        )
        return [str(sid) for (sid,) in rows]

    def check_title_free(self, title: str | None, session_id: str) -> None:
        """Raise :class:`TitleInUseError` when a session other than ``session_id`` holds ``title``."""
        if title is None:
            return
        holder = self.title_holder(title)
        if holder is not None and holder != session_id:
            raise TitleInUseError(title, holder)

    def _check_chosen_title(self, title: str | None, session_id: str) -> None:
        """Refuse ``title`` for ``session_id`` when it ends in a lineage's ``" #N"`` and is not the session's own
        lineage title: its title now, or the one its compression parent's title numbers it (:class:`TitleError`)."""
        if title is None or lineage_number(title) == 1:
            return
        record = self.find(session_id)
        own: list[str | None] = [] if record is None else [record.title]
        parent = self.find(record.parent_session_id) if record and record.parent_session_id else None
        if parent is not None and parent.title and parent.end_reason == EndReason.COMPRESSION.value:
            own.append(next_lineage_title(parent.title, ()))
        check_chosen_title(title, own=own)
