"""The runtime's writer and readers over a :class:`PostgresStore`, for a shard host.

The runtime is written against the SQLite store's :class:`~hermes_actors.store.writer.StoreWriter` and
:class:`~hermes_actors.store.readers.ReaderPool`; these are the same two on PostgreSQL. :class:`PgWriter` keeps
the writer's contract (one thread, group commit, each write in its own savepoint, ``then`` after the commit) on one
pooled connection, whose control statements ride together (:mod:`~hermes_actors.store.pg.group_commit`);
:class:`PgReaders` lends the store itself, whose pool gives each reading thread a connection of
its own.

A network store adds one case a file does not have: the connection breaks while ``COMMIT`` is on its way, and the
batch may or may not have committed. The writer then asks the server, as soon as it answers again, whether the
batch's transaction committed (:meth:`~hermes_actors.store.pg.db.Database.outcome`) and settles every write of the
batch by that answer before it takes the next batch: a caller (a session's turn) is told "committed" only of what
the store has, and "failed" only of what it does not, and nothing else is written in between. A connection lost in
the middle of a batch fails every write of it (nothing was committed), never only the ones after the break; and
:meth:`PgWriter.call` waits for the outcome however long that takes, since a caller that stopped waiting could not
know what its write did.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from hermes_actors.errors import StoreError
from hermes_actors.store.pg.db import CommitUnknownError
from hermes_actors.store.pg.group_commit import group_transaction
from hermes_actors.store.readers import ReaderPool
from hermes_actors.store.writer import CommitObserver, StoreWriter, WriterClosedError, _Job

if TYPE_CHECKING:
    from collections.abc import Callable

    from hermes_actors.store.interface import StoreInterface
    from hermes_actors.store.pg.store import PostgresStore

__all__ = ["PgReaders", "PgWriter"]

T = TypeVar("T")
_log = logging.getLogger(__name__)
_ASK_EVERY_S = 0.5  # how often an unknown commit's outcome is asked while the server does not answer
_ASK_TIMEOUT_S = 2.0


class _Broken(Exception):
    """The batch's connection broke inside a write: the whole batch failed (raised past the writes' savepoints)."""


class PgWriter(StoreWriter):
    """:class:`StoreWriter` on a :class:`PostgresStore` (which it does not close: the host does)."""

    def __init__(self, store: PostgresStore, *, observer: CommitObserver | None = None) -> None:
        self._pg = store
        self.unknown_commits = 0  # commits whose connection broke on the way, resolved against the server
        super().__init__(store, name="hermes-pg-writer", observer=observer)

    def call(self, work: Callable[[StoreInterface], T], *, timeout: float | None = 30.0) -> T:
        """Run ``work(store)`` in the next commit and return its result (or raise its exception). It waits for
        the outcome however long the server is away (``timeout`` is ignored): the writer settles every write,
        and one whose caller stopped waiting might commit unseen."""
        future = self.submit(work)
        while True:
            try:
                return future.result(timeout=1.0)
            except FutureTimeout:
                if not self._thread.is_alive():
                    raise WriterClosedError("the store writer has stopped; the write's outcome is unknown") from None

    def _run(self) -> None:
        stopping = False
        while not stopping:
            batch, stopping = self._take_batch()
            if batch:
                started = time.perf_counter()
                try:
                    committed = self._commit(batch)
                except Exception as exc:  # a bug here must not stop the writer with futures left open
                    _log.exception("the store writer failed on a batch of %d writes", len(batch))
                    committed = False
                    for job in batch:
                        if not job.future.done():
                            job.fail(exc)
                if self._observer is not None:
                    self._observe(len(batch), time.perf_counter() - started, committed)

    def _commit_one(self, job: _Job) -> bool:
        return self._commit([job])

    def _commit(self, batch: list[_Job]) -> bool:
        """Run ``batch`` in one transaction, each write in a savepoint; return whether it committed."""
        outcomes: list[tuple[_Job, Any, BaseException | None]] = []
        try:
            with group_transaction(self._pg.database) as transaction:
                for job in batch:
                    try:
                        with transaction.write():
                            result = job.work(self._store)
                    except Exception as exc:
                        if transaction.broken:
                            raise _Broken(str(exc)) from exc
                        outcomes.append((job, None, exc))
                    else:
                        outcomes.append((job, result, None))
        except CommitUnknownError as exc:
            if not self._resolve(exc, len(batch)):
                return self._fail(batch, StoreError(f"{exc}: it did not commit; nothing of it was saved"))
        except _Broken as exc:
            return self._fail(batch, StoreError(f"the connection to PostgreSQL was lost ({exc}); nothing was saved"))
        except StoreError as exc:
            return self._fail(batch, exc)
        self._writes += len(batch)
        self._commits += 1
        self._largest = max(self._largest, len(batch))
        for job, result, error in outcomes:
            if error is None:
                job.succeed(result)
            else:
                job.fail(error)
        return True

    def _fail(self, batch: list[_Job], error: StoreError) -> bool:
        _log.error("store commit of %d writes failed: %s", len(batch), error)
        for job in batch:
            job.fail(error)
        return False

    def _resolve(self, exc: CommitUnknownError, writes: int) -> bool:
        """Whether the batch whose commit ``exc`` cut off committed, asked of the server until it says (or until
        the writer stops, when the writes fail with ``exc``: their outcome stays unknown)."""
        self.unknown_commits += 1
        _log.warning("store commit of %d writes: %s; asking the server whether it committed", writes, exc)
        if exc.xid is None:
            raise exc  # cannot be: the batch asked for its id first
        while True:
            committed = self._pg.database.outcome(exc.xid, timeout_s=_ASK_TIMEOUT_S)
            if committed is not None:
                _log.warning(
                    "store commit of %d writes (transaction %s) %s",
                    writes,
                    exc.xid,
                    "did commit" if committed else "did not commit",
                )
                return committed
            if self._closed.wait(_ASK_EVERY_S):
                raise exc  # stopping with the server away: the writes fail, their outcome unknown


class PgReaders(ReaderPool):
    """:class:`ReaderPool` on a :class:`PostgresStore`: every borrower gets the store (its pool does the lending)."""

    def __init__(self, store: PostgresStore) -> None:
        self._pg: StoreInterface = store

    @contextmanager
    def reader(self, timeout: float | None = 30.0) -> Iterator[StoreInterface]:
        """The store, for the block."""
        yield self._pg

    def close(self) -> None:
        """Nothing to close: the host closes the store."""
