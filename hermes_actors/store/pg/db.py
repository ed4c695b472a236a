"""The PostgreSQL store's connections: a psycopg pool, and the transaction a thread has open on one of them.

Every table class of :mod:`hermes_actors.store.pg` talks to the database through one :class:`Database`. A method
that runs outside any transaction borrows a pooled connection for one statement (autocommit); inside
:meth:`Database.transaction` every statement of the thread runs on the connection that transaction holds, so a
turn's writes commit or roll back together however many table methods it calls. A nested transaction is a savepoint
(psycopg's own nesting); with ``savepoint=False`` a nested block adds nothing and joins the enclosing one, as the
SQLite store's methods do.

psycopg errors become :class:`~hermes_actors.errors.StoreError` here, so nothing above sees the driver's types,
and so does a pool that had no connection to lend in time. A connection lost inside a transaction is never taken for
a commit: psycopg ends such a block without a word (it cannot send ``COMMIT``), and :meth:`Database.transaction`
raises instead. When the loss cuts the ``COMMIT`` itself the outcome is unknown: :class:`CommitUnknownError` carries
the transaction's id, which :meth:`Database.outcome` resolves against the server once it answers again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool

from hermes_actors.errors import StoreError, StoreFault
from hermes_actors.store.pg.pooled import PooledConnection, custom_plans, direct, generic_plans, sent
from hermes_actors.store.pg.spares import Spares

__all__ = ["CommitUnknownError", "Database", "Params", "direct", "fault_of", "store_error"]

Params = Sequence[Any] | dict[str, Any]
DEFAULT_POOL_SIZE = 4
_POOL_TIMEOUT_S = 30.0
_CONNECT_TIMEOUT_S = 10
_PREPARE_AFTER = 5  # runs of one statement text on a connection before psycopg prepares it
_LOST = (
    "the connection to PostgreSQL was lost inside a transaction ({cause}); nothing of it was committed "
    "(PostgreSQL rolls back a transaction whose connection ends)"
)


class CommitUnknownError(StoreError):
    """The connection broke while ``COMMIT`` was on its way: the transaction ``xid`` may or may not have committed.
    :meth:`Database.outcome` asks the server which, once it answers again."""

    def __init__(self, message: str, *, xid: str | None) -> None:
        super().__init__(message)
        self.xid = xid


def fault_of(exc: BaseException) -> StoreFault | None:
    """The :class:`StoreFault` a psycopg error amounts to (a full disk, a read-only server, a lock wait), if any."""
    if isinstance(exc, pg_errors.DiskFull | pg_errors.OutOfMemory):
        return StoreFault.FULL
    if isinstance(exc, pg_errors.ReadOnlySqlTransaction):
        return StoreFault.READ_ONLY
    if isinstance(exc, pg_errors.LockNotAvailable | pg_errors.SerializationFailure | pg_errors.DeadlockDetected):
        return StoreFault.BUSY
    return None


def store_error(exc: psycopg.Error, doing: str) -> StoreError:
    """``exc`` as a :class:`StoreError` saying what was being done (the psycopg error stays its cause)."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return StoreError(f"PostgreSQL refused {doing}: {message}", fault=fault_of(exc))


class _Open(threading.local):
    """The connection and transaction depth of the current thread's open transaction, and the row locks it is
    known to hold (:meth:`Database.holds`)."""

    connection: psycopg.Connection[Any] | None = None
    depth: int = 0
    locks: set[Hashable] | None = None
    xid: str | None = None  # the open transaction's id, once asked for (Database.xid)


