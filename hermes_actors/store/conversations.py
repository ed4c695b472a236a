"""The API's ``/v1/conversations`` (``ConversationTable``): a row per conversation, tied to the session it began in.

A row goes with that session (``ON DELETE CASCADE``). It holds what a session does not: the metadata the client set
and the API key's scope. Every read and change is within one scope: another key's conversation is as unknown as a
missing one. A record read here names the session the conversation began in, and that session's user. Written once
over the database seam for both stores.
"""

from __future__ import annotations

from typing import Any

import msgspec

from hermes_actors.conversation_port import ConversationRecord
from hermes_actors.store.sql import SqlTable

__all__ = ["ConversationTable"]

_metadata = msgspec.json.Decoder(dict[str, str])
_SELECT = (
    "SELECT c.id, c.session_id, c.scope, c.metadata, c.created_at, s.user_id FROM api_conversations AS c "
    "JOIN sessions AS s ON s.id = c.session_id WHERE c.id = ? AND c.scope = ?"
)


class ConversationTable(SqlTable):
    """The conversations of the API, read and changed within a scope."""

    def add(self, conversation: ConversationRecord) -> None:
        """Store ``conversation``, begun in its ``session_id``."""
        self._db.execute(
            "INSERT INTO api_conversations (id, session_id, scope, metadata, created_at) VALUES (?, ?, ?, ?, ?)",
            (
                conversation.id,
                conversation.session_id,
                conversation.scope or "",
                msgspec.json.encode(conversation.metadata).decode(),
                conversation.created_at,
            ),
        )

    def find(self, conversation_id: str, scope: str | None) -> ConversationRecord | None:
        """The conversation ``conversation_id`` of ``scope``, with the session it began in."""
        rows = self._db.execute(_SELECT, (conversation_id, scope or ""))
        if not rows:
            return None
        return self._record(rows[0])

    def set_metadata(self, conversation_id: str, scope: str | None, metadata: dict[str, str]) -> bool:
        """Replace the conversation's metadata; whether there is such a conversation."""
        changed = self._db.count(
            "UPDATE api_conversations SET metadata = ? WHERE id = ? AND scope = ?",
            (msgspec.json.encode(metadata).decode(), conversation_id, scope or ""),
        )
        return changed > 0

    @staticmethod
    def _record(row: tuple[Any, ...]) -> ConversationRecord:
        conversation_id, session_id, scope, metadata, created_at, user_id = row
        return ConversationRecord(
            id=str(conversation_id),
            session_id=str(session_id),
            scope=str(scope) or None,
            metadata=_metadata.decode(metadata),
            created_at=float(created_at),
            user_id=None if user_id is None else str(user_id),
        )
