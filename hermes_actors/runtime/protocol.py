"""Every message between the runtime's actors, and what a session needs from the runtime.

The edge tells the supervisor :class:`Deliver`; session actors get :class:`RunTurn` and answer
:class:`TurnFinished` (and :class:`SessionStopped` when they stop); timers and the outbox tell the supervisor
:class:`PassivationTick`, :class:`~hermes_actors.lifecycle.work.EndDue` and
:class:`~hermes_actors.lifecycle.work.HandoffResult`. The lifecycle's own types (deliveries, control steps) are
defined in :mod:`hermes_actors.lifecycle.work`, below the runtime, and re-exported here.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from typing import Any, Protocol

import msgspec

from hermes_actors.agents.base import Agent
from hermes_actors.config import RuntimeConfig, SessionsConfig
from hermes_actors.lifecycle.work import (
    Compress,
    Control,
    Delivery,
    EndDue,
    EndSession,
    Handoff,
    HandoffResult,
    SetTitle,
)
from hermes_actors.messages import OutboundMessage, encode
from hermes_actors.routing import SessionSource
from hermes_actors.store import Store
from hermes_actors.store.readers import ReaderPool
from hermes_actors.store.writer import StoreWriter

__all__ = [
    "BackgroundJobs",
    "CancelToken",
    "Compress",
    "Control",
    "Deliver",
    "Delivery",
    "EndDue",
    "EndSession",
    "GetStatistics",
    "Handoff",
    "HandoffResult",
    "OutboxSink",
    "PassivationTick",
    "Rebind",
    "RunTurn",
    "SessionFor",
    "SessionServices",
    "SessionStopped",
    "SetTitle",
    "StopSession",
    "SupervisorAsk",
    "SupervisorMessage",
    "SupervisorStatistics",
    "SupervisorTell",
    "TurnFinished",
    "TurnOutcome",
    "queue_reply",
    "reply_for",
]


def _open(latch: threading.Lock) -> None:
    """Release ``latch`` unless it is open already (a call's end and ``/stop`` may both open it)."""
    with contextlib.suppress(RuntimeError):
        latch.release()


class CancelToken:
    """Set by ``/stop``, ``/new`` and resets to invalidate a running turn; its late result is dropped.

    A turn may make several agent calls (a summary, then the reply); :meth:`wait_for` gives each call a latch of
    its own, which the call's end or :meth:`cancel` opens, so one call's end never counts for the next one. A
    plain lock is the latch: no ``threading.Event`` and its condition variable per call.
    """

    __slots__ = ("_latch", "cancelled")

    def __init__(self) -> None:
        self.cancelled = False
        self._latch: threading.Lock | None = None  # the latch of the call being waited for, if any

    def cancel(self) -> None:
        """Invalidate the turn and wake the call waiting on it."""
        self.cancelled = True
        latch = self._latch
        if latch is not None:
            _open(latch)

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


class RunTurn(msgspec.Struct, frozen=True, kw_only=True):
    """Supervisor → session: one turn over ``deliveries`` (several when rapid-fire text was merged).

    With ``reply_override`` the turn only answers (``/stop``); with ``control`` it runs a lifecycle step.
    """

    deliveries: tuple[Delivery, ...]
    token: CancelToken
    reply_override: str | None = None
    control: Control | None = None


class TurnOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What a turn did. ``ended`` means the session is over; ``continued_by`` names its compression child, and
    ``requeue`` the deliveries that child must run first (they were not run here)."""

    session_id: str
    inbox_ids: tuple[int, ...]
    outbox_id: int | None
    stored_messages: int
    cancelled: bool = False
    failed: str | None = None
    ended: bool = False
    continued_by: str | None = None
    requeue: tuple[Delivery, ...] = ()
    origin: SessionSource | None = None  # where the session was opened (its reset policy depends on it)
    rebound: tuple[str, ...] = ()  # routing keys this turn pointed at the session (handoff)
    handoff_previous: str | None = None  # the session the handoff key led to before
    not_ended: bool = False  # an end asked for could not run here (another process holds the lease)


class TurnFinished(msgspec.Struct, frozen=True, kw_only=True):
    """Session → supervisor: the turn is committed; send the next one."""

    session_id: str
    outcome: TurnOutcome | None = None
    retry: RunTurn | None = None  # nothing of this turn was saved (lease lost, store failed): run it again first
    error: str | None = None  # why the store failed; the supervisor waits before the retry


class SessionStopped(msgspec.Struct, frozen=True, kw_only=True):
    """Session → supervisor: the actor has stopped (passivated, evicted or ended)."""

    session_id: str
    actor_urn: str


class Deliver(msgspec.Struct, frozen=True, kw_only=True):
    """Edge → supervisor: a committed inbound message for ``routing_key``."""

    routing_key: str
    delivery: Delivery


class Rebind(msgspec.Struct, frozen=True, kw_only=True):
    """Point ``routing_key`` at ``session_id`` from now on. Ask it: the reply is the future of the route's commit
    (the supervisor does not wait for it; the caller may)."""

    routing_key: str
    session_id: str


class StopSession(msgspec.Struct, frozen=True, kw_only=True):
    """Invalidate the running turn of the session behind ``routing_key`` (``/stop``)."""

    routing_key: str


class SessionFor(msgspec.Struct, frozen=True, kw_only=True):
    """Ask the supervisor which session ``routing_key`` reaches now; the reply is its id or ``None``."""

    routing_key: str


class GetStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """Ask the supervisor for a :class:`SupervisorStatistics` snapshot."""


class PassivationTick(msgspec.Struct, frozen=True, kw_only=True):
    """Timer → supervisor: passivate idle actors and renew leases."""


class SupervisorStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of the supervisor."""

    live_actors: int
    running: int
    queued_messages: int
    routes_cached: int
    activations: int
    passivations: int
    evictions: int
    turns: int
    rejected: int


SupervisorTell = Deliver | TurnFinished | SessionStopped | StopSession | EndDue | HandoffResult | PassivationTick
"""What the supervisor is told. A failure handling one is logged and the directory goes on (an inbound message it
could not queue stays pending in the inbox and is replayed at the next start)."""

SupervisorAsk = SessionFor | GetStatistics | Rebind
"""What the supervisor is asked; a failure goes back to the caller."""

SupervisorMessage = SupervisorTell | SupervisorAsk


class OutboxSink(Protocol):
    """Where committed replies go for delivery."""

    def deliver(self, outbox_id: int, message: OutboundMessage) -> None:
        """Deliver the reply committed as row ``outbox_id``."""
        ...

    def enabled(self, platform: str) -> bool:
        """Return whether replies can be sent to ``platform``."""
        ...

    def create_thread(self, platform: str, chat_id: str, title: str, *, account_id: str = "") -> str | None:
        """Open a thread on ``platform`` for a handoff; ``None`` when it has none. Raises ``SendError``."""
        ...

    def notify(self, message: OutboundMessage) -> None:
        """Send ``message`` once, best effort, without an outbox row (the store could not take one)."""
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


class SessionServices:
    """The runtime parts every session uses, shared by all of them."""

    __slots__ = (
        "agent",
        "agent_pool",
        "background",
        "clock",
        "config",
        "lease_owner",
        "outbox",
        "owner_alive",
        "readers",
        "sessions",
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
    ) -> None:
        self.writer = writer
        self.readers = readers
        self.agent = agent
        self.agent_pool = agent_pool
        self.outbox = outbox
        self.config = config
        self.lease_owner = lease_owner
        self.owner_alive = owner_alive
        self.clock = clock
        self.sessions = sessions or SessionsConfig()
        self.background = BackgroundJobs()


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


def queue_reply(store: Store, outbound: OutboundMessage, *, session_exists: bool = False) -> int:
    """Commit ``outbound`` to the outbox (inside the caller's transaction); return its row id.

    ``session_exists`` skips the lookup when the caller has just written to the session.
    """
    session_id = outbound.session_id
    if session_id is not None and not session_exists and store.find_session(session_id) is None:
        session_id = None  # its first turn has not committed yet: no row to refer to
    return store.outbox.add(
        session_id=session_id,
        platform=outbound.platform,
        account_id=outbound.account_id,
        chat_id=outbound.chat_id,
        thread_id=outbound.thread_id,
        payload=encode(outbound),
    )
