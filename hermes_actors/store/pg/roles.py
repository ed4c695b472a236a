"""Role leases (``role_leases``, schema version 4): the cluster-wide singletons of ``hermesd --cluster``.

A role is something exactly one replica may do at a time: run a long-poll or socket account's adapter and send its
replies (``adapter:<platform>:<account>``), send the other replies of a platform (``send:<platform>``). The
discipline is the shard leases' (:mod:`hermes_actors.store.pg.shards`): ``holder`` and ``epoch`` name a term,
``expires_at`` its end **by the database clock**; taking a free or expired role raises its epoch; only the holder
renews its own unexpired term; a release ends it at once; :meth:`PgRoles.check`, run first inside the transaction
of a write the role guards, refuses with :class:`~hermes_actors.errors.RoleLostError`. As for shards, the check holds
the row ``FOR KEY SHARE`` and a takeover locks it ``FOR UPDATE``: a takeover waits for the writes in flight, while
the holder's renewal, which changes no key, waits for none of them (an ``UPDATE`` waiting for share locks can be
starved by a stream of overlapping writes, each taking the lock before the last let it go).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from hermes_actors.errors import RoleLostError
from hermes_actors.store.pg.db import Database

__all__ = ["PgRoles", "RoleLease"]

_NOW = "(clock_timestamp() + make_interval(secs => %(skew)s))"


class RoleLease(msgspec.Struct, frozen=True, kw_only=True):
    """One row of ``role_leases``; ``remaining_s`` is the term left by the database clock (negative: expired)."""

    role: str
    holder: str | None
    epoch: int
    remaining_s: float


class PgRoles:
    """Acquire, renew, release and check role terms on the database clock (``skew`` seconds added, for tests)."""

    __slots__ = ("_db", "_skew")

    def __init__(self, db: Database, skew: Callable[[], float]) -> None:
        self._db = db
        self._skew = skew

    def acquire(self, role: str, holder: str, ttl_s: float) -> int | None:
        """Take ``role`` if it is free, released or expired, under a new epoch; the epoch, or ``None`` (held)."""
        params = {"role": role, "holder": holder, "ttl": ttl_s, "skew": self._skew()}
        self._db.execute("INSERT INTO role_leases (role) VALUES (%(role)s) ON CONFLICT (role) DO NOTHING", params)
        found = self._db.value(  # FOR UPDATE: waits for the writes in flight under the old term (FOR KEY SHARE)
            f"WITH free AS (SELECT role FROM role_leases WHERE role = %(role)s AND expires_at <= {_NOW} FOR UPDATE) "
            f"UPDATE role_leases AS r SET holder = %(holder)s, epoch = r.epoch + 1, "
            f"expires_at = {_NOW} + make_interval(secs => %(ttl)s) "
            f"FROM free WHERE r.role = free.role AND r.expires_at <= {_NOW} RETURNING r.epoch",
            params,
        )
        return None if found is None else int(found)

    def renew(self, role: str, holder: str, epoch: int, ttl_s: float) -> bool:
        """Extend ``holder``'s term of ``role`` at ``epoch`` if it has not expired; whether it was.

        An expired term is not renewed even when no one took it: it must be acquired again, under a new epoch."""
        return (
            self._db.count(
                f"UPDATE role_leases SET expires_at = {_NOW} + make_interval(secs => %(ttl)s) "
                f"WHERE role = %(role)s AND holder = %(holder)s AND epoch = %(epoch)s AND expires_at > {_NOW}",
                {"role": role, "holder": holder, "epoch": epoch, "ttl": ttl_s, "skew": self._skew()},
            )
            > 0
        )

    def release(self, role: str, holder: str, epoch: int) -> bool:
        """End ``holder``'s term of ``role`` at ``epoch`` now (free to take at once); whether it was still its."""
        return (
            self._db.count(
                "UPDATE role_leases SET holder = NULL, expires_at = '-infinity' "
                "WHERE role = %s AND holder = %s AND epoch = %s",
                (role, holder, epoch),
            )
            > 0
        )

    def check(self, role: str, holder: str, epoch: int) -> None:
        """Inside the caller's transaction: hold the role's row (``FOR KEY SHARE``: a takeover waits for the commit,
        the holder's renewal does not) if ``holder`` still has it at ``epoch`` and unexpired; :class:`RoleLostError`
        otherwise (the caller's transaction must roll back)."""
        rows = self._db.execute(
            "SELECT 1 FROM role_leases WHERE role = %(role)s AND holder = %(holder)s AND epoch = %(epoch)s "
            f"AND expires_at > {_NOW} FOR KEY SHARE",
            {"role": role, "holder": holder, "epoch": epoch, "skew": self._skew()},
        )
        if not rows:
            raise RoleLostError(
                f"{holder} no longer holds the role {role} at epoch {epoch} (its term ended or another replica "
                "took it); the write was rolled back"
            )

    def leases(self) -> list[RoleLease]:
        """Every role's row, by role."""
        rows = self._db.execute(
            "SELECT role, holder, epoch, CASE WHEN isfinite(expires_at) THEN "
            f"extract(epoch FROM expires_at - {_NOW})::double precision END FROM role_leases ORDER BY role",
            {"skew": self._skew()},
        )
        return [
            RoleLease(
                role=str(role),
                holder=holder,
                epoch=int(epoch),
                remaining_s=float(left) if left is not None else float("-inf"),
            )
            for role, holder, epoch, left in rows
        ]
