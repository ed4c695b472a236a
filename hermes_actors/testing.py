"""Fakes for tests of hermes-actors and of code built on it (adapter authors included), and the agent contract:
:func:`check_agent` and the pytest mixin :class:`AgentContract` check an agent against what the runtime expects
(:mod:`hermes_actors.agents.contract`), :class:`EventRecorder` records what a turn streams."""

from __future__ import annotations

import itertools
import queue
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from hermes_actors.agents.contract import AgentContract, check_agent
from hermes_actors.agents.contract_inputs import EventRecorder
from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.turn import AgentMessage, AgentReply, TurnInput
from hermes_actors.messages import InboundMessage, OutboundMessage
from hermes_actors.ports import SendError
from hermes_actors.routing import SessionSource
from hermes_actors.store.records import Role

if TYPE_CHECKING:
    from hermes_actors.agents.base import Agent
    from hermes_actors.runtime.gateway import Gateway

__all__ = [
    "AgentContract",
    "EventRecorder",
    "FakeClock",
    "FakePlatform",
    "FakeThreadedPlatform",
    "GatedAgent",
    "SeeingAgent",
    "check_agent",
    "open_fake_gateway",
    "poll_until",
]

T = TypeVar("T")


def poll_until(
    probe: Callable[[], T | None],
    timeout: float = 10.0,
    *,
    interval: float = 0.01,
    what: str | Callable[[], str] = "the condition",
) -> T:
    """Call ``probe`` every ``interval`` seconds until it returns something truthy, and return that.

    For what has no event to wait on (another process, a server's state seen from outside). After ``timeout``
    seconds, :class:`AssertionError`: ``what`` names the condition, or (a callable) builds the whole message, so it
    can show the last answer. An exception from ``probe`` ends the wait at once.
    """
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() >= deadline:
            raise AssertionError(what() if callable(what) else f"{what} did not hold within {timeout} s")
        time.sleep(interval)


class GatedAgent(EchoAgent):
    """An echo agent whose turns wait until ``release`` is set (then answer anyway after 10 s, so a test that fails
    before releasing does not hang its gateway's stop); ``started`` is set as a turn starts.

    It blocks, so it runs in the agent pool (``runs_inline`` false), where ``/stop`` and timeouts can leave it.
    """

    runs_inline = False

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        self.started.set()
        self.release.wait(10)
        return super().run_turn(turn, timeout_s=timeout_s)


class SeeingAgent(EchoAgent):
    """An agent that works ``min_s`` to ``max_s`` seconds a turn and answers with what it was given: ``saw N after
    T`` (N user messages in its history, the last of them T), so a test can check in the store that every turn was
    computed from the complete committed history before it. It blocks, so it runs in the agent pool.

    With ``gated``, its first turn sets ``started`` and waits for ``release`` (10 s at most), as :class:`GatedAgent`;
    with ``stamped``, the reply ends in `` @start-end`` (the agent call's wall-clock span), to check that no two
    turns of a conversation overlapped.
    """

    runs_inline = False

    def __init__(
        self, min_s: float = 0.0, max_s: float = 0.0, *, seed: int = 0, gated: bool = False, stamped: bool = False
    ) -> None:
        super().__init__()
        self._stamped = stamped
        self._span = (min_s, max_s)
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self.started = threading.Event()
        self.release = threading.Event()
        if not gated:
            self.release.set()

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        with self._lock:
            pause = self._random.uniform(*self._span)
        began = time.time()
        self.started.set()
        self.release.wait(10)
        threading.Event().wait(pause)
        users = [m for m in turn.history if m.role == Role.USER]
        text = f"saw {len(users)} after {users[-1].content if users else '-'}"
        if self._stamped:
            text += f" @{began:.6f}-{time.time():.6f}"
        return AgentReply(messages=(AgentMessage(role=Role.ASSISTANT, content=text),), text=text)


