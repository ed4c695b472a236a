"""What every adapter's tests and fakes need, written once.

:class:`RunningAdapter` is an adapter started on a real gateway with the store reads its tests make (each
platform's test module subclasses it with what is its own: a poll cursor, how its inbox rows look);
:class:`Arrivals` is a fake platform's queue of what the adapter sent it; :class:`LogRecords` keeps log records
where pytest's ``caplog`` cannot reach (hypothesis examples share no function-scoped fixture).
"""

from __future__ import annotations

import logging
import queue
from dataclasses import dataclass
from typing import Generic, TypeVar

from hermes_actors.runtime.gateway import Gateway
from platforms.base import Adapter

__all__ = ["Arrivals", "LogRecords", "RunningAdapter"]

A = TypeVar("A", bound=Adapter)
T = TypeVar("T")


@dataclass(frozen=True)
class RunningAdapter(Generic[A]):
    """``adapter`` started on ``gateway``."""

    adapter: A
    gateway: Gateway

    def stop(self) -> None:
        """Stop the adapter, then the gateway."""
        self.adapter.stop()
        self.gateway.stop()

    def session_of(self, key: str) -> str | None:
        """The session routing key ``key`` leads to in the store."""
        with self.gateway.read() as store:
            return store.get_route(key)

    def transcript(self, key: str) -> list[tuple[str, str | None]]:
        """(role, content) of every message of the session ``key`` leads to."""
        session = self.session_of(key)
        assert session is not None, f"no session for {key}"
        with self.gateway.read() as store:
            return [(m.role, m.content) for m in store.load_transcript(session)]

    def inbox_rows(self, *columns: str) -> list[tuple[str, ...]]:
        """The given columns of every inbox row, oldest first, as text."""
        with self.gateway.read() as store:
            rows = store._connection.execute(f"SELECT {', '.join(columns)} FROM inbox ORDER BY id").fetchall()
        return [tuple(str(value) for value in row) for row in rows]


class Arrivals(Generic[T]):
    """What a fake platform server accepted, in arrival order, for a test to take one at a time.

    ``what`` names the items and ``where`` the fake in failure messages ("nothing was posted to the fake Slack").
    """

    def __init__(self, what: str, where: str) -> None:
        self._queue: queue.SimpleQueue[T] = queue.SimpleQueue()
        self._what = what
        self._where = where

    def put(self, item: T) -> None:
        """Record an arrival (the fake's request handler calls this)."""
        self._queue.put(item)

    def take(self, timeout: float = 10.0) -> T:
        """The next arrival, waiting up to ``timeout``."""
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"nothing was {self._what} to {self._where} within {timeout} s") from None

    def drain(self) -> list[T]:
        """Every arrival not taken yet."""
        taken: list[T] = []
        while not self._queue.empty():
            taken.append(self._queue.get())
        return taken

    def nothing_more(self, wait: float = 0.2) -> bool:
        """Whether nothing further arrives within ``wait`` seconds (an unexpected arrival fails the test)."""
        try:
            extra = self._queue.get(timeout=wait)
        except queue.Empty:
            return True
        raise AssertionError(f"unexpected arrival {extra}")


class LogRecords(logging.Handler):
    """Keeps every record (hypothesis examples cannot share pytest's function-scoped caplog)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
