"""The ports the core owns: what a platform adapter implements, and all it sees of the runtime.

An adapter implements :class:`Adapter` and hands the runtime :class:`ReplySender` objects (and, on a platform with
threads, :class:`ThreadCreator`). Once started it receives an :class:`Inbox`, which is two ports cut by their
users: a chat adapter types itself against :class:`ChatInbox` (the durable edge it feeds inbound messages into,
with its stored poll positions and what it accepted recently; :func:`accept_many_async` commits from an event loop),
the HTTP API server against :class:`ApiInbox` (turn calls, sessions, stored responses, the runtime's health and
numbers for ``/health/ready`` and ``/metrics`` (their types are :mod:`hermes_actors.health`'s), the names of the
agents a request may ask for, the API's conversations, and the :class:`~hermes_actors.operator_port.Operator` for
the holder of the admin key); :class:`Intake` is what both use. An adapter never gets the gateway or a store.
``platforms.base`` re-exports these names for adapter authors.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Protocol, runtime_checkable

import msgspec

from hermes_actors.approval_port import ApprovalDesk
from hermes_actors.conversation_port import ConversationBook
from hermes_actors.errors import PlatformError
from hermes_actors.health import (
    AgentInfo,
    ClusterView,
    ConnectionReporter,
    DiskSpace,
    Exposition,
    Latency,
    PlatformHealth,
    PlatformStatus,
    Readiness,
    Vitals,
)
from hermes_actors.job_port import JobBook
from hermes_actors.media import MediaStore
from hermes_actors.messages import ApprovalRequest, InboundMessage, OutboundMessage, ResponseRecord, TokenUsage
from hermes_actors.operator_port import Operator
from hermes_actors.routing import KeyPolicy
from hermes_actors.turn_events import ToolStatus, TurnEvents

__all__ = [
    "AcceptResult",
    "Adapter",
    "AgentInfo",
    "ApiInbox",
    "Capabilities",
    "ChatInbox",
    "ClusterView",
    "ConnectionReporter",
    "DiskSpace",
    "Exposition",
    "Inbox",
    "Intake",
    "Latency",
    "PlatformHealth",
    "PlatformStatus",
    "PollCursor",
    "Readiness",
    "ReplySender",
    "SendError",
    "SessionOwner",
    "StoredAnswer",
    "ThreadCreator",
    "ToolStatus",
    "TurnEvents",
    "Vitals",
    "accept_many_async",
]


class Capabilities(msgspec.Struct, frozen=True, kw_only=True):
    """What a platform can do with replies; the runtime and commands adapt to it."""

    threads: bool = False  # topics/threads exist (a handoff can open one)
    edits: bool = False  # a sent message can be edited (streamed replies)
    typing: bool = False  # a typing indicator can be shown while a turn runs
    max_message_chars: int | None = None  # longer replies are split by the sender


class SendError(PlatformError):
    """A reply could not be sent.

    ``retry_after_s`` is the platform's own hint (HTTP 429 ``retry_after``); ``outcome_unknown`` says the
    platform may have received it anyway (a timeout after the request left), so a retry may duplicate it;
    ``permanent`` says no retry can succeed (the user blocked the bot, the chat is gone): the outbox gives the
    reply up, records why, and goes on with the chat's later replies.
    """

    def __init__(
        self,
        message: str,
        *,
        retry_after_s: float | None = None,
        outcome_unknown: bool = False,
        permanent: bool = False,
    ) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.outcome_unknown = outcome_unknown
        self.permanent = permanent


class ReplySender(Protocol):
    """Sends replies to one platform.

    ``idempotent_sends`` is true when the platform drops a repeated send of the same reply by itself, so a
    retry after an unknown outcome needs no duplicate flag. The outbox calls ``send`` from several threads at
    once, one per chat (never two sends to one chat at a time): shared state in a sender needs a lock.
    """

    platform: str
    idempotent_sends: bool

    def send(self, message: OutboundMessage) -> str | None:
        """Deliver ``message``; return the platform's message id, or raise :class:`SendError`."""
        ...


@runtime_checkable
class ThreadCreator(Protocol):
    """A sender on a platform with threads (Telegram topics, Discord threads, Slack thread anchors)."""

    def create_thread(self, chat_id: str, title: str, *, account_id: str = "") -> str:
        """Open a thread in ``chat_id`` and return its thread id, or raise :class:`SendError`."""
        ...


class PollCursor(msgspec.Struct, frozen=True, kw_only=True):
    """A platform's poll position, stored with the inbox rows it covers."""

    platform: str
    cursor: str
    account_id: str = ""


