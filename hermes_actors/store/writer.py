"""The single writing connection, on a thread of its own, with group commit.

Every write in the daemon is a function of the store (typed as
:class:`~hermes_actors.store.interface.StoreInterface`) submitted here. The writer takes the first queued
function, then everything else already queued (up to ``max_batch``), runs each in its own savepoint inside one
transaction and commits once: writes that arrive while a commit is in flight share the next one, and a lone write
is committed at once, never held back by a timer. A function that raises rolls back only its own savepoint and
its caller gets the exception; a failed commit (a full disk, say) fails every function of the batch with a
:class:`StoreError`, a lone write as a batch. A full disk, a read-only file or a held lock is a :class:`StoreError`
with its fault wherever SQLite reports it.

An ``observer`` (a :class:`CommitObserver`) hears of every transaction the writer ran: how many writes it held and
how long it took, committed or not. The store knows nothing of who listens (the runtime's metrics do).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

import apsw
import msgspec

from hermes_actors.errors import StoreError, StoreFault
from hermes_actors.store.connection import fault_of
from hermes_actors.store.interface import StoreInterface
from hermes_actors.store.sqlite_db import SqliteDb

__all__ = ["CommitObserver", "StoreWriter", "WriterClosedError", "WriterStatistics"]

T = TypeVar("T")
_log = logging.getLogger(__name__)
_STOP = object()


class WriterClosedError(StoreError):
    """The writer has stopped and takes no more writes."""


class WriterStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of the writer's work."""

    writes: int
    commits: int
    largest_batch: int
    queued: int


def _full(exc: apsw.FullError) -> StoreError:
    error = StoreError(
        "the database or its disk is full; nothing of this write was saved (earlier writes are safe). "
        "Free disk space, or prune old sessions with 'hermesctl sessions prune'",
        fault=StoreFault.FULL,
    )
    error.__cause__ = exc
    return error


def _refused(exc: Exception) -> Exception:
    """The error a caller should see: a full disk as the :class:`StoreError` that says so, also when SQLite rolled
    the transaction back itself and the rollback on the way out failed ("no transaction is active"); a read-only
    file or a held lock as a :class:`StoreError` with its fault. Any other error is the write's own (a bug, a
    constraint), passed on as it is."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, apsw.FullError):
            return _full(cause)
        cause = cause.__context__
    fault = fault_of(exc)
    if fault is not None:
        return _write_refused(exc, fault)
    return exc


def _write_refused(exc: BaseException, fault: StoreFault | None) -> StoreError:
    error = StoreError(f"the database refused the write ({exc}); nothing of it was saved", fault=fault)
    error.__cause__ = exc
    return error


class _HalfWritten(Exception):
    """An ``atomic`` write raised after changing rows: the batch's transaction cannot keep the others alone."""


class CommitObserver(Protocol):
    """Hears of each transaction of the writer, on its thread, after the commit (or the failed one): keep it cheap."""

    def __call__(self, writes: int, seconds: float, *, committed: bool) -> None: ...


class _Job:
    """A submitted write whose :class:`Future` resolves after its commit; ``atomic``: see :meth:`StoreWriter.submit`."""

    __slots__ = ("atomic", "future", "then", "work")

    def __init__(
        self, work: Callable[[StoreInterface], Any], then: Callable[[Any], object] | None, *, atomic: bool = False
    ) -> None:
        self.work = work
        self.then = then
        self.atomic = atomic
        self.future: Future[Any] = Future()

    def succeed(self, result: Any) -> None:
        """Run ``then(result)`` (on the writer thread, after the commit), then resolve the future."""
        if self.then is not None:
            try:
                self.then(result)
            except Exception as exc:
                self.future.set_exception(exc)
                return
        self.future.set_result(result)

    def fail(self, error: BaseException) -> None:
        """The write or its commit failed with ``error``."""
        self.future.set_exception(error)


class _Call(_Job):
    """A write whose caller waits for it (:meth:`StoreWriter.call`): a lock released once the outcome is set, in
    place of a :class:`Future` (``future`` is never set: the writer settles a job through :meth:`succeed` and
    :meth:`fail` only). A future costs a condition and its lock on both sides, and every turn waits for its commit.
    """

    __slots__ = ("_done", "_error", "_result")

    def __init__(self, work: Callable[[StoreInterface], Any]) -> None:
        self.work = work
        self.then = None
        self.atomic = False
        self._result: Any = None
        self._error: BaseException | None = None
        self._done = threading.Lock()
        self._done.acquire()

    def succeed(self, result: Any) -> None:
        """The write committed with ``result``."""
        self._result = result
        self._done.release()

    def fail(self, error: BaseException) -> None:
        """The write or its commit failed with ``error``."""
        self._error = error
        self._done.release()

    def wait(self, timeout: float | None) -> Any:
        """The write's result once committed, or its error; :class:`TimeoutError` after ``timeout`` seconds."""
        if not self._done.acquire(timeout=-1 if timeout is None else timeout):
            raise TimeoutError(f"the store writer did not commit this write within {timeout} s")
        if self._error is not None:
            raise self._error
        return self._result


