"""Cross-process ownership of sessions: the ``leases`` table and its fencing epochs."""

from __future__ import annotations

from hermes_actors.errors import LeaseLostError
from hermes_actors.store.connection import Table, Transaction

__all__ = ["Leases"]


class Leases(Table):
    """Cross-process ownership of sessions: one row per owned session, renewed by heartbeat, expiring.

    Every take-over (a new owner, or the same owner after its row was gone) gets a new ``epoch`` from a counter
    that only grows, so a turn computed under one tenure cannot commit under another: see :meth:`fence`.
    """

    def grant(self, session_id: str, owner: str, ttl_s: float) -> int | str:
        """Take or renew the lease; return its epoch, or the current holder's owner string when it is held."""
        now = self._clock()
        with Transaction(self._db, savepoint=False):
            held = self._db.execute(
                "SELECT owner, epoch, expires_at FROM leases WHERE session_id = ?", (session_id,)
            ).fetchone()
            if held is not None and held[0] == owner:
                self._db.execute(
                    "UPDATE leases SET expires_at = ? WHERE session_id = ?", (max(now + ttl_s, held[2]), session_id)
                )
                return int(held[1])
            if held is not None and held[2] >= now:
                return str(held[0])
            epoch = self._next_epoch()
            self._db.execute(
                "INSERT INTO leases (session_id, owner, acquired_at, expires_at, epoch) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner, acquired_at = excluded.acquired_at, "
                "expires_at = excluded.expires_at, epoch = excluded.epoch",
                (session_id, owner, now, now + ttl_s, epoch),
            )
            return epoch

    def _next_epoch(self) -> int:
        row = self._db.execute(
            "INSERT INTO meta (key, value) VALUES ('lease_epoch', '1') ON CONFLICT (key) DO UPDATE "
            "SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT) RETURNING value"
        ).get
        return int(str(row))

    def acquire(self, session_id: str, owner: str, ttl_s: float) -> str | None:
        """Take or renew the lease; return ``None`` on success or the current holder's owner string."""
        granted = self.grant(session_id, owner, ttl_s)
        return granted if isinstance(granted, str) else None

    def fence(self, session_id: str, owner: str, epoch: int, ttl_s: float) -> None:
        """Check, inside the caller's transaction, that ``owner`` still holds the lease at ``epoch``, and extend it.

        Raises :class:`LeaseLostError` otherwise (the lease expired and another process took it, even if it has
        given it up since): the caller's transaction must roll back, its work was computed from a stale history.
        """
        with Transaction(self._db, savepoint=False):
            self._db.execute(
                "UPDATE leases SET expires_at = max(expires_at, ?) WHERE session_id = ? AND owner = ? AND epoch = ?",
                (self._clock() + ttl_s, session_id, owner, epoch),
            )
            if self._db.changes() == 0:
                raise LeaseLostError(
                    f"this process no longer holds the lease of session {session_id} (epoch {epoch}): another "
                    "process took it over; the turn is rolled back and runs again under a new lease"
                )

    def epoch_of(self, session_id: str, owner: str) -> int | None:
        """Return the epoch of ``owner``'s lease on ``session_id``, or ``None`` when it does not hold it."""
        row = self._db.execute(
            "SELECT epoch FROM leases WHERE session_id = ? AND owner = ?", (session_id, owner)
        ).fetchone()
        return None if row is None else int(row[0])

    def heartbeat(self, owner: str, ttl_s: float) -> int:
        """Extend every lease ``owner`` holds; return how many."""
        with Transaction(self._db, savepoint=False):
            self._db.execute("UPDATE leases SET expires_at = ? WHERE owner = ?", (self._clock() + ttl_s, owner))
            return self._db.changes()

    def release(self, session_id: str, owner: str) -> bool:
        """Give the lease up; return whether ``owner`` held it."""
        with Transaction(self._db, savepoint=False):
            self._db.execute("DELETE FROM leases WHERE session_id = ? AND owner = ?", (session_id, owner))
            return self._db.changes() > 0

    def release_all(self, owner: str) -> int:
        """Give up every lease ``owner`` holds (clean shutdown)."""
        with Transaction(self._db, savepoint=False):
            self._db.execute("DELETE FROM leases WHERE owner = ?", (owner,))
            return self._db.changes()

    def owners(self) -> list[str]:
        """Return every owner holding at least one lease, expired or not (recovery looks for dead ones)."""
        return [str(owner) for (owner,) in self._db.execute("SELECT DISTINCT owner FROM leases")]

    def holder(self, session_id: str) -> str | None:
        """Return the owner of a lease that has not expired, or ``None``."""
        row = self._db.execute(
            "SELECT owner FROM leases WHERE session_id = ? AND expires_at >= ?", (session_id, self._clock())
        ).get
        return None if row is None else str(row)