class AcceptResult(msgspec.Struct, frozen=True, kw_only=True):
    """What ``accept`` did: the inbox row, or ``duplicate`` for a redelivery already seen."""

    routing_key: str
    inbox_id: int | None
    duplicate: bool


class StoredAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """What became of a message the inbox took: ``pending`` until its turn commits, then ``done`` (answered) or
    ``rejected``; ``reply`` is the agent's last words after it in its session (``None``: the turn stored no
    reply, e.g. the agent failed), with the model's tokens for that turn; ``tool_calls`` the calls of the client's
    tools the turn ended with (JSON, OpenAI's shape), when it did; ``approval`` the request for approval the turn
    paused on, while no turn has continued from it."""

    message: InboundMessage  # as the inbox stored it
    state: str
    session_id: str | None
    reply: str | None = None
    usage: TokenUsage | None = None
    tool_calls: str | None = None
    approval: ApprovalRequest | None = None


class SessionOwner(msgspec.Struct, frozen=True, kw_only=True):
    """Whose a stored session is: enough for an entry point to decide whether a client may continue it."""

    session_id: str
    platform: str  # the platform that opened it (the session's ``source``)
    scope_id: str | None  # the scope it was opened in (the API server's key fingerprint)
    live: bool  # not ended: a new turn may still join it
    user_id: str | None = None  # the participant who opened it
    route: str | None = None  # the session the routing key asked about leads to now (None: none, or not asked)


class Intake(Protocol):
    """What every entry point uses to hand the runtime a message: the parts :class:`ChatInbox` and
    :class:`ApiInbox` share."""

    @property
    def media(self) -> MediaStore:
        """The media store attachments are saved into before their message is accepted."""
        ...

    @property
    def ask_timeout_s(self) -> float:
        """How long a blocking call of the runtime may take (``runtime.ask_timeout_s``)."""
        ...

    def submit(self, inbound: InboundMessage) -> Future[AcceptResult]:
        """Commit ``inbound`` (or recognise a redelivery) and queue its turn without waiting: the future resolves
        once the inbox row has committed."""
        ...


class ChatInbox(Intake, Protocol):
    """The chat-adapter port: the durable inbox a platform adapter feeds, with its stored poll positions.

    ``accept`` and ``accept_many`` return once the inbox rows have committed, so the adapter acknowledges the
    platform only when a message is safe; they block, so an adapter on an event loop awaits
    :func:`accept_many_async` instead. ``submit`` and ``submit_many`` return a future of the same commit.
    """

    def accept(self, inbound: InboundMessage) -> AcceptResult:
        """Commit ``inbound`` (or recognise a redelivery) and queue its turn; return once it is safe."""
        ...

    def accept_many(self, batch: Sequence[InboundMessage], *, cursor: PollCursor | None = None) -> list[AcceptResult]:
        """Commit ``batch`` in one transaction with the poll ``cursor`` that covers it; return once it is safe."""
        ...

    def submit_many(
        self, batch: Sequence[InboundMessage], *, cursor: PollCursor | None = None
    ) -> Future[list[AcceptResult]]:
        """:meth:`accept_many` without waiting: the future resolves once the batch (and ``cursor``) committed."""
        ...

    def poll_cursor(self, platform: str, account_id: str = "") -> str | None:
        """The poll position last committed for (``platform``, ``account_id``), or ``None``."""
        ...

    def recent_inbound(self, platform: str, since: float) -> list[InboundMessage]:
        """``platform``'s messages the inbox accepted at or after ``since`` (answered or not), oldest first."""
        ...


