"""Role leases (``role_leases``, schema version 4): the cluster-wide singletons of ``hermesd --cluster``.

A role is something exactly one replica may do at a time: run a long-poll or socket account's adapter and send its
replies (``adapter:<platform>:<account>``), send the other replies of a platform (``send:<platform>``). Its lease is a
term table (:mod:`hermes_actors.store.terms`) on the database clock, the shard leases' twin: taking a free or expired
role raises its epoch; only the holder renews its own unexpired term; a release ends it now; :meth:`PgRoles.check`,
run first inside the transaction of a write the role guards, refuses with :class:`~hermes_actors.errors.RoleLostError`.
The check holds the row ``FOR KEY SHARE`` and a takeover locks it ``FOR UPDATE``: a takeover waits for the writes in
flight, while the holder's renewal, which changes no key, waits for none of them (an ``UPDATE`` waiting for share
locks can be starved by a stream of overlapping writes, each taking the lock before the last let it go).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from hermes_actors.errors import RoleLostError
from hermes_actors.store.sql import SqlDb
from hermes_actors.store.terms import DATABASE_CLOCK, TermSpec, TermTable

__all__ = ["PgRoles", "RoleLease"]

_SPEC = TermSpec(table="role_leases", key="role", clock=DATABASE_CLOCK)


class RoleLease(msgspec.Struct, frozen=True, kw_only=True):
    """One row of ``role_leases``; ``remaining_s`` is the term left by the database clock (negative: expired;
    ``-inf``: no one holds the role, never or since a release)."""

    role: str
    holder: str | None
    epoch: int
    remaining_s: float


class PgRoles:
    """Acquire, renew, release and check role terms on the database clock (``skew`` seconds added, for tests)."""

    __slots__ = ("_skew", "_terms")

    def __init__(self, db: SqlDb, skew: Callable[[], float]) -> None:
        self._terms = TermTable(db, _SPEC, skew=skew)
        self._skew = skew

    def acquire(self, role: str, holder: str, ttl_s: float) -> int | None:
        """Take ``role`` if it is free, released or expired, under a new epoch; the epoch, or ``None`` (held)."""
        self._terms.create([role])
        return self._terms.take(holder, [role], ttl_s).get(role)

    def renew(self, role: str, holder: str, epoch: int, ttl_s: float) -> bool:
        """Extend ``holder``'s term of ``role`` at ``epoch`` if it has not expired; whether it was.

        An expired term is not renewed even when no one took it: it must be acquired again, under a new epoch."""
        return bool(self._terms.renew(holder, ttl_s, terms={role: epoch}))

    def release(self, role: str, holder: str, epoch: int) -> bool:
        """End ``holder``'s term of ``role`` at ``epoch`` now (free to take at once); whether it was still its."""
        return self._terms.release(holder, terms={role: epoch}) > 0

    def check(self, role: str, holder: str, epoch: int) -> None:
        """Inside the caller's transaction: hold the role's row (``FOR KEY SHARE``: a takeover waits for the commit,
        the holder's renewal does not) if ``holder`` still has it at ``epoch`` and unexpired; :class:`RoleLostError`
        otherwise (the caller's transaction must roll back)."""
        if not self._terms.check(role, holder, epoch):
            raise RoleLostError(
                f"{holder} no longer holds the role {role} at epoch {epoch} (its term ended or another replica "
                "took it); the write was rolled back"
            )

    def held_among_query(self, terms: Sequence[tuple[str, str, int]]) -> tuple[str, dict[str, Any]]:
        """:meth:`check` as a query for a statement that writes only under roles, for several terms (role, holder,
        epoch) at once: the positions ``n`` (from 1) of those held, each held role's row ``FOR KEY SHARE``; with its
        parameters (named ``term_roles``, ``term_holders``, ``term_epochs`` and ``skew``)."""
        spec = self._terms.spec
        query = (
            "SELECT t.n FROM unnest(:term_roles::text[], :term_holders::text[], :term_epochs::bigint[]) "
            f"WITH ORDINALITY AS t(role, holder, epoch, n) JOIN {spec.table} r ON r.{spec.key} = t.role "
            f"AND r.{spec.holder} = t.holder AND r.epoch = t.epoch WHERE r.expires_at >= {spec.clock.now} "
            "FOR KEY SHARE OF r"
        )
        return query, {
            "term_roles": [role for role, _, _ in terms],
            "term_holders": [holder for _, holder, _ in terms],
            "term_epochs": [epoch for _, _, epoch in terms],
            "skew": self._skew(),
        }

    def leases(self) -> list[RoleLease]:
        """Every role's row, by role."""
        return [
            RoleLease(
                role=str(row.key),
                holder=row.holder,
                epoch=row.epoch,
                remaining_s=row.remaining_s if row.holder is not None else float("-inf"),
            )
            for row in self._terms.rows()
        ]
