"""The pooled connections :class:`~hermes_actors.store.pg.db.Database` keeps at hand between two statements.

Lending a connection through psycopg_pool (``getconn``, the connection's own ``with`` block, ``putconn``, their
locks, stats and log calls) cost a one-row statement about 40 % of its client CPU beside the statement itself. So a
connection a statement has finished with waits here, in :class:`Spares`, for the next statement or transaction,
which takes it without asking the pool. The pool is asked only when no spare is left; then the borrower waits in the
pool, and a connection given back meanwhile goes to the pool, which hands it to the waiter (a spare parked beside a
borrower waiting in the pool would leave that borrower waiting for nothing).

What the pool does to a returned connection still happens: one that broke or is inside a transaction goes back to the
pool, which replaces or rolls it back; and one taken from the pool ``keep_s`` ago or more goes back at its next
return, so the pool's lifetime and health rules still reach every connection.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import pq
from psycopg_pool import ConnectionPool

__all__ = ["Spares"]

_KEEP_S = 60.0


class Spares:
    """Connections of ``pool`` kept between borrowers: :meth:`take` one, :meth:`give` it back, :meth:`close` to hand
    every spare back to the pool (before the pool closes)."""

    def __init__(
        self,
        pool: ConnectionPool[psycopg.Connection[Any]],
        *,
        keep_s: float = _KEEP_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pool = pool
        self._keep_s = keep_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._idle: list[psycopg.Connection[Any]] = []
        self._since: dict[int, float] = {}  # id(connection) -> when it was taken from the pool
        self._waiting = 0  # borrowers waiting in the pool: a connection given back goes to them
        self._closed = False
        self.pool_takes = 0  # connections taken from the pool (tests count them)

    @property
    def pool(self) -> ConnectionPool[psycopg.Connection[Any]]:
        """The pool the spares come from."""
        return self._pool

    def take(self, timeout_s: float) -> psycopg.Connection[Any]:
        """A spare, else a connection from the pool (waiting up to ``timeout_s``: psycopg_pool's ``PoolTimeout``)."""
        with self._lock:
            if self._idle:
                return self._idle.pop()
            self._waiting += 1
        try:
            connection = self._pool.getconn(timeout=timeout_s)
        finally:
            with self._lock:
                self._waiting -= 1
        self.pool_takes += 1
        self._since[id(connection)] = self._monotonic()
        return connection

    def give(self, connection: psycopg.Connection[Any]) -> None:
        """Keep ``connection`` for the next borrower, or give it back to the pool: when someone waits there, when it
        broke or is inside a transaction, when it has been out of the pool ``keep_s``, or once closing."""
        usable = not connection.closed and connection.pgconn.transaction_status == pq.TransactionStatus.IDLE
        fresh = self._monotonic() - self._since.get(id(connection), float("-inf")) < self._keep_s
        with self._lock:
            if usable and fresh and not self._waiting and not self._closed:
                self._idle.append(connection)
                return
        self._since.pop(id(connection), None)
        self._pool.putconn(connection)

    def close(self) -> None:
        """Give every spare back to the pool; later returns go there too."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for connection in idle:
            self._since.pop(id(connection), None)
            self._pool.putconn(connection)
