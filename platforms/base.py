"""What the runtime needs of a platform adapter.

Adapters import only :mod:`hermes_actors.messages` and :mod:`hermes_actors.routing` from the runtime.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from hermes_actors.errors import PlatformError
from hermes_actors.messages import OutboundMessage

__all__ = ["ReplySender", "SendError", "ThreadCreator"]


class SendError(PlatformError):
    """A reply could not be sent.

    ``retry_after_s`` is the platform's own hint (HTTP 429 ``retry_after``); ``outcome_unknown`` says the
    platform may have received it anyway (a timeout after the request left), so a retry may duplicate it.
    """

    def __init__(self, message: str, *, retry_after_s: float | None = None, outcome_unknown: bool = False) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.outcome_unknown = outcome_unknown


class ReplySender(Protocol):
    """Sends replies to one platform.

    ``idempotent_sends`` is true when the platform drops a repeated send of the same reply by itself, so a
    retry after an unknown outcome needs no duplicate flag.
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
