"""The routing directory: the ``routes`` table, which session a routing key points at (SPEC §3).

A route names a session that exists: pointing a key at an unknown id is refused (:class:`SessionNotFoundError`),
and deleting a session deletes its routes (``ON DELETE CASCADE``).
"""

from __future__ import annotations

from collections.abc import Callable

from hermes_actors.errors import SessionNotFoundError
from hermes_actors.store.sessions import Sessions
from hermes_actors.store.sql import SqlDb, SqlTable

__all__ = ["Routes"]


class Routes(SqlTable):
    """The ``routes`` table (``store.routes``)."""

    __slots__ = ("_sessions",)

    def __init__(self, db: SqlDb, clock: Callable[[], float], sessions: Sessions) -> None:
        super().__init__(db, clock)
        self._sessions = sessions

    def get(self, routing_key: str) -> str | None:
        """The session id ``routing_key`` points at, or ``None``."""
        rows = self._db.execute("SELECT session_id FROM routes WHERE routing_key = ?", (routing_key,), keyed=True)
        found = rows[0][0] if rows else None
        return None if found is None else str(found)

    def set(self, routing_key: str, session_id: str, *, at: float | None = None) -> None:
        """Point ``routing_key`` at ``session_id`` (creating or replacing the entry), dated ``at`` or now."""
        routed = self._db.count(
            "INSERT INTO routes (routing_key, session_id, updated_at) SELECT ?, id, ? FROM sessions WHERE id = ? "
            "ON CONFLICT (routing_key) DO UPDATE SET session_id = excluded.session_id, "
            "updated_at = excluded.updated_at",
            (routing_key, self._clock() if at is None else at, session_id),
        )
        if not routed:
            raise SessionNotFoundError(f"cannot route {routing_key!r} to {session_id!r}: no such session")

    def unbind(self, routing_key: str) -> bool:
        """Remove the entry for ``routing_key``; whether there was one."""
        return self._db.count("DELETE FROM routes WHERE routing_key = ?", (routing_key,)) > 0

    def unbind_session(self, session_id: str) -> list[str]:
        """Remove every route to ``session_id``; the keys that pointed at it."""
        with self._db.transaction(savepoint=False):
            keys = self.to(session_id)
            self._db.execute("DELETE FROM routes WHERE session_id = ?", (session_id,))
        return keys

    def to(self, session_id: str) -> list[str]:
        """Every routing key pointing at ``session_id``."""
        rows = self._db.execute(
            "SELECT routing_key FROM routes WHERE session_id = ? ORDER BY routing_key", (session_id,)
        )
        return [str(key) for (key,) in rows]

    def repoint(self, from_session_id: str, to_session_id: str) -> int:
        """Move every route of ``from_session_id`` to ``to_session_id`` (compression); how many moved."""
        with self._db.transaction(savepoint=False):
            self._sessions.get(to_session_id)
            return self._db.count(
                "UPDATE routes SET session_id = ?, updated_at = ? WHERE session_id = ?",
                (to_session_id, self._clock(), from_session_id),
            )
