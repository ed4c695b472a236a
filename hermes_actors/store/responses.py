"""The responses of the API's ``/v1/responses`` (``store.responses``): kept with the session their turn ran in.

A row goes with its session (``ON DELETE CASCADE``), so deleting or pruning a session takes its responses with it;
nothing else evicts them. Every read is within one scope (an API key's fingerprint): another key's response is
as unknown as a missing one. Saving a response again replaces its row with a new one, the newest of its scope
(SQLite's ``rowid``, PostgreSQL's ``seq``, breaks a tie of ``created_at``).
"""

from __future__ import annotations

from typing import Any

from hermes_actors.messages import ResponseRecord
from hermes_actors.store.sql import Dialect, SqlTable

__all__ = ["Responses"]

_COLUMNS = "id, session_id, scope, status, body, created_at, conversation, previous_id, instructions"
_ORDER = {Dialect.SQLITE: "rowid", Dialect.POSTGRES: "seq"}  # the order rows were saved in


def _record(row: tuple[Any, ...]) -> ResponseRecord:
    fields = dict(zip(ResponseRecord.__struct_fields__, row, strict=True))
    return ResponseRecord(**{**fields, "scope": fields["scope"] or None, "body": bytes(fields["body"])})


class Responses(SqlTable):
    """Stored responses, one row each, read within a scope."""

    def save(self, response: ResponseRecord) -> None:
        """Store ``response``, replacing a row with its id (an in-progress snapshot becomes the final one)."""
        with self._db.transaction(savepoint=False):
            self._db.execute("DELETE FROM api_responses WHERE id = ?", (response.id,))
            self._db.execute(
                f"INSERT INTO api_responses ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM api_responses WHERE id = ? AND scope = ?", (response_id, scope or "")
        )
        return _record(rows[0]) if rows else None

    def delete(self, response_id: str, scope: str | None) -> bool:
        """Delete the response ``response_id`` of ``scope``; whether there was one."""
        return self._db.count("DELETE FROM api_responses WHERE id = ? AND scope = ?", (response_id, scope or "")) > 0

    def latest_in(self, scope: str | None, conversation: str) -> ResponseRecord | None:
        """The newest response of ``scope`` in the conversation named ``conversation``, ``None`` before its first."""
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM api_responses WHERE scope = ? AND conversation = ? "
            f"ORDER BY created_at DESC, {_ORDER[self._db.dialect]} DESC LIMIT 1",
            (scope or "", conversation),
        )
        return _record(rows[0]) if rows else None
