"""The database seam the store's tables are written over once: :class:`SqlDb`, and its two dialects.

A table class holds an :class:`SqlDb` and writes its statements in SQLite's spelling: ``?`` for a positional
parameter, ``:name`` for a named one, ``ON CONFLICT``/``RETURNING`` as both databases have them (SQLite since 3.35).
What really differs between SQLite and PostgreSQL is said through :class:`Dialect`'s few fragments: the greater of
two values, membership in a list given as one parameter, row locks (``FOR UPDATE``, ``FOR KEY SHARE``: PostgreSQL
locks rows, SQLite's ``BEGIN IMMEDIATE`` already holds the one write lock). The PostgreSQL side translates the
placeholders once per statement text (:func:`pg_sql`, cached).

Every statement passes one execute point, so :attr:`SqlDb.trace` sees each with its time (off by default: one
``None`` check per statement). :func:`tracing` collects them for a block, for the benches and for debugging;
``HERMES_SQL_TRACE=DIR`` in a process's environment has every :class:`SqlDb` it opens append its statements to a
:class:`TraceFile` in ``DIR`` (:func:`trace_from_env`), for a bench watching processes it did not start itself.
"""

from __future__ import annotations

import enum
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

__all__ = [
    "NOTICE_WHOLE_BELOW",
    "TRACE_ENV",
    "Dialect",
    "Params",
    "SqlDb",
    "SqlTable",
    "StatementTrace",
    "TraceFile",
    "TraceHook",
    "notice_payload",
    "pg_sql",
    "timed",
    "trace_from_env",
    "tracing",
]

Params = Sequence[Any] | dict[str, Any]
TraceHook = Callable[[str, float], None]  # a statement's text and its seconds


class Dialect(enum.StrEnum):
    """Which SQL a :class:`SqlDb` speaks, and the fragments that differ."""

    SQLITE = "sqlite"
    POSTGRES = "postgres"

    def greatest(self, a: str, b: str) -> str:
        """The greater of two SQL expressions (SQLite's two-argument ``max``)."""
        return f"max({a}, {b})" if self is Dialect.SQLITE else f"greatest({a}, {b})"

    def least(self, a: str, b: str) -> str:
        """The lesser of two SQL expressions."""
        return f"min({a}, {b})" if self is Dialect.SQLITE else f"least({a}, {b})"

    def member(self, column: str) -> str:
        """``column`` is one of the values of the next parameter, given by :meth:`members`."""
        if self is Dialect.SQLITE:
            return f"{column} IN (SELECT value FROM json_each(?))"
        return f"{column} = ANY(?)"

    def members(self, values: Sequence[Any]) -> Any:
        """The parameter for :meth:`member`: a JSON array for SQLite, a list for PostgreSQL."""
        return json.dumps(list(values)) if self is Dialect.SQLITE else list(values)

    @property
    def for_update(self) -> str:
        """Locks the selected rows for this transaction (PostgreSQL); nothing in SQLite, whose writing
        transactions already hold the database's one write lock."""
        return "" if self is Dialect.SQLITE else " FOR UPDATE"

    @property
    def for_key_share(self) -> str:
        """Keeps the selected rows from being deleted or re-keyed until this transaction ends (PostgreSQL)."""
        return "" if self is Dialect.SQLITE else " FOR KEY SHARE"

    def limit(self, rows: int | None) -> int | None:
        """The parameter of ``LIMIT ?`` for at most ``rows`` rows, ``None`` meaning all of them (SQLite's -1: it
        refuses ``LIMIT NULL``; PostgreSQL's NULL: it refuses -1). The clause stays, so ``OFFSET ?`` may follow."""
        if rows is not None:
            return rows
        return -1 if self is Dialect.SQLITE else None


class SqlDb(Protocol):
    """One database as the table classes see it. Statements use SQLite's placeholders (see the module docstring)."""

    trace: TraceHook | None

    @property
    def dialect(self) -> Dialect:
        """The SQL this database speaks."""
        ...

    @property
    def in_transaction(self) -> bool:
        """Whether the current thread has a transaction open."""
        ...

    def execute(self, sql: str, params: Params = (), *, keyed: bool = False) -> list[tuple[Any, ...]]:
        """Run one statement; its rows (none for a statement that returns nothing). ``keyed``: the statement finds
        its rows by keys, and by literal predicates where an index is partial, so a plan made without its values
        serves every value (PostgreSQL keeps one; SQLite prepares every statement once in any case)."""
        ...

    def executemany(self, sql: str, rows: Sequence[Params]) -> None:
        """Run one statement once per row of parameters."""
        ...

    def value(self, sql: str, params: Params = ()) -> Any:
        """The first column of the first row, or ``None``."""
        ...

    def count(self, sql: str, params: Params = ()) -> int:
        """Run one statement; how many rows it changed."""
        ...

    def transaction(self, *, savepoint: bool = True) -> AbstractContextManager[None]:
        """Run the block in one transaction; nested, in a savepoint (``savepoint=False``: joined as it is)."""
        ...


_PG_CACHE: dict[str, str] = {}
_PG_CACHE_LOCK = threading.Lock()
_NAME_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_NAME_PART = _NAME_START | frozenset("0123456789")


