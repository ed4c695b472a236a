"""Messages taken out of a transcript (``TranscriptCuts``): the tail a stateless client no longer sends (it
regenerated an answer or edited a message), an item an API client deleted from its conversation.

A cut message takes its attachment rows and full-text index rows with it, as a deleted session's messages do; the
session's message and tool-call counters shrink by what was cut, while its token counters keep what the model was
paid for. Written once over the database seam for both stores.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from hermes_actors.store.sql import SqlTable

__all__ = ["TranscriptCuts"]

_calls = msgspec.json.Decoder(list[Any])


def _call_count(tool_calls: Any) -> int:
    if tool_calls is None:
        return 0
    try:
        return len(_calls.decode(tool_calls))
    except msgspec.DecodeError:  # a row written as an array by the store itself: never expected
        return 0


class TranscriptCuts(SqlTable):
    """Deletes chosen messages of one session and keeps its counters true."""

    def cut(self, session_id: str, message_ids: Sequence[int]) -> int:
        """Delete the messages ``message_ids`` of ``session_id`` (ids of other sessions are left alone); how many
        were deleted."""
        if not message_ids:
            return 0
        dialect = self._db.dialect
        with self._db.transaction(savepoint=False):
            ref = self._db.value("SELECT ref FROM sessions WHERE id = ?", (session_id,))
            if ref is None:
                return 0
            chosen = f"session_ref = ? AND {dialect.member('id')}"
            params = (ref, dialect.members([int(i) for i in message_ids]))
            rows = self._db.execute(f"SELECT tool_calls FROM messages WHERE {chosen}", params)
            if not rows:
                return 0
            self._db.execute(f"DELETE FROM messages WHERE {chosen}", params)
            calls = sum(_call_count(tool_calls) for (tool_calls,) in rows)
            self._db.execute(
                f"UPDATE sessions SET message_count = {dialect.greatest('message_count - ?', '0')}, "
                f"tool_call_count = {dialect.greatest('tool_call_count - ?', '0')} WHERE ref = ?",
                (len(rows), calls, ref),
            )
            return len(rows)

    def cut_from(self, session_id: str, first_id: int) -> int:
        """Delete the messages of ``session_id`` from ``first_id`` on (the tail); how many were deleted."""
        with self._db.transaction(savepoint=False):
            rows = self._db.execute(
                "SELECT m.id FROM messages AS m JOIN sessions AS s ON s.ref = m.session_ref "
                "WHERE s.id = ? AND m.id >= ?",
                (session_id, first_id),
            )
            return self.cut(session_id, [int(message_id) for (message_id,) in rows])
