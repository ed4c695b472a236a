"""What every adapter's tests and fakes need, written once.

:class:`StartGateway` is the ``start_gateway`` fixture of ``conftest.py``: an adapter started on a real gateway
through the inbox port, both stopped at the end of the test. :class:`RunningAdapter` is such an adapter with the
store reads its tests make (each platform's test module subclasses it with what is its own: a poll cursor, how its
inbox rows look); :func:`wait_on` waits for a condition a fake's condition variable announces
(``hermes_actors.testing`` has ``poll_until`` for one that nothing signals, and ``GatedAgent``, which holds turns
until a test lets them go);
:func:`inbound_messages` reads the inbox rows back as the adapter accepted them;
:class:`Arrivals` is a fake platform's queue of what the adapter sent it; :class:`LogRecords` keeps log records
where pytest's ``caplog`` cannot reach (hypothesis examples share no function-scoped fixture).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from hermes_actors.messages import InboundMessage, decode_inbound
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.testing import poll_until
from platforms.base import Adapter, ConnectionReporter, Inbox, ReplySender

__all__ = [
    "Arrivals",
    "LogRecords",
    "RunningAdapter",
    "StartGateway",
    "inbound_messages",
    "wait_on",
    "wait_problem",
]

A = TypeVar("A", bound=Adapter)
T = TypeVar("T")


class StartGateway(Protocol):
    """Open a gateway on the test's ``state.db`` with ``adapter``'s senders (and ``senders``) and start ``adapter``
    on its inbox (wrapped by ``inbox_for``); at the end of the test the adapter stops, then the gateway.

    ``options`` go to :class:`Gateway` (``clock``, ``tick_interval_s``, ``media``, ``agent``, ...); ``config``
    defaults to quick outbox retries.
    """

    def __call__(
        self,
        adapter: Adapter,
        *,
        senders: Sequence[ReplySender] = (),
        inbox_for: Callable[[Inbox], Inbox] | None = None,
        **options: Any,
    ) -> Gateway: ...


def wait_on(changed: threading.Condition, check: Callable[[], T], timeout: float, failed: Callable[[], str]) -> T:
    """Wait until ``check()`` is truthy, re-checking it (without holding ``changed``) whenever ``changed`` is
    notified; return it. After ``timeout`` seconds, :class:`AssertionError` with the message ``failed()``."""
    deadline = time.monotonic() + timeout
    with changed:
        while True:
            changed.release()
            try:
                value = check()
            finally:
                changed.acquire()
            if value:
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(failed())
            changed.wait(min(left, 0.05))


def wait_problem(adapter: ConnectionReporter, containing: str, timeout: float = 10.0) -> str:
    """Wait until ``adapter.connection_problem()`` holds ``containing``; return the whole problem."""

    def found() -> str | None:
        problem = adapter.connection_problem()
        return problem if problem is not None and containing in problem else None

    return poll_until(found, timeout, what=lambda: f"no problem with {containing!r}: {adapter.connection_problem()!r}")


def inbound_messages(gateway: Gateway, platform: str) -> list[InboundMessage]:
    """The messages of ``platform``'s inbox rows, oldest first, as the adapter committed them (attachments and
    all), read through the store interface."""
    with gateway.read() as store:
        return [decode_inbound(payload) for payload in store.inbox.payloads_since(platform, 0.0)]


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
            rows = store.sql.execute(f"SELECT {', '.join(columns)} FROM inbox ORDER BY id")
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
