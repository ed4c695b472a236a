"""The :class:`~hermes_actors.conversation_port.ConversationBook` of a running gateway (or a cluster replica): the
API's conversations as sessions.

Opening a conversation creates its session (live, no route yet: the API points the conversation's routing key at it
with its first turn, as a client's ``X-Hermes-Session-Id`` does) and the conversation's row, with the items given,
in one write. Items are the lineage's messages (:func:`items_of`); items added or deleted between turns are written
on the store writer and are seen by the conversation's next turn, which the API sends with the conversation's items
read at that moment. A conversation is deleted through its sessions, newest first, the way an operator deletes one
(through a live session's actor, :class:`~hermes_actors.runtime.operator.SessionAdmin`); its row goes with the
session it began in.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import msgspec

from hermes_actors.agents.history import is_summary
from hermes_actors.conversation_port import ConversationItem, ConversationRecord
from hermes_actors.errors import SessionNotFoundError
from hermes_actors.messages import ContextMessage
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.operator import SessionAdmin
from hermes_actors.runtime.operator_reads import carried_over
from hermes_actors.runtime.store_access import StoreAccess
from hermes_actors.store import MessageRecord, NewMessage, Role, StoreInterface
from hermes_actors.store.conversations import ConversationTable
from hermes_actors.store.transcript_cuts import Cut, TranscriptCuts

__all__ = ["StoreConversations", "items_of"]

_ROLES = {"user": Role.USER, "assistant": Role.ASSISTANT, "tool": Role.TOOL, "system": Role.SYSTEM}


def _item(message: MessageRecord) -> ConversationItem:
    return ConversationItem(
        id=message.id,
        role=message.role,
        content=message.content or "",
        created_at=message.created_at,
        tool_calls=message.tool_calls,
        tool_call_id=message.tool_call_id,
    )


def items_of(store: StoreInterface, tip_id: str) -> list[tuple[str, MessageRecord]]:
    """The messages of the lineage ending at ``tip_id``, root first, each with its session; a compression child's
    summary and the copies it carried of its parent's last messages are left out (each message counts once)."""
    found: list[tuple[str, MessageRecord]] = []
    previous: list[MessageRecord] = []
    for member in store.lineage_chain(tip_id):
        messages = store.load_transcript(member)
        shown = messages
        if previous and messages and is_summary(messages[0]):
            after = messages[1:]
            shown = after[carried_over(previous, after) :]
        found.extend((member, m) for m in shown)
        previous = messages
    return found


def _new(items: Sequence[ContextMessage], now: float) -> list[NewMessage]:
    return [
        NewMessage(
            role=_ROLES.get(item.role, Role.USER),
            content=item.content,
            tool_calls=item.tool_calls,
            tool_call_id=item.tool_call_id,
            created_at=now,
        )
        for item in items
    ]


class StoreConversations:
    """The conversations on ``access`` (a gateway's reader pool and writer, or a cluster's database); ``admin``
    deletes their sessions; ``agent_for`` names the agent a new conversation's session is bound to."""

    def __init__(
        self,
        access: StoreAccess,
        admin: SessionAdmin,
        *,
        agent_for: Callable[[SessionSource], str | None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._access = access
        self._admin = admin
        self._agent_for = agent_for
        self._clock = clock

    def open(
        self, conversation: ConversationRecord, source: SessionSource, items: Sequence[ContextMessage]
    ) -> ConversationRecord:
        """Store ``conversation`` with a new live session from ``source`` holding ``items``."""
        agent = self._agent_for(source) if self._agent_for is not None else None
        now = self._clock()

        def open_(store: StoreInterface) -> ConversationRecord:
            session = store.create_session(source, agent=agent)
            opened = msgspec.structs.replace(conversation, session_id=session.id, user_id=session.user_id)
            ConversationTable(store.sql, self._clock).add(opened)
            if items:
                store.append_messages(session.id, _new(items, now))
            return opened

        return self._access.write(open_)

    def find(self, conversation_id: str, scope: str | None) -> ConversationRecord | None:
        """The conversation, its ``session_id`` the session it goes on in now."""
        with self._access.read() as store:
            return self._current(store, conversation_id, scope)

    def set_metadata(
        self, conversation_id: str, scope: str | None, metadata: dict[str, str]
    ) -> ConversationRecord | None:
        """Replace the metadata; the conversation as it is now."""
        if not self._access.write(
            lambda store: ConversationTable(store.sql, self._clock).set_metadata(conversation_id, scope, metadata)
        ):
            return None
        return self.find(conversation_id, scope)

    def delete(self, conversation_id: str, scope: str | None) -> bool:
        """Delete the conversation's sessions, newest first (its row goes with the first)."""
        with self._access.read() as store:
            found = ConversationTable(store.sql, self._clock).find(conversation_id, scope)
            chain = store.lineage_chain(found.session_id) if found is not None else []
        if found is None:
            return False
        for member in reversed(chain):
            try:
                self._admin.delete(self._admin.check(member))
            except SessionNotFoundError:
                continue  # deleted meanwhile
        return True

    def items(self, conversation_id: str, scope: str | None, *, current: bool = False) -> list[ConversationItem] | None:
        """The conversation's items, oldest first (``current``: its current session's messages, summary first)."""
        with self._access.read() as store:
            found = self._current(store, conversation_id, scope)
            if found is None:
                return None
            if current:
                return [_item(message) for message in store.load_transcript(found.session_id)]
            return [_item(message) for _, message in items_of(store, found.session_id)]

    def add_items(
        self, conversation_id: str, scope: str | None, items: Sequence[ContextMessage]
    ) -> list[ConversationItem] | None:
        """Append ``items`` to the conversation's current session; the items as stored."""
        now = self._clock()
        new = _new(items, now)

        def add(store: StoreInterface) -> list[ConversationItem] | None:
            found = self._current(store, conversation_id, scope)
            if found is None:
                return None
            ids = store.append_messages(found.session_id, new)
            return [
                ConversationItem(
                    id=message_id,
                    role=m.role.value,
                    content=m.content or "",
                    created_at=now,
                    tool_calls=m.tool_calls,
                    tool_call_id=m.tool_call_id,
                )
                for message_id, m in zip(ids, new, strict=True)
            ]

        return self._access.write(add)

    def delete_item(self, conversation_id: str, scope: str | None, item_id: int) -> bool | None:
        """Delete the item ``item_id`` of the conversation."""

        def delete(store: StoreInterface) -> Cut | None:
            found = self._current(store, conversation_id, scope)
            if found is None:
                return None
            owner = next((sid for sid, m in items_of(store, found.session_id) if m.id == item_id), None)
            return TranscriptCuts(store.sql, self._clock).cut(owner, [item_id]) if owner is not None else Cut()

        cut = self._access.write(delete)
        if cut is None:
            return None
        if cut.files:  # once the cut has committed
            with self._access.read() as store:
                store.attachments.remove_unreferenced(cut.files)
        return cut.messages > 0

    def _current(self, store: StoreInterface, conversation_id: str, scope: str | None) -> ConversationRecord | None:
        found = ConversationTable(store.sql, self._clock).find(conversation_id, scope)
        if found is None:
            return None
        return msgspec.structs.replace(found, session_id=store.lineage_tip(found.session_id))
