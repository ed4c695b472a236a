"""The inbound and outbound queues on PostgreSQL: ``store.inbox`` and ``store.outbox``.

The same rules as :mod:`hermes_actors.store.inbox` and :mod:`hermes_actors.store.outbox_queue`: an inbox row is
pending until its turn commits or it is refused, a redelivery (same platform, account and platform message id) is
dropped by the unique key; an outbox row is unsent until sent or given up.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hermes_actors.store.pg.db import Database
from hermes_actors.store.records import InboxKind, InboxRow, InboxState, OutboxRow, QueueSummary

__all__ = ["PgInbox", "PgOutbox", "PgTable"]

_PENDING = InboxState.PENDING.value
_INBOX_COLUMNS = (
    "id, platform, account_id, platform_message_id, routing_key, payload, received_at, state, session_id, owner, kind"
)
_OUTBOX_COLUMNS = (
    "id, session_id, platform, account_id, chat_id, thread_id, payload, created_at, attempts, next_attempt_at"
)
_UNSENT = "sent_at IS NULL AND abandoned_at IS NULL"


def _inbox_row(row: tuple[Any, ...]) -> InboxRow:
    fields = dict(zip(InboxRow.__struct_fields__, row, strict=True))
    state, kind = InboxState(fields["state"]), InboxKind(fields["kind"])
    return InboxRow(**{**fields, "payload": bytes(fields["payload"]), "state": state, "kind": kind})


def _outbox_row(row: tuple[Any, ...]) -> OutboxRow:
    fields = dict(zip(OutboxRow.__struct_fields__, row, strict=True))
    return OutboxRow(**{**fields, "payload": bytes(fields["payload"])})


def _limit(limit: int) -> int | None:
    """A ``limit`` of -1 (everything, as SQLite reads it) as PostgreSQL's ``LIMIT NULL``."""
    return None if limit < 0 else limit


class PgTable:
    """The base of the PostgreSQL table classes: the database and the clock."""

    __slots__ = ("_clock", "_db")

    def __init__(self, db: Database, clock: Callable[[], float]) -> None:
        self._db = db
        self._clock = clock


