"""Tool calls waiting for a person's decision: the ``approvals`` table.

A turn whose agent asks to run a tool that needs approval pauses: its commit stores the calls here with the chat
the user was asked in, and the turn's state ends there. A decision moves a row from ``pending`` to ``approved`` or
``denied`` exactly once (:meth:`Approvals.decide`, inside the commit that claims it: an approved row's calls run
after that commit, so a replay of the decision finds the row decided and never runs them again), the calls'
results are kept once they ran (:meth:`Approvals.record_results`), and the commit of the turn that continued with
the decision marks the row resumed. Rows go with their session.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from hermes_actors.routing import SessionSource
from hermes_actors.store.sql import SqlTable

__all__ = ["ApprovalRow", "ApprovalState", "Approvals"]

_COLUMNS = (
    "id, session_id, message_id, source, calls, state, created_at, expires_at, decided_at, decided_by, reason, "
    "results, resumed_at"
)
_source_encoder = msgspec.msgpack.Encoder()
_source_decoder = msgspec.msgpack.Decoder(SessionSource)


class ApprovalState(enum.StrEnum):
    """Where a request for approval stands."""

    PENDING = "pending"  # nobody has answered yet
    APPROVED = "approved"  # its calls may run (once: the commit that approved it claimed them)
    DENIED = "denied"  # refused, by a person or because nobody answered in time


class ApprovalRow(msgspec.Struct, frozen=True, kw_only=True):
    """One request for approval (see the module docstring).

    ``message_id`` is the platform message whose turn paused (an API run's id), ``source`` the chat and person it
    was asked of, ``calls`` the tool calls waiting (a JSON array in OpenAI's shape). ``decided_by`` names who
    answered; ``results`` maps each call that ran to its result (JSON object text).
    """

    id: int
    session_id: str
    message_id: str
    source: SessionSource
    calls: str
    state: ApprovalState
    created_at: float
    expires_at: float
    decided_at: float | None = None
    decided_by: str | None = None
    reason: str | None = None
    results: str | None = None
    resumed_at: float | None = None

    @property
    def is_open(self) -> bool:
        """Whether its turn has not continued yet (it waits for a decision, or for the turn that runs it)."""
        return self.resumed_at is None


def _row(values: tuple[Any, ...]) -> ApprovalRow:
    fields = dict(zip(ApprovalRow.__struct_fields__, values, strict=True))
    fields["source"] = _source_decoder.decode(bytes(fields["source"]))
    fields["state"] = ApprovalState(fields["state"])
    return ApprovalRow(**fields)


class Approvals(SqlTable):
    """Requests for approval and their decisions."""

    def add(
        self,
        session_id: str,
        *,
        message_id: str,
        source: SessionSource,
        calls: str,
        expires_at: float,
    ) -> int:
        """Store a pending request (inside the commit of the turn that pauses); its id."""
        rows = self._db.execute(
            "INSERT INTO approvals (session_id, message_id, source, calls, state, created_at, expires_at) "
            "VALUES (?, ?, ?, ?, 'pending', ?, ?) RETURNING id",
            (session_id, message_id, _source_encoder.encode(source), calls, self._clock(), expires_at),
        )
        return int(rows[0][0])

    def get(self, approval_id: int) -> ApprovalRow | None:
        """The request ``approval_id``, or ``None``."""
        rows = self._db.execute(f"SELECT {_COLUMNS} FROM approvals WHERE id = ?", (approval_id,))
        return _row(rows[0]) if rows else None

    def open_in(self, session_id: str) -> ApprovalRow | None:
        """The newest request of ``session_id`` whose turn has not continued, or ``None``."""
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM approvals WHERE session_id = ? AND resumed_at IS NULL ORDER BY id DESC LIMIT 1",
            (session_id,),
        )
        return _row(rows[0]) if rows else None

    def of_message(self, message_id: str) -> list[ApprovalRow]:
        """The requests the turn answering platform message ``message_id`` made, oldest first."""
        rows = self._db.execute(f"SELECT {_COLUMNS} FROM approvals WHERE message_id = ? ORDER BY id", (message_id,))
        return [_row(r) for r in rows]

    def pending(self, *, limit: int = 100) -> list[ApprovalRow]:
        """The requests nobody has answered, oldest first."""
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM approvals WHERE state = 'pending' ORDER BY id LIMIT ?", (limit,)
        )
        return [_row(r) for r in rows]

    def overdue(self, now: float, *, timer_prefix: str, limit: int = 100) -> list[ApprovalRow]:
        """The pending requests whose deadline has passed at ``now`` and whose timer (in ``timers``, named
        ``timer_prefix`` and the id) is still set, oldest first: the write that queues a denial cancels the timer,
        so a second look finds that request no longer."""
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM approvals WHERE state = 'pending' AND expires_at <= ? AND EXISTS "
            "(SELECT 1 FROM timers WHERE timers.name = CAST(? AS text) || CAST(approvals.id AS text)) "
            "ORDER BY id LIMIT ?",
            (now, timer_prefix, limit),
        )
        return [_row(r) for r in rows]

    def decide(self, approval_id: int, *, approved: bool, by: str, reason: str | None = None) -> bool:
        """Answer a pending request (inside the commit that claims its calls); whether it was pending."""
        state = ApprovalState.APPROVED if approved else ApprovalState.DENIED
        return (
            self._db.count(
                "UPDATE approvals SET state = ?, decided_at = ?, decided_by = ?, reason = ? "
                "WHERE id = ? AND state = 'pending'",
                (state.value, self._clock(), by, reason, approval_id),
            )
            > 0
        )

    def record_results(self, approval_id: int, results: str) -> None:
        """Keep what the approved calls returned (JSON object text: call id -> result)."""
        self._db.execute("UPDATE approvals SET results = ? WHERE id = ?", (results, approval_id))

    def resume(self, approval_id: int) -> bool:
        """Inside the commit of the turn that continued with the decision: the request is done; whether it was
        open."""
        return (
            self._db.count(
                "UPDATE approvals SET resumed_at = ? WHERE id = ? AND resumed_at IS NULL", (self._clock(), approval_id)
            )
            > 0
        )
