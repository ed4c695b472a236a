"""Long-lived connections to a platform: one task per account on one event loop thread, reconnecting with backoff.

The adapters that hold a connection of their own to their platform (Discord's, QQ's and Mattermost's websockets,
DingTalk's stream, Signal's event streams, Telegram's and Matrix's long polls) share one shape. Each account (a
bot, a robot, a number) has a :class:`Connection` whose :meth:`Connection.run` makes an attempt (a websocket
session, an event stream, a run of long polls), holds it until it ends and tries again after a backoff, until the
adapter stops (its task is cancelled) or the platform refuses it for good (:class:`Fatal`). :class:`Connections`
runs them as tasks on one event loop in one thread, sharing one ``aiohttp.ClientSession``, and keeps where each
stands in its :class:`~platforms.support.links.Links` for readiness and status.

What differs stays in each subclass: what an attempt does (:meth:`Connection.attempt`), which errors it expects
and how they read (:meth:`Connection.failure`, :meth:`Connection.retrying`, so log lines keep each platform's
words), its backoff, and how long a connection must have been up for its end not to count as a failure.

:meth:`Connections.start` returns once every task runs and raises what failed before that; an error after it is
logged, since nobody waits for it then. :meth:`Connections.stop` cancels the tasks from the caller's thread and waits
a bounded time for the loop to end; the loop's default executor (``asyncio.to_thread``,
:func:`~hermes_actors.ports.accept_many_async`) is shut down before the loop closes, so a commit under way ends first.
"""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import logging
import random
import threading
import time
from collections.abc import Iterable, Sequence
from typing import ClassVar

import aiohttp

from hermes_actors.messages import InboundMessage
from hermes_actors.ports import AcceptResult, ChatInbox, PollCursor, accept_many_async
from platforms.support.http_client import open_session
from platforms.support.links import Links

__all__ = ["Connection", "Connections", "Ended", "Fatal", "NotStored", "doubling"]

_START_TIMEOUT_S = 30.0


def doubling(failures: int, low: float, high: float, rng: random.Random | None = None) -> float:
    """``low`` seconds after the first failure, doubling with each one after it up to ``high``; jittered to half to
    all of it with ``rng``."""
    wait = min(high, low * 2.0 ** min(max(failures - 1, 0), 30))
    return wait if rng is None else wait * (0.5 + rng.random() / 2)


