"""The timer service: one thread and a heap of deadlines, never a ``threading.Timer`` per session.

Durable deadlines (idle/daily resets) are rows of the ``timers`` table, written through the store writer; at start
the reset scheduler arms them again from each live session's last activity (``ResetScheduler.rebuild``).
Recurring in-memory ticks (passivation, queue pruning) are not stored. A session's deadline moves with every turn,
so row changes are coalesced: each name keeps only its latest change, and one writer job stores all the changes
made since the previous one (a job per turn cost 18% of the aggregate throughput, bench/README.md). The clock is
injected: tests move a fake clock and call :meth:`TimerService.poke` to make the thread look again.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from hermes_actors.store import StoreInterface
from hermes_actors.store.writer import StoreWriter, WriterClosedError

__all__ = ["TimerService"]

_log = logging.getLogger(__name__)

Handler = Callable[[str, bytes | None], None]


def _log_failed_flush(done: Future[int]) -> None:
    error = done.exception()
    if error is not None:
        _log.error("reset deadlines were not stored (%s); they are rebuilt from the sessions at the next start", error)


class TimerService:
    """Runs callbacks when their deadlines pass; see the module docstring."""

    def __init__(
        self,
        *,
        writer: StoreWriter | None = None,
        clock: Callable[[], float] = time.time,
        max_wait_s: float = 1.0,
    ) -> None:
        self._writer = writer
        self._clock = clock
        self._max_wait = max_wait_s
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, str]] = []
        self._due: dict[str, tuple[float, int]] = {}  # name -> live heap entry (others are stale)
        self._payloads: dict[str, bytes | None] = {}
        self._recurring: dict[str, tuple[float, Callable[[], None]]] = {}
        self._once: dict[str, Callable[[], None]] = {}
        self._handlers: list[tuple[str, Handler]] = []
        self._seq = itertools.count()
        self._stopped = False
        self._fired: dict[str, int] = {}  # name -> how many times it has fired and been handled
        # Row changes not handed to the writer yet: name -> (due_at, payload), or None to delete the row.
        self._unwritten: dict[str, tuple[float, bytes | None] | None] = {}
        self._flush_queued = False
        self._unwritten_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="hermes-timers", daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread; pending deadlines stay in the store."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def on(self, prefix: str, handler: Handler) -> None:
        """Call ``handler(name, payload)`` for durable deadlines whose name starts with ``prefix``."""
        self._handlers.append((prefix, handler))

    def every(self, name: str, interval_s: float, callback: Callable[[], None]) -> None:
        """Call ``callback`` every ``interval_s`` seconds (in memory only)."""
        with self._cond:
            self._recurring[name] = (interval_s, callback)
            self._push(name, self._clock() + interval_s)

    def once(self, name: str, due_at: float, callback: Callable[[], None]) -> None:
        """Call ``callback`` once at ``due_at`` (in memory only); arming ``name`` again moves it."""
        with self._cond:
            self._once[name] = callback
            self._push(name, due_at)

    def schedule(self, name: str, due_at: float, payload: bytes | None = None) -> None:
        """Create or move the durable deadline ``name``."""
        self._persist(name, (due_at, payload))
        self.load(name, due_at, payload)

    def load(self, name: str, due_at: float, payload: bytes | None = None) -> None:
        """Arm a deadline already stored (at start) without writing it again."""
        with self._cond:
            self._payloads[name] = payload
            self._push(name, due_at)

    def cancel(self, name: str) -> None:
        """Remove a deadline."""
        with self._cond:
            self._due.pop(name, None)
            self._payloads.pop(name, None)
            self._recurring.pop(name, None)
            in_memory = self._once.pop(name, None) is not None
        if not in_memory:
            self._persist(name, None)

    def armed(self, name: str) -> bool:
        """Return whether ``name`` has a deadline."""
        with self._cond:
            return name in self._due

    def pending(self) -> dict[str, float]:
        """Return the armed deadlines by name."""
        with self._cond:
            return {name: due for name, (due, _) in self._due.items()}

    def fire_count(self, name: str) -> int:
        """How many times ``name`` has fired and its handler returned."""
        with self._cond:
            return self._fired.get(name, 0)

    def wait_fired(self, name: str, count: int, timeout: float) -> bool:
        """Wait until ``name`` has fired ``count`` times in all (see :meth:`fire_count`); return whether it did."""
        with self._cond:
            return self._cond.wait_for(lambda: self._fired.get(name, 0) >= count, timeout)

    def poke(self) -> None:
        """Look at the clock again now (after a fake clock moved)."""
        with self._cond:
            self._cond.notify_all()

    def _push(self, name: str, due_at: float) -> None:
        seq = next(self._seq)
        self._due[name] = (due_at, seq)
        # Wake the thread only for a new earliest deadline: a later one cannot shorten its wait. (The head may be a
        # stale entry; the thread then wakes at that time, drops it and waits again, so nothing is late.)
        earliest = not self._heap or due_at < self._heap[0][0]
        heapq.heappush(self._heap, (due_at, seq, name))
        if earliest:
            self._cond.notify_all()

    def _persist(self, name: str, change: tuple[float, bytes | None] | None) -> None:
        """Queue a row change; one writer job at a time carries every change queued until it runs."""
        if self._writer is None:
            return
        with self._unwritten_lock:
            self._unwritten[name] = change
            if self._flush_queued:
                return
            self._flush_queued = True
        try:
            self._writer.submit(self._flush).add_done_callback(_log_failed_flush)
        except WriterClosedError:  # stopping: the rows are rebuilt from the sessions at the next start
            with self._unwritten_lock:
                self._flush_queued = False

    def _flush(self, store: StoreInterface) -> int:
        with self._unwritten_lock:
            changes, self._unwritten = self._unwritten, {}
            self._flush_queued = False
        store.timers.apply(changes)
        return len(changes)

    def _next_due(self) -> tuple[str, float] | None:
        while self._heap:
            due, seq, name = self._heap[0]
            if self._due.get(name) == (due, seq):
                return name, due
            heapq.heappop(self._heap)  # cancelled or moved
        return None

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopped:
                    return
                head = self._next_due()
                now = self._clock()
                if head is None or head[1] > now:
                    wait = self._max_wait if head is None else min(self._max_wait, head[1] - now)
                    self._cond.wait(wait)
                    continue
                name, _ = head
                heapq.heappop(self._heap)
                del self._due[name]
                payload = self._payloads.pop(name, None)
                recurring = self._recurring.get(name)
                callback = self._once.pop(name, None)
                if recurring is not None:
                    self._push(name, now + recurring[0])
                    callback = recurring[1]
            self._fire(name, payload, callback)

    def _fire(self, name: str, payload: bytes | None, callback: Callable[[], None] | None) -> None:
        try:
            if callback is not None:
                callback()
                return
            for prefix, handler in self._handlers:
                if name.startswith(prefix):
                    handler(name, payload)
                    break
            else:
                _log.warning("timer %s fired with no handler; dropped", name)
            if name not in self._due:
                self._persist(name, None)
        except Exception:
            _log.exception("timer %s failed", name)
        finally:
            with self._cond:
                self._fired[name] = self._fired.get(name, 0) + 1
                self._cond.notify_all()
