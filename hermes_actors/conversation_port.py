"""The conversations port: OpenAI's ``/v1/conversations`` as the API server sees them, each one a stored session.

A conversation is a session of the API server's (its chat id is the conversation's id) with a row of its own for the
metadata and the API key's scope. Its items are the messages of that session's lineage, oldest first: a compression
child's summary and the copies of its parent's last messages are left out, so each message is one item, under its
own id. The entry point finds the port on its :class:`~hermes_actors.ports.ApiInbox` (``inbox.conversations``);
every call blocks and is made off the event loop.

Errors: :class:`~hermes_actors.errors.SessionClosedError` (items added to a conversation whose session has ended),
:class:`~hermes_actors.errors.SessionBusyError` (its session is held by another process, for a deletion).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import msgspec

from hermes_actors.messages import ContextMessage
from hermes_actors.routing import SessionSource

__all__ = ["ConversationBook", "ConversationItem", "ConversationRecord"]


class ConversationRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One conversation: ``session_id`` is the session it goes on in now (the newest of its lineage; the one it
    began in is kept by the store), ``scope`` the API key's fingerprint (``None`` without a key), ``user_id`` the
    user its session speaks for."""

    id: str
    session_id: str
    scope: str | None
    metadata: dict[str, str]
    created_at: float
    user_id: str | None = None


class ConversationItem(msgspec.Struct, frozen=True, kw_only=True):
    """One stored message of a conversation: ``id`` is the message's id in the store; ``role`` is ``user``,
    ``assistant``, ``tool`` or ``system``; an assistant message may carry ``tool_calls`` (JSON, OpenAI's shape), a
    tool message answers ``tool_call_id``."""

    id: int
    role: str
    content: str
    created_at: float
    tool_calls: str | None = None
    tool_call_id: str | None = None


class ConversationBook(Protocol):
    """The conversations of the API, each read and changed within one scope (an API key's fingerprint): another
    scope's conversation is as unknown as a missing one (``None``)."""

    def open(
        self, conversation: ConversationRecord, source: SessionSource, items: Sequence[ContextMessage]
    ) -> ConversationRecord:
        """Store ``conversation`` with a new live session opened from ``source`` holding ``items``."""
        ...

    def find(self, conversation_id: str, scope: str | None) -> ConversationRecord | None:
        """The conversation ``conversation_id`` of ``scope``."""
        ...

    def set_metadata(
        self, conversation_id: str, scope: str | None, metadata: dict[str, str]
    ) -> ConversationRecord | None:
        """Replace the conversation's metadata; the conversation as it is now."""
        ...

    def delete(self, conversation_id: str, scope: str | None) -> bool:
        """Delete the conversation with its sessions, their messages and the responses made in them."""
        ...

    def items(self, conversation_id: str, scope: str | None, *, current: bool = False) -> list[ConversationItem] | None:
        """The conversation's items, oldest first; ``current``: only the messages of the session it goes on in now,
        as its next turn's model is sent them (after a compression, the summary first, as a ``system`` item)."""
        ...

    def add_items(
        self, conversation_id: str, scope: str | None, items: Sequence[ContextMessage]
    ) -> list[ConversationItem] | None:
        """Append ``items`` to the conversation's session (no turn runs); the items as stored."""
        ...

    def delete_item(self, conversation_id: str, scope: str | None, item_id: int) -> bool | None:
        """Delete the item ``item_id``; whether the conversation held it (``None``: no such conversation)."""
        ...
