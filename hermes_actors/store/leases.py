"""Cross-process ownership of sessions: the ``leases`` table, a term table (:mod:`hermes_actors.store.terms`) of
both stores.

A process (``owner``) holds a session's lease while its turns run there; every take-over gets a new epoch, so a turn
computed under one tenure cannot commit under another (:meth:`Leases.fence`). What sets session leases apart is
declared in their spec: a row exists only while someone holds the lease (a release deletes it), so epochs come from
``meta`` 'lease_epoch', a counter that only grows; and the owner renews its own lease even past its end while no
other process took it (a paused process goes on where it was). The SQLite store keeps the time of its own clock;
the PostgreSQL store the database's (``clock_timestamp()``, plus ``skew`` in tests), so hosts whose clocks disagree
still agree on who holds a session.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from hermes_actors.errors import LeaseLostError
from hermes_actors.store.sql import Dialect, SqlDb
from hermes_actors.store.term_guard import FencedWrite, TermGuard
from hermes_actors.store.terms import DATABASE_SECONDS_CLOCK, STORE_CLOCK, TermClock, TermSpec, TermTable

__all__ = ["Leases"]


def _spec(clock: TermClock) -> TermSpec:
    return TermSpec(
        table="leases",
        key="session_id",
        holder="owner",
        clock=clock,
        rows_outlive_terms=False,
        epoch_counter="lease_epoch",
        renew_expired=True,
        acquired_at=True,
        free_row=(("owner", "''"), ("acquired_at", "{now}"), ("expires_at", "{never}")),
    )


class Leases:
    """Session leases with fencing epochs, one row per owned session, renewed by heartbeat, expiring.

    ``shard_check`` (cluster mode, :meth:`PostgresStore.fence_shards`) runs first in :meth:`grant` and
    :meth:`fence`: a session's lease is taken and a turn's commit made only under its shard's lease. When it
    answers ``False`` (the fault test's switch: fencing off) :meth:`fence` checks no epoch either. ``shard_guard``
    gives :meth:`fence` the same check as a :class:`~hermes_actors.store.term_guard.TermGuard` to carry in its
    renewal (one statement instead of two), or ``None`` when there is nothing to carry (fencing off, or the shard
    already checked in this transaction).
    """

    __slots__ = ("_db", "_terms", "shard_check", "shard_guard")

    def __init__(
        self, db: SqlDb, clock: Callable[[], float] = time.time, *, skew: Callable[[], float] | None = None
    ) -> None:
        self._db = db
        kept = STORE_CLOCK if db.dialect is Dialect.SQLITE else DATABASE_SECONDS_CLOCK
        self._terms = TermTable(db, _spec(kept), skew=skew or (lambda: 0.0), clock=clock)
        self.shard_check: Callable[[str], bool] | None = None
        self.shard_guard: Callable[[str], TermGuard | None] | None = None

    def grant(self, session_id: str, owner: str, ttl_s: float, *, new: bool = False) -> int | str:
        """Take or renew the lease: its epoch, or the current holder's owner string when another holds it. ``new``:
        the session was created in this transaction, so no lease of it can be held yet (taken without looking for
        one first; were one held, it is found as usual)."""
        terms = self._terms
        with self._db.transaction(savepoint=False):
            if self.shard_check is not None:
                self.shard_check(session_id)
            if new:
                terms.create([session_id])
                taken = terms.take(owner, [session_id], ttl_s)
                if session_id in taken:
                    return taken[session_id]
            renewed = terms.renew(owner, ttl_s, keys=[session_id])
            if renewed:
                return renewed[session_id]
            terms.create([session_id])
            held = terms.holding(session_id)  # the row locked: a concurrent grant waits for this one
            if held is not None and held[2] and held[0]:
                return held[0]
            return terms.take(owner, [session_id], ttl_s)[session_id]

    def acquire(self, session_id: str, owner: str, ttl_s: float) -> str | None:
        """Take or renew the lease: ``None``, or the current holder's owner string."""
        granted = self.grant(session_id, owner, ttl_s)
        return granted if isinstance(granted, str) else None

    def fence(
        self,
        session_id: str,
        owner: str,
        epoch: int,
        ttl_s: float,
        *,
        seen: int | None = None,
        then: Sequence[FencedWrite] = (),
    ) -> int | None:
        """Check, inside the caller's transaction, that ``owner`` still holds the lease at ``epoch``, and extend it;
        return the database's version (SQLite's ``PRAGMA data_version``; ``None`` on PostgreSQL) it was seen at.

        Raises :class:`LeaseLostError` otherwise (another process took the lease over, even if it has given it up
        since): the caller's transaction must roll back, its work was computed from a stale history.

        ``seen`` is a version this check returned inside a transaction that has committed since. While the version
        is still that one, no other connection has committed anything in between, so no other process can have
        taken the lease, and the check is answered without a statement (the heartbeat extends the lease). The
        writer holds the write lock from its ``BEGIN IMMEDIATE`` to its commit, so nothing can commit between this
        answer and the caller's commit either. Any other process's commit, of whatever table, sends the next check
        to the table again.

        ``then``: the caller's first writes under the lease, in order. Where the check carries a shard's guard (a
        shard host) they ride in the renewal's statement, one round trip where several were; elsewhere they run after
        the check, one after another.
        """
        guard = self.shard_guard(session_id) if self.shard_guard is not None else None
        if guard is not None:
            with self._db.transaction(savepoint=False):
                renewed, rows = self._renewed(owner, ttl_s, {session_id: epoch}, guard, then)
                if renewed:
                    guard.held()
                    for write, took in zip(then, rows, strict=True):
                        write.took(took)  # a completion's shard checks know the guard's shard is held now
                    return self._version()
                guard.check()  # raises when the shard's term is what was lost
                raise self._lost(session_id, epoch)
        if self.shard_check is not None and not self.shard_check(session_id):
            version = None
        else:
            version = self._version()
            if seen is None or version != seen:
                with self._db.transaction(savepoint=False):
                    if not self._terms.renew(owner, ttl_s, terms={session_id: epoch}):
                        raise self._lost(session_id, epoch)
        for write in then:
            write.alone()
        return version

    def _renewed(
        self, owner: str, ttl_s: float, terms: dict[str, int], guard: TermGuard, then: Sequence[FencedWrite]
    ) -> tuple[bool, list[list[dict[str, Any]]]]:
        """Renew ``terms`` under ``guard``, with the writes ``then`` in the same statement: whether they were
        renewed, and the rows each write returned."""
        if not then:
            return bool(self._terms.renew(owner, ttl_s, terms=terms, guard=guard)), []
        under, renewal, params = self._terms.renewal(owner, ttl_s, self._terms.which(terms=terms), guard)
        names = [f"fenced{n}" for n in range(len(then))]
        parts = [write.fenced(name) for write, name in zip(then, names, strict=True)]
        queries = ", ".join(query for query, _ in parts)
        returned = ", ".join(f"(SELECT json_agg({name}) FROM {name})" for name in names)
        for _, written in parts:
            params.update(written)
        ((renewed, *rows),) = self._db.execute(
            f"WITH {under}, renewed AS ({renewal}), {queries} SELECT EXISTS (SELECT FROM renewed), {returned}", params
        )
        return bool(renewed), [found or [] for found in rows]

    @staticmethod
    def _lost(session_id: str, epoch: int) -> LeaseLostError:
        return LeaseLostError(
            f"this process no longer holds the lease of session {session_id} (epoch {epoch}): another "
            "process took it over; the turn is rolled back and runs again under a new lease"
        )

    def _version(self) -> int | None:
        """SQLite's ``PRAGMA data_version``: changes whenever another connection commits (``None`` on PostgreSQL,
        which has no such counter)."""
        if self._db.dialect is not Dialect.SQLITE:
            return None
        return int(self._db.value("PRAGMA data_version"))

    def epoch_of(self, session_id: str, owner: str) -> int | None:
        """The epoch of ``owner``'s lease on ``session_id``, or ``None`` when it does not hold it."""
        return self._terms.epoch_of(session_id, owner)

    def heartbeat(self, owner: str, ttl_s: float) -> int:
        """Extend every lease ``owner`` holds; how many."""
        return len(self._terms.renew(owner, ttl_s))

    def release(self, session_id: str, owner: str) -> bool:
        """Give the lease up; whether ``owner`` held it."""
        return self._terms.release(owner, keys=[session_id]) > 0

    def release_all(self, owner: str) -> int:
        """Give up every lease ``owner`` holds (clean shutdown)."""
        return self._terms.release(owner)

    def owners(self) -> list[str]:
        """Every owner holding at least one lease, expired or not (recovery looks for dead ones)."""
        return self._terms.holders()

    def holder(self, session_id: str) -> str | None:
        """The owner of a lease that has not expired, or ``None``."""
        return self._terms.holder(session_id)