class Ended(Exception):
    """How an attempt ended (returned, or raised from deep inside it): why, the wait before the next attempt
    (``None``: the connection's backoff decides) and the error behind it, if any."""

    def __init__(self, reason: str, wait_s: float | None = None, *, error: Exception | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.wait_s = wait_s
        self.error = error


class Fatal(Exception):
    """Reconnecting cannot help (a refused token, intents the platform will not give): the connection stops, and its
    state says why, naming the fix."""


class NotStored(Exception):
    """A message could not be committed: the connection is made again later (so the platform delivers the message
    again), backed off on its own count of failed commits so that a full disk does not spin reconnects."""


class Connection(abc.ABC):
    """One account's long-lived connection, named ``name`` in ``links``; ``who`` begins its log lines
    (``"discord bot 'main'"``).

    ``stable_s`` is how long an attempt must have been up (:meth:`connected`) to restart the count of failures, and
    ``stable_end_counts`` whether the end of such an attempt counts as the first failure (a poll failing after
    answered ones: the next attempt waits ``backoff(1)``) or not (a websocket that ran a while and dropped: the next
    waits ``backoff(0)``). ``expected`` are the errors an attempt may end with that need no stack in the log.
    """

    stable_s: ClassVar[float] = 0.0
    stable_end_counts: ClassVar[bool] = True
    expected: ClassVar[tuple[type[Exception], ...]] = (aiohttp.ClientError, OSError, TimeoutError)

    def __init__(self, name: str, inbox: ChatInbox, *, who: str, links: Links, log: logging.Logger) -> None:
        self.name = name
        self.inbox = inbox
        self.who = who
        self.links = links
        self.log = log
        self.failures = 0  # attempts failed in a row
        self._up = False
        self._store_failures = 0

    @property
    def status(self) -> str:
        """``starting``, ``connected``, ``reconnecting (<why>)`` or ``stopped: <why>``."""
        return self.links.state(self.name)

    def connected(self) -> None:
        """The attempt is up (a handshake finished, a poll was answered)."""
        self._up = True
        self.links.connected(self.name)

    @abc.abstractmethod
    async def attempt(self, http: aiohttp.ClientSession) -> Ended:
        """Make one connection and hold it until it ends; return (or raise) how it ended."""

    @abc.abstractmethod
    def backoff(self, failures: int) -> float:
        """Seconds to wait before the next attempt after ``failures`` failed ones in a row."""

    def failure(self, exc: Exception) -> Ended:
        """How an attempt that raised ``exc`` ended (called while it is handled): an :attr:`expected` error's
        message, or, logged with its stack, ``an unexpected error``."""
        if isinstance(exc, self.expected):
            return Ended(f"the connection failed ({str(exc)[:300] or type(exc).__name__})", error=exc)
        self.log.exception("%s: the connection failed unexpectedly", self.who)
        return Ended("an unexpected error", error=exc)

    def retrying(self, ended: Ended, wait: float) -> None:
        """Log that the connection ended as ``ended`` and is tried again in ``wait`` seconds."""
        self.log.info("%s: %s; reconnecting in %.1f s", self.who, ended.reason, wait)

    async def commit(
        self, batch: Sequence[InboundMessage], *, cursor: PollCursor | None, what: str
    ) -> list[AcceptResult]:
        """Commit ``batch`` with ``cursor`` off the loop (:func:`~hermes_actors.ports.accept_many_async`); when it
        fails, log it and raise :class:`NotStored` naming ``what`` (``"message 123"``)."""
        try:
            results = await accept_many_async(self.inbox, batch, cursor=cursor)
        except Exception as exc:
            self.log.exception("%s: could not store %s", self.who, what)
            raise NotStored(f"{what} could not be stored ({exc})") from exc
        self._store_failures = 0
        return results

    async def run(self, http: aiohttp.ClientSession) -> None:
        """Make attempts until cancelled or refused for good."""
        while True:
            self._up = False
            began = time.monotonic()
            try:
                ended = await self.attempt(http)
            except Fatal as exc:
                self.links.stopped(self.name, str(exc))
                self.log.error("%s: %s; not reconnecting", self.who, exc)
                return
            except Ended as exc:
                ended = exc
            except NotStored as exc:
                self._store_failures += 1
                ended = Ended(str(exc), error=exc)
            except Exception as exc:
                ended = self.failure(exc)
            stable = self._up and time.monotonic() - began >= self.stable_s and not self._store_failures
            self.failures = int(self.stable_end_counts) if stable else self.failures + 1
            wait = ended.wait_s if ended.wait_s is not None else self.backoff(max(self.failures, self._store_failures))
            self.links.failed(self.name, ended.reason)
            self.retrying(ended, wait)
            await asyncio.sleep(wait)


class Connections:
    """The :class:`Connection` objects of one adapter, run on a new event loop in the thread ``thread``; ``links``
    keeps where each of ``names`` stands (``kind`` names them in a problem: ``"bot"``, ``"account"``).

    ``log`` and ``label`` (such as ``"telegram: the poll"``) word the two log lines this class writes: ``"<label>
    loop ended with an error"`` and ``"<label> thread did not stop within <timeout> s"``.
    """

    def __init__(self, kind: str, names: Iterable[str], *, thread: str, label: str, log: logging.Logger) -> None:
        self.links = Links(kind, names)
        self._name = thread
        self._label = label
        self._log = log
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tasks: list[asyncio.Task[None]] = []

    def problem(self) -> str | None:
        """Every connection that is down, named with its last error, or ``None`` when none is."""
        return self.links.problem()

    def states(self) -> dict[str, str]:
        """Where each connection stands (:meth:`~platforms.support.links.Links.state`)."""
        return self.links.states()

    def start(self, connections: Sequence[Connection]) -> None:
        """Start the thread and return once every connection's task runs; an error raised before then is raised
        here."""
        started: concurrent.futures.Future[None] = concurrent.futures.Future()
        loop = asyncio.new_event_loop()
        self._loop = loop

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._run(connections, started))
            except BaseException as exc:
                if not started.done():  # failed before the tasks began: start() raises it
                    started.set_exception(exc)
                else:
                    self._log.exception("%s loop ended with an error", self._label)
            finally:
                loop.run_until_complete(loop.shutdown_default_executor())
                loop.close()

        self._thread = threading.Thread(target=run, name=self._name, daemon=True)
        self._thread.start()
        started.result(timeout=_START_TIMEOUT_S)

    async def _run(self, connections: Sequence[Connection], started: concurrent.futures.Future[None]) -> None:
        async with open_session() as http:
            self._tasks = [
                asyncio.create_task(connection.run(http), name=f"{self._name}-{connection.name}")
                for connection in connections
            ]
            started.set_result(None)
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel the tasks and wait up to ``timeout`` for the thread; a no-op when it is not running."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return

        def cancel() -> None:
            for task in self._tasks:
                task.cancel()

        try:
            loop.call_soon_threadsafe(cancel)
        except RuntimeError:  # the loop closed in between: the tasks have ended already
            return
        thread.join(timeout)
        if thread.is_alive():
            self._log.warning("%s thread did not stop within %.1f s", self._label, timeout)
