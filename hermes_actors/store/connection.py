"""Opening APSW connections with the settings every hermes-actors connection needs.

One function per setting, each saying why. A connection has one owner thread; the writer and every reader open
their own.
"""

from __future__ import annotations

import enum
from pathlib import Path
from types import TracebackType

import apsw

from hermes_actors.errors import StoreError
from hermes_actors.store.tokenizer import register_tokenizer

__all__ = ["DEFAULT_BUSY_TIMEOUT_MS", "Synchronous", "Transaction", "open_connection"]

DEFAULT_BUSY_TIMEOUT_MS = 5000
DEFAULT_CHECKPOINT_PAGES = 10_000
DEFAULT_PAGE_SIZE = 4096  # 16384 saves 4% of the file but costs a fifth of small-commit speed (bench/README.md)


class Synchronous(enum.StrEnum):
    """How hard a commit waits for the disk.

    ``NORMAL`` (the default) survives a killed process: WAL commits are durable once written to the OS.
    ``FULL`` also survives power loss, at an fsync per commit.
    """

    OFF = "OFF"
    NORMAL = "NORMAL"
    FULL = "FULL"


class Transaction:
    """``with Transaction(db):`` runs the block in one transaction; nested, in a savepoint.

    APSW's own connection context manager, typed to show that it never swallows an exception. With
    ``savepoint=False`` a nested block adds no savepoint and relies on the enclosing one: the store's methods use
    that, since the writer already gives every job its own savepoint, and a statement pair per method per turn is
    measurable.
    """

    __slots__ = ("_active", "_db", "_savepoint")

    def __init__(self, db: apsw.Connection, *, savepoint: bool = True) -> None:
        self._db = db
        self._savepoint = savepoint
        self._active = False

    def __enter__(self) -> None:
        self._active = self._savepoint or not self._db.in_transaction
        if self._active:
            self._db.__enter__()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._active:
            self._db.__exit__(exc_type, exc, tb)


def _choose_page_size(connection: apsw.Connection, page_size: int) -> None:
    """Pick the page size of a new database (it is fixed once the first page is written, WAL included).

    Larger pages hold long messages with less overflow slack and make the FTS segments written at each commit
    fewer; see bench/README.md for the measured trade-off.
    """
    if connection.execute("PRAGMA page_count").get == 0:
        connection.execute(f"PRAGMA page_size = {int(page_size)}")


def _checkpoint_every(connection: apsw.Connection, pages: int) -> None:
    """Fold the WAL back into the database every ``pages`` pages rather than SQLite's 1,000.

    A turn's commit rewrites the same few pages (FTS segment structure, the session's row, index leaves); a
    checkpoint copies each page once however often it changed, so fewer, larger checkpoints write much less.
    Measured (bench/README.md): turn-sized commits went from 0.66 to 0.71 of the large-transaction ceiling. The
    price is a WAL of up to ``pages`` pages (40 MB at 4 KB) that readers consult and a crash replays.
    """
    connection.execute(f"PRAGMA wal_autocheckpoint = {int(pages)}")


def _use_wal(connection: apsw.Connection) -> None:
    """WAL lets readers read while the single writer commits, and makes commits one sequential append."""
    mode = connection.execute("PRAGMA journal_mode = WAL").get
    if str(mode).lower() != "wal":
        raise StoreError(f"could not switch {connection.filename!r} to WAL (got {mode!r}); use a local file")


def _enforce_foreign_keys(connection: apsw.Connection) -> None:
    """Foreign keys keep transcripts, routes and leases from pointing at deleted sessions; SQLite's default is off."""
    connection.execute("PRAGMA foreign_keys = ON")


def _set_busy_timeout(connection: apsw.Connection, milliseconds: int) -> None:
    """Wait for another process's write lock (a terminal chat, a checkpoint) instead of failing at once."""
    connection.set_busy_timeout(milliseconds)


def _set_synchronous(connection: apsw.Connection, level: Synchronous) -> None:
    """Choose durability against commit cost; see :class:`Synchronous`."""
    connection.execute(f"PRAGMA synchronous = {level.value}")


def _keep_temporaries_in_memory(connection: apsw.Connection) -> None:
    """Sorts for listings and FTS merges stay off the disk, which may be small or slow."""
    connection.execute("PRAGMA temp_store = MEMORY")


def open_connection(
    path: str | Path,
    *,
    readonly: bool = False,
    synchronous: Synchronous | str = Synchronous.NORMAL,
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    page_size: int = DEFAULT_PAGE_SIZE,
    checkpoint_pages: int = DEFAULT_CHECKPOINT_PAGES,
) -> apsw.Connection:
    """Open ``path`` with WAL, foreign keys, a busy timeout and the ``hermes_words`` tokenizer.

    A writable connection creates the file when missing. Migrations are not applied here; see
    :func:`hermes_actors.store.migrations.migrate`.
    """
    try:
        level = Synchronous(str(synchronous).upper())
    except ValueError:
        choices = ", ".join(s.value for s in Synchronous)
        raise StoreError(f"synchronous must be one of {choices}, not {synchronous!r}") from None
    flags = apsw.SQLITE_OPEN_READONLY if readonly else apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    try:
        connection = apsw.Connection(str(path), flags=flags)
        _set_busy_timeout(connection, busy_timeout_ms)
        register_tokenizer(connection)
        if not readonly:
            _choose_page_size(connection, page_size)
            _use_wal(connection)
            _checkpoint_every(connection, checkpoint_pages)
        _enforce_foreign_keys(connection)
        _set_synchronous(connection, level)
        _keep_temporaries_in_memory(connection)
    except apsw.Error as exc:
        raise StoreError(f"cannot open database {str(path)!r}: {exc}") from exc
    return connection
