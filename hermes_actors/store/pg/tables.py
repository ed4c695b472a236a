"""The PostgreSQL store's session leases (``store.leases``), with the rules of their SQLite counterpart.

Leases are the exception to "times come from the injected clock": every expiry is written and compared in the
database's clock (``clock_timestamp()``), so hosts whose clocks disagree still agree on who holds a session. A
``skew`` (seconds, 0 in production) is added to it, for tests that move time forward without waiting.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from hermes_actors.errors import LeaseLostError
from hermes_actors.store.pg.db import Database

__all__ = ["PgLeases"]

_log = logging.getLogger(__name__)
_NOW = "(extract(epoch FROM clock_timestamp())::double precision + %(skew)s)"


class PgLeases:
    """Cross-process ownership of sessions with fencing epochs, expiring by the database clock.

    ``shard_check`` (cluster mode, :meth:`PostgresStore.fence_shards`) runs first in :meth:`grant` and
    :meth:`fence`: a session's lease is taken and a turn's commit made only under its shard's lease. When it
    answers ``False`` (the fault test's switch: fencing off) :meth:`fence` checks no epoch either.
    """

    __slots__ = ("_db", "_skew", "shard_check")

    def __init__(self, db: Database, skew: Callable[[], float]) -> None:
        self._db = db
        self._skew = skew
        self.shard_check: Callable[[str], bool] | None = None

    def grant(self, session_id: str, owner: str, ttl_s: float) -> int | str:
        """Take or renew the lease: its epoch, or the current holder's owner string when it is held."""
        args = {"id": session_id, "owner": owner, "ttl": ttl_s, "skew": self._skew()}
        with self._db.transaction(savepoint=False):
            if self.shard_check is not None:
                self.shard_check(session_id)
            self._db.execute("SELECT pg_advisory_xact_lock(hashtext('lease:' || %(id)s))", args)
            rows = self._db.execute(
                f"SELECT owner, epoch, expires_at >= {_NOW} FROM leases WHERE session_id = %(id)s FOR UPDATE", args
            )
            if rows and rows[0][0] == owner:
                self._db.execute(
                    f"UPDATE leases SET expires_at = greatest(expires_at, {_NOW} + %(ttl)s) WHERE session_id = %(id)s",
                    args,
                )
                return int(rows[0][1])
            if rows and rows[0][2]:
                return str(rows[0][0])
            epoch = self._next_epoch()
            self._db.execute(
                f"INSERT INTO leases (session_id, owner, acquired_at, expires_at, epoch) VALUES (%(id)s, %(owner)s, "
                f"{_NOW}, {_NOW} + %(ttl)s, %(epoch)s) ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner, "
                "acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, epoch = excluded.epoch",
                {**args, "epoch": epoch},
            )
            return epoch

    def _next_epoch(self) -> int:
        return int(
            self._db.value(
                "INSERT INTO meta (key, value) VALUES ('lease_epoch', '1') ON CONFLICT (key) DO UPDATE "
                "SET value = (meta.value::bigint + 1)::text RETURNING value"
            )
        )

    def acquire(self, session_id: str, owner: str, ttl_s: float) -> str | None:
        """Take or renew the lease: ``None``, or the current holder's owner string."""
        granted = self.grant(session_id, owner, ttl_s)
        return granted if isinstance(granted, str) else None

    def fence(self, session_id: str, owner: str, epoch: int, ttl_s: float) -> None:
        """Check inside the caller's transaction that ``owner`` still holds the lease at ``epoch``, and extend it
        (:class:`LeaseLostError` otherwise)."""
        if self.shard_check is not None and not self.shard_check(session_id):
            return
        changed = self._db.count(
            f"UPDATE leases SET expires_at = greatest(expires_at, {_NOW} + %(ttl)s) "
            "WHERE session_id = %(id)s AND owner = %(owner)s AND epoch = %(epoch)s",
            {"id": session_id, "owner": owner, "epoch": epoch, "ttl": ttl_s, "skew": self._skew()},
        )
        if changed == 0:
            raise LeaseLostError(
                f"this process no longer holds the lease of session {session_id} (epoch {epoch}): another "
                "process took it over; the turn is rolled back and runs again under a new lease"
            )

    def epoch_of(self, session_id: str, owner: str) -> int | None:
        """The epoch of ``owner``'s lease on ``session_id``, or ``None``."""
        found = self._db.value("SELECT epoch FROM leases WHERE session_id = %s AND owner = %s", (session_id, owner))
        return None if found is None else int(found)

    def heartbeat(self, owner: str, ttl_s: float) -> int:
        """Extend every lease ``owner`` holds; how many."""
        return self._db.count(
            f"UPDATE leases SET expires_at = {_NOW} + %(ttl)s WHERE owner = %(owner)s",
            {"owner": owner, "ttl": ttl_s, "skew": self._skew()},
        )

    def release(self, session_id: str, owner: str) -> bool:
        """Give the lease up; whether ``owner`` held it."""
        return self._db.count("DELETE FROM leases WHERE session_id = %s AND owner = %s", (session_id, owner)) > 0

    def release_all(self, owner: str) -> int:
        """Give up every lease ``owner`` holds."""
        return self._db.count("DELETE FROM leases WHERE owner = %s", (owner,))

    def owners(self) -> list[str]:
        """Every owner holding at least one lease, expired or not."""
        return [str(owner) for (owner,) in self._db.execute("SELECT DISTINCT owner FROM leases ORDER BY owner")]

    def holder(self, session_id: str) -> str | None:
        """The owner of a lease that has not expired (by the database clock), or ``None``."""
        found = self._db.value(
            f"SELECT owner FROM leases WHERE session_id = %(id)s AND expires_at >= {_NOW}",
            {"id": session_id, "skew": self._skew()},
        )
        return None if found is None else str(found)
