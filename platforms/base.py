"""What the runtime needs of a platform adapter.

Adapters build on :mod:`hermes_actors.messages` and :mod:`hermes_actors.routing`; they reach the runtime only
through the :class:`~hermes_actors.runtime.gateway.Gateway` handed to :meth:`Adapter.start`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import msgspec

from hermes_actors.errors import PlatformError
from hermes_actors.messages import OutboundMessage

if TYPE_CHECKING:
    from hermes_actors.runtime.gateway import Gateway

__all__ = ["Adapter", "Capabilities", "ReplySender", "SendError", "ThreadCreator"]


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


class Adapter(Protocol):
    """A platform entry point the daemon starts and stops.

    It is built from its config section before the gateway exists (the gateway needs its reply senders), then
    started with the gateway, into which it feeds inbound messages with ``gateway.accept``.
    """

    platform: str
    capabilities: Capabilities

    def senders(self) -> Sequence[ReplySender]:
        """The reply senders to register with the gateway's outbox."""
        ...

    def start(self, gateway: Gateway) -> None:
        """Start receiving (bind servers, start polls); raise :class:`PlatformError` if it cannot."""
        ...

    def stop(self, timeout: float = 10.0) -> None:
        """Stop receiving; return within about ``timeout`` seconds."""
        ...

    def describe(self) -> list[str]:
        """Lines for the daemon's banner: where this entry point listens and how to talk to it."""
        ...
