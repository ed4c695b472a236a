"""The PostgreSQL store's :class:`~hermes_actors.store.sql.SqlDb`: what the store's table classes call, over one
:class:`~hermes_actors.store.pg.db.Database`."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from hermes_actors.store.pg.db import Database, Params
from hermes_actors.store.sql import Dialect, TraceHook, pg_sql, timed, trace_from_env

__all__ = ["PgSqlDb"]


class PgSqlDb:
    """A :class:`Database` as the store's tables use it (:class:`~hermes_actors.store.sql.SqlDb`): statements in
    SQLite's placeholders, translated once per text (:func:`~hermes_actors.store.sql.pg_sql`)."""

    __slots__ = ("database", "trace")

    def __init__(self, database: Database) -> None:
        self.database = database
        self.trace: TraceHook | None = trace_from_env()

    @property
    def dialect(self) -> Dialect:
        """Always :attr:`Dialect.POSTGRES`."""
        return Dialect.POSTGRES

    @property
    def in_transaction(self) -> bool:
        """Whether the current thread has a transaction open."""
        return self.database.in_transaction

    def execute(self, sql: str, params: Params = (), *, keyed: bool = False) -> list[tuple[Any, ...]]:
        """Run one statement; its rows. ``keyed``: its plan does not depend on its values
        (:meth:`Database.execute`)."""
        hook = self.trace
        started = time.perf_counter() if hook is not None else 0.0
        rows = self.database.execute(pg_sql(sql), params or None, keyed=keyed)
        if hook is not None:
            timed(hook, sql, started)
        return rows

    def executemany(self, sql: str, rows: Sequence[Params]) -> None:
        """Run one statement once per row of parameters."""
        hook = self.trace
        started = time.perf_counter() if hook is not None else 0.0
        self.database.executemany(pg_sql(sql), rows)
        if hook is not None:
            timed(hook, sql, started)

    def value(self, sql: str, params: Params = ()) -> Any:
        """The first column of the first row, or ``None``."""
        rows = self.execute(sql, params)
        return rows[0][0] if rows else None

    def count(self, sql: str, params: Params = ()) -> int:
        """Run one statement; how many rows it changed."""
        hook = self.trace
        started = time.perf_counter() if hook is not None else 0.0
        changed = self.database.count(pg_sql(sql), params or None)
        if hook is not None:
            timed(hook, sql, started)
        return changed

    def transaction(self, *, savepoint: bool = True) -> AbstractContextManager[None]:
        """A transaction on this thread's connection (nested: a savepoint, unless ``savepoint=False``). With a trace
        hook set, the hook sees an outermost one as ``BEGIN`` and a savepoint as ``SAVEPOINT``, each with its
        seconds from its start to its end (the round trips a statement count leaves out)."""
        if self.trace is None:
            return self.database.transaction(savepoint=savepoint)
        return self._traced_transaction(self.trace, savepoint)

    @contextmanager
    def _traced_transaction(self, hook: TraceHook, savepoint: bool) -> Iterator[None]:
        kind = "SAVEPOINT" if self.database.in_transaction else "BEGIN"
        if kind == "SAVEPOINT" and not savepoint:
            with self.database.transaction(savepoint=False):
                yield
            return
        started = time.perf_counter()
        try:
            with self.database.transaction(savepoint=savepoint):
                yield
        finally:
            timed(hook, kind, started)
