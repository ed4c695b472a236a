"""Lane workers: the few threads that make one platform's sends, so a send that blocks holds up only its chat.

The outbox actor keeps the lanes (one queue per chat) and hands :class:`LaneWorkers` at most one send per chat and
never more sends at once than it has workers, so a slow send, or a sender sleeping in its rate limiter, occupies
one worker and the other chats go on. Workers are daemon threads started on first need: a send still hanging when
the process exits does not keep it alive; its reply stays queued in the store with its attempt counted, and the
next start sends it again, flagged as a possible duplicate.

:class:`Gauge` is the count the outbox answers ``in_flight`` from without asking its actor: a lock and an int,
raised by whoever queues work for the actor and lowered by the actor when the work is done or set aside.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections.abc import Callable

__all__ = ["Gauge", "LaneWorkers"]

_log = logging.getLogger(__name__)

_CLOSE = object()


class Gauge:
    """A thread-safe count."""

    __slots__ = ("_lock", "_value")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value = 0

    def add(self, delta: int) -> None:
        """Raise (or, with a negative ``delta``, lower) the count."""
        with self._lock:
            self._value += delta

    def value(self) -> int:
        """Return the count now."""
        with self._lock:
            return self._value


class LaneWorkers:
    """Up to ``size`` daemon threads named ``<name>-<n>`` that run the jobs given to :meth:`run`, each at once
    while fewer than ``size`` are running."""

    def __init__(self, name: str, size: int) -> None:
        if size < 1:
            raise ValueError(f"LaneWorkers needs at least one worker, got {size}")
        self._name = name
        self._size = size
        self._jobs: queue.SimpleQueue[Callable[[], None] | object] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self._waiting = 0  # jobs queued that no worker has taken yet
        self._closed = False
        self._numbers = itertools.count(1)

    @property
    def size(self) -> int:
        """How many jobs can run at once."""
        return self._size

    def run(self, job: Callable[[], None]) -> None:
        """Run ``job`` on a worker, starting one when none is free; never blocks. An exception ``job`` lets out is
        logged. Raises ``RuntimeError`` after :meth:`close`."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"the lane workers {self._name!r} are closed")
            self._waiting += 1
            start = self._waiting > self._idle and self._threads < self._size
            if start:
                self._threads += 1
                self._idle += 1  # counted idle from now, so the next job does not start a thread for itself too
        self._jobs.put(job)
        if start:
            name = f"{self._name}-{next(self._numbers)}"
            threading.Thread(target=self._work, name=name, daemon=True).start()

    def close(self) -> None:
        """Let every worker end once its current job returns; jobs not taken yet are dropped."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            threads = self._threads
        for _ in range(threads):
            self._jobs.put(_CLOSE)

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            with self._lock:
                self._idle -= 1
                if job is _CLOSE or self._closed:
                    self._threads -= 1
                    return
                self._waiting -= 1
            try:
                job()  # type: ignore[operator]
            except Exception:
                _log.exception("%s: a job failed", self._name)
            with self._lock:
                self._idle += 1
