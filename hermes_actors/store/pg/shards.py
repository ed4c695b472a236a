"""Virtual shards and their leases (``shard_leases``): the cluster's shard map and the fence of every turn.

A session belongs to shard ``shard_of(session_id, shards)`` (the first 8 bytes of its id's SHA-256, modulo the
shard count: the same on every host and Python version, unlike ``hash``). A host holds a shard for a term of the
shard's lease, a term table (:mod:`hermes_actors.store.terms`) on the database clock: taking a free or expired shard
raises its epoch, so a host paused past its term (SIGSTOP, a long GC, a stalled network) finds its epoch gone when it
wakes: :meth:`PgShards.check`, run first in every turn's transaction, refuses its commit with
:class:`~hermes_actors.errors.ShardLostError`. The check holds the row ``FOR KEY SHARE`` and a takeover locks it
``FOR UPDATE`` first, so a takeover waits for the turns in flight to commit and a turn waits for the takeover; the
holder's own renewal and release change no key, so they wait for nothing (a renewal that waited for the turns of the
shards it renews could deadlock with a group commit holding one of them and asking for another).

:class:`ShardFence` is what a host holds in memory: the terms of its shards, each with its local deadline
(:class:`~hermes_actors.store.held_terms.HeldTerms`). Past the deadline the host stops committing on its own
(self-fencing), before it has even heard that another host took over.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import msgspec

from hermes_actors.errors import ShardLostError
from hermes_actors.ids import SessionKind, new_session_id
from hermes_actors.store.held_terms import HeldTerms
from hermes_actors.store.sql import SqlDb
from hermes_actors.store.term_guard import TermGuard, prefixed
from hermes_actors.store.terms import DATABASE_CLOCK, TermSpec, TermTable

__all__ = [
    "DEFAULT_SHARDS",
    "HostBeat",
    "LockMemo",
    "PgShards",
    "ShardFence",
    "ShardLease",
    "home_shards",
    "new_session_id_in",
    "shard_for_key",
    "shard_of",
]

DEFAULT_SHARDS = 256
_NOW = DATABASE_CLOCK.now
_SPEC = TermSpec(table="shard_leases", key="shard", clock=DATABASE_CLOCK)


def shard_of(session_id: str, shards: int) -> int:
    """The shard of ``session_id`` among ``shards`` (stable across hosts, processes and Python versions)."""
    digest = hashlib.sha256(session_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % shards


def new_session_id_in(shard: int, shards: int, kind: SessionKind = SessionKind.GATEWAY) -> str:
    """A new session id (:func:`~hermes_actors.ids.new_session_id`) whose :func:`shard_of` is ``shard``: its time
    drawn once, then random suffixes until one hashes there (``shards`` tries on average, each hashing only the
    suffix after the time's digest state)."""
    drawn = new_session_id(kind)
    stem, digits = drawn[: drawn.rindex("_") + 1], len(drawn) - drawn.rindex("_") - 1
    head = hashlib.sha256(stem.encode("utf-8"))
    while True:
        block = secrets.token_hex(4 * 64)
        for start in range(0, len(block), 8):
            suffix = block[start : start + digits]
            tried = head.copy()
            tried.update(suffix.encode("ascii"))
            if int.from_bytes(tried.digest()[:8], "big") % shards == shard:
                return stem + suffix


def shard_for_key(route: str | None, routing_key: str, shards: int) -> int:
    """The shard a message of ``routing_key`` goes to: that of ``route``, the session the key leads to, or for a key
    with no session yet the key's own (the host that runs it draws the new session's id in that shard)."""
    return shard_of(route or routing_key, shards)


def home_shards(host: str, hosts: Sequence[str], shards: int) -> set[int]:
    """The shards whose home is ``host`` by rendezvous hashing over ``hosts``: each shard goes to the host with
    the highest hash of (shard, host), so adding or removing a host moves only that host's share."""

    def weight(shard: int, name: str) -> bytes:
        return hashlib.sha256(f"{shard}\x00{name}".encode()).digest()

    return {s for s in range(shards) if max(hosts, key=lambda name: weight(s, name)) == host}


class ShardLease(msgspec.Struct, frozen=True, kw_only=True):
    """One row of the shard map; ``remaining_s`` is the term left by the database clock (negative: expired)."""

    shard: int
    holder: str | None
    epoch: int
    remaining_s: float


class HostBeat(msgspec.Struct, frozen=True, kw_only=True):
    """One row of ``shard_hosts``: the host's last heartbeat, its incarnation (the process beating under the name),
    for how long that incarnation has run, how many the name has had, and its numbers as of the beat (bytes the
    cluster package encodes; ``None`` from a host that sent none)."""

    holder: str
    seen_s_ago: float
    incarnation: str
    up_s: float | None
    incarnations: int
    stats: bytes | None


class LockMemo(Protocol):
    """What a transaction remembers of the row locks it took (:class:`~hermes_actors.store.pg.db.Database`)."""

    def holds(self, lock: Hashable) -> bool: ...

    def took(self, lock: Hashable) -> None: ...


class PgShards:
    """The ``shard_leases`` table (acquire, renew, release and check shard terms, on the database clock) and the
    shard hosts' heartbeats (``shard_hosts``).

    ``skew`` (seconds, 0 in production) is added to the database clock, for tests that move time forward; ``locks``
    remembers which rows a transaction has checked already.
    """

    __slots__ = ("_db", "_locks", "_skew", "_terms")

    def __init__(self, db: SqlDb, skew: Callable[[], float], *, locks: LockMemo | None = None) -> None:
        self._db = db
        self._skew = skew
        self._locks = locks
        self._terms = TermTable(db, _SPEC, skew=skew)

    def ensure(self, shards: int) -> None:
        """Create the rows of shards ``0 .. shards - 1`` that do not exist yet (free, epoch 0)."""
        self._terms.create(range(shards))

    def acquire(self, holder: str, shards: Iterable[int], ttl_s: float) -> dict[int, int]:
        """Take those of ``shards`` that are free or expired (each under a new epoch); shard -> epoch taken."""
        return self._terms.take(holder, set(shards), ttl_s)

    def renew(self, holder: str, held: Mapping[int, int], ttl_s: float) -> dict[int, int]:
        """Extend the terms of ``held`` (shard -> epoch) that are still ``holder``'s and unexpired; those renewed.

        A term that expired is not renewed even when no one took it: another host may be taking it right now, and
        the holder must take it again (under a new epoch) like anyone else.
        """
        return self._terms.renew(holder, ttl_s, terms=held)

    def release(self, holder: str, held: Mapping[int, int]) -> int:
        """End ``holder``'s terms of ``held`` now (the shards are free to take); how many were still its. The grace
        period in which only its home host takes a free shard counts from the release, so a shard given back to its
        home host is not taken first by another host (nor by the releasing one again) that ticks sooner."""
        return self._terms.release(holder, terms=held)

    def check(self, shard: int, holder: str, epoch: int) -> None:
        """Inside the caller's transaction: hold the shard's row (``FOR KEY SHARE``) if ``holder`` still has it at
        ``epoch`` and unexpired; :class:`ShardLostError` otherwise (the caller's transaction must roll back). Once
        per transaction: the row stays held until it ends, so a second check would find what the first did (a
        takeover waits for the commit)."""
        lock = ("shard_leases", shard, holder, epoch)
        if self._locks is not None and self._locks.holds(lock):
            return
        if not self._terms.check(shard, holder, epoch):
            raise ShardLostError(
                f"{holder} no longer holds shard {shard} at epoch {epoch} (its term ended or another host took it); "
                "the turn is rolled back and its messages stay pending for the shard's holder"
            )
        if self._locks is not None:
            self._locks.took(lock)

    def guard_query(self, shard: int, holder: str, epoch: int) -> tuple[str, dict[str, Any]] | None:
        """:meth:`check` as a query for a statement to carry (:class:`TermGuard`), its parameters prefixed
        ``shard_``; ``None`` when this transaction holds the shard's row already (nothing left to check)."""
        if self._locks is not None and self._locks.holds(("shard_leases", shard, holder, epoch)):
            return None
        return prefixed(*self._terms.check_query(shard, holder, epoch), "shard_")

    def guarded(self, shard: int, holder: str, epoch: int) -> None:
        """A statement carrying :meth:`guard_query` found the term held: the transaction holds the row now."""
        if self._locks is not None:
            self._locks.took(("shard_leases", shard, holder, epoch))

    def beat(self, holder: str, *, incarnation: str = "", stats: bytes | None = None) -> None:
        """Record that ``holder`` is alive now (by the database clock), as ``incarnation`` (a new one is counted
        and its start recorded), with its numbers ``stats``."""
        self._db.execute(
            "INSERT INTO shard_hosts (holder, seen_at, incarnation, started_at, incarnations, stats) "
            f"VALUES (:holder, {_NOW}, :incarnation, {_NOW}, 1, :stats) "
            "ON CONFLICT (holder) DO UPDATE SET seen_at = excluded.seen_at, stats = excluded.stats, "
            "incarnation = excluded.incarnation, "
            "started_at = CASE WHEN shard_hosts.incarnation = excluded.incarnation AND shard_hosts.started_at "
            "IS NOT NULL THEN shard_hosts.started_at ELSE excluded.started_at END, "
            "incarnations = shard_hosts.incarnations "
            "+ CASE WHEN shard_hosts.incarnation = excluded.incarnation THEN 0 ELSE 1 END",
            {"holder": holder, "incarnation": incarnation, "stats": stats, "skew": self._skew()},
        )

    def hosts(self) -> dict[str, float]:
        """Every host that ever beat, with the seconds since its last beat (by the database clock)."""
        return {beat.holder: beat.seen_s_ago for beat in self.host_beats(stats=False)}

    def host_beats(self, *, stats: bool = True) -> list[HostBeat]:
        """Every host that ever beat, by name: its last beat, incarnation and (with ``stats``) its numbers."""
        rows = self._db.execute(
            f"SELECT holder, extract(epoch FROM {_NOW} - seen_at)::double precision, incarnation, "
            f"extract(epoch FROM {_NOW} - started_at)::double precision, incarnations, "
            f"{'stats' if stats else 'NULL'} FROM shard_hosts ORDER BY holder",
            {"skew": self._skew()},
        )
        return [
            HostBeat(
                holder=str(holder),
                seen_s_ago=float(age),
                incarnation=str(incarnation),
                up_s=None if up is None else float(up),
                incarnations=int(incarnations),
                stats=None if blob is None else bytes(blob),
            )
            for holder, age, incarnation, up, incarnations, blob in rows
        ]

    def leases(self) -> list[ShardLease]:
        """Every shard's row, in shard order."""
        return [
            ShardLease(shard=int(row.key), holder=row.holder, epoch=row.epoch, remaining_s=row.remaining_s)
            for row in self._terms.rows()
        ]

    def expired(self) -> list[int]:
        """The shards free to take now (never held, released, or past their term), in order."""
        return [int(shard) for shard in self._terms.ended()]


class ShardFence(HeldTerms[int]):
    """The shards one host holds (shard -> epoch), each with a local deadline, shared by the host's threads.

    ``enabled=False`` is the test-only switch that turns fencing off: :meth:`check` checks nothing, the local
    deadline drops nothing, and the session leases' epochs are not checked either (:meth:`PostgresStore.fence_shards`);
    the fault test runs with it to show what fencing prevents.
    """

    def __init__(
        self,
        holder: str,
        shards: int,
        *,
        enabled: bool = True,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(holder, monotonic=monotonic, enabled=enabled)
        self.shards = shards
        self.refusals = 0  # commits refused: a term run out locally, or lost by the database's verdict

    def owns(self, session_id: str) -> bool:
        """Whether the session's shard is held (and within its local deadline)."""
        return self.epoch(shard_of(session_id, self.shards)) is not None

    def check(self, shards: PgShards, target: str | int) -> bool:
        """Inside a turn's transaction: :class:`ShardLostError` unless this host still holds ``target`` (a session
        id: its shard; an int: that shard), by its own deadline first (self-fencing), then by the database
        (:meth:`PgShards.check`); whether fencing is on (``False``: nothing was checked)."""
        if not self.enabled:
            return False
        shard = target if isinstance(target, int) else shard_of(target, self.shards)
        epoch = self.epoch(shard)
        if epoch is None:
            self.refusals += 1
            of = f"shard {shard}" if isinstance(target, int) else f"shard {shard} of session {target}"
            raise ShardLostError(
                f"{self.holder} does not hold {of} (or its term ran out locally); "
                "the turn is rolled back and its messages stay pending for the shard's holder"
            )
        try:
            shards.check(shard, self.holder, epoch)
        except ShardLostError:
            self.refusals += 1
            raise
        return True

    def guard(self, shards: PgShards, session_id: str) -> TermGuard | None:
        """:meth:`check` of the session's shard for a statement to carry (a session lease's renewal), or ``None``
        when fencing is off or the transaction checked the shard already. A term run out locally is refused at
        once, as :meth:`check` does."""
        if not self.enabled:
            return None
        shard = shard_of(session_id, self.shards)
        epoch = self.epoch(shard)
        if epoch is None:
            return None  # the caller's check refuses it
        held_at: int = epoch
        found = shards.guard_query(shard, self.holder, held_at)
        if found is None:
            return None  # checked in this transaction: the caller's check finds it held, with no statement
        query, params = found
        return TermGuard(
            query,
            params,
            held=lambda: shards.guarded(shard, self.holder, held_at),
            check=lambda: self.check(shards, session_id),
        )