class PgInbox(PgTable):
    """Durable inbound queue with dedupe on (platform, account, platform message id).

    ``shard_check`` (cluster mode, :meth:`PostgresStore.fence_shards`) runs when a row is completed for a session,
    inside the transaction that completes it (a turn's): a host that lost the row's shard cannot commit it. The
    shard checked is the row's own (the one its host pulled it from), which is its session's except for a command
    that re-points its key to a session of another shard (``/resume``, a handoff); a row without a shard (written
    outside cluster mode) is checked by its session's.
    """

    __slots__ = ("shard_check",)

    def __init__(self, db: Database, clock: Callable[[], float]) -> None:
        super().__init__(db, clock)
        self.shard_check: Callable[[str | int], bool] | None = None

    def add(
        self,
        *,
        platform: str,
        account_id: str,
        platform_message_id: str,
        routing_key: str,
        payload: bytes,
        owner: str | None = None,
        kind: InboxKind = InboxKind.MESSAGE,
    ) -> int | None:
        """Commit an inbound message; its row id, or ``None`` when it was seen before (a redelivery)."""
        found = self._db.value(
            "INSERT INTO inbox (platform, account_id, platform_message_id, routing_key, payload, received_at, owner, "
            "kind) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (platform, account_id, platform_message_id) "
            "DO NOTHING RETURNING id",
            (platform, account_id, platform_message_id, routing_key, payload, self._clock(), owner, kind.value),
        )
        return None if found is None else int(found)

    def complete(self, inbox_id: int, *, session_id: str | None, state: InboxState = InboxState.DONE) -> bool:
        """Mark a pending row answered or refused; whether it was pending."""
        with self._db.transaction(savepoint=False):  # the caller's (a turn's), or one of its own
            changed = self._db.execute(
                "UPDATE inbox SET state = %s, session_id = %s, completed_at = %s WHERE id = %s AND state = %s "
                "RETURNING shard",
                (InboxState(state).value, session_id, self._clock(), inbox_id, _PENDING),
            )
            if self.shard_check is not None and session_id is not None:  # before the commit, so it can refuse it
                shard = changed[0][0] if changed else None
                self.shard_check(session_id if shard is None else int(shard))
        return bool(changed)

    def claim(self, inbox_id: int, owner: str) -> None:
        """Make ``owner`` the process that runs the pending row's turn."""
        self._db.execute("UPDATE inbox SET owner = %s WHERE id = %s AND state = %s", (owner, inbox_id, _PENDING))

    def find(self, platform: str, account_id: str, platform_message_id: str) -> InboxRow | None:
        """The row of a platform's message, ``None`` when the inbox never took it (or pruned it)."""
        rows = self._db.execute(
            f"SELECT {_INBOX_COLUMNS} FROM inbox WHERE platform = %s AND account_id = %s AND platform_message_id = %s",
            (platform, account_id, platform_message_id),
        )
        return _inbox_row(rows[0]) if rows else None

    def pending_among(self, inbox_ids: Sequence[int]) -> set[int]:
        """Which of ``inbox_ids`` are still pending."""
        if not inbox_ids:
            return set()
        rows = self._db.execute("SELECT id FROM inbox WHERE state = %s AND id = ANY(%s)", (_PENDING, list(inbox_ids)))
        return {int(inbox_id) for (inbox_id,) in rows}

    def pending(self) -> list[InboxRow]:
        """Every row without a completed turn, oldest first."""
        rows = self._db.execute(f"SELECT {_INBOX_COLUMNS} FROM inbox WHERE state = %s ORDER BY id", (_PENDING,))
        return [_inbox_row(r) for r in rows]

    def depth(self) -> int:
        """How many rows are pending."""
        return int(self._db.value("SELECT count(*) FROM inbox WHERE state = %s", (_PENDING,)) or 0)

    def summary(self) -> QueueSummary:
        """How many rows are pending, and when the oldest of them arrived."""
        count = self.depth()
        if count == 0:
            return QueueSummary(count=0, oldest_at=None)
        oldest = self._db.value("SELECT received_at FROM inbox WHERE state = %s ORDER BY id LIMIT 1", (_PENDING,))
        return QueueSummary(count=count, oldest_at=None if oldest is None else float(oldest))

    def summary_by_platform(self) -> dict[str, QueueSummary]:
        """Per platform with messages pending: how many, and when the oldest of them arrived."""
        rows = self._db.execute(
            "SELECT platform, count(*), min(received_at) FROM inbox WHERE state = %s GROUP BY 1", (_PENDING,)
        )
        return {str(p): QueueSummary(count=int(n), oldest_at=float(at)) for p, n, at in rows}

    def get(self, inbox_id: int) -> InboxRow | None:
        """One row, or ``None``."""
        rows = self._db.execute(f"SELECT {_INBOX_COLUMNS} FROM inbox WHERE id = %s", (inbox_id,))
        return _inbox_row(rows[0]) if rows else None

    def prune_completed(self, before: float, *, limit: int = -1) -> int:
        """Forget completed rows older than ``before``, at most ``limit`` (-1: all); how many."""
        return self._db.count(
            "DELETE FROM inbox WHERE id IN "
            "(SELECT id FROM inbox WHERE completed_at IS NOT NULL AND completed_at < %s LIMIT %s)",
            (before, _limit(limit)),
        )

    def payloads_since(self, platform: str, since: float) -> list[bytes]:
        """The payloads of ``platform``'s rows received at or after ``since``, oldest first."""
        rows = self._db.execute(
            "SELECT payload FROM inbox WHERE platform = %s AND received_at >= %s ORDER BY id", (platform, since)
        )
        return [bytes(payload) for (payload,) in rows]