class StoreWriter:
    """Owns a writable store and runs submitted writes on its thread, committing them in groups (the SQLite store's
    commit: :class:`~hermes_actors.store.pg.writer.PgWriter` commits a PostgreSQL one)."""

    def __init__(
        self,
        store: StoreInterface,
        *,
        max_batch: int = 512,
        name: str = "hermes-store-writer",
        observer: CommitObserver | None = None,
    ) -> None:
        self._store = store
        self._observer = observer
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[_Job | object] = queue.SimpleQueue()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._writes = 0
        self._commits = 0
        self._largest = 0
        sql = store.sql
        # Rows changed by the connection's statements so far (SQLite's total_changes), to check an atomic write;
        # without it (another database) an atomic write gets its savepoint like any other.
        self._changes: Callable[[], int] | None = sql.connection.total_changes if isinstance(sql, SqliteDb) else None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(
        self, work: Callable[[StoreInterface], T], *, then: Callable[[T], object] | None = None, atomic: bool = False
    ) -> Future[T]:
        """Queue ``work(store)`` for the next commit; the future resolves after that commit.

        ``then(result)`` runs on the writer thread once the commit is durable and before the future resolves
        (jobs' ``then`` calls run in commit order); if it raises, the future carries its exception instead.

        ``atomic`` says that ``work`` runs a single statement, so when it fails nothing of it is left to undo (SQLite
        undoes a failed statement): it runs without a savepoint of its own, which costs a statement pair and a copy
        of every page it changes. Should it raise after changing a row after all, the writer cannot undo that row
        alone, and fails the whole batch rather than commit half of it.
        """
        job = _Job(work, then, atomic=atomic)
        self._put(job)
        return job.future

    def call(self, work: Callable[[StoreInterface], T], *, timeout: float | None = 30.0) -> T:
        """Run ``work(store)`` in the next commit and return its result (or raise its exception); ``TimeoutError``
        when it has not committed within ``timeout`` seconds (it still runs)."""
        job = _Call(work)
        self._put(job)
        result: T = job.wait(timeout)
        return result

    def _put(self, job: _Job) -> None:
        with self._lock:
            if self._closed.is_set():
                raise WriterClosedError("the store writer has stopped; no more writes are accepted")
            self._queue.put(job)

    def statistics(self) -> WriterStatistics:
        """Return counts of writes and commits so far."""
        return WriterStatistics(
            writes=self._writes, commits=self._commits, largest_batch=self._largest, queued=self._queue.qsize()
        )

    def stop(self, timeout: float | None = 30.0) -> None:
        """Commit what is queued, then stop the thread and close the store's connection."""
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
            self._queue.put(_STOP)
        self._thread.join(timeout)

    def _take_batch(self) -> tuple[list[_Job], bool]:
        first = self._queue.get()
        if first is _STOP:
            return [], True
        batch: list[_Job] = [first]  # type: ignore[list-item]
        while len(batch) < self._max_batch:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                return batch, True
            batch.append(item)  # type: ignore[arg-type]
        return batch, False

    def _run(self) -> None:
        try:
            stopping = False
            while not stopping:
                batch, stopping = self._take_batch()
                if batch:
                    started = time.perf_counter()
                    committed = self._commit(batch)
                    if self._observer is not None:
                        self._observe(len(batch), time.perf_counter() - started, committed)
        finally:
            self._store.close()

    def _observe(self, writes: int, seconds: float, committed: bool) -> None:
        assert self._observer is not None
        try:
            self._observer(writes, seconds, committed=committed)
        except Exception:  # an observer's bug must not stop the writer
            _log.exception("the store writer's commit observer failed")

    def _commit_one(self, job: _Job) -> bool:
        """A lone write needs no savepoint of its own: its transaction is all there is to roll back."""
        db = self._store.sql
        worked = False
        try:
            with self._store.transaction():
                result = job.work(self._store)
                worked = True
        except Exception as exc:
            if db.in_transaction:  # a failed COMMIT can leave the transaction open
                db.execute("ROLLBACK")
            refused = _refused(exc)
            if worked and not isinstance(refused, StoreError):  # the COMMIT failed: as a batch's failed commit
                _log.error("store commit of 1 write failed: %s", exc)
                refused = _write_refused(exc, fault_of(exc))
            job.fail(refused)
            return False
        self._writes += 1
        self._commits += 1
        self._largest = max(self._largest, 1)
        job.succeed(result)
        return True

    def _run_atomic(self, job: _Job, changes: Callable[[], int]) -> tuple[_Job, Any, BaseException | None]:
        """Run an ``atomic`` job of a batch without a savepoint: its outcome; :class:`_HalfWritten` (the batch
        fails) when it raised after changing rows (``changes`` counts them), which only its own savepoint could
        have undone."""
        before = changes()
        try:
            return job, job.work(self._store), None
        except Exception as exc:
            if changes() != before:
                raise _HalfWritten(f"a write submitted as atomic changed rows and then failed: {exc!r}") from exc
            return job, None, _refused(exc)

    def _commit(self, batch: list[_Job]) -> bool:
        """Run ``batch`` in one transaction; return whether it committed."""
        if len(batch) == 1:
            return self._commit_one(batch[0])
        outcomes: list[tuple[_Job, Any, BaseException | None]] = []
        db = self._store.sql
        try:
            with self._store.transaction():
                for job in batch:
                    if job.atomic and self._changes is not None:
                        outcomes.append(self._run_atomic(job, self._changes))
                        continue
                    try:
                        with self._store.transaction():
                            outcomes.append((job, job.work(self._store), None))
                    except Exception as exc:
                        outcomes.append((job, None, _refused(exc)))
        except (apsw.Error, _HalfWritten) as exc:
            _log.error("store commit of %d writes failed: %s", len(batch), exc)
            refused = _refused(exc)
            failure = refused if isinstance(refused, StoreError) else _write_refused(exc, fault_of(exc))
            for job in batch:
                job.fail(failure)
            return False
        finally:
            if db.in_transaction:  # a failed COMMIT can leave the transaction open
                db.execute("ROLLBACK")
        self._writes += len(batch)
        self._commits += 1
        self._largest = max(self._largest, len(batch))
        for job, result, error in outcomes:
            if error is None:
                job.succeed(result)
            else:
                job.fail(error)
        return True
