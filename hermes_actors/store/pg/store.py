"""The PostgreSQL store: :class:`PostgresStore`, the second implementation of the store interface.

It satisfies every protocol of :mod:`hermes_actors.store.interface` (the contract tests in ``tests/store`` and
``tests/search`` run against it and against the SQLite store), over a psycopg connection pool
(:class:`~hermes_actors.store.pg.db.Database`). Unlike the SQLite store's one connection, the pool may be used by
several threads at once: each thread's :meth:`PostgresStore.transaction` holds its own connection.

What differs from the SQLite store, by design: lease expiry is the database clock's (see
:mod:`~hermes_actors.store.leases`); :meth:`~PostgresStore.backup` refuses (``pg_dump`` is PostgreSQL's
backup); sizes are ``pg_database_size``; ``free_bytes`` is 0 (PostgreSQL reuses dead space itself).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from hermes_actors.errors import StoreError
from hermes_actors.store import backup as sqlite_backup
from hermes_actors.store.connection import StoreUnwritableError
from hermes_actors.store.fts import Order
from hermes_actors.store.leases import Leases
from hermes_actors.store.pg import fts, maintenance
from hermes_actors.store.pg.db import DEFAULT_POOL_SIZE, Database, redact
from hermes_actors.store.pg.migrations import migrate, schema_version
from hermes_actors.store.pg.outbox_claims import OutboxClaims
from hermes_actors.store.pg.replicas import PgReplicas
from hermes_actors.store.pg.reset_scan import ResetScan
from hermes_actors.store.pg.roles import PgRoles
from hermes_actors.store.pg.search import PgSearchReads
from hermes_actors.store.pg.shard_queue import ShardQueue
from hermes_actors.store.pg.shards import PgShards, ShardFence
from hermes_actors.store.pg.sql_db import PgSqlDb
from hermes_actors.store.pg.transcript import PgMessageRows
from hermes_actors.store.records import FtsResult, OptimizeResult
from hermes_actors.store.search_reads import SearchReads
from hermes_actors.store.sql_store import SqlStore

__all__ = ["PostgresStore"]


def _quiet(phase: str) -> None:
    """Progress that reports nothing."""


def _no_skew() -> float:
    return 0.0


class PostgresStore(SqlStore):
    """Sessions, messages, routes and the tables around them in one PostgreSQL database.

    Open with :meth:`open`; it migrates the database to the current schema. ``clock`` dates rows as the SQLite
    store's does; ``lease_skew`` (seconds added to the database clock when leases expire, 0 in production) lets
    tests move lease time forward.
    """

    def __init__(
        self,
        database: Database,
        *,
        clock: Callable[[], float] = time.time,
        lease_skew: Callable[[], float] = _no_skew,
    ) -> None:
        sql = PgSqlDb(database)
        super().__init__(sql, clock, rows=PgMessageRows(sql), media_dir=None)
        self.database = database
        self._pg = sql
        self.leases = Leases(self.sql, clock, skew=lease_skew)
        self.shards = PgShards(self.sql, lease_skew, locks=database)
        self.roles = PgRoles(self.sql, lease_skew)
        self.replicas = PgReplicas(self.sql, lease_skew)
        self.shard_queue = ShardQueue(self.sql, clock)
        self.outbox_claims = OutboxClaims(self.sql, clock)
        self.reset_scan = ResetScan(self.sql)

    @classmethod
    def open(
        cls,
        dsn: str,
        *,
        pool_size: int = DEFAULT_POOL_SIZE,
        clock: Callable[[], float] = time.time,
        lease_skew: Callable[[], float] = _no_skew,
        migrate_schema: bool = True,
    ) -> PostgresStore:
        """Connect to the database at ``dsn`` (a ``postgresql://`` URL or key=value string) and migrate it."""
        database = Database(dsn, pool_size=pool_size)
        try:
            if migrate_schema:
                migrate(database)
        except BaseException:
            database.close()
            raise
        return cls(database, clock=clock, lease_skew=lease_skew)

    @property
    def path(self) -> str:
        """The database's connection string, without its password."""
        return redact(self.database.dsn)

    def close(self) -> None:
        """Close every connection of the pool."""
        self.database.close()

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """A read-only block that sees one snapshot of the database (``REPEATABLE READ``), as the SQLite store's
        read transaction does: a long export is consistent whatever the shard hosts commit meanwhile."""
        if self.database.in_transaction:
            raise StoreError("a snapshot must be the outermost transaction of its thread")
        with self.database.transaction():
            self.database.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield

    def fence_shards(self, fence: ShardFence | None) -> None:
        """Cluster mode: from now on every turn's transaction (its inbox completions, its session lease's grant
        and fence) first checks that ``fence``'s host still holds the session's shard (``None``: no check)."""
        check = None if fence is None else (lambda session_id: fence.check(self.shards, session_id))
        self.inbox.shard_check = check
        self.leases.shard_check = check
        self.leases.shard_guard = None if fence is None else (lambda session_id: fence.guard(self.shards, session_id))

    # -- maintenance -------------------------------------------------------------------------------------------

    def schema_version(self) -> int:
        """The database's schema version (0: no tables of ours)."""
        return schema_version(self.database)

    def check_writable(self, *, timeout_s: float | None = None) -> None:
        """Raise :class:`StoreUnwritableError` unless the database takes a write now (within ``timeout_s``, a
        connection's wait and each statement's run counted apart; ``None``: the pool's and the server's own)."""
        try:
            with self.database.transaction(wait_s=timeout_s):
                if timeout_s is not None:
                    self.database.execute(f"SET LOCAL statement_timeout = {max(1, int(timeout_s * 1000))}")
                self.database.execute("CREATE TEMPORARY TABLE hermes_probe (x integer) ON COMMIT DROP")
                if self.database.value("SELECT pg_is_in_recovery()"):
                    raise StoreUnwritableError(f"{self.path} is a read-only standby; point hermes at the primary")
        except StoreUnwritableError:
            raise
        except StoreError as exc:
            raise StoreUnwritableError(f"{self.path} does not take writes: {exc}", fault=exc.fault) from exc

    def check_integrity(self, *, progress: Callable[[str], None] | None = None) -> list[str]:
        """Rows whose references dangle, one line each."""
        return maintenance.check_integrity(self.sql, progress or _quiet)

    def check_search_indexes(self, *, progress: Callable[[str], None] | None = None) -> list[str]:
        """Stale search columns among the newest messages, one line."""
        return maintenance.check_search_indexes(self.sql, progress or _quiet)

    def optimize(self, *, progress: Callable[[str], None] | None = None) -> OptimizeResult:
        """Recompute the search columns, vacuum and analyze."""
        return maintenance.optimize(self.sql, progress or _quiet)

    def backup(
        self,
        dest: str | Path,
        *,
        overwrite: bool = False,
        progress: Callable[[int, int], None] | None = None,
        pages_per_step: int = sqlite_backup.DEFAULT_PAGES_PER_STEP,
        pause_s: float = sqlite_backup.DEFAULT_PAUSE_S,
    ) -> sqlite_backup.BackupResult:
        """Refused: a PostgreSQL store is backed up with PostgreSQL's own tools."""
        raise StoreError(
            f"{self.path} is a PostgreSQL store: back it up with pg_dump (or the server's continuous archiving), "
            "not 'hermesctl db backup'"
        )

    def free_bytes(self) -> int:
        """0: PostgreSQL reuses dead space itself (VACUUM); there is no free list to report."""
        return 0

    def _database_bytes(self) -> int:
        return int(self.database.value("SELECT pg_database_size(current_database())") or 0)

    # -- full-text search ---------------------------------------------------------------------------------------

    def fts_query(
        self,
        query: str,
        *,
        limit: int = 20,
        roles: Sequence[str] | None = None,
        session_id: str | None = None,
        order: Order = "relevance",
    ) -> FtsResult:
        """Run a full-text query over messages; never raises for a malformed query (see :mod:`.fts`)."""
        return fts.query_messages(self.database, query, limit=limit, roles=roles, session_id=session_id, order=order)

    def search_reads(self) -> SearchReads:
        """The reads ``session_search`` makes, on this store's pool."""
        return PgSearchReads(self._pg, self.resolution)