class ApiInbox(Intake, Protocol):
    """The API application port: what the HTTP API server does with turns, sessions, stored responses and the
    runtime's health, besides submitting messages."""

    @property
    def key_policy(self) -> KeyPolicy:
        """How the runtime turns a message's source into its routing key."""
        ...

    @property
    def agents(self) -> tuple[str, ...]:
        """The names of the configured agents, the default first: a message may ask for one
        (:attr:`~hermes_actors.messages.InboundMessage.agent`, the API's ``model``) for the session it starts."""
        ...

    def session_owner(self, session_id: str, routing_key: str | None = None) -> SessionOwner | None:
        """Who owns the stored session ``session_id``, or ``None`` if there is none; with ``routing_key``, also
        the session that key reaches now (:attr:`SessionOwner.route`, as :meth:`session_for` answers)."""
        ...

    def session_for(self, routing_key: str) -> str | None:
        """The session ``routing_key`` reaches now, or ``None``."""
        ...

    def rebind(self, routing_key: str, session_id: str) -> None:
        """Point ``routing_key`` at ``session_id`` from now on."""
        ...

    def store_unwritable_reason(self) -> str | None:
        """Why the store cannot take writes now (for a health check), or ``None`` when it can."""
        ...

    def watch_turn(self, message_id: str, events: TurnEvents) -> None:
        """Report the turn that answers ``message_id`` to ``events`` as it happens (streamed text, tool calls);
        register before submitting the message. Called from the agent's thread: each call must return at once."""
        ...

    def unwatch_turn(self, message_id: str) -> None:
        """Stop reporting ``message_id``'s turn."""
        ...

    def stored_answer(self, platform: str, message_id: str) -> StoredAnswer | None:
        """What became of ``platform``'s message ``message_id`` (``account_id`` ``""``), ``None`` when the inbox
        never took it: still pending, or answered with the reply stored in its session."""
        ...

    def save_response(self, response: ResponseRecord) -> Future[None]:
        """Store an API response with its session (replacing one with its id); resolves once committed."""
        ...

    def get_response(self, response_id: str, scope: str | None) -> ResponseRecord | None:
        """The stored response ``response_id`` made in ``scope`` (an API key's fingerprint), else ``None``."""
        ...

    def delete_response(self, response_id: str, scope: str | None) -> Future[bool]:
        """Delete the stored response ``response_id`` of ``scope``; resolves to whether there was one."""
        ...

    def latest_response_in(self, scope: str | None, conversation: str) -> ResponseRecord | None:
        """The newest stored response of ``scope`` in the conversation named ``conversation``, else ``None``."""
        ...

    def readiness(self) -> Readiness:
        """Whether the store takes writes and each configured entry point is up (may wait up to 2 s on the store)."""
        ...

    def vitals(self) -> Vitals:
        """The runtime's numbers now (reads the store's queues)."""
        ...

    def metrics(self) -> Exposition:
        """Every metric series of the runtime, in Prometheus's text format (reads the store's queues)."""
        ...

    @property
    def operator(self) -> Operator:
        """What an operator holding the admin key may do to every session (:mod:`hermes_actors.operator_port`)."""
        ...

    @property
    def conversations(self) -> ConversationBook:
        """The API's ``/v1/conversations``, each a session (:mod:`hermes_actors.conversation_port`)."""
        ...

    @property
    def approvals(self) -> ApprovalDesk:
        """Requests for approval (:mod:`hermes_actors.approval_port`): the operator's ``/api/approvals`` and the
        console."""
        ...

    @property
    def jobs(self) -> JobBook:
        """The scheduled turns (:mod:`hermes_actors.job_port`): the operator's ``/api/jobs`` and the console."""
        ...


class Inbox(ChatInbox, ApiInbox, Protocol):
    """Both ports in one object: what the runtime hands every entry point's :meth:`Adapter.start`. Each adapter
    types its ``start`` against the port it uses (:class:`ChatInbox`, or :class:`ApiInbox` for the API server)."""


async def accept_many_async(
    inbox: ChatInbox, batch: Sequence[InboundMessage], *, cursor: PollCursor | None = None
) -> list[AcceptResult]:
    """:meth:`ChatInbox.accept_many` for an adapter on an event loop: the commit waits on a worker thread, so the
    loop goes on serving the adapter's other connections meanwhile.

    Cancelled (the adapter stopping) while the commit runs, it still waits for that commit before raising
    :class:`asyncio.CancelledError`, so a stop never leaves a batch whose outcome nobody saw.
    """
    commit = asyncio.ensure_future(asyncio.to_thread(inbox.accept_many, batch, cursor=cursor))
    try:
        return await asyncio.shield(commit)
    except asyncio.CancelledError:
        await asyncio.wait([commit])
        if not commit.cancelled():
            commit.exception()  # seen here: the caller, stopping, hears of the commit no more
        raise


class Adapter(Protocol):
    """A platform entry point the daemon starts and stops.

    It is built from its config section before the runtime exists (the runtime needs its reply senders), then
    started with the :class:`Inbox`, into which it feeds inbound messages (``inbox.accept_many``).
    """

    platform: str
    capabilities: Capabilities

    def senders(self) -> Sequence[ReplySender]:
        """The reply senders to register with the runtime's outbox."""
        ...

    def start(self, inbox: Inbox) -> None:
        """Start receiving (bind servers, start polls); raise :class:`PlatformError` if it cannot."""
        ...

    def stop(self, timeout: float = 10.0) -> None:
        """Stop receiving; return within about ``timeout`` seconds."""
        ...

    def describe(self) -> list[str]:
        """Lines for the daemon's banner: where this entry point listens and how to talk to it."""
        ...
