"""What could not be done: the ``dead_letters`` table, and a dead letter's replay.

A dead letter names the inbox row of a message whose turn failed (``inbox_id`` alone), the outbox row of a reply
given up with the message it answered (both), or an event delivery given up (``outbox_id`` alone), with the reason.
A message's row is no longer pending once it is dead-lettered, so no start runs it again by itself; a replay is
asked for (:meth:`DeadLetters.request_replay`, from ``hermesctl``, any process) and done by the runtime that runs
the store's turns (:meth:`DeadLetters.take_replays`, in one write): a message's inbox row is pending again, claimed
by that runtime, and a given-up row unsent again, queued anew. Rows go with their inbox or outbox row.
"""

from __future__ import annotations

from typing import Any

import msgspec

from hermes_actors.store.inbox import INBOX_COLUMNS, inbox_row
from hermes_actors.store.outbox_queue import OUTBOX_COLUMNS, outbox_row
from hermes_actors.store.records import InboxRow, OutboxRow
from hermes_actors.store.sql import SqlTable

__all__ = ["DeadLetterRow", "DeadLetters", "Revived"]

_COLUMNS = "id, inbox_id, outbox_id, platform, session_id, reason, created_at, replay_requested_at, replayed_at"
_OPEN = "replayed_at IS NULL"


class DeadLetterRow(msgspec.Struct, frozen=True, kw_only=True):
    """One thing that could not be done (see the module docstring); ``replayed_at`` once it was run again."""

    id: int
    inbox_id: int | None
    outbox_id: int | None
    platform: str
    session_id: str | None
    reason: str
    created_at: float
    replay_requested_at: float | None = None
    replayed_at: float | None = None

    @property
    def is_message(self) -> bool:
        """Whether it is a message's (a turn failed, or its reply was given up), not an event delivery's."""
        return self.inbox_id is not None


class Revived(msgspec.Struct, frozen=True, kw_only=True):
    """What :meth:`DeadLetters.take_replays` made runnable again: messages to run, replies and deliveries to send."""

    messages: list[InboxRow] = []
    sends: list[OutboxRow] = []


def _row(values: tuple[Any, ...]) -> DeadLetterRow:
    return DeadLetterRow(**dict(zip(DeadLetterRow.__struct_fields__, values, strict=True)))


class DeadLetters(SqlTable):
    """Messages, replies and event deliveries that could not be done, and their replays."""

    def add(
        self,
        *,
        platform: str,
        reason: str,
        inbox_id: int | None = None,
        outbox_id: int | None = None,
        session_id: str | None = None,
    ) -> int:
        """Record a dead letter (inside the caller's transaction: the one that gives the thing up); its id."""
        if inbox_id is None and outbox_id is None:
            raise ValueError("a dead letter names an inbox row, an outbox row or both")
        rows = self._db.execute(
            "INSERT INTO dead_letters (inbox_id, outbox_id, platform, session_id, reason, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
            (inbox_id, outbox_id, platform, session_id, reason, self._clock()),
        )
        return int(rows[0][0])

    def listed(self, *, messages: bool, open_only: bool = True, limit: int = 100) -> list[DeadLetterRow]:
        """The newest dead letters first: the messages' (``messages``) or the event deliveries'; with
        ``open_only``, those not replayed."""
        where = "inbox_id IS NOT NULL" if messages else "inbox_id IS NULL"
        if open_only:
            where += f" AND {_OPEN}"
        rows = self._db.execute(f"SELECT {_COLUMNS} FROM dead_letters WHERE {where} ORDER BY id DESC LIMIT ?", (limit,))
        return [_row(r) for r in rows]

    def of_inbox(self, inbox_id: int) -> list[DeadLetterRow]:
        """The dead letters of one message, oldest first."""
        rows = self._db.execute(f"SELECT {_COLUMNS} FROM dead_letters WHERE inbox_id = ? ORDER BY id", (inbox_id,))
        return [_row(r) for r in rows]

    def of_outbox(self, outbox_id: int) -> list[DeadLetterRow]:
        """The dead letters of one reply or event delivery, oldest first."""
        rows = self._db.execute(f"SELECT {_COLUMNS} FROM dead_letters WHERE outbox_id = ? ORDER BY id", (outbox_id,))
        return [_row(r) for r in rows]

    def open_counts(self) -> tuple[int, int]:
        """How many dead letters wait for a replay: the messages', the event deliveries'."""
        rows = self._db.execute(f"SELECT inbox_id IS NOT NULL, count(*) FROM dead_letters WHERE {_OPEN} GROUP BY 1")
        counts = {bool(kind): int(n) for kind, n in rows}
        return counts.get(True, 0), counts.get(False, 0)

    def replays_asked(self) -> bool:
        """Whether a replay was asked for and not yet done (a read: the runtime's tick looks before it writes)."""
        found = self._db.value(f"SELECT 1 FROM dead_letters WHERE replay_requested_at IS NOT NULL AND {_OPEN} LIMIT 1")
        return found is not None

    def request_replay(self, *, inbox_id: int | None = None, outbox_id: int | None = None) -> list[DeadLetterRow]:
        """Ask for the open dead letters of a message (``inbox_id``) or of a reply or delivery (``outbox_id``) to be
        run again by the runtime; return them (none: nothing of it is dead-lettered)."""
        column, value = ("inbox_id", inbox_id) if inbox_id is not None else ("outbox_id", outbox_id)
        rows = self._db.execute(
            f"UPDATE dead_letters SET replay_requested_at = ? WHERE {column} = ? AND {_OPEN} RETURNING {_COLUMNS}",
            (self._clock(), value),
        )
        return sorted((_row(r) for r in rows), key=lambda row: row.id)

    def take_replays(self, owner: str) -> Revived:
        """Inside a write: every dead letter asked to be replayed is marked replayed and made runnable again: a
        given-up reply or delivery unsent (queued now, so its give-up time counts afresh), a failed message's inbox
        row pending and claimed by ``owner``. Return those rows, in id order."""
        now = self._clock()
        taken = self._db.execute(
            f"UPDATE dead_letters SET replayed_at = ? WHERE replay_requested_at IS NOT NULL AND {_OPEN} "
            "RETURNING inbox_id, outbox_id",
            (now,),
        )
        sends = sorted({int(o) for _, o in taken if o is not None})
        messages = sorted({int(i) for i, o in taken if o is None and i is not None})
        dialect = self._db.dialect
        unsent: list[OutboxRow] = []
        pending: list[InboxRow] = []
        if sends:
            rows = self._db.execute(
                "UPDATE outbox SET abandoned_at = NULL, next_attempt_at = 0, created_at = ? "
                f"WHERE {dialect.member('id')} AND sent_at IS NULL RETURNING {OUTBOX_COLUMNS}",
                (now, dialect.members(sends)),
            )
            unsent = sorted((outbox_row(r) for r in rows), key=lambda row: row.id)
        if messages:
            rows = self._db.execute(
                "UPDATE inbox SET state = 'pending', completed_at = NULL, owner = ? "
                f"WHERE {dialect.member('id')} RETURNING {INBOX_COLUMNS}",
                (owner, dialect.members(messages)),
            )
            pending = sorted((inbox_row(r) for r in rows), key=lambda row: row.id)
        return Revived(messages=pending, sends=unsent)
