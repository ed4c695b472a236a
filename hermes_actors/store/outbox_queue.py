"""The durable outbound queue: replies committed with their turn and delivered afterwards.

A row is unsent until ``sent_at`` or ``abandoned_at`` is set; ``attempts`` counts sends begun, so a row with
``attempts > 0`` may already have reached the platform. On PostgreSQL the commit that queues a reply also sends
``NOTIFY hermes_outbox`` with its platform and, when it fits, the row (:mod:`hermes_actors.store.pg.turn_relay`).
"""

from __future__ import annotations

import functools
from typing import Any

from hermes_actors.store.records import OutboxRow, QueueSummary
from hermes_actors.store.sql import Dialect, SqlTable, notice_payload

__all__ = ["OUTBOX_COLUMNS", "Outbox", "QueuedReply", "outbox_row"]

OUTBOX_COLUMNS = (
    "id, session_id, platform, account_id, chat_id, thread_id, payload, created_at, attempts, next_attempt_at"
)
"""The columns of an :class:`OutboxRow`, in its fields' order."""

_UNSENT = "sent_at IS NULL AND abandoned_at IS NULL"
_ADD = (
    "INSERT INTO outbox (session_id, platform, account_id, chat_id, thread_id, payload, created_at, attempts) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id"
)


def _notified(added: str, told: str, platform: str) -> tuple[str, str]:
    """The query building the notice of each row of ``added`` (a ``WITH`` query), and the ``SELECT`` sending them
    on ``hermes_outbox`` from that query once it is named ``told``: the row, or the platform (``platform``, a
    parameter) when the row is too large for a notice (:func:`~hermes_actors.store.pg.turn_relay.reply_notice`)."""
    return (
        f"SELECT id, json_build_array({platform}::text, id, encode(payload, 'base64'), created_at)::text AS whole "
        f"FROM {added}",
        f"SELECT id, pg_notify('hermes_outbox', {notice_payload('whole', platform)}) FROM {told}",
    )


_TOLD, _NOTIFY = _notified("added", "told", "?")
_ADD_NOTIFIED = (
    f"WITH added AS ({_ADD.removesuffix('RETURNING id')}RETURNING id, payload, created_at), told AS ({_TOLD}) {_NOTIFY}"
)


@functools.cache
def _add_fenced(name: str) -> str:
    """The insert and its notice as a fence's ``WITH`` queries (:meth:`QueuedReply.fenced`), the last one
    ``name``: written only when the lease was renewed."""
    told, notify = _notified(f"{name}_added", f"{name}_told", ":out_platform")
    return (
        f"{name}_added AS (INSERT INTO outbox (session_id, platform, account_id, chat_id, thread_id, payload, "
        "created_at, attempts) SELECT :out_session::text, :out_platform::text, :out_account::text, :out_chat::text, "
        ":out_thread::text, :out_payload::bytea, :out_at::float8, :out_attempts::int "
        f"WHERE EXISTS (SELECT FROM renewed) RETURNING id, payload, created_at), {name}_told AS ({told}), "
        f"{name} AS ({notify})"
    )


class QueuedReply:
    """A reply queued under a session lease's fence (:meth:`Outbox.adding`), a
    :class:`~hermes_actors.store.term_guard.FencedWrite`: in the fence's own statement where the store carries it as
    one (PostgreSQL, a shard host), else by :meth:`Outbox.add` after the check. :attr:`id`: its row id."""

    __slots__ = ("_at", "_fields", "_outbox", "id")

    def __init__(self, outbox: Outbox, fields: dict[str, Any], at: float) -> None:
        self._outbox = outbox
        self._fields = fields
        self._at = at
        self.id = 0

    def fenced(self, name: str) -> tuple[str, dict[str, Any]]:
        """The insert and its notice as a fence's ``WITH`` queries (the last returns the row's id), and their
        parameters."""
        fields = self._fields
        return _add_fenced(name), {
            "out_session": fields["session_id"],
            "out_platform": fields["platform"],
            "out_account": fields["account_id"],
            "out_chat": fields["chat_id"],
            "out_thread": fields["thread_id"],
            "out_payload": fields["payload"],
            "out_at": self._at,
            "out_attempts": fields["attempts"],
        }

    def took(self, rows: list[dict[str, Any]]) -> None:
        """The row the fence's statement inserted."""
        (row,) = rows
        self.id = int(row["id"])

    def alone(self) -> None:
        """:meth:`Outbox.add`."""
        self.id = self._outbox.add(**self._fields)


def outbox_row(row: tuple[Any, ...]) -> OutboxRow:
    """An :class:`OutboxRow` from the values of :data:`OUTBOX_COLUMNS` (PostgreSQL's payload made ``bytes``)."""
    fields = dict(zip(OutboxRow.__struct_fields__, row, strict=True))
    return OutboxRow(**{**fields, "payload": bytes(fields["payload"])})


