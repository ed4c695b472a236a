"""The runtime's writer and readers over a :class:`PostgresStore`, for a shard host.

The runtime is written against the SQLite store's :class:`~hermes_actors.store.writer.StoreWriter` and
:class:`~hermes_actors.store.readers.ReaderPool`; these are the same two on PostgreSQL. :class:`PgWriter` keeps
the writer's contract (one thread, group commit, each write in its own savepoint, ``then`` after the commit) on one
pooled connection; :class:`PgReaders` lends the store itself, whose pool gives each reading thread a connection of
its own. The runtime calls only methods of the store interface, which :class:`PostgresStore` implements: the casts
to ``Store`` below are where that duck typing is declared.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from hermes_actors.errors import StoreError
from hermes_actors.store.readers import ReaderPool
from hermes_actors.store.writer import CommitObserver, StoreWriter, _Job

if TYPE_CHECKING:
    from hermes_actors.store.pg.store import PostgresStore
    from hermes_actors.store.store import Store

__all__ = ["PgReaders", "PgWriter"]

_log = logging.getLogger(__name__)


class PgWriter(StoreWriter):
    """:class:`StoreWriter` on a :class:`PostgresStore` (which it does not close: the host does)."""

    def __init__(self, store: PostgresStore, *, observer: CommitObserver | None = None) -> None:
        self._pg = store
        super().__init__(cast("Store", store), name="hermes-pg-writer", observer=observer)

    def _run(self) -> None:
        stopping = False
        while not stopping:
            batch, stopping = self._take_batch()
            if batch:
                started = time.perf_counter()
                committed = self._commit(batch)
                if self._observer is not None:
                    self._observe(len(batch), time.perf_counter() - started, committed)

    def _commit_one(self, job: _Job) -> bool:
        return self._commit([job])

    def _commit(self, batch: list[_Job]) -> bool:
        """Run ``batch`` in one transaction, each write in a savepoint; return whether it committed."""
        outcomes: list[tuple[_Job, Any, BaseException | None]] = []
        try:
            with self._pg.transaction():
                for job in batch:
                    try:
                        with self._pg.transaction():
                            outcomes.append((job, job.work(self._store), None))
                    except Exception as exc:
                        outcomes.append((job, None, exc))
        except StoreError as exc:
            _log.error("store commit of %d writes failed: %s", len(batch), exc)
            for job in batch:
                job.future.set_exception(exc)
            return False
        self._writes += len(batch)
        self._commits += 1
        self._largest = max(self._largest, len(batch))
        for job, result, error in outcomes:
            if error is None:
                job.succeed(result)
            else:
                job.future.set_exception(error)
        return True


class PgReaders(ReaderPool):
    """:class:`ReaderPool` on a :class:`PostgresStore`: every borrower gets the store (its pool does the lending)."""

    def __init__(self, store: PostgresStore) -> None:
        self._pg = cast("Store", store)

    @contextmanager
    def reader(self, timeout: float | None = 30.0) -> Iterator[Store]:
        """The store, for the block."""
        yield self._pg

    def close(self) -> None:
        """Nothing to close: the host closes the store."""
