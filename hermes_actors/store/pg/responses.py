"""The API's stored responses on PostgreSQL (``store.responses``), with the rules of
:mod:`hermes_actors.store.responses`: a row goes with its session, every read is within one scope."""

from __future__ import annotations

from typing import Any

from hermes_actors.messages import ResponseRecord
from hermes_actors.store.pg.queues import PgTable

__all__ = ["PgResponses"]

_COLUMNS = "id, session_id, scope, status, body, created_at, conversation, previous_id, instructions"


def _record(row: tuple[Any, ...]) -> ResponseRecord:
    fields = dict(zip(ResponseRecord.__struct_fields__, row, strict=True))
    return ResponseRecord(**{**fields, "scope": fields["scope"] or None, "body": bytes(fields["body"])})


class PgResponses(PgTable):
    """Stored responses, one row each, read within a scope."""

    def save(self, response: ResponseRecord) -> None:
        """Store ``response``, replacing a row with its id; the saved row is its scope's newest (a new ``seq``)."""
        with self._db.transaction(savepoint=False):
            self._db.execute("DELETE FROM api_responses WHERE id = %s", (response.id,))
            self._db.execute(
                f"INSERT INTO api_responses ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
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
            f"SELECT {_COLUMNS} FROM api_responses WHERE id = %s AND scope = %s", (response_id, scope or "")
        )
        return _record(rows[0]) if rows else None

    def delete(self, response_id: str, scope: str | None) -> bool:
        """Delete the response ``response_id`` of ``scope``; whether there was one."""
        deleted = self._db.count("DELETE FROM api_responses WHERE id = %s AND scope = %s", (response_id, scope or ""))
        return deleted > 0

    def latest_in(self, scope: str | None, conversation: str) -> ResponseRecord | None:
        """The newest response of ``scope`` in the conversation named ``conversation``, ``None`` before its first."""
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM api_responses WHERE scope = %s AND conversation = %s "
            "ORDER BY created_at DESC, seq DESC LIMIT 1",
            (scope or "", conversation),
        )
        return _record(rows[0]) if rows else None
