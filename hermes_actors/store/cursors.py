"""Small durable values: ``meta`` entries and the platforms' poll cursors."""

from __future__ import annotations

from hermes_actors.store.connection import Table, Transaction

__all__ = ["KeyValues"]


class KeyValues(Table):
    """Small durable values: ``meta`` entries and platform poll cursors."""

    def get_meta(self, key: str) -> str | None:
        """Return a meta value, or ``None``."""
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).get
        return None if row is None else str(row)

    def set_meta(self, key: str, value: str) -> None:
        """Set a meta value."""
        with Transaction(self._db, savepoint=False):
            self._db.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    def get_cursor(self, platform: str, account_id: str = "") -> str | None:
        """Return a platform's poll cursor (Telegram offset, iLink sync buffer), or ``None``."""
        row = self._db.execute(
            "SELECT cursor FROM poll_cursors WHERE platform = ? AND account_id = ?", (platform, account_id)
        ).get
        return None if row is None else str(row)

    def set_cursor(self, platform: str, cursor: str, account_id: str = "") -> None:
        """Store a poll cursor; call it in the transaction that commits the inbox rows it covers."""
        with Transaction(self._db, savepoint=False):
            self._db.execute(
                "INSERT INTO poll_cursors (platform, account_id, cursor, updated_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (platform, account_id) DO UPDATE SET cursor = excluded.cursor, "
                "updated_at = excluded.updated_at",
                (platform, account_id, cursor, self._clock()),
            )
