"""The responses of the API's ``/v1/responses`` (``store.responses``): kept with the session their turn ran in.

A row goes with its session (``ON DELETE CASCADE``), so deleting or pruning a session takes its responses with it;
nothing else evicts them. Every read is within one scope (an API key's fingerprint): another key's response is
as unknown as a missing one.
"""

from __future__ import annotations

from typing import Any

from hermes_actors.messages import ResponseRecord
from hermes_actors.store.connection import Table, Transaction

__all__ = ["Responses"]

_COLUMNS = "id, session_id, scope, status, body, created_at, conversation, previous_id, instructions"


def _record(row: tuple[Any, ...]) -> ResponseRecord:
    fields = dict(zip(ResponseRecord.__struct_fields__, row, strict=True))
    return ResponseRecord(**{**fields, "scope": fields["scope"] or None})


class Responses(Table):
    """Stored responses, one row each, read within a scope."""

    def save(self, response: ResponseRecord) -> None:
        """Store ``response``, replacing a row with its id (an in-progress snapshot becomes the final one)."""
        with Transaction(self._db, savepoint=False):
            self._db.execute(
                f"INSERT OR REPLACE INTO api_responses ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    response.id,
                    response.session_id,
                    response.scope or "",
                    response.status,
                    response.body,
                    response.created_at,
                    response.conversation,
                    response.previous_id,
                    response.instructions,
                ),
            )

    def get(self, response_id: str, scope: str | None) -> ResponseRecord | None:
        """The response ``response_id`` of ``scope``, ``None`` when there is none (or it is another scope's)."""
        row = self._db.execute(
            f"SELECT {_COLUMNS} FROM api_responses WHERE id = ? AND scope = ?", (response_id, scope or "")
        ).fetchone()
        return None if row is None else _record(row)

    def delete(self, response_id: str, scope: str | None) -> bool:
        """Delete the response ``response_id`` of ``scope``; whether there was one."""
        with Transaction(self._db, savepoint=False):
            self._db.execute("DELETE FROM api_responses WHERE id = ? AND scope = ?", (response_id, scope or ""))
            return self._db.changes() > 0

    def latest_in(self, scope: str | None, conversation: str) -> ResponseRecord | None:
        """The newest response of ``scope`` in the conversation named ``conversation``, ``None`` before its first."""
        row = self._db.execute(
            f"SELECT {_COLUMNS} FROM api_responses WHERE scope = ? AND conversation = ? "
            "ORDER BY created_at DESC, rowid DESC LIMIT 1",
            (scope or "", conversation),
        ).fetchone()
        return None if row is None else _record(row)
