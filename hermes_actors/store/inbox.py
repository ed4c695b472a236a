"""The durable inbound queue: every accepted platform message is a row before anything acts on it.

A row is :attr:`~InboxState.PENDING` until the turn that answers it commits (:attr:`~InboxState.DONE`) or it is
refused (:attr:`~InboxState.REJECTED`); the (platform, account, platform message id) key makes a redelivery a
no-op. Writes join the caller's transaction, so a turn commits its inbox completion with its transcript.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hermes_actors.store.records import InboxKind, InboxRow, InboxState, QueueSummary
from hermes_actors.store.sql import SqlDb, SqlTable

__all__ = ["INBOX_COLUMNS", "Completion", "Inbox", "inbox_insert", "inbox_row"]

_PENDING = InboxState.PENDING.value

INBOX_COLUMNS = (
    "id, platform, account_id, platform_message_id, routing_key, payload, received_at, state, session_id, owner, kind"
)
"""The columns of an :class:`InboxRow`, in its fields' order."""


def inbox_insert(holder: str) -> str:
    """The statement that adds a row unless its key is taken, returning its id: the platform, account, platform
    message id, routing key, payload, receipt time, kind, and then the column ``holder`` (``owner``: the process
    that runs its turn; ``shard``: the cluster shard whose holder does)."""
    return (
        "INSERT INTO inbox (platform, account_id, platform_message_id, routing_key, payload, received_at, kind, "
        f"{holder}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (platform, account_id, platform_message_id) "
        "DO NOTHING RETURNING id"
    )


_ADD = inbox_insert("owner")
_COMPLETE_FENCED = (  # PostgreSQL's: a shard host's fence carries it (Completion.fenced)
    "UPDATE inbox SET state = :inbox_state, session_id = :inbox_session, completed_at = :inbox_at "
    f"WHERE id = ANY(:inbox_ids::bigint[]) AND state = '{_PENDING}' AND EXISTS (SELECT FROM renewed) "
    "RETURNING id, shard"
)


def inbox_row(row: tuple[Any, ...]) -> InboxRow:
    """An :class:`InboxRow` from the values of :data:`INBOX_COLUMNS` (PostgreSQL's payload made ``bytes``)."""
    fields = dict(zip(InboxRow.__struct_fields__, row, strict=True))
    state, kind = InboxState(fields["state"]), InboxKind(fields["kind"])
    return InboxRow(**{**fields, "payload": bytes(fields["payload"]), "state": state, "kind": kind})