class PgOutbox(PgTable):
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
        """Queue a reply; its row id (``attempts=1``: its first send counted ahead). Its commit also sends ``NOTIFY
        hermes_outbox`` with the platform, so whoever delivers that platform's replies (a cluster dispatcher, an API
        replica's waiting requests) looks at once."""
        return int(
            self._db.value(
                "WITH added AS (INSERT INTO outbox (session_id, platform, account_id, chat_id, thread_id, payload, "
                "created_at, attempts) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING id) "
                "SELECT id FROM added, pg_notify('hermes_outbox', %s)",
                (session_id, platform, account_id, chat_id, thread_id, payload, self._clock(), attempts, platform),
            )
        )

    def backlog(self) -> int:
        """How many replies are neither sent nor given up."""
        return int(self._db.value(f"SELECT count(*) FROM outbox WHERE {_UNSENT}") or 0)

    def summary_by_platform(self) -> dict[str, QueueSummary]:
        """Per platform, how many replies wait and when the oldest was queued."""
        rows = self._db.execute(f"SELECT platform, count(*), min(created_at) FROM outbox WHERE {_UNSENT} GROUP BY 1")
        return {str(p): QueueSummary(count=int(n), oldest_at=float(at)) for p, n, at in rows}

    def unsent(self, platform: str | None = None, *, limit: int = 1000) -> list[OutboxRow]:
        """Undelivered rows in id order."""
        where = _UNSENT + (" AND platform = %s" if platform is not None else "")
        params: tuple[Any, ...] = (platform, limit) if platform is not None else (limit,)
        rows = self._db.execute(f"SELECT {_OUTBOX_COLUMNS} FROM outbox WHERE {where} ORDER BY id LIMIT %s", params)
        return [_outbox_row(r) for r in rows]

    def begin_attempt(self, outbox_id: int) -> int:
        """Count a send attempt before it is made; the attempt number."""
        found = self._db.value(
            "UPDATE outbox SET attempts = attempts + 1 WHERE id = %s RETURNING attempts", (outbox_id,)
        )
        return int(found or 0)

    def begin_attempts(self, outbox_ids: list[int]) -> None:
        """Count a send attempt of each row."""
        if outbox_ids:
            self._db.execute("UPDATE outbox SET attempts = attempts + 1 WHERE id = ANY(%s)", (list(outbox_ids),))

    def uncount_attempts(self, outbox_ids: list[int]) -> None:
        """Take back the attempt counted ahead of each unsent row whose send never began."""
        if outbox_ids:
            self._db.execute(
                "UPDATE outbox SET attempts = attempts - 1 WHERE id = ANY(%s) AND attempts > 0 AND sent_at IS NULL",
                (list(outbox_ids),),
            )

    def mark_sent(self, outbox_id: int, platform_message_id: str | None) -> None:
        """Record delivery."""
        self.mark_sent_many([(outbox_id, platform_message_id)])

    def mark_sent_many(self, sent: list[tuple[int, str | None]]) -> None:
        """Record the delivery of several rows: (row id, platform message id) pairs."""
        now = self._clock()
        with self._db.transaction(savepoint=False):
            self._db.executemany(
                "UPDATE outbox SET sent_at = %s, platform_message_id = %s, last_error = NULL WHERE id = %s",
                [(now, platform_id, outbox_id) for outbox_id, platform_id in sent],
            )

    def abandon(self, outbox_id: int, reason: str) -> None:
        """Give a reply up: it is never sent."""
        self._db.execute(
            "UPDATE outbox SET abandoned_at = %s, last_error = %s WHERE id = %s", (self._clock(), reason, outbox_id)
        )

    def mark_failed(self, outbox_id: int, error: str, retry_at: float) -> None:
        """Record a failed attempt and when to try again."""
        self._db.execute(
            "UPDATE outbox SET last_error = %s, next_attempt_at = %s WHERE id = %s", (error, retry_at, outbox_id)
        )

    def prune_finished(self, before: float, *, limit: int = -1) -> int:
        """Forget replies sent or given up before ``before``, at most ``limit`` (-1: all); how many."""
        return self._db.count(
            "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox WHERE (sent_at IS NOT NULL AND sent_at < %s) "
            "OR (abandoned_at IS NOT NULL AND abandoned_at < %s) LIMIT %s)",
            (before, before, _limit(limit)),
        )
