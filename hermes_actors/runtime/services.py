"""What the runtime's parts share: the services every session uses, the cancel token of a running turn, the
outbox port, background job counting, and building and queueing replies."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from typing import Any, Protocol

from hermes_actors.agents.base import Agent
from hermes_actors.agents.tools import Tool
from hermes_actors.config import BusyConfig, RuntimeConfig, SessionsConfig
from hermes_actors.ids import SessionKind, new_session_id
from hermes_actors.messages import OutboundMessage, encode
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.agent_roster import AgentRoster
from hermes_actors.runtime.events import Events
from hermes_actors.runtime.metrics import Metrics
from hermes_actors.runtime.turn_watch import TurnWatch
from hermes_actors.store import StoreInterface
from hermes_actors.store.outbox_queue import QueuedReply
from hermes_actors.store.readers import ReaderPool
from hermes_actors.store.writer import StoreWriter

__all__ = [
    "ArmApproval",
    "BackgroundJobs",
    "CancelToken",
    "HandoffReplies",
    "NewSessionId",
    "OutboxSink",
    "SessionServices",
    "SessionTools",
    "default_session_id",
    "queue_reply",
    "reply_for",
]


def _open(latch: threading.Lock) -> None:
    """Release ``latch`` unless it is open already (a call's end and ``/stop`` may both open it)."""
    with contextlib.suppress(RuntimeError):
        latch.release()


class CancelToken:
    """Set by ``/stop``, ``/new``, resets and a newer message (busy policy ``interrupt``: :attr:`interrupted`) to
    invalidate a running turn; its late result is dropped.

    A turn may make several agent calls (a summary, then the reply); :meth:`wait_for` gives each call a latch of
    its own, which the call's end or :meth:`cancel` opens, so one call's end never counts for the next one. A
    plain lock is the latch: no ``threading.Event`` and its condition variable per call. :meth:`settle` is the
    turn's verdict: a cancel after it changes nothing, so whoever :meth:`on_cancel` told hears only of a cancel
    that really dropped the turn's result.
    """

    __slots__ = ("_callbacks", "_latch", "_lock", "_settled", "cancelled", "interrupted")

    def __init__(self) -> None:
        self.cancelled = False
        self.interrupted = False  # cancelled by a newer message, whose turn answers this one's messages too
        self._latch: threading.Lock | None = None  # the latch of the call being waited for, if any
        self._lock = threading.Lock()
        self._settled = False
        self._callbacks: list[Callable[[], None]] = []

    def cancel(self, *, interrupted: bool = False) -> None:
        """Invalidate the turn and wake the call waiting on it (``interrupted``: for a newer message); nothing
        happens once the turn has settled or was cancelled already."""
        with self._lock:
            if self._settled or self.cancelled:
                return
            self.cancelled = True
            self.interrupted = interrupted
            callbacks, self._callbacks = self._callbacks, []
        latch = self._latch
        if latch is not None:
            _open(latch)
        for callback in callbacks:
            callback()

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (once, on the cancelling thread: it must return at once) when the turn is cancelled
        before it settles; at once when it is cancelled already."""
        with self._lock:
            if self._settled:
                return
            if not self.cancelled:
                self._callbacks.append(callback)
                return
        callback()

    def settle(self) -> bool:
        """The turn's agent call is over: return whether the turn was cancelled. A later :meth:`cancel` does
        nothing (the turn keeps its result) and no :meth:`on_cancel` callback runs any more."""
        with self._lock:
            self._settled = True
            self._callbacks = []
            return self.cancelled

    def wait_for(self, call: Future[Any], timeout: float) -> None:
        """Wait until ``call`` is done, the turn is cancelled, or ``timeout`` seconds have passed."""
        latch = threading.Lock()
        latch.acquire()
        self._latch = latch  # before the check: a cancel from now on opens this latch
        try:
            if self.cancelled:
                return
            call.add_done_callback(lambda _: _open(latch))
            latch.acquire(timeout=timeout)
        finally:
            self._latch = None


class HandoffReplies:
    """The message ids of handoff prompts whose replies the supervisor waits to hear about (thread-safe).

    The handoff turn registers its prompt's id before it runs; the outbox's delivery report for a reply to that
    id is the handoff's result (:class:`~hermes_actors.lifecycle.work.HandoffResult`).
    """

    __slots__ = ("_ids", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: set[str] = set()

    def expect(self, message_id: str) -> None:
        """Report the delivery of the reply to ``message_id``."""
        with self._lock:
            self._ids.add(message_id)

    def take(self, message_id: str | None) -> bool:
        """Return whether a reply to ``message_id`` is a handoff's first message (once: its report is taken)."""
        if message_id is None:
            return False
        with self._lock:
            if message_id in self._ids:
                self._ids.discard(message_id)
                return True
            return False


class OutboxSink(Protocol):
    """Where committed replies go for delivery."""

    def deliver(self, outbox_id: int, message: OutboundMessage, *, counted: bool = False) -> None:
        """Deliver the reply committed as row ``outbox_id`` (``counted``: with its first attempt counted ahead)."""
        ...

    def enabled(self, platform: str) -> bool:
        """Return whether replies can be sent to ``platform``."""
        ...

    def counts_ahead(self, platform: str) -> bool:
        """Whether a reply to ``platform`` should be committed with its first attempt counted (:func:`queue_reply`
        with ``counted=True``, then :meth:`deliver` with it): this process sends it as soon as it is delivered."""
        ...

    def create_thread(self, platform: str, chat_id: str, title: str, *, account_id: str = "") -> str | None:
        """Open a thread on ``platform`` for a handoff; ``None`` when it has none. Raises ``SendError``."""
        ...

    def notify(self, message: OutboundMessage) -> None:
        """Send ``message`` once, best effort, without an outbox row (the store could not take one)."""
        ...

    def held(self) -> contextlib.AbstractContextManager[None]:
        """Within the block, this thread's deliveries wait; they go, in order, when it ends."""
        ...


class BackgroundJobs:
    """Counts work started beside the turns (automatic titles, queue pruning), so ``Gateway.wait_idle`` can wait."""

    __slots__ = ("_lock", "_running")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0

    def track(self, future: Future[Any]) -> None:
        """Count ``future`` until it is done."""
        with self._lock:
            self._running += 1
        future.add_done_callback(self._finished)

    def _finished(self, future: Future[Any]) -> None:
        with self._lock:
            self._running -= 1

    def running(self) -> int:
        """How many tracked jobs have not finished."""
        with self._lock:
            return self._running


class NewSessionId(Protocol):
    """A new session id of ``kind`` for a session that continues ``near`` (its routing key, or the session it is
    the child of): cluster mode puts it in ``near``'s shard (:mod:`hermes_actors.store.pg.shards`)."""

    def __call__(self, kind: SessionKind, near: str) -> str: ...


def default_session_id(kind: SessionKind, near: str) -> str:
    """A new session id of ``kind`` (``near`` does not matter on one machine)."""
    return new_session_id(kind)


SessionTools = Callable[[str, SessionSource], Sequence[Tool]]
"""The built-in tools a session offers beside ``session_search`` (its id and origin given); frozen with its prefix."""


def _no_tools(session_id: str, origin: SessionSource) -> Sequence[Tool]:
    return ()


ArmApproval = Callable[[int, float], None]
"""Arm the deadline (``due_at``) of a request for approval whose commit stored its durable timer (its id given)."""


def _unarmed(approval_id: int, due_at: float) -> None:
    """No timer service (a test's bare services): the deadline is armed at the next start."""


class SessionServices:
    """The runtime parts every session uses, shared by all of them. ``agents`` are the named agents a session's
    agent is chosen from (by default ``agent`` alone); ``agent`` is their default one. ``events`` is where a commit
    emits what it made happen (by default nowhere). ``busy`` is what happens to a message that arrives while its
    session runs a turn; a reload replaces it whole (the supervisor reads it at each message)."""

    __slots__ = (
        "agent",
        "agent_pool",
        "agents",
        "arm_approval",
        "background",
        "busy",
        "clock",
        "config",
        "events",
        "handoffs",
        "lease_owner",
        "metrics",
        "new_id",
        "outbox",
        "owner_alive",
        "readers",
        "session_tools",
        "sessions",
        "watch",
        "writer",
    )

    def __init__(
        self,
        *,
        writer: StoreWriter,
        readers: ReaderPool,
        agent: Agent,
        agent_pool: Executor,
        outbox: OutboxSink,
        config: RuntimeConfig,
        lease_owner: str,
        owner_alive: Callable[[str], bool] = lambda owner: True,
        clock: Callable[[], float] = time.time,
        sessions: SessionsConfig | None = None,
        metrics: Metrics | None = None,
        new_id: NewSessionId = default_session_id,
        agents: AgentRoster | None = None,
        events: Events | None = None,
        busy: BusyConfig | None = None,
    ) -> None:
        self.events = events or Events(clock=clock)
        self.busy = busy or BusyConfig()
        self.new_id = new_id  # cluster mode draws a new session's id in the shard of what it continues
        self.writer = writer
        self.readers = readers
        self.agents = agents if agents is not None else AgentRoster.single(agent)
        self.agent = self.agents.default.agent
        self.agent_pool = agent_pool
        self.outbox = outbox
        self.config = config
        self.lease_owner = lease_owner
        self.owner_alive = owner_alive
        self.clock = clock
        self.sessions = sessions or SessionsConfig()
        self.metrics = metrics or Metrics()
        self.background = BackgroundJobs()
        self.handoffs = HandoffReplies()
        self.watch = TurnWatch()  # clients watching turns live (an API request that streams)
        self.session_tools: SessionTools = _no_tools  # built-in tools beside session_search (the schedule tool)
        self.arm_approval: ArmApproval = _unarmed  # arms a request's deadline once its commit stored the timer


def reply_for(
    source: SessionSource,
    session_id: str | None,
    text: str,
    reply_to: str | None = None,
    *,
    answers: Sequence[str] = (),
) -> OutboundMessage:
    """Return a message to ``source``'s chat (and thread) from ``session_id``, answering the ``answers`` ids."""
    return OutboundMessage(
        platform=source.platform,
        account_id=source.account_id or "",
        chat_id=source.chat_id,
        thread_id=source.thread_id,
        user_id=source.participant_id,
        session_id=session_id,
        text=text,
        reply_to=reply_to,
        answers=tuple(answers) if answers else ((reply_to,) if reply_to else ()),
    )


def queue_reply(
    store: StoreInterface, outbound: OutboundMessage, *, session_exists: bool = False, counted: bool = False
) -> int:
    """Commit ``outbound`` to the outbox (inside the caller's transaction); return its row id.

    ``session_exists`` skips the lookup when the caller has just written to the session; ``counted`` counts its first
    send attempt ahead, in the same transaction (deliver it with ``counted=True``: the outbox sends it at once).
    """
    session_id = outbound.session_id
    if session_id is not None and not session_exists and store.find_session(session_id) is None:
        session_id = None  # its first turn has not committed yet: no row to refer to
    return store.outbox.add(**_reply_row(outbound, session_id, counted))


def queuing_reply(store: StoreInterface, outbound: OutboundMessage, *, counted: bool = False) -> QueuedReply:
    """:func:`queue_reply` as a write a session lease's fence carries, for a turn that writes to its session (which
    therefore exists); its row id afterwards (:attr:`QueuedReply.id`)."""
    return store.outbox.adding(**_reply_row(outbound, outbound.session_id, counted))


def _reply_row(outbound: OutboundMessage, session_id: str | None, counted: bool) -> dict[str, Any]:
    """The outbox row of ``outbound`` (``session_id``: the session it refers to)."""
    return {
        "session_id": session_id,
        "platform": outbound.platform,
        "account_id": outbound.account_id,
        "chat_id": outbound.chat_id,
        "thread_id": outbound.thread_id,
        "payload": encode(outbound),
        "attempts": 1 if counted else 0,
    }
