"""The SQLite side of the database seam: :class:`SqliteDb`, an :class:`~hermes_actors.store.sql.SqlDb` over one
APSW connection.

Statements run as written (the seam's placeholders are SQLite's own). Transactions are
:class:`~hermes_actors.store.connection.Transaction`: ``BEGIN IMMEDIATE`` outermost, savepoints nested.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import apsw

from hermes_actors.store.connection import Transaction
from hermes_actors.store.sql import Dialect, Params, TraceHook, timed, trace_from_env

__all__ = ["SqliteDb"]


class SqliteDb:
    """An APSW connection as the store's tables use it."""

    __slots__ = ("connection", "trace")

    def __init__(self, connection: apsw.Connection) -> None:
        self.connection = connection
        self.trace: TraceHook | None = trace_from_env()

    @property
    def dialect(self) -> Dialect:
        """Always :attr:`Dialect.SQLITE`."""
        return Dialect.SQLITE

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open on the connection."""
        return bool(self.connection.in_transaction)

    def execute(self, sql: str, params: Params = (), *, keyed: bool = False) -> list[tuple[Any, ...]]:
        """Run one statement; its rows (``keyed`` changes nothing here: SQLite plans a statement once, when its
        connection first prepares it)."""
        hook = self.trace
        if hook is None:
            return self.connection.execute(sql, params).fetchall()
        started = time.perf_counter()
        rows = self.connection.execute(sql, params).fetchall()
        timed(hook, sql, started)
        return rows

    def executemany(self, sql: str, rows: Sequence[Params]) -> None:
        """Run one statement once per row of parameters."""
        if not rows:
            return
        hook = self.trace
        started = time.perf_counter()
        self.connection.executemany(sql, rows)
        if hook is not None:
            timed(hook, sql, started)

    def value(self, sql: str, params: Params = ()) -> Any:
        """The first column of the first row, or ``None``."""
        hook = self.trace
        started = time.perf_counter() if hook is not None else 0.0
        row = self.connection.execute(sql, params).fetchone()
        if hook is not None:
            timed(hook, sql, started)
        return None if row is None else row[0]

    def count(self, sql: str, params: Params = ()) -> int:
        """Run one statement; how many rows it changed."""
        self.execute(sql, params)
        return int(self.connection.changes())

    def transaction(self, *, savepoint: bool = True) -> Transaction:
        """A transaction (nested: a savepoint, or with ``savepoint=False`` the enclosing one joined)."""
        return Transaction(self.connection, savepoint=savepoint)
