"""The long-lived connection base (``platforms.support.connections``) and the awaitable commit of the chat port.

A scripted :class:`Connection` runs on a real :class:`Connections` thread: each attempt follows the next step of its
script, and the test reads what the base made of it (the failure counts it asked the backoff for, the states it
reported). Every wait is on an event; the backoff answers 0 s so the attempts follow each other at once.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import aiohttp
import pytest

from hermes_actors.messages import InboundMessage
from hermes_actors.ports import AcceptResult, PollCursor, accept_many_async
from hermes_actors.testing import poll_until
from platforms.support.connections import Connection, Connections, Ended, Fatal, NotStored, doubling

_log = logging.getLogger(__name__)

Step = Callable[["Scripted"], Ended]


def up_then(ended: Ended) -> Step:
    def step(connection: Scripted) -> Ended:
        connection.connected()
        return ended

    return step


def fails(exc: Exception, *, after_up: bool = False) -> Step:
    def step(connection: Scripted) -> Ended:
        if after_up:
            connection.connected()
        raise exc

    return step


class Scripted(Connection):
    """A connection whose attempts follow ``script``; once it runs out, it announces :attr:`done` and waits."""

    def __init__(self, script: Sequence[Step], connections: Connections) -> None:
        super().__init__("main", NeverInbox(), who="test bot 'main'", links=connections.links, log=_log)
        self._script = list(script)
        self._attempts = 0
        self.asked: list[int] = []  # the failure counts the backoff was asked for
        self.states: list[str] = []  # the state after each attempt
        self.done = threading.Event()

    async def attempt(self, http: aiohttp.ClientSession) -> Ended:
        self._attempts += 1
        if self._attempts > 1:
            self.states.append(self.status)
        if not self._script:
            self.done.set()
            await asyncio.Event().wait()  # until cancelled
        return self._script.pop(0)(self)

    def backoff(self, failures: int) -> float:
        self.asked.append(failures)
        return 0.0


class Forgiving(Scripted):
    """A connection whose end, once it was up, is not a failure (a websocket that ran and dropped)."""

    stable_end_counts = False


class NeverInbox:
    """An inbox no scripted connection commits to."""

    media: Any = None
    ask_timeout_s = 1.0

    def submit(self, inbound: InboundMessage) -> Future[AcceptResult]:
        raise AssertionError("not used")

    def accept(self, inbound: InboundMessage) -> AcceptResult:
        raise AssertionError("not used")

    def accept_many(self, batch: Sequence[InboundMessage], *, cursor: PollCursor | None = None) -> list[AcceptResult]:
        raise AssertionError("not used")

    def submit_many(
        self, batch: Sequence[InboundMessage], *, cursor: PollCursor | None = None
    ) -> Future[list[AcceptResult]]:
        raise AssertionError("not used")

    def poll_cursor(self, platform: str, account_id: str = "") -> str | None:
        return None

    def recent_inbound(self, platform: str, since: float) -> list[InboundMessage]:
        return []


def run_script(script: Sequence[Step], *, counts: bool) -> tuple[Scripted, Connections]:
    connections = Connections("bot", ["main"], thread="test-connections", label="test: the connection", log=_log)
    connection = (Scripted if counts else Forgiving)(script, connections)
    connections.start([connection])
    try:
        assert connection.done.wait(10), "the script did not run to its end"
    finally:
        connections.stop(5)
    return connection, connections


def test_a_poll_failing_after_answered_ones_counts_as_the_first_failure() -> None:
    refused = OSError("refused")
    connection, _ = run_script(
        [fails(refused), fails(refused), fails(refused, after_up=True), fails(refused)], counts=True
    )
    assert connection.asked == [1, 2, 1, 2]


def test_a_connection_that_was_up_ends_without_counting_and_the_next_attempt_waits_backoff_zero() -> None:
    connection, connections = run_script(
        [fails(OSError("refused")), up_then(Ended("the server closed it")), fails(TimeoutError())], counts=False
    )
    assert connection.asked == [1, 0, 1]
    assert connection.states == [
        "reconnecting (the connection failed (refused))",
        "reconnecting (the server closed it)",
        "reconnecting (the connection failed (TimeoutError))",
    ]
    assert connections.problem() == "bot 'main': reconnecting (the connection failed (TimeoutError))"


def test_an_end_that_names_its_wait_is_not_backed_off_and_an_unexpected_error_is_logged_with_its_stack(
    caplog: pytest.LogCaptureFixture,
) -> None:
    connection, _ = run_script([up_then(Ended("asked to reconnect", 0.0)), fails(KeyError("odd"))], counts=True)
    assert connection.asked == [2]  # the second end: the first named its wait
    assert connection.states[-1] == "reconnecting (an unexpected error)"
    (record,) = [r for r in caplog.records if "failed unexpectedly" in r.getMessage()]
    assert record.getMessage() == "test bot 'main': the connection failed unexpectedly"
    assert record.exc_info is not None


def test_failed_commits_back_off_on_their_own_count_even_on_a_connection_that_was_up() -> None:
    not_stored = NotStored("message 1 could not be stored (disk full)")
    connection, _ = run_script(
        [fails(not_stored, after_up=True), fails(not_stored, after_up=True), up_then(Ended("closed"))],
        counts=False,
    )
    assert connection.asked == [1, 2, 3]  # failed commits are not forgiven by the connection being up
    assert connection.states[0] == "reconnecting (message 1 could not be stored (disk full))"


def test_a_fatal_end_stops_the_connection_with_the_fix_in_its_state(caplog: pytest.LogCaptureFixture) -> None:
    connections = Connections("bot", ["main"], thread="test-connections", label="test: the connection", log=_log)
    stopped = threading.Event()

    class Refused(Scripted):
        async def attempt(self, http: aiohttp.ClientSession) -> Ended:
            stopped.set()
            raise Fatal("the token was refused; create a new one")

    connections.start([Refused([], connections)])
    try:
        assert stopped.wait(10)
        poll_until(lambda: connections.states()["main"].startswith("stopped"), what="the stopped state")
    finally:
        connections.stop(5)
    assert connections.problem() == "bot 'main': stopped: the token was refused; create a new one"
    assert "test bot 'main': the token was refused; create a new one; not reconnecting" in caplog.text


def test_a_cancelled_commit_still_finishes_before_its_caller_stops() -> None:
    entered, release = threading.Event(), threading.Event()
    committed: list[list[InboundMessage]] = []

    class SlowInbox(NeverInbox):
        def accept_many(
            self, batch: Sequence[InboundMessage], *, cursor: PollCursor | None = None
        ) -> list[AcceptResult]:
            entered.set()
            assert release.wait(10)
            committed.append(list(batch))
            return []

    async def scenario() -> tuple[bool, bool]:
        task = asyncio.create_task(accept_many_async(SlowInbox(), [], cursor=None))
        await asyncio.to_thread(entered.wait, 10)
        task.cancel()
        for _ in range(5):  # loop turns enough for a cancellation to end a task that did not shield its commit
            await asyncio.sleep(0)
        waiting = not task.done()  # cancelled, yet still waiting for the commit under way
        release.set()
        try:
            await task
        except asyncio.CancelledError:
            return waiting, True
        return waiting, False

    waiting, cancelled = asyncio.run(scenario())
    assert (waiting, cancelled, committed) == (True, True, [[]])


def test_the_doubling_backoff_starts_low_doubles_and_stops_at_high() -> None:
    assert [doubling(n, 1.0, 5.0) for n in (0, 1, 2, 3, 4, 2000)] == [1.0, 1.0, 2.0, 4.0, 5.0, 5.0]
