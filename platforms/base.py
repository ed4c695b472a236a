"""What the runtime needs of a platform adapter, and what it hands one: the ports of :mod:`hermes_actors.ports`.

Adapters build on :mod:`hermes_actors.messages` and :mod:`hermes_actors.routing`; they reach the runtime only
through the :class:`~hermes_actors.ports.Inbox` handed to :meth:`Adapter.start`, typed as the port they use (a chat
adapter's :class:`~hermes_actors.ports.ChatInbox`, the API server's :class:`~hermes_actors.ports.ApiInbox`). The
names are re-exported here so an adapter author imports them from one place.
"""

from __future__ import annotations

from hermes_actors.ports import (
    AcceptResult,
    Adapter,
    ApiInbox,
    Capabilities,
    ChatInbox,
    ConnectionReporter,
    Inbox,
    PollCursor,
    ReplySender,
    SendError,
    SessionOwner,
    ThreadCreator,
    accept_many_async,
)

__all__ = [
    "AcceptResult",
    "Adapter",
    "ApiInbox",
    "Capabilities",
    "ChatInbox",
    "ConnectionReporter",
    "Inbox",
    "PollCursor",
    "ReplySender",
    "SendError",
    "SessionOwner",
    "ThreadCreator",
    "accept_many_async",
]
