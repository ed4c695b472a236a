"""Every message between the runtime's actors.

The edge tells the supervisor :class:`Deliver`; session actors get :class:`RunTurn` and answer
:class:`TurnFinished` (and :class:`SessionStopped` when they stop); timers and the outbox tell the supervisor
:class:`PassivationTick`, :class:`~hermes_actors.lifecycle.work.EndDue` and
:class:`~hermes_actors.lifecycle.work.HandoffResult`; an outbox actor gets :data:`OutboxMessage` from its router,
its lane workers and the timers. Each actor's ``on_receive`` is a ``match`` over its union. The lifecycle's own
types (deliveries, control steps) are defined in :mod:`hermes_actors.lifecycle.work`, below the runtime, and
re-exported here.
"""

from __future__ import annotations

import enum
from concurrent.futures import Future

import msgspec

from hermes_actors.lifecycle.work import (
    AdminChange,
    Compress,
    Control,
    Decide,
    Delivery,
    EndDue,
    EndSession,
    Handoff,
    HandoffResult,
    SetTitle,
)
from hermes_actors.messages import OutboundMessage
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.services import CancelToken
from hermes_actors.runtime.steering import SteerChannel

__all__ = [
    "AdminChange",
    "AgentFailure",
    "CancelToken",
    "ChatKey",
    "Compress",
    "Control",
    "Decide",
    "Deliver",
    "DeliverBatch",
    "Delivery",
    "EndDue",
    "EndSession",
    "FailureKind",
    "GetStatistics",
    "HandOver",
    "Handoff",
    "HandoffResult",
    "OutboxMessage",
    "PassivationTick",
    "Rebind",
    "ReleaseOutbox",
    "ReplyFailed",
    "ReplySent",
    "RetryDue",
    "RunTurn",
    "SendReply",
    "SessionFor",
    "SessionMessage",
    "SessionStopped",
    "SetTitle",
    "StopOutbox",
    "StopSession",
    "SupervisorAsk",
    "SupervisorMessage",
    "SupervisorStatistics",
    "SupervisorTell",
    "TurnFinished",
    "TurnOutcome",
]


class FailureKind(enum.Enum):
    """How an agent call failed."""

    TIMEOUT = "timeout"  # no answer within the turn's timeout
    ERROR = "error"  # the agent raised AgentError (or an inline agent raised)
    CRASH = "crash"  # the agent raised something unexpected


class AgentFailure(msgspec.Struct, frozen=True, kw_only=True):
    """An agent call that gave no answer: ``kind``, ``text`` (what the user is told instead of a reply) and
    ``error`` (what failed, for health checks and the log)."""

    kind: FailureKind
    text: str
    error: str = ""


class RunTurn(msgspec.Struct, frozen=True, kw_only=True):
    """Supervisor → session: one turn over ``deliveries`` (several when rapid-fire text was merged).

    With ``reply_override`` the turn only answers (``/stop``); with ``control`` it runs a lifecycle step. An
    ordinary turn's ``steering`` takes messages that arrive while it runs (busy policy ``steer``), and its reply
    also answers ``also_answers``, the messages of turns a newer message interrupted (busy policy ``interrupt``).
    """

    deliveries: tuple[Delivery, ...]
    token: CancelToken
    reply_override: str | None = None
    control: Control | None = None
    steering: SteerChannel | None = None
    also_answers: tuple[str, ...] = ()


SessionMessage = RunTurn
"""What a session actor is told (by the supervisor only)."""


class TurnOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What a turn did. ``ended`` means the session is over; ``continued_by`` names its compression child, and
    ``requeue`` the deliveries that child must run first (they were not run here); without a child, ``requeue`` is
    the deliveries to route anew (their keys lead to another session since this one ended elsewhere).
    ``interrupted`` (of a turn a newer message stopped) are the message ids the session's next turn answers too."""

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
    interrupted: tuple[str, ...] = ()


class TurnFinished(msgspec.Struct, frozen=True, kw_only=True):
    """Session → supervisor: the turn is committed; send the next one."""

    session_id: str
    outcome: TurnOutcome | None = None
    retry: RunTurn | None = None  # nothing of this turn was saved (lease lost, store failed): run it again first
    error: str | None = None  # why the store failed; the supervisor waits before the retry
    # Cluster mode: the host lost the shard's term these deliveries were handed over under (the turn was refused).
    # The session's queued deliveries of that term or an earlier one are dropped: their rows stay pending and are
    # handed over again, in order, under the next term (so none of them commits ahead of the refused one).
    abandon_term: int | None = None


