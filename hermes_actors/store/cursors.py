"""Small durable values: ``meta`` entries and the platforms' poll cursors."""

from __future__ import annotations

from hermes_actors.store.sql import SqlTable

__all__ = ["KeyValues"]


class KeyValues(SqlTable):
    """Small durable values: ``meta`` entries and platform poll cursors."""

    def get_meta(self, key: str) -> str | None:
        """Return a meta value, or ``None``."""
        found = self._db.value("SELECT value FROM meta WHERE key = ?", (key,))
        return None if found is None else str(found)

    def set_meta(self, key: str, value: str) -> None:
        """Set a meta value."""
        self._db.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def get_cursor(self, platform: str, account_id: str = "") -> str | None:
        """Return a platform's poll cursor (Telegram offset, iLink sync buffer), or ``None``."""
        found = self._db.value(
            "SELECT cursor FROM poll_cursors WHERE platform = ? AND account_id = ?", (platform, account_id)
        )
        return None if found is None else str(found)

    def set_cursor(self, platform: str, cursor: str, account_id: str = "") -> None:
        """Store a poll cursor; call it in the transaction that commits the inbox rows it covers."""
        self._db.execute(
            "INSERT INTO poll_cursors (platform, account_id, cursor, updated_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (platform, account_id) DO UPDATE SET cursor = excluded.cursor, "
            "updated_at = excluded.updated_at",
            (platform, account_id, cursor, self._clock()),
        )