class Outbox(SqlTable):
    """Replies committed with their turn, delivered afterwards."""

    def add(
        self,
        *,
        session_id: str | None,
        platform: str,
        account_id: str,
        chat_id: str | None,
        thread_id: str | None,
        payload: bytes,
        attempts: int = 0,
    ) -> int:
        """Queue a reply; return its row id. ``attempts=1`` counts its first send ahead, in the caller's
        transaction: the outbox that makes that send need not count it (see :meth:`uncount_attempts`). On
        PostgreSQL its commit notifies whoever delivers ``platform``'s replies (a cluster dispatcher, an API
        replica's waiting requests), so they look at once."""
        params: tuple[Any, ...] = (
            session_id,
            platform,
            account_id,
            chat_id,
            thread_id,
            payload,
            self._clock(),
            attempts,
        )
        if self._db.dialect is Dialect.POSTGRES:
            return int(self._db.execute(_ADD_NOTIFIED, (*params, platform, platform))[0][0])
        return int(self._db.execute(_ADD, params)[0][0])

    def adding(
        self,
        *,
        session_id: str | None,
        platform: str,
        account_id: str,
        chat_id: str | None,
        thread_id: str | None,
        payload: bytes,
        attempts: int = 0,
    ) -> QueuedReply:
        """:meth:`add` as a write a session lease's fence carries (:class:`QueuedReply`): in the fence's statement on
        a shard host, after the check elsewhere."""
        fields = {
            "session_id": session_id,
            "platform": platform,
            "account_id": account_id,
            "chat_id": chat_id,
            "thread_id": thread_id,
            "payload": payload,
            "attempts": attempts,
        }
        return QueuedReply(self, fields, self._clock())

    def backlog(self) -> int:
        """Count the replies neither sent nor given up."""
        return int(self._db.value(f"SELECT count(*) FROM outbox WHERE {_UNSENT}") or 0)

    def summary_by_platform(self) -> dict[str, QueueSummary]:
        """Per platform, how many replies are neither sent nor given up and when the oldest was queued."""
        rows = self._db.execute(f"SELECT platform, count(*), min(created_at) FROM outbox WHERE {_UNSENT} GROUP BY 1")
        return {str(p): QueueSummary(count=int(n), oldest_at=float(at)) for p, n, at in rows}

    def unsent(self, platform: str | None = None, *, limit: int = 1000) -> list[OutboxRow]:
        """Return undelivered rows in id order (per chat, that is the order to send them in)."""
        where = _UNSENT + (" AND platform = ?" if platform is not None else "")
        params: tuple[Any, ...] = (platform, limit) if platform is not None else (limit,)
        rows = self._db.execute(
            f"SELECT {OUTBOX_COLUMNS} FROM outbox WHERE {where} ORDER BY id LIMIT ?", params, keyed=True
        )
        return [outbox_row(r) for r in rows]

    def begin_attempt(self, outbox_id: int) -> int:
        """Count a send attempt before it is made; return the attempt number (1 for the first)."""
        rows = self._db.execute(
            "UPDATE outbox SET attempts = attempts + 1 WHERE id = ? RETURNING attempts", (outbox_id,)
        )
        return int(rows[0][0]) if rows else 0

    def begin_attempts(self, outbox_ids: list[int]) -> None:
        """Count a send attempt of each row, before the sends are made (one statement for a batch)."""
        if outbox_ids:
            dialect = self._db.dialect
            self._db.execute(
                f"UPDATE outbox SET attempts = attempts + 1 WHERE {dialect.member('id')}",
                (dialect.members(outbox_ids),),
            )

    def uncount_attempts(self, outbox_ids: list[int]) -> None:
        """Take back the attempt counted ahead (:meth:`add` with ``attempts=1``) of each unsent row whose send never
        began, so a later start does not flag it as a possible duplicate."""
        if outbox_ids:
            dialect = self._db.dialect
            self._db.execute(
                f"UPDATE outbox SET attempts = attempts - 1 WHERE {dialect.member('id')} AND attempts > 0 "
                "AND sent_at IS NULL",
                (dialect.members(outbox_ids),),
            )

    def mark_sent(self, outbox_id: int, platform_message_id: str | None) -> None:
        """Record delivery."""
        self.mark_sent_many([(outbox_id, platform_message_id)])

    def mark_sent_many(self, sent: list[tuple[int, str | None]]) -> None:
        """Record the delivery of several rows: (row id, platform message id) pairs."""
        now = self._clock()
        with self._db.transaction(savepoint=False):
            self._db.executemany(
                "UPDATE outbox SET sent_at = ?, platform_message_id = ?, last_error = NULL WHERE id = ?",
                [(now, platform_id, outbox_id) for outbox_id, platform_id in sent],
            )

    def abandon(self, outbox_id: int, reason: str) -> None:
        """Give a reply up: it is never sent (a handoff whose delivery failed)."""
        self._db.execute(
            "UPDATE outbox SET abandoned_at = ?, last_error = ? WHERE id = ?", (self._clock(), reason, outbox_id)
        )

    def mark_failed(self, outbox_id: int, error: str, retry_at: float) -> None:
        """Record a failed attempt and when to try again."""
        self._db.execute(
            "UPDATE outbox SET last_error = ?, next_attempt_at = ? WHERE id = ?", (error, retry_at, outbox_id)
        )

    def prune_finished(self, before: float, *, limit: int = -1) -> int:
        """Forget replies sent or given up before ``before``, at most ``limit`` (-1: all) of them; return how many."""
        return self._db.count(
            "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox WHERE (sent_at IS NOT NULL AND sent_at < ?) "
            "OR (abandoned_at IS NOT NULL AND abandoned_at < ?) LIMIT ?)",
            (before, before, self._db.dialect.limit(None if limit < 0 else limit)),
        )
