"""The agent pool: the threads that run agent calls (a model's answer, a summary, a title), at most N at a time.

An :class:`~concurrent.futures.Executor` like ``ThreadPoolExecutor``, with one difference that shutdown needs: its
threads are daemons, and ``shutdown(cancel_futures=True)`` cancels every call not finished, the running ones
included. A call waiting on a model that does not answer then holds neither the turn waiting for it nor the
process's exit (``ThreadPoolExecutor`` joins its threads at exit, so one such call kept ``hermesd`` alive until the
model answered). The cancelled call's thread runs on until the call returns; its result is dropped.

A cancelled call's future is how the turn waiting for it learns that the runtime is stopping
(:class:`~hermes_actors.runtime.agent_calls.AgentCalls` raises :class:`~hermes_actors.errors.ShutdownError`): the
turn commits nothing and its messages stay pending for the next start. A ``/stop`` is not this: it goes through the
turn's :class:`~hermes_actors.runtime.services.CancelToken` and stores the turn as stopped.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, InvalidStateError
from typing import Any, ParamSpec, TypeVar

__all__ = ["AgentPool"]

_log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

_Call = tuple[Future[Any], Callable[[], Any]]


class AgentPool(Executor):
    """Runs submitted calls on up to ``workers`` daemon threads (started as calls need them), in submission order."""

    __slots__ = ("_calls", "_closed", "_idle", "_lock", "_name", "_threads", "_work", "_workers")

    def __init__(self, workers: int, *, name: str = "hermes-agent") -> None:
        if workers < 1:
            raise ValueError(f"an agent pool needs at least one thread, not {workers}")
        self._workers = workers
        self._name = name
        self._work: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)  # released by a thread that waits for work
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._calls: set[Future[Any]] = set()  # submitted and not finished
        self._closed = False

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        """Queue ``fn(*args, **kwargs)``; return its future. Raise ``RuntimeError`` once the pool has shut down."""
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the agent pool has shut down: the runtime is stopping")
            self._calls.add(future)
            self._work.put((future, lambda: fn(*args, **kwargs)))
            if not self._idle.acquire(blocking=False) and len(self._threads) < self._workers:
                self._start_thread()
        future.add_done_callback(self._forget)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Take no more calls. ``cancel_futures``: cancel every call not finished, running ones too (their threads
        are left to end by themselves). ``wait``: wait for the threads to end (after the calls not cancelled)."""
        with self._lock:
            self._closed = True
            calls = list(self._calls) if cancel_futures else []
            threads = list(self._threads)
            for _ in threads:
                self._work.put(None)
        for future in calls:
            future.cancel()
        if wait:
            for thread in threads:
                thread.join()

    def abandon(self) -> None:
        """Shut down at once, cancelling every call not finished (the runtime is stopping; see the module doc)."""
        if calls := self.running():
            _log.info("stopping: %d agent calls given up; their turns run again at the next start", calls)
        self.shutdown(wait=False, cancel_futures=True)

    def running(self) -> int:
        """How many submitted calls have not finished (running or queued)."""
        with self._lock:
            return len(self._calls)

    def _forget(self, future: Future[Any]) -> None:
        with self._lock:
            self._calls.discard(future)

    def _start_thread(self) -> None:
        thread = threading.Thread(
            target=self._serve, name=f"{self._name}_{len(self._threads)}", daemon=True
        )  # a daemon: a call that never returns must not hold the process's exit
        self._threads.append(thread)
        thread.start()

    def _serve(self) -> None:
        while (call := self._work.get()) is not None:
            future, run = call
            if not future.cancelled():
                _settle(future, run)
            del call, future, run  # drop the result before waiting for the next call
            self._idle.release()


def _settle(future: Future[Any], run: Callable[[], Any]) -> None:
    """Run ``run`` and give ``future`` its result or exception, unless it was cancelled meanwhile (then dropped).

    The future stays pending while the call runs (it is never marked running), so :meth:`AgentPool.shutdown` can
    still cancel it."""
    try:
        result = run()
    except BaseException as exc:
        with contextlib.suppress(InvalidStateError):
            future.set_exception(exc)
    else:
        with contextlib.suppress(InvalidStateError):
            future.set_result(result)