class Inbox(SqlTable):
    """Durable inbound queue with dedupe on (platform, account, platform message id).

    ``shard_check`` (cluster mode, :meth:`PostgresStore.fence_shards`) runs when a row is completed for a session,
    inside the transaction that completes it (a turn's): a host that lost the row's shard cannot commit it. The
    shard checked is the row's own (the one its host pulled it from), which is its session's except for a command
    that re-points its key to a session of another shard (``/resume``, a handoff); a row without a shard (written
    outside cluster mode) is checked by its session's.
    """

    __slots__ = ("shard_check",)

    def __init__(self, db: SqlDb, clock: Callable[[], float]) -> None:
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
        """Commit an inbound message; return its row id, or ``None`` when it was seen before (a redelivery).

        ``owner`` is the lease owner of the accepting process: its turn is that process's to run, and another
        process's recovery leaves the row alone while that owner lives.
        """
        rows = self._db.execute(
            _ADD, (platform, account_id, platform_message_id, routing_key, payload, self._clock(), kind.value, owner)
        )
        return int(rows[0][0]) if rows else None

    def complete(self, inbox_id: int, *, session_id: str | None, state: InboxState = InboxState.DONE) -> bool:
        """Mark a pending row answered (:attr:`InboxState.DONE`) or refused (:attr:`InboxState.REJECTED`); return
        whether it was pending.

        A row another turn completed already is left as it is: a caller that expected it pending ran a turn twice.
        """
        params = (InboxState(state).value, session_id, self._clock(), inbox_id, _PENDING)
        sql = "UPDATE inbox SET state = ?, session_id = ?, completed_at = ? WHERE id = ? AND state = ?"
        if self.shard_check is None or session_id is None:
            return self._db.count(sql, params) > 0
        with self._db.transaction(savepoint=False):  # the caller's (a turn's), or one of its own
            changed = self._db.execute(sql + " RETURNING shard", params)
            self.check_shard(session_id, changed[0][0] if changed else None)
        return bool(changed)

    def check_shard(self, session_id: str, shard: int | None) -> None:
        """In cluster mode (``shard_check``), refuse a completion for ``session_id`` of a row of ``shard`` (``None``:
        a row without one, checked by its session's) whose shard this host lost: before the commit, so it can refuse
        it."""
        if self.shard_check is not None:
            self.shard_check(session_id if shard is None else int(shard))

    def completion(
        self, inbox_ids: Sequence[int], *, session_id: str, state: InboxState = InboxState.DONE
    ) -> Completion:
        """The completion of the rows a turn of ``session_id`` answers, for its session lease's fence to carry
        (:meth:`~hermes_actors.store.leases.Leases.fence` with ``then``: the completion itself): :attr:`Completion.done`
        says afterwards which were pending, as :meth:`complete` does one by one."""
        return Completion(self, inbox_ids, session_id, state, now=self._clock())

    def claim(self, inbox_id: int, owner: str) -> None:
        """Make ``owner`` the process that runs the pending row's turn (recovery after its owner died)."""
        self._db.execute("UPDATE inbox SET owner = ? WHERE id = ? AND state = ?", (owner, inbox_id, _PENDING))

    def pending_among(self, inbox_ids: Sequence[int]) -> set[int]:
        """Return which of ``inbox_ids`` are still pending."""
        if not inbox_ids:
            return set()
        dialect = self._db.dialect
        rows = self._db.execute(  # 'pending' a literal: a plan made without the values still sees the partial index
            f"SELECT id FROM inbox WHERE state = '{_PENDING}' AND {dialect.member('id')}",
            (dialect.members(inbox_ids),),
            keyed=True,
        )
        return {int(inbox_id) for (inbox_id,) in rows}

    def pending(self) -> list[InboxRow]:
        """Return every row without a completed turn, oldest first."""
        rows = self._db.execute(f"SELECT {INBOX_COLUMNS} FROM inbox WHERE state = ? ORDER BY id", (_PENDING,))
        return [inbox_row(r) for r in rows]

    def depth(self) -> int:
        """Count the rows without a completed turn."""
        return int(self._db.value("SELECT count(*) FROM inbox WHERE state = ?", (_PENDING,)) or 0)

    def summary(self) -> QueueSummary:
        """Count the rows without a completed turn and say when the oldest of them arrived, from the index alone
        (no row is read but the oldest)."""
        count = self.depth()
        if count == 0:
            return QueueSummary(count=0, oldest_at=None)
        oldest = self._db.value("SELECT received_at FROM inbox WHERE state = ? ORDER BY id LIMIT 1", (_PENDING,))
        return QueueSummary(count=count, oldest_at=None if oldest is None else float(oldest))

    def summary_by_platform(self) -> dict[str, QueueSummary]:
        """Per platform with messages pending: how many, and when the oldest of them arrived."""
        rows = self._db.execute(
            "SELECT platform, count(*), min(received_at) FROM inbox WHERE state = ? GROUP BY platform", (_PENDING,)
        )
        return {str(p): QueueSummary(count=int(n), oldest_at=float(at)) for p, n, at in rows}

    def get(self, inbox_id: int) -> InboxRow | None:
        """Return one row, or ``None``."""
        rows = self._db.execute(f"SELECT {INBOX_COLUMNS} FROM inbox WHERE id = ?", (inbox_id,))
        return inbox_row(rows[0]) if rows else None

    def find(self, platform: str, account_id: str, platform_message_id: str) -> InboxRow | None:
        """The row of a platform's message, ``None`` when the inbox never took it (or pruned it)."""
        rows = self._db.execute(
            f"SELECT {INBOX_COLUMNS} FROM inbox WHERE platform = ? AND account_id = ? AND platform_message_id = ?",
            (platform, account_id, platform_message_id),
        )
        return inbox_row(rows[0]) if rows else None

    def prune_completed(self, before: float, *, limit: int = -1) -> int:
        """Forget completed rows older than ``before`` (their dedupe window ends), at most ``limit`` (-1: all) of
        them; return how many."""
        return self._db.count(
            "DELETE FROM inbox WHERE id IN "
            "(SELECT id FROM inbox WHERE completed_at IS NOT NULL AND completed_at < ? LIMIT ?)",
            (before, self._db.dialect.limit(None if limit < 0 else limit)),
        )

    def payloads_since(self, platform: str, since: float) -> list[bytes]:
        """Return the payloads of ``platform``'s rows received at or after ``since`` (answered or not), oldest
        first."""
        rows = self._db.execute(
            "SELECT payload FROM inbox WHERE platform = ? AND received_at >= ? ORDER BY id", (platform, since)
        )
        return [bytes(payload) for (payload,) in rows if isinstance(payload, bytes | memoryview)]


class Completion:
    """Pending rows completed under a session lease's fence (:meth:`Inbox.completion`), a
    :class:`~hermes_actors.store.term_guard.FencedWrite`: in the fence's own statement where the store carries it as
    one (PostgreSQL, a shard host), else one by one after the check (:meth:`Inbox.complete`); the row's shard is
    checked either way. :attr:`done`: the ids that were pending."""

    __slots__ = ("_ids", "_inbox", "_now", "_session_id", "_state", "done")

    def __init__(
        self, inbox: Inbox, inbox_ids: Sequence[int], session_id: str, state: InboxState, *, now: float
    ) -> None:
        self._inbox = inbox
        self._ids = inbox_ids
        self._session_id = session_id
        self._state = state
        self._now = now
        self.done: set[int] = set()

    def fenced(self, name: str) -> tuple[str, dict[str, Any]]:
        """The completion as a fence's ``WITH`` query (the rows it completed: their id and shard), and its
        parameters."""
        params = {
            "inbox_state": InboxState(self._state).value,
            "inbox_session": self._session_id,
            "inbox_at": self._now,
            "inbox_ids": list(self._ids),
        }
        return f"{name} AS ({_COMPLETE_FENCED})", params

    def took(self, rows: list[dict[str, Any]]) -> None:
        """The rows the fence's statement completed (their id and shard)."""
        for row in rows:
            self._inbox.check_shard(self._session_id, row["shard"])
            self.done.add(int(row["id"]))

    def alone(self) -> None:
        """Complete the rows one by one (:meth:`Inbox.complete`)."""
        for inbox_id in self._ids:
            if self._inbox.complete(inbox_id, session_id=self._session_id, state=self._state):
                self.done.add(inbox_id)