def _translate(sql: str) -> str:
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'\"":  # a quoted literal or identifier, copied as it is (a doubled quote stays inside)
            end = i + 1
            while end < n and sql[end] != ch:
                end += 1
            out.append(sql[i : end + 1].replace("%", "%%"))
            i = end + 1
        elif ch == "?":
            out.append("%s")
            i += 1
        elif ch == "%":
            out.append("%%")
            i += 1
        elif ch == ":" and i + 1 < n and sql[i + 1] == ":":  # a PostgreSQL cast
            out.append("::")
            i += 2
        elif ch == ":" and i + 1 < n and sql[i + 1] in _NAME_START:
            end = i + 1
            while end < n and sql[end] in _NAME_PART:
                end += 1
            out.append(f"%({sql[i + 1 : end]})s")
            i = end
        else:
            out.append(ch)
            i += 1
    return "".join(out)


NOTICE_WHOLE_BELOW = 7900  # bytes: PostgreSQL refuses a NOTIFY payload of 8000 and more


def notice_payload(whole: str, key: str) -> str:
    """A ``NOTIFY`` payload in PostgreSQL's SQL: the expression ``whole`` (a row as JSON text, which a listener
    hands over without reading the row back) while it is under :data:`NOTICE_WHOLE_BELOW` bytes, else ``key`` (what
    tells a listener where to read the row)."""
    return f"CASE WHEN octet_length({whole}) < {NOTICE_WHOLE_BELOW} THEN {whole} ELSE {key} END"


def pg_sql(sql: str) -> str:
    """``sql`` with SQLite's placeholders as psycopg's (``?`` → ``%s``, ``:name`` → ``%(name)s``, ``%`` → ``%%``),
    translated once per text."""
    found = _PG_CACHE.get(sql)
    if found is None:
        found = _translate(sql)
        with _PG_CACHE_LOCK:
            _PG_CACHE[sql] = found
    return found


class StatementTrace:
    """The statements a :func:`tracing` block ran, with their seconds, in order."""

    __slots__ = ("statements",)

    def __init__(self) -> None:
        self.statements: list[tuple[str, float]] = []

    def __call__(self, sql: str, seconds: float) -> None:
        self.statements.append((sql, seconds))

    @property
    def seconds(self) -> float:
        """The time spent in statements."""
        return sum(s for _, s in self.statements)

    def summary(self) -> list[tuple[str, int, float]]:
        """Each distinct statement with how often it ran and its total seconds, the costliest first."""
        totals: dict[str, tuple[int, float]] = {}
        for sql, seconds in self.statements:
            count, total = totals.get(sql, (0, 0.0))
            totals[sql] = (count + 1, total + seconds)
        return sorted(((sql, c, t) for sql, (c, t) in totals.items()), key=lambda item: -item[2])


@contextmanager
def tracing(db: SqlDb) -> Iterator[StatementTrace]:
    """Collect the statements ``db`` runs inside the block (replacing any hook set before, restored after)."""
    trace = StatementTrace()
    before = db.trace
    db.trace = trace
    try:
        yield trace
    finally:
        db.trace = before


TRACE_ENV = "HERMES_SQL_TRACE"


class TraceFile:
    """A trace hook appending each statement to ``path``, for a reader in another process: a statement's text once,
    as ``S<TAB>id<TAB>text`` (on one line), then ``wall-clock time<TAB>id<TAB>seconds`` per run. Each line is one
    ``write`` to a file opened for appending, so a reader sees whole lines as they happen. Thread-safe."""

    __slots__ = ("_fd", "_ids", "_lock", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._ids: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, sql: str, seconds: float) -> None:
        with self._lock:
            number = self._ids.get(sql)
            head = ""
            if number is None:
                number = self._ids[sql] = len(self._ids)
                head = f"S\t{number}\t{' '.join(sql.split())}\n"
            os.write(self._fd, f"{head}{time.time():.6f}\t{number}\t{seconds:.6f}\n".encode())


_TRACE_FILES: dict[tuple[int, str], TraceFile] = {}  # by process id (a forked child opens its own) and directory
_TRACE_FILES_LOCK = threading.Lock()


def trace_from_env() -> TraceHook | None:
    """The trace hook a new :class:`SqlDb` starts with: ``None``, unless ``HERMES_SQL_TRACE`` names a directory,
    where this process's statements go to ``sql-<pid>.trace`` (one :class:`TraceFile` per process)."""
    directory = os.environ.get(TRACE_ENV)
    if not directory:
        return None
    key = (os.getpid(), directory)
    with _TRACE_FILES_LOCK:
        found = _TRACE_FILES.get(key)
        if found is None:
            found = _TRACE_FILES[key] = TraceFile(os.path.join(directory, f"sql-{key[0]}.trace"))
    return found


def timed(hook: TraceHook, sql: str, started: float) -> None:
    """Report one statement to ``hook`` (the execute points call this only when a hook is set)."""
    hook(sql, time.perf_counter() - started)


class SqlTable:
    """The base of the store's table classes written over the seam: a database and a clock."""

    __slots__ = ("_clock", "_db")

    def __init__(self, db: SqlDb, clock: Callable[[], float]) -> None:
        self._db = db
        self._clock = clock