class Database:
    """A pool of connections to one PostgreSQL database and the transactions threads hold on them.

    A statement a connection has run five times is prepared (psycopg's ``prepare_threshold``): PostgreSQL then
    skips parsing and rewriting it, and psycopg sends only its parameters. The pool's connections set
    ``plan_cache_mode = force_custom_plan``, so a prepared statement is still planned for its values each time:
    a generic plan cannot see a search query's values (a rare bigram and a common one would get the same plan) and
    would lose the GIN index. A statement whose plan does not depend on its values (:meth:`execute` with ``keyed``)
    runs on a second pool instead, whose connections keep one generic plan per prepared statement.
    """

    def __init__(self, dsn: str, *, pool_size: int = DEFAULT_POOL_SIZE) -> None:
        self.dsn = dsn
        self._open = _Open()
        try:  # one plain connection first: its refusal names the problem (the pool's would only time out)
            psycopg.connect(dsn, connect_timeout=_CONNECT_TIMEOUT_S).close()
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to PostgreSQL at {redact(dsn)}: {str(exc).strip()}") from exc
        self._pool_size = max(1, pool_size)
        self._pool = self._new_pool(custom_plans, "hermes-store")
        self._spares = Spares(self._pool)
        self._keyed: Spares | None = None  # the keyed pool's, opened by the first keyed statement
        self._keyed_lock = threading.Lock()
        try:
            self._pool.open(wait=True, timeout=_POOL_TIMEOUT_S)
        except Exception as exc:
            self._pool.close()
            raise StoreError(f"cannot connect to PostgreSQL at {redact(dsn)}: {exc}") from exc

    def _new_pool(
        self, configure: Callable[[psycopg.Connection[Any]], None], name: str
    ) -> ConnectionPool[psycopg.Connection[Any]]:
        return ConnectionPool(
            self.dsn,
            connection_class=PooledConnection,
            min_size=1,
            max_size=self._pool_size,
            kwargs={"autocommit": True, "prepare_threshold": _PREPARE_AFTER, "connect_timeout": _CONNECT_TIMEOUT_S},
            configure=configure,
            open=False,
            timeout=_POOL_TIMEOUT_S,
            name=name,
        )

    def close(self) -> None:
        """Close every pooled connection."""
        self._spares.close()
        self._pool.close()
        with self._keyed_lock:
            keyed, self._keyed = self._keyed, None
        if keyed is not None:
            keyed.close()
            keyed.pool.close()

    def _keyed_spares(self) -> Spares:
        spares = self._keyed
        if spares is not None:
            return spares
        with self._keyed_lock:
            if self._keyed is None:
                pool = self._new_pool(generic_plans, "hermes-store-keyed")
                pool.open(wait=False)  # a borrower waits for its first connection as for any other
                self._keyed = Spares(pool)
            return self._keyed

    @property
    def in_transaction(self) -> bool:
        """Whether the current thread has a transaction open."""
        return self._open.connection is not None

    @contextmanager
    def transaction(self, *, savepoint: bool = True, wait_s: float | None = None) -> Iterator[None]:
        """Run the block in one transaction; nested, in a savepoint (``savepoint=False``: joined as it is).
        ``wait_s`` bounds the wait for a pooled connection (``None``: the pool's own timeout)."""
        held = self._open.connection
        if held is not None:
            if not savepoint:
                yield
                return
            try:
                with self._errors("a savepoint"), sent(held).transaction():
                    yield
            except BaseException:
                self._open.locks = None  # a rolled-back savepoint released the row locks taken inside it
                raise
            return
        with self._lend(wait_s) as connection:
            self._open.connection = connection
            self._open.locks = None
            self._open.xid = None
            committing = False
            try:
                with self._errors("a transaction"), connection.transaction():
                    yield
                    committing = True  # the block is over: leaving the ``with`` sends COMMIT
            except StoreError as exc:
                if committing and connection.broken:
                    raise CommitUnknownError(
                        f"the connection to PostgreSQL was lost while the transaction committed ({exc}); "
                        "whether it committed is known only once the server answers again",
                        xid=self._open.xid,
                    ) from exc
                raise
            finally:
                xid = self._open.xid
                self._open.connection = None
                self._open.locks = None
                self._open.xid = None
            if connection.broken:  # psycopg could not send COMMIT, and ended the block without a word
                raise StoreError(_LOST.format(cause=f"transaction {xid or 'without an id'}"))

    def broken(self) -> bool:
        """Whether the current thread's transaction lost its connection (nothing of it can commit now)."""
        held = self._open.connection
        return held is not None and held.broken

    def xid(self) -> str:
        """Inside a transaction: its id (assigned now if it had none), for :meth:`outcome` after an unknown commit."""
        if self._open.connection is None:
            raise StoreError("Database.xid needs an open transaction")
        if self._open.xid is None:
            self._open.xid = str(self.value("SELECT pg_current_xact_id()::text"))
        return self._open.xid

    def outcome(self, xid: str, *, timeout_s: float) -> bool | None:
        """Whether transaction ``xid`` committed (``False``: it rolled back), asked of the server on a fresh
        connection; ``None`` while it cannot say (it does not answer within ``timeout_s``, or the transaction is
        still in progress: its backend has not noticed the lost connection yet)."""
        try:
            with self._lend(timeout_s) as connection:
                row = connection.execute(b"SELECT pg_xact_status(%s::xid8)", (xid,)).fetchone()
        except (psycopg.Error, StoreError):
            return None
        status = row[0] if row else None
        if status == "committed":
            return True
        if status == "aborted":
            return False
        return None

    def probe(self, timeout_s: float) -> str | None:
        """Whether the server answers a statement within ``timeout_s`` (a health check that never hangs): ``None``
        when it does, else why not."""
        try:
            with self._lend(timeout_s) as connection:
                connection.execute(b"SELECT 1")
        except (psycopg.Error, StoreError) as exc:
            return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return None

    @contextmanager
    def _lend(self, timeout_s: float | None, *, keyed: bool = False) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection (``keyed``: of the pool for keyed statements, :meth:`execute`), kept at hand
        afterwards (:class:`~hermes_actors.store.pg.spares.Spares`); a pool with none to lend within ``timeout_s``
        (the pool's own timeout when ``None``) is a :class:`StoreError` naming the server, not the pool's own
        exception."""
        spares = self._keyed_spares() if keyed else self._spares
        connection = self._take(spares, timeout_s)
        try:
            yield connection
        finally:
            spares.give(connection)

    def _take(self, spares: Spares, timeout_s: float | None) -> psycopg.Connection[Any]:
        waited = _POOL_TIMEOUT_S if timeout_s is None else timeout_s
        try:
            return spares.take(waited)
        except psycopg.Error as exc:  # the pool's PoolTimeout, or a closed pool
            raise StoreError(
                f"PostgreSQL at {redact(self.dsn)} gave no connection within {waited:g} s ({str(exc).strip()}); "
                "check that the server runs and takes connections"
            ) from exc

    def lend(self, timeout_s: float | None = None) -> AbstractContextManager[psycopg.Connection[Any]]:
        """A pooled connection for the block (for a transaction its borrower begins and ends itself,
        :mod:`~hermes_actors.store.pg.group_commit`); the pool's own timeout when ``timeout_s`` is ``None``."""
        return self._lend(timeout_s)

    @contextmanager
    def holding(self, connection: psycopg.Connection[Any], xid: str | None) -> Iterator[None]:
        """Make ``connection``, on which the caller began transaction ``xid`` (``None``: not known yet, or its
        ``BEGIN`` deferred to its first statement), this thread's open transaction for the block: every statement of
        the thread runs there, and a nested :meth:`transaction` is a savepoint of it."""
        self._open.connection, self._open.locks, self._open.xid = connection, None, xid
        try:
            yield
        finally:
            self._open.connection, self._open.locks, self._open.xid = None, None, None

    def forget_locks(self) -> None:
        """A savepoint was rolled back: the row locks taken since are no longer known to be held."""
        self._open.locks = None

    def holds(self, lock: Hashable) -> bool:
        """Whether the current transaction took ``lock`` (a row lock a caller named, :meth:`took`) and still holds
        it: until the transaction ends, or a savepoint inside it rolls back (which forgets every lock, to be safe)."""
        locks = self._open.locks
        return locks is not None and lock in locks

    def took(self, lock: Hashable) -> None:
        """Inside a transaction: remember that it now holds ``lock`` (kept until it commits or rolls back)."""
        if self._open.connection is None:
            return  # an autocommit statement's lock ended with it
        if self._open.locks is None:
            self._open.locks = set()
        self._open.locks.add(lock)

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except psycopg.Error as exc:
            raise store_error(exc, doing) from exc

    @contextmanager
    def cursor(self) -> Iterator[psycopg.Cursor[Any]]:
        """A cursor of its own on the current transaction's connection, or on a pooled one in autocommit for one use
        (a ``COPY``)."""
        held = self._open.connection
        if held is not None:
            with self._errors("a statement"):
                sent(held)
            with held.cursor() as cursor:
                yield cursor
            return
        with self._lend(None) as connection, connection.cursor() as cursor:
            yield cursor

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """The current transaction's connection, or a spare one in autocommit for one statement."""
        held = self._open.connection
        if held is not None:
            yield sent(held)
            return
        with self._lend(None) as connection:
            yield connection

    def execute(self, sql: str, params: Params | None = None, *, keyed: bool = False) -> list[tuple[Any, ...]]:
        """Run one statement; its rows (none for a statement that returns nothing).

        ``keyed``: the statement's plan does not depend on its values (rows found by keys, partial indexes'
        predicates written as literals). Outside a transaction it runs on a connection that keeps one generic plan
        per prepared statement (``plan_cache_mode = force_generic_plan``), so a hot statement is not planned again on
        every run; inside the thread's open transaction it is one of its statements like any other.

        Sent through libpq (:mod:`~hermes_actors.store.pg.direct`), and written without context managers: it runs
        for every statement, and a psycopg cursor's steps were half of its client CPU, the context managers a tenth."""
        held = self._open.connection
        try:
            if held is not None:
                return direct(held).rows(sql.encode(), params)
            spares = self._keyed_spares() if keyed else self._spares
            connection = self._take(spares, None)
            try:
                return direct(connection).rows(sql.encode(), params)
            finally:
                spares.give(connection)
        except psycopg.Error as exc:
            raise store_error(exc, "a statement") from exc

    def count(self, sql: str, params: Params | None = None) -> int:
        """Run one statement; how many rows it changed."""
        with self._errors("a statement"):
            held = self._open.connection  # its deferred statements ride with this one (not _connection's flush)
            if held is not None:
                return direct(held).changed(sql.encode(), params)
            with self._lend(None) as connection:
                return direct(connection).changed(sql.encode(), params)

    def executemany(self, sql: str, rows: Sequence[Params]) -> None:
        """Run one statement once per row of parameters."""
        if not rows:
            return
        with self._errors("a statement"), self._connection() as connection, connection.cursor() as cursor:
            cursor.executemany(sql.encode(), rows)

    def value(self, sql: str, params: Params | None = None) -> Any:
        """The first column of the first row, or ``None``."""
        rows = self.execute(sql, params)
        return rows[0][0] if rows else None


def redact(dsn: str) -> str:
    """``dsn`` without its password, for messages."""
    try:
        parts = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparsable DSN>"
    parts.pop("password", None)
    return " ".join(f"{k}={v}" for k, v in parts.items())
