"""Durable deadlines: the ``timers`` table (idle resets, daily resets, retries), named so setting one again moves it."""

from __future__ import annotations

from collections.abc import Mapping

from hermes_actors.store.records import TimerRow
from hermes_actors.store.sql import SqlTable

__all__ = ["Timers"]

_UPSERT = (
    "INSERT INTO timers (name, due_at, payload) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE "
    "SET due_at = excluded.due_at, payload = excluded.payload"
)


class Timers(SqlTable):
    """Durable deadlines, named so that setting one again replaces it."""

    def set(self, name: str, due_at: float, payload: bytes | None = None) -> None:
        """Create or move the deadline ``name``."""
        self._db.execute(_UPSERT, (name, due_at, payload))

    def cancel(self, name: str) -> bool:
        """Remove the deadline; return whether it existed."""
        return self._db.count("DELETE FROM timers WHERE name = ?", (name,)) > 0

    def apply(self, changes: Mapping[str, tuple[float, bytes | None] | None]) -> None:
        """Set each named deadline to its ``(due_at, payload)``, or remove it where the change is ``None``."""
        upserts = [(name, change[0], change[1]) for name, change in changes.items() if change is not None]
        removals = [name for name, change in changes.items() if change is None]
        with self._db.transaction(savepoint=False):
            self._db.executemany(_UPSERT, upserts)
            if removals:
                dialect = self._db.dialect
                self._db.execute(f"DELETE FROM timers WHERE {dialect.member('name')}", (dialect.members(removals),))

    def all(self) -> list[TimerRow]:
        """Return every deadline, earliest first."""
        rows = self._db.execute("SELECT name, due_at, payload FROM timers ORDER BY due_at, name")
        return [TimerRow(name=str(n), due_at=float(d), payload=None if p is None else bytes(p)) for n, d, p in rows]
