"""The SQLite store: :class:`Store`, the tables of :class:`~.sql_store.SqlStore` over one APSW connection, with
what is SQLite's own (opening and migrating the file, FTS5 search, the file's integrity, backup and size).

A plain synchronous library. The connection belongs to the thread that uses it; the daemon gives its writing
``Store`` to one actor and opens read-only ``Store`` objects elsewhere. Every method that writes runs in one
transaction; :meth:`Store.transaction` nests them (as savepoints) when a turn must commit several together.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import apsw

from hermes_actors.errors import StoreError
from hermes_actors.store import backup, fts, maintenance
from hermes_actors.store.attachments import media_dir_for
from hermes_actors.store.connection import (
    DEFAULT_BUSY_TIMEOUT_MS,
    Synchronous,
    Transaction,
    check_writable,
    open_connection,
)
from hermes_actors.store.leases import Leases
from hermes_actors.store.migrations import migrate, schema_version
from hermes_actors.store.records import FtsResult, OptimizeResult
from hermes_actors.store.search_apsw import StoreSearchReads
from hermes_actors.store.search_reads import SearchReads
from hermes_actors.store.sql_store import SqlStore
from hermes_actors.store.sqlite_db import SqliteDb
from hermes_actors.store.transcript import SqliteMessageRows

__all__ = ["Store"]

_log = logging.getLogger(__name__)


def _quiet(phase: str) -> None:
    """Progress that reports nothing."""


class Store(SqlStore):
    """Sessions, messages, titles, routes and the tables around them in one SQLite database: the APSW
    implementation of :class:`~hermes_actors.store.interface.StoreInterface`.

    Open with :meth:`open`; it migrates a writable database to the current schema.
    """

    def __init__(self, connection: apsw.Connection, *, clock: Callable[[], float] = time.time) -> None:
        sql = SqliteDb(connection)
        super().__init__(sql, clock, rows=SqliteMessageRows(sql), media_dir=media_dir_for(connection.filename or ""))
        self._db = connection
        self._sqlite = sql
        self.leases = Leases(self.sql, clock)

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        readonly: bool = False,
        synchronous: Synchronous | str = Synchronous.NORMAL,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        clock: Callable[[], float] = time.time,
    ) -> Store:
        """Open (and, unless ``readonly``, create and migrate) the database at ``path``."""
        connection = open_connection(path, readonly=readonly, synchronous=synchronous, busy_timeout_ms=busy_timeout_ms)
        try:
            if not readonly:
                migrate(connection)
            elif schema_version(connection) == 0:
                raise StoreError(
                    f"{path} has no hermes-actors schema (no tables of ours): most likely a copy of state.db taken "
                    "without its state.db-wal while hermesd ran, so everything was still in the WAL. Copy state.db "
                    "together with state.db-wal and state.db-shm (or stop hermesd first), or create a fresh "
                    "database with 'hermesctl db migrate'"
                )
        except BaseException:
            connection.close()
            raise
        return cls(connection, clock=clock)

    @property
    def _connection(self) -> apsw.Connection:
        """The underlying connection: for the store package's own modules (and white-box tests) only."""
        return self._db

    @property
    def path(self) -> str:
        """The database file name."""
        return str(self._db.filename)

    def close(self) -> None:
        """Close the connection; the store is unusable afterwards. A writable store first folds the WAL back into
        the database file (:func:`~.maintenance.fold_wal`), so a copy of the file alone is a whole database."""
        try:
            if not self._db.readonly("main"):
                maintenance.fold_wal(self._db)
        except apsw.Error as exc:  # closed already, or a disk that refuses the write: the WAL stays, nothing is lost
            _log.debug("%s: the WAL was not folded back at close: %s", self._db.filename, exc)
        self._db.close()

    def transaction(self) -> Transaction:
        """A block run in one transaction (a savepoint when nested; see :meth:`SqlStore.transaction`)."""
        return Transaction(self._db)

    # -- maintenance -------------------------------------------------------------------------------------------

    def schema_version(self) -> int:
        """Return the database's schema version (0 for a new file); :class:`StoreError` if it cannot be read."""
        try:
            return schema_version(self._db)
        except apsw.Error as exc:
            raise StoreError(f"cannot read {self.path}: {exc}; is it a hermes-actors database?") from exc

    def check_writable(self) -> None:
        """Raise :class:`StoreUnwritableError` naming the problem and the fix unless the database takes a write now.

        See :func:`hermes_actors.store.connection.check_writable`; run it where the store's owner runs.
        """
        check_writable(self._db)

    def check_integrity(self, *, progress: maintenance.PhaseProgress | None = None) -> list[str]:
        """Run SQLite's integrity and foreign key checks; return one line per problem (none: healthy).

        ``progress`` hears the name of each phase as it starts.
        """
        return maintenance.check_integrity(self._db, progress or _quiet)

    def check_search_indexes(self, *, progress: maintenance.PhaseProgress | None = None) -> list[str]:
        """Check both full-text indexes against the messages (needs a writable store); one line per stale index."""
        return maintenance.check_search_indexes(self._db, progress or _quiet)

    def optimize(self, *, progress: maintenance.PhaseProgress | None = None) -> OptimizeResult:
        """Rebuild both search indexes, refresh the planner's statistics, vacuum and checkpoint the file.

        It holds the write lock throughout; :class:`StoreBusyError` names the step at which another process's
        lock outlasted the busy timeout. ``progress`` hears the name of each step as it starts.
        """
        return maintenance.optimize(self._db, progress or _quiet)

    def backup(
        self,
        dest: str | Path,
        *,
        overwrite: bool = False,
        progress: backup.PageProgress | None = None,
        pages_per_step: int = backup.DEFAULT_PAGES_PER_STEP,
        pause_s: float = backup.DEFAULT_PAUSE_S,
    ) -> backup.BackupResult:
        """Copy the database, as of the call, into the self-contained file ``dest``, checked with quick_check
        (see :func:`.backup.backup_database`); other processes keep writing meanwhile."""
        return backup.backup_database(
            self._db, dest, overwrite=overwrite, progress=progress, pages_per_step=pages_per_step, pause_s=pause_s
        )

    def free_bytes(self) -> int:
        """Return the bytes of free pages in the file (reused by new data; a VACUUM gives them back)."""
        return maintenance.free_bytes(self._db)

    def _database_bytes(self) -> int:
        return maintenance.file_bytes(self.path)

    # -- full-text search ---------------------------------------------------------------------------------------

    def fts_query(
        self,
        query: str,
        *,
        limit: int = 20,
        roles: Sequence[str] | None = None,
        session_id: str | None = None,
        order: fts.Order = "relevance",
    ) -> FtsResult:
        """Run a full-text query over messages; never raises for a malformed query (see :mod:`.fts`)."""
        return fts.query_messages(self._db, query, limit=limit, roles=roles, session_id=session_id, order=order)

    def search_reads(self) -> SearchReads:
        """Return the reads ``session_search`` makes, on this store's connection (one per search)."""
        return StoreSearchReads(self._sqlite, self.resolution)
