"""The durable inbound queue: every accepted platform message is a row before anything acts on it.

A row is :attr:`~InboxState.PENDING` until the turn that answers it commits (:attr:`~InboxState.DONE`) or it is
refused (:attr:`~InboxState.REJECTED`); the (platform, account, platform message id) key makes a redelivery a
no-op. Writes join the caller's transaction, so a turn commits its inbox completion with its transcript.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from hermes_actors.store.connection import Table, Transaction
from hermes_actors.store.records import InboxKind, InboxRow, InboxState, QueueSummary

__all__ = ["Inbox"]

_PENDING = InboxState.PENDING.value

_INBOX_COLUMNS = (
    "id, platform, account_id, platform_message_id, routing_key, payload, received_at, state, session_id, owner, kind"
)


def _inbox_row(row: tuple[Any, ...]) -> InboxRow:
    fields = dict(zip(InboxRow.__struct_fields__, row, strict=True))
    return InboxRow(**{**fields, "state": InboxState(fields["state"]), "kind": InboxKind(fields["kind"])})


class Inbox(Table):
    """Durable inbound queue with dedupe on (platform, account, platform message id)."""

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
        """Commit an inbound message; return its row id, or ``None`` when it was seen before (a redelivery).

        ``owner`` is the lease owner of the accepting process: its turn is that process's to run, and another
        process's recovery leaves the row alone while that owner lives.
        """
        with Transaction(self._db, savepoint=False):
            self._db.execute(
                "INSERT INTO inbox (platform, account_id, platform_message_id, routing_key, payload, received_at, "
                "owner, kind) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (platform, account_id, platform_message_id) "
                "DO NOTHING",
                (platform, account_id, platform_message_id, routing_key, payload, self._clock(), owner, kind.value),
            )
            return self._db.last_insert_rowid() if self._db.changes() else None

    def complete(self, inbox_id: int, *, session_id: str | None, state: InboxState = InboxState.DONE) -> bool:
        """Mark a pending row answered (:attr:`InboxState.DONE`) or refused (:attr:`InboxState.REJECTED`); return
        whether it was pending.

        A row another turn completed already is left as it is: a caller that expected it pending ran a turn twice.
        """
        with Transaction(self._db, savepoint=False):
            self._db.execute(
                "UPDATE inbox SET state = ?, session_id = ?, completed_at = ? WHERE id = ? AND state = ?",
                (InboxState(state).value, session_id, self._clock(), inbox_id, _PENDING),
            )
            return self._db.changes() > 0

    def claim(self, inbox_id: int, owner: str) -> None:
        """Make ``owner`` the process that runs the pending row's turn (recovery after its owner died)."""
        with Transaction(self._db, savepoint=False):
            self._db.execute("UPDATE inbox SET owner = ? WHERE id = ? AND state = ?", (owner, inbox_id, _PENDING))

    def pending_among(self, inbox_ids: Sequence[int]) -> set[int]:
        """Return which of ``inbox_ids`` are still pending."""
        if not inbox_ids:
            return set()
        rows = self._db.execute(
            "SELECT id FROM inbox WHERE state = ? AND id IN (SELECT value FROM json_each(?))",
            (_PENDING, msgspec.json.encode(list(inbox_ids)).decode()),
        )
        return {int(inbox_id) for (inbox_id,) in rows}

    def pending(self) -> list[InboxRow]:
        """Return every row without a completed turn, oldest first."""
        rows = self._db.execute(f"SELECT {_INBOX_COLUMNS} FROM inbox WHERE state = ? ORDER BY id", (_PENDING,))
        return [_inbox_row(r) for r in rows]

    def depth(self) -> int:
        """Count the rows without a completed turn."""
        row = self._db.execute("SELECT count(*) FROM inbox WHERE state = ?", (_PENDING,)).fetchone()
        return int(row[0]) if row else 0

    def summary(self) -> QueueSummary:
        """Count the rows without a completed turn and say when the oldest of them arrived, from the index alone
        (no row is read but the oldest)."""
        count = self.depth()
        if count == 0:
            return QueueSummary(count=0, oldest_at=None)
        row = self._db.execute(
            "SELECT received_at FROM inbox WHERE state = ? ORDER BY id LIMIT 1", (_PENDING,)
        ).fetchone()
        return QueueSummary(count=count, oldest_at=float(row[0]) if row else None)

    def summary_by_platform(self) -> dict[str, QueueSummary]:
        """Per platform with messages pending: how many, and when the oldest of them arrived."""
        rows = self._db.execute(
            "SELECT platform, count(*), min(received_at) FROM inbox WHERE state = ? GROUP BY platform", (_PENDING,)
        )
        return {str(p): QueueSummary(count=int(n), oldest_at=float(at)) for p, n, at in rows}

    def get(self, inbox_id: int) -> InboxRow | None:
        """Return one row, or ``None``."""
        row = self._db.execute(f"SELECT {_INBOX_COLUMNS} FROM inbox WHERE id = ?", (inbox_id,)).fetchone()
        return _inbox_row(row) if row is not None else None

    def find(self, platform: str, account_id: str, platform_message_id: str) -> InboxRow | None:
        """The row of a platform's message, ``None`` when the inbox never took it (or pruned it)."""
        row = self._db.execute(
            f"SELECT {_INBOX_COLUMNS} FROM inbox WHERE platform = ? AND account_id = ? AND platform_message_id = ?",
            (platform, account_id, platform_message_id),
        ).fetchone()
        return _inbox_row(row) if row is not None else None

    def prune_completed(self, before: float, *, limit: int = -1) -> int:
        """Forget completed rows older than ``before`` (their dedupe window ends), at most ``limit`` (-1: all) of
        them; return how many."""
        with Transaction(self._db, savepoint=False):
            self._db.execute(
                "DELETE FROM inbox WHERE id IN "
                "(SELECT id FROM inbox WHERE completed_at IS NOT NULL AND completed_at < ? LIMIT ?)",
                (before, limit),
            )
            return self._db.changes()

    def payloads_since(self, platform: str, since: float) -> list[bytes]:
        """Return the payloads of ``platform``'s rows received at or after ``since`` (answered or not), oldest
        first."""
        rows = self._db.execute(
            "SELECT payload FROM inbox WHERE platform = ? AND received_at >= ? ORDER BY id", (platform, since)
        ).fetchall()
        return [payload for (payload,) in rows if isinstance(payload, bytes)]
