"""A small pool of read-only connections shared by actor threads.

WAL lets readers read while the writer commits. A reader is lent to one thread at a time, so each connection
still has one user at any moment.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hermes_actors.store.interface import StoreInterface
from hermes_actors.store.store import Store

__all__ = ["ReaderPool"]


class ReaderPool:
    """``size`` read-only :class:`Store` objects on the same database file."""

    def __init__(self, path: str | Path, *, size: int = 4) -> None:
        self._idle: queue.SimpleQueue[Store] = queue.SimpleQueue()
        self._all = [Store.open(path, readonly=True) for _ in range(size)]
        for store in self._all:
            self._idle.put(store)

    @contextmanager
    def reader(self, timeout: float | None = 30.0) -> Iterator[StoreInterface]:
        """Borrow a reader for the block; waits up to ``timeout`` when all are lent."""
        store = self._idle.get(timeout=timeout)
        try:
            yield store
        finally:
            self._idle.put(store)

    def close(self) -> None:
        """Close every connection (call once no thread reads any more)."""
        for store in self._all:
            store.close()
