"""Durable deadlines: the ``timers`` table (idle resets, daily resets, retries), named so setting one again moves it."""

from __future__ import annotations

from collections.abc import Mapping

from hermes_actors.store.connection import Table, Transaction
from hermes_actors.store.records import TimerRow

__all__ = ["Timers"]


class Timers(Table):
    """Durable deadlines, named so that setting one again replaces it."""

    def set(self, name: str, due_at: float, payload: bytes | None = None) -> None:
        """Create or move the deadline ``name``."""
        with Transaction(self._db, savepoint=False):
            self._db.execute(
                "INSERT INTO timers (name, due_at, payload) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE "
                "SET due_at = excluded.due_at, payload = excluded.payload",
                (name, due_at, payload),
            )

    def cancel(self, name: str) -> bool:
        """Remove the deadline; return whether it existed."""
        with Transaction(self._db, savepoint=False):
            self._db.execute("DELETE FROM timers WHERE name = ?", (name,))
            return self._db.changes() > 0

    def apply(self, changes: Mapping[str, tuple[float, bytes | None] | None]) -> None:
        """Set each named deadline to its ``(due_at, payload)``, or remove it where the change is ``None``."""
        upserts = [(name, change[0], change[1]) for name, change in changes.items() if change is not None]
        removals = [(name,) for name, change in changes.items() if change is None]
        with Transaction(self._db, savepoint=False):
            if upserts:
                self._db.executemany(
                    "INSERT INTO timers (name, due_at, payload) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE "
                    "SET due_at = excluded.due_at, payload = excluded.payload",
                    upserts,
                )
            if removals:
                self._db.executemany("DELETE FROM timers WHERE name = ?", removals)

    def all(self) -> list[TimerRow]:
        """Return every deadline, earliest first."""
        rows = self._db.execute("SELECT name, due_at, payload FROM timers ORDER BY due_at, name")
        return [TimerRow(name=str(n), due_at=float(d), payload=p) for n, d, p in rows]
