"""Leases, written once: a term table in the database (:class:`TermTable`); the terms one holder keeps in memory
with their local deadlines are :class:`~hermes_actors.store.held_terms.HeldTerms`. Session leases
(:mod:`hermes_actors.store.leases`), shard leases (:mod:`hermes_actors.store.pg.shards`) and role leases
(:mod:`hermes_actors.store.pg.roles`) are its instances.

A row is one key's lease: ``holder``, the ``epoch`` of the holder's term, and ``expires_at``, its end. A term is
taken under a new epoch once the last one ended (:meth:`TermTable.take`, after locking the row ``FOR UPDATE``),
renewed by its holder (:meth:`TermTable.renew`, never shortened), released (:meth:`TermTable.release`: it ends now)
and checked inside the transaction of every write it guards (:meth:`TermTable.check`, ``FOR KEY SHARE``);
hermes_actors/cluster/README.md tells this discipline, the release rule and the grace period once. What differs
between the tables is declared in their :class:`TermSpec`: the clock (:class:`TermClock`), whether a row outlives
its term (a session lease's row is deleted at release, so its epochs come from a counter that only grows), and
whether a holder may renew its expired term while no one took it over (a session's may: its turn goes on; a
shard's or a role's may not, since the cluster moves them by expiry alone).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, TypeVar

import msgspec

from hermes_actors.store.sql import Dialect, SqlDb
from hermes_actors.store.term_guard import TermGuard

__all__ = [
    "DATABASE_CLOCK",
    "DATABASE_SECONDS_CLOCK",
    "STORE_CLOCK",
    "TermClock",
    "TermRow",
    "TermSpec",
    "TermTable",
]

K = TypeVar("K", bound=int | str)


class TermClock(msgspec.Struct, frozen=True, kw_only=True):
    """How a term table keeps time, as SQL: now, the end of a term of ``:ttl`` seconds from now, the end of a term
    never held, and the seconds left of a row's term (NULL: never held); ``database``: now is the database's
    clock (plus ``:skew``), else the store's, sent as ``:now``."""

    now: str
    deadline: str
    never: str
    remaining: str
    database: bool


_PG_NOW = "(clock_timestamp() + make_interval(secs => :skew))"
_PG_SECONDS = "(extract(epoch FROM clock_timestamp())::double precision + :skew)"

DATABASE_CLOCK = TermClock(
    now=_PG_NOW,
    deadline=f"{_PG_NOW} + make_interval(secs => :ttl)",
    never="'-infinity'::timestamptz",
    remaining=f"CASE WHEN isfinite(expires_at) THEN extract(epoch FROM expires_at - {_PG_NOW})::double precision END",
    database=True,
)
"""PostgreSQL's ``clock_timestamp()``, ``expires_at`` a ``timestamptz``: hosts whose clocks disagree still agree."""

DATABASE_SECONDS_CLOCK = TermClock(
    now=_PG_SECONDS,
    deadline=f"{_PG_SECONDS} + :ttl",
    never="'-Infinity'::double precision",
    remaining=f"CASE WHEN expires_at > -1e308 THEN expires_at - {_PG_SECONDS} END",
    database=True,
)
"""The same clock, ``expires_at`` in unix seconds (``double precision``, as the SQLite schema keeps them)."""

STORE_CLOCK = TermClock(
    now=":now",
    deadline=":now + :ttl",
    never="-9e999",  # SQLite reads it as -Inf
    remaining="CASE WHEN expires_at > -1e308 THEN expires_at - :now END",
    database=False,
)
"""The store's injected clock in unix seconds (SQLite: one machine, one clock)."""


class TermSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What one term table declares: its name, key and holder columns, its clock, whether a row is deleted when
    its term ends (``rows_outlive_terms=False``: the epochs then come from the ``meta`` counter ``epoch_counter``),
    and whether a holder may renew its expired term while no one took it (``renew_expired``). ``free_row`` gives
    the values (SQL) a row needs besides its key when it is created free."""

    table: str
    key: str
    holder: str = "holder"
    clock: TermClock
    rows_outlive_terms: bool = True
    epoch_counter: str | None = None
    renew_expired: bool = False
    acquired_at: bool = False  # the table records when each term was taken
    free_row: tuple[tuple[str, str], ...] = ()


class TermRow(msgspec.Struct, frozen=True, kw_only=True):
    """One row of a term table; ``remaining_s`` is the term left by the table's clock (negative: ended;
    ``-inf``: never held)."""

    key: int | str
    holder: str | None
    epoch: int
    remaining_s: float


class TermTable:
    """The statements of one term table (see the module docstring), over an :class:`SqlDb` of either dialect.

    ``skew`` (seconds added to the database clock, 0 in production) lets tests move a database's time forward;
    ``clock`` is the store's clock, for :data:`STORE_CLOCK`."""

    __slots__ = ("_clock", "_db", "_skew", "spec")

    spec: TermSpec

    def __init__(
        self,
        db: SqlDb,
        spec: TermSpec,
        *,
        skew: Callable[[], float] = lambda: 0.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self.spec = spec
        self._skew = skew
        self._clock = clock

    def _time(self, **params: Any) -> dict[str, Any]:
        """``params`` with the clock's own (``skew`` or ``now``)."""
        if self.spec.clock.database:
            return {**params, "skew": self._skew()}
        return {**params, "now": self._clock()}

    def which(
        self, keys: Collection[K] | None = None, terms: Mapping[K, int] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """The condition naming ``terms`` (key and epoch), or ``keys``, or every key (both ``None``)."""
        key = self.spec.key
        if terms is not None and len(terms) == 1:  # the common case, planned as a key lookup
            [(one, epoch)] = terms.items()
            return f"{key} = :k0 AND epoch = :e0", {"k0": one, "e0": epoch}
        if keys is not None and len(keys) == 1:
            return f"{key} = :k0", {"k0": next(iter(keys))}
        if terms is not None:
            marks = ", ".join(f"(:k{i}, :e{i})" for i in range(len(terms)))
            params = {f"k{i}": k for i, k in enumerate(terms)} | {f"e{i}": e for i, e in enumerate(terms.values())}
            return f"({key}, epoch) IN (VALUES {marks})", params
        if keys is not None:
            marks = ", ".join(f"(:k{i})" for i in range(len(keys)))
            return f"{key} IN (VALUES {marks})", {f"k{i}": k for i, k in enumerate(keys)}
        return "TRUE", {}

    def _rows(self, rows: list[tuple[Any, ...]]) -> dict[Any, int]:
        return {key: int(epoch) for key, epoch in rows}

    def create(self, keys: Iterable[K]) -> None:
        """Create the rows of ``keys`` that do not exist yet, free (never held)."""
        spec = self.spec
        clock = spec.clock
        columns = [spec.key, *(name for name, _ in spec.free_row)]
        values = [":key", *(value.format(now=clock.now, never=clock.never) for _, value in spec.free_row)]
        self._db.executemany(
            f"INSERT INTO {spec.table} ({', '.join(columns)}) VALUES ({', '.join(values)}) "
            f"ON CONFLICT ({spec.key}) DO NOTHING",
            [self._time(key=key) for key in keys],
        )

    def _next_epoch(self) -> int:
        """The next value of the table's epoch counter (``meta``), which only grows."""
        name = self.spec.epoch_counter
        assert name is not None, f"{self.spec.table}: a table whose rows end with their terms names an epoch counter"
        cast = "INTEGER" if self._db.dialect is Dialect.SQLITE else "bigint"
        return int(
            self._db.value(
                "INSERT INTO meta (key, value) VALUES (:name, '1') ON CONFLICT (key) DO UPDATE "
                f"SET value = CAST(CAST(meta.value AS {cast}) + 1 AS TEXT) RETURNING value",
                {"name": name},
            )
        )

    def take(self, holder: str, keys: Collection[K], ttl_s: float) -> dict[K, int]:
        """Take those of ``keys`` whose rows exist and whose terms have ended, each under a new epoch (locking each
        row first, in key order: a takeover waits for the writes in flight under the old term); key -> epoch."""
        if not keys:
            return {}
        spec = self.spec
        clock = spec.clock
        which, params = self.which(sorted(keys))
        epoch = "epoch + 1" if spec.rows_outlive_terms else ":epoch"
        if not spec.rows_outlive_terms:
            params["epoch"] = self._next_epoch()
        taken_at = f", acquired_at = {clock.now}" if spec.acquired_at else ""
        rows = self._db.execute(
            f"WITH free AS (SELECT {spec.key} FROM {spec.table} WHERE {which} AND expires_at < {clock.now} "
            f"ORDER BY {spec.key}{self._db.dialect.for_update}) "
            f"UPDATE {spec.table} SET {spec.holder} = :holder, epoch = {epoch}, expires_at = {clock.deadline}"
            f"{taken_at} WHERE {spec.key} IN (SELECT {spec.key} FROM free) AND expires_at < {clock.now} "
            f"RETURNING {spec.key}, epoch",
            self._time(holder=holder, ttl=ttl_s, **params),
        )
        return self._rows(rows)

    def renew(
        self,
        holder: str,
        ttl_s: float,
        *,
        terms: Mapping[K, int] | None = None,
        keys: Collection[K] | None = None,
        guard: TermGuard | None = None,
    ) -> dict[Any, int]:
        """Move the end of ``holder``'s terms forward by ``ttl_s`` from now (never back): those of ``terms`` (key
        -> epoch), of ``keys``, or (both ``None``) all of them; key -> epoch of those renewed. An expired term is
        renewed only where the spec allows it (``renew_expired``); none is while ``guard`` yields no row."""
        if (terms is not None and not terms) or (keys is not None and not keys):
            return {}
        under, statement, params = self.renewal(holder, ttl_s, self.which(keys, terms), guard)
        return self._rows(self._db.execute(f"WITH {under} {statement}" if under else statement, params))

    def renewal(
        self, holder: str, ttl_s: float, which: tuple[str, dict[str, Any]], guard: TermGuard | None
    ) -> tuple[str, str, dict[str, Any]]:
        """:meth:`renew`'s statement unsent, for a statement that embeds it: its ``WITH`` query (the guard's, or
        empty), the ``UPDATE`` (returning key and epoch) of the terms ``which`` names, and the parameters."""
        spec, (condition, params) = self.spec, which
        unexpired = "" if spec.renew_expired else f" AND expires_at >= {spec.clock.now}"
        only = "" if guard is None else " AND EXISTS (SELECT FROM guard)"
        return (
            "" if guard is None else f"guard AS ({guard.query})",
            f"UPDATE {spec.table} SET expires_at = {self._db.dialect.greatest('expires_at', spec.clock.deadline)} "
            f"WHERE {condition} AND {spec.holder} = :holder{unexpired}{only} RETURNING {spec.key}, epoch",
            self._time(holder=holder, ttl=ttl_s, **params, **(guard.params if guard else {})),
        )

    def release(self, holder: str, *, terms: Mapping[K, int] | None = None, keys: Collection[K] | None = None) -> int:
        """End ``holder``'s terms now: those of ``terms`` (key -> epoch), of ``keys``, or (both ``None``) all of
        them; how many were still its. The keys are free to take at once (a row that ends with its term is
        deleted)."""
        if (terms is not None and not terms) or (keys is not None and not keys):
            return 0
        spec = self.spec
        which, params = self.which(keys, terms)
        if spec.rows_outlive_terms:
            statement = (
                f"UPDATE {spec.table} SET {spec.holder} = NULL, expires_at = {spec.clock.now} "
                f"WHERE {which} AND {spec.holder} = :holder"
            )
        else:
            statement = f"DELETE FROM {spec.table} WHERE {which} AND {spec.holder} = :holder"
        return self._db.count(statement, self._time(holder=holder, **params))

    def check(self, key: K, holder: str, epoch: int) -> bool:
        """Inside the caller's transaction: whether ``holder`` holds ``key`` at ``epoch``, unexpired; its row is then
        held ``FOR KEY SHARE`` until the transaction ends (a takeover waits for it, the holder's renewal does not)."""
        return bool(self._db.execute(*self.check_query(key, holder, epoch)))

    def check_query(self, key: K, holder: str, epoch: int) -> tuple[str, dict[str, Any]]:
        """:meth:`check`'s query and its parameters (named ``key``, ``holder``, ``epoch`` and the clock's), for a
        statement that embeds it (a ``WITH`` query that writes only while the term is held)."""
        spec = self.spec
        return (
            f"SELECT 1 FROM {spec.table} WHERE {spec.key} = :key AND {spec.holder} = :holder AND epoch = :epoch "
            f"AND expires_at >= {spec.clock.now}{self._db.dialect.for_key_share}",
            self._time(key=key, holder=holder, epoch=epoch),
        )

    def holding(self, key: K) -> tuple[str, int, bool] | None:
        """Inside the caller's transaction: the row of ``key`` locked ``FOR UPDATE`` as (holder, epoch, whether its
        term is unexpired), ``None`` when there is none or no one holds it."""
        spec = self.spec
        rows = self._db.execute(
            f"SELECT {spec.holder}, epoch, expires_at >= {spec.clock.now} FROM {spec.table} "
            f"WHERE {spec.key} = :key{self._db.dialect.for_update}",
            self._time(key=key),
        )
        if not rows or rows[0][0] is None:
            return None
        holder, epoch, live = rows[0]
        return str(holder), int(epoch), bool(live)

    def holder(self, key: K) -> str | None:
        """The holder of ``key``'s unexpired term, or ``None``."""
        spec = self.spec
        found = self._db.value(
            f"SELECT {spec.holder} FROM {spec.table} WHERE {spec.key} = :key AND expires_at >= {spec.clock.now}",
            self._time(key=key),
        )
        return None if found is None else str(found)

    def epoch_of(self, key: K, holder: str) -> int | None:
        """The epoch of ``holder``'s term of ``key`` (expired or not), or ``None``."""
        spec = self.spec
        found = self._db.value(
            f"SELECT epoch FROM {spec.table} WHERE {spec.key} = :key AND {spec.holder} = :holder",
            {"key": key, "holder": holder},
        )
        return None if found is None else int(found)

    def holders(self) -> list[str]:
        """Every holder of a term, expired or not, in order."""
        spec = self.spec
        rows = self._db.execute(
            f"SELECT DISTINCT {spec.holder} FROM {spec.table} WHERE {spec.holder} IS NOT NULL ORDER BY {spec.holder}"
        )
        return [str(holder) for (holder,) in rows]

    def rows(self) -> list[TermRow]:
        """Every row, in key order."""
        spec = self.spec
        rows = self._db.execute(
            f"SELECT {spec.key}, {spec.holder}, epoch, {spec.clock.remaining} FROM {spec.table} ORDER BY {spec.key}",
            self._time(),
        )
        return [
            TermRow(
                key=key,
                holder=None if holder is None else str(holder),
                epoch=int(epoch),
                remaining_s=float("-inf") if left is None else float(left),
            )
            for key, holder, epoch, left in rows
        ]

    def ended(self) -> list[Any]:
        """The keys whose terms have ended (or were never held), in order: free to take now."""
        spec = self.spec
        rows = self._db.execute(
            f"SELECT {spec.key} FROM {spec.table} WHERE expires_at < {spec.clock.now} ORDER BY {spec.key}",
            self._time(),
        )
        return [key for (key,) in rows]