class SessionStopped(msgspec.Struct, frozen=True, kw_only=True):
    """Session → supervisor: the actor has stopped (passivated, evicted or ended)."""

    session_id: str
    actor_urn: str


class Deliver(msgspec.Struct, frozen=True, kw_only=True):
    """Edge → supervisor: a committed inbound message for ``routing_key``.

    A shard host (cluster mode) sets ``check_route`` and ``stored_route``, the session the key's stored route led
    to when it took the row: other hosts may have re-pointed the key since this supervisor cached its route.
    """

    routing_key: str
    delivery: Delivery
    check_route: bool = False
    stored_route: str | None = None


class DeliverBatch(msgspec.Struct, frozen=True, kw_only=True):
    """Recovery → supervisor: replayed inbound messages, in order, handed over together. Their sessions' turns start
    once all of them are queued, so each session's busy policy sees them as arriving together (``collect`` makes
    them one turn, ``queue`` one turn each)."""

    delivers: tuple[Deliver, ...]


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
    stopping_actors: int  # asked to stop (passivated, evicted, ended), still counted in live_actors until stopped
    running: int
    queued_messages: int
    routes_cached: int
    activations: int
    passivations: int
    evictions: int
    turns: int
    rejected: int
    ended: int = 0  # actors stopped because their session ended


SupervisorTell = (
    Deliver | DeliverBatch | TurnFinished | SessionStopped | StopSession | EndDue | HandoffResult | PassivationTick
)
"""What the supervisor is told. A failure handling one is logged and the directory goes on (an inbound message it
could not queue stays pending in the inbox and is replayed at the next start)."""

SupervisorAsk = SessionFor | GetStatistics | Rebind | AdminChange
"""What the supervisor is asked; a failure goes back to the caller (an :class:`AdminChange` is answered when it is
queued; its control's future resolves once the session's actor has applied it)."""

SupervisorMessage = SupervisorTell | SupervisorAsk


ChatKey = tuple[str, str | None, str | None]
"""An outbox lane: (account, chat, thread)."""


class SendReply(msgspec.Struct, frozen=True, kw_only=True):
    """Router → outbox: send a committed reply; ``suspect``: an earlier attempt may have reached the platform;
    ``counted``: its row was committed with its next attempt counted ahead (that send counts nothing)."""

    outbox_id: int
    message: OutboundMessage
    suspect: bool = False
    counted: bool = False


class RetryDue(msgspec.Struct, frozen=True, kw_only=True):
    """Router or timer → outbox: retry the chats whose head reply is due again."""


class ReplySent(msgspec.Struct, frozen=True, kw_only=True):
    """Worker → outbox: the head of ``key`` was delivered (and its mark submitted)."""

    key: ChatKey
    outbox_id: int
    message: OutboundMessage


class ReplyFailed(msgspec.Struct, frozen=True, kw_only=True):
    """Worker → outbox: the head of ``key`` was not delivered, or may not have been (``unknown``)."""

    key: ChatKey
    outbox_id: int
    message: OutboundMessage
    error: str
    retry_after_s: float | None = None
    unknown: bool = False
    permanent: bool = False


class StopOutbox(msgspec.Struct, frozen=True, kw_only=True):
    """Router → outbox: send nothing more; once no send is in progress, resolve ``done`` with the replies still
    held (oldest first) and stop."""

    done: Future[list[SendReply]]


class ReleaseOutbox(msgspec.Struct, frozen=True, kw_only=True):
    """Router → a stopping outbox: resolve ``done`` now, with the replies whose sends are still in progress too."""

    done: Future[list[SendReply]]


class HandOver(msgspec.Struct, frozen=True, kw_only=True):
    """Router → a new outbox: the replies the one it replaces held; they go before anything delivered since."""

    items: list[SendReply]


OutboxMessage = SendReply | RetryDue | ReplySent | ReplyFailed | StopOutbox | ReleaseOutbox | HandOver
"""What an outbox actor is told. A failure handling one is logged and the mailbox goes on (a reply it lost track
of is still an unsent row, which the next start sends)."""
