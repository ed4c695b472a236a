"""Reads of the outbox as its rows stand, for people: a message's replies with their attempts (``hermesctl messages
show``), the event deliveries (``hermesctl events deliveries``), and when a delivery was queued (an event webhook's
``give_up_after_s``)."""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from hermes_actors.store.sql import SqlTable

__all__ = ["Deliveries", "DeliveryRow", "DeliveryState"]

_COLUMNS = (
    "id, session_id, platform, account_id, chat_id, payload, created_at, attempts, next_attempt_at, sent_at, "
    "abandoned_at, last_error"
)


class DeliveryState(enum.StrEnum):
    """Where an outbox row stands."""

    QUEUED = "queued"  # not tried yet
    RETRYING = "retrying"  # tried, failed, waiting for its next attempt
    SENT = "sent"
    DEAD = "dead"  # given up: a dead letter


class DeliveryRow(msgspec.Struct, frozen=True, kw_only=True):
    """An outbox row with what became of it: its attempts, when it was sent or given up, its last error."""

    id: int
    session_id: str | None
    platform: str
    account_id: str
    chat_id: str | None
    payload: bytes
    created_at: float
    attempts: int
    next_attempt_at: float
    sent_at: float | None
    abandoned_at: float | None
    last_error: str | None

    @property
    def state(self) -> DeliveryState:
        """Where the row stands."""
        if self.sent_at is not None:
            return DeliveryState.SENT
        if self.abandoned_at is not None:
            return DeliveryState.DEAD
        return DeliveryState.RETRYING if self.last_error is not None else DeliveryState.QUEUED


def _row(values: tuple[Any, ...]) -> DeliveryRow:
    fields = dict(zip(DeliveryRow.__struct_fields__, values, strict=True))
    return DeliveryRow(**{**fields, "payload": bytes(fields["payload"])})


_WHERE_STATE = {
    DeliveryState.SENT: "sent_at IS NOT NULL",
    DeliveryState.DEAD: "abandoned_at IS NOT NULL",
    DeliveryState.RETRYING: "sent_at IS NULL AND abandoned_at IS NULL AND last_error IS NOT NULL",
    DeliveryState.QUEUED: "sent_at IS NULL AND abandoned_at IS NULL AND last_error IS NULL",
}


class Deliveries(SqlTable):
    """The outbox's rows as they stand (reads only)."""

    def get(self, outbox_id: int) -> DeliveryRow | None:
        """One row, or ``None``."""
        rows = self._db.execute(f"SELECT {_COLUMNS} FROM outbox WHERE id = ?", (outbox_id,))
        return _row(rows[0]) if rows else None

    def of_platform(
        self,
        platform: str,
        *,
        account_id: str | None = None,
        state: DeliveryState | None = None,
        limit: int = 50,
    ) -> list[DeliveryRow]:
        """The newest rows of ``platform`` first (of one account, in one state, when given)."""
        where, params = ["platform = ?"], [platform]
        if account_id is not None:
            where.append("account_id = ?")
            params.append(account_id)
        if state is not None:
            where.append(_WHERE_STATE[state])
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM outbox WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT ?", (*params, limit)
        )
        return [_row(r) for r in rows]

    def to_chat(
        self, platform: str, account_id: str, chat_id: str | None, *, since: float, limit: int = 200
    ) -> list[DeliveryRow]:
        """The rows to one chat queued at or after ``since``, oldest first (the replies a message may have had)."""
        chat = "" if chat_id is None else " AND chat_id = ?"
        params: tuple[Any, ...] = (platform, account_id, since, *(() if chat_id is None else (chat_id,)), limit)
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM outbox WHERE platform = ? AND account_id = ? AND created_at >= ?{chat} "
            "ORDER BY id LIMIT ?",
            params,
        )
        return [_row(r) for r in rows]

    def queued_at(self, outbox_id: int) -> float | None:
        """When row ``outbox_id`` was queued (or last replayed); ``None`` for no such row."""
        found = self._db.value("SELECT created_at FROM outbox WHERE id = ?", (outbox_id,))
        return None if found is None else float(found)
