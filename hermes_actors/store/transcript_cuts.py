"""Messages taken out of a transcript (``TranscriptCuts``): the tail a stateless client no longer sends (it
regenerated an answer or edited a message), an item an API client deleted from its conversation.

A cut message takes its attachment rows and full-text index rows with it, as a deleted session's messages do (the
files those rows named are said in the :class:`Cut`, to be removed once the cut has committed); the session's
message and tool-call counters shrink by what was cut, while its token counters keep what the model was paid for.
Written once over the database seam for both stores.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from hermes_actors.store.sql import SqlTable

__all__ = ["Cut", "TranscriptCuts"]

_calls = msgspec.json.Decoder(list[Any])


def _call_count(tool_calls: Any) -> int:
    if tool_calls is None:
        return 0
    try:
        return len(_calls.decode(tool_calls))
    except msgspec.DecodeError:  # a row written as an array by the store itself: never expected
        return 0


class Cut(msgspec.Struct, frozen=True, kw_only=True):
    """What a cut deleted: how many ``messages``, and the media ``files`` their attachments named (for
    :meth:`~hermes_actors.store.attachments.Attachments.remove_unreferenced` once the cut has committed)."""

    messages: int = 0
    files: frozenset[str] = frozenset()


class TranscriptCuts(SqlTable):
    """Deletes chosen messages of one session and keeps its counters true."""

    def cut(self, session_id: str, message_ids: Sequence[int]) -> Cut:
        """Delete the messages ``message_ids`` of ``session_id`` (ids of other sessions are left alone)."""
        if not message_ids:
            return Cut()
        dialect = self._db.dialect
        with self._db.transaction(savepoint=False):
            ref = self._db.value("SELECT ref FROM sessions WHERE id = ?", (session_id,))
            if ref is None:
                return Cut()
            chosen = f"session_ref = ? AND {dialect.member('id')}"
            params = (ref, dialect.members([int(i) for i in message_ids]))
            rows = self._db.execute(f"SELECT tool_calls FROM messages WHERE {chosen}", params)
            if not rows:
                return Cut()
            files = self._db.execute(
                f"DELETE FROM attachments WHERE message_id IN (SELECT id FROM messages WHERE {chosen}) RETURNING path",
                params,
            )
            self._db.execute(f"DELETE FROM messages WHERE {chosen}", params)
            calls = sum(_call_count(tool_calls) for (tool_calls,) in rows)
            self._db.execute(
                f"UPDATE sessions SET message_count = {dialect.greatest('message_count - ?', '0')}, "
                f"tool_call_count = {dialect.greatest('tool_call_count - ?', '0')} WHERE ref = ?",
                (len(rows), calls, ref),
            )
            return Cut(messages=len(rows), files=frozenset(str(path) for (path,) in files if path is not None))

    def cut_from(self, session_id: str, first_id: int) -> Cut:
        """Delete the messages of ``session_id`` from ``first_id`` on (the tail)."""
        with self._db.transaction(savepoint=False):
            rows = self._db.execute(
                "SELECT m.id FROM messages AS m JOIN sessions AS s ON s.ref = m.session_ref "
                "WHERE s.id = ? AND m.id >= ?",
                (session_id, first_id),
            )
            return self.cut(session_id, [int(message_id) for (message_id,) in rows])
