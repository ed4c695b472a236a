"""Notes the agent kept about a user, given to that user's later sessions."""

from __future__ import annotations

from hermes_actors.store.sql import SqlTable

__all__ = ["Memories"]


class Memories(SqlTable):
    """Notes the agent kept about a user (save-memory turns), given to that user's later sessions."""

    def add(self, user_key: str, contents: list[str], *, source_session_id: str | None) -> int:
        """Store notes about ``user_key``; return how many."""
        with self._db.transaction(savepoint=False):
            now = self._clock()
            self._db.executemany(
                "INSERT INTO memories (user_key, content, source_session_id, created_at) VALUES (?, ?, ?, ?)",
                [(user_key, content, source_session_id, now) for content in contents],
            )
        return len(contents)

    def for_user(self, user_key: str, *, limit: int = 50) -> list[str]:
        """Return the newest ``limit`` notes about ``user_key``, oldest first."""
        rows = self._db.execute(
            "SELECT content FROM (SELECT id, content FROM memories WHERE user_key = ? ORDER BY id DESC LIMIT ?) "
            "AS m ORDER BY id",
            (user_key, limit),
        )
        return [str(content) for (content,) in rows]