class FakeClock:
    """A wall clock (unix seconds) that moves only when told; pass it where a ``clock`` is injected.

    :meth:`monotonic` moves with it (pass it where a ``monotonic`` is injected), and threads that wait on a
    deadline of this clock registered through :func:`hermes_actors.clock.wake_on_advance` look again after every
    :meth:`advance`, so no test sleeps for real time to pass a timer or a batching window.
    """

    def __init__(self, start: float = 1_764_460_800.0) -> None:
        self.now = start
        self._start = start
        self._lock = threading.Lock()
        self._wakeups: list[Callable[[], None]] = []

    def __call__(self) -> float:
        return self.now

    def monotonic(self) -> float:
        """Seconds since this clock was made, moving only with :meth:`advance`."""
        return self.now - self._start

    def on_advance(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after every :meth:`advance` (what :func:`~hermes_actors.clock.wake_on_advance` uses)."""
        with self._lock:
            self._wakeups.append(callback)

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds``, then wake whoever waits on it."""
        with self._lock:
            self.now += seconds
            wakeups = list(self._wakeups)
        for wake in wakeups:
            wake()


class FakePlatform:
    """A platform in memory: ``push()`` sends a user message through a gateway, ``pop()`` takes the next reply.

    Give it to the gateway as a sender and call :meth:`attach` with the gateway (anything with an ``accept``
    method). ``fail_next(n)`` makes the next ``n`` sends fail.
    """

    idempotent_sends = False

    def __init__(self, platform: str = "fake", *, account_id: str | None = None) -> None:
        self.platform = platform
        self.account_id = account_id
        self.sent: list[OutboundMessage] = []
        self._replies: queue.SimpleQueue[OutboundMessage] = queue.SimpleQueue()
        self._ids = itertools.count(1)
        self._failures = 0
        self._failure_unknown = False
        self._failure_permanent = False
        self._failure_retry_after: float | None = None
        self._lock = threading.Lock()
        self._gateway: _Accepts | None = None

    def attach(self, gateway: _Accepts) -> None:
        """Send pushed messages to ``gateway.accept``."""
        self._gateway = gateway

    def message(
        self,
        text: str,
        *,
        chat_id: str = "chat-1",
        user_id: str = "user-1",
        chat_type: str = "dm",
        thread_id: str | None = None,
        message_id: str | None = None,
        scope_id: str | None = None,
    ) -> InboundMessage:
        """Build the inbound message this platform would produce."""
        return InboundMessage(
            source=SessionSource(
                platform=self.platform,
                account_id=self.account_id,
                scope_id=scope_id,
                chat_type=chat_type,
                chat_id=chat_id,
                thread_id=thread_id,
                user_id=user_id,
            ),
            text=text,
            message_id=message_id or f"m{next(self._ids)}",
        )

    def push(self, text: str, **fields: str | None) -> object:
        """Send a user message through the attached gateway; return what ``accept`` returned."""
        if self._gateway is None:
            raise RuntimeError("FakePlatform.push needs a gateway: call attach(gateway) first")
        return self._gateway.accept(self.message(text, **fields))  # type: ignore[arg-type]

    def fail_next(
        self,
        count: int,
        *,
        outcome_unknown: bool = False,
        permanent: bool = False,
        retry_after_s: float | None = None,
    ) -> None:
        """Make the next ``count`` sends raise :class:`SendError` (``retry_after_s``: as a 429 with Retry-After)."""
        with self._lock:
            self._failures = count
            self._failure_unknown = outcome_unknown
            self._failure_permanent = permanent
            self._failure_retry_after = retry_after_s

    def send(self, message: OutboundMessage) -> str | None:
        """Record the reply (the ReplySender protocol)."""
        with self._lock:
            if self._failures > 0:
                self._failures -= 1
                raise SendError(
                    "fake platform refused the send",
                    outcome_unknown=self._failure_unknown,
                    permanent=self._failure_permanent,
                    retry_after_s=self._failure_retry_after,
                )
            self.sent.append(message)
        self._replies.put(message)
        return f"sent-{len(self.sent)}"

    def pop(self, timeout: float = 10.0) -> OutboundMessage:
        """Return the next reply sent, waiting up to ``timeout``; raise ``TimeoutError`` when none comes."""
        try:
            return self._replies.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no reply on {self.platform} within {timeout} s") from None


class FakeThreadedPlatform(FakePlatform):
    """A :class:`FakePlatform` with threads: ``create_thread`` opens ``thread-N`` (or fails, when told to)."""

    def __init__(self, platform: str = "fake", *, account_id: str | None = None) -> None:
        super().__init__(platform, account_id=account_id)
        self.threads: list[tuple[str, str]] = []
        self.thread_failure: str | None = None

    def create_thread(self, chat_id: str, title: str, *, account_id: str = "") -> str:
        """Open a thread in ``chat_id`` (the ThreadCreator protocol)."""
        if self.thread_failure is not None:
            raise SendError(self.thread_failure)
        self.threads.append((chat_id, title))
        return f"thread-{len(self.threads)}"


class _Accepts(Protocol):
    def accept(self, inbound: InboundMessage, /) -> object: ...


@contextmanager
def open_fake_gateway(
    path: str | Path,
    *,
    agent: Agent | None = None,
    platform: str = "fake",
    clock: Callable[[], float] | None = None,
    **runtime: Any,
) -> Iterator[tuple[Gateway, FakePlatform]]:
    """Run a gateway on ``path`` with one :class:`FakePlatform`; ``runtime`` fields go to ``RuntimeConfig``
    (except ``reset``, ``tz``, ``on_turn``, ``tick_interval_s`` and ``busy``, which go to the gateway).

    ``with open_fake_gateway(tmp_path / "state.db") as (gateway, fake): fake.push("hi"); fake.pop()``
    """
    from hermes_actors.config import RuntimeConfig
    from hermes_actors.runtime.gateway import Gateway

    fake = FakePlatform(platform)
    extra: dict[str, Any] = {"clock": clock} if clock is not None else {}
    for option in ("reset", "tz", "on_turn", "tick_interval_s", "busy"):
        if option in runtime:
            extra[option] = runtime.pop(option)
    gateway = Gateway(path, config=RuntimeConfig(**runtime), agent=agent, senders=[fake], **extra)
    fake.attach(gateway)
    try:
        yield gateway, fake
    finally:
        gateway.stop(timeout=10)
