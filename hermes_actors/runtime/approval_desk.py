"""The approvals port over a store (:class:`StoreApprovals`): what the operator's API and console read and answer.

An answer is the message :func:`~hermes_actors.lifecycle.approvals.operator_decision` builds, accepted like any
inbound message (so it is stored before the call returns, runs in order with the session's turns and is replayed
after a crash); the session's turn checks the request again, so a second answer changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import msgspec

from hermes_actors.approval_port import ApprovalError, ApprovalNotFoundError, ApprovalView
from hermes_actors.lifecycle.approvals import OPERATOR, operator_decision
from hermes_actors.messages import InboundMessage
from hermes_actors.runtime.approval_requests import approval_calls_of
from hermes_actors.store import StoreInterface
from hermes_actors.store.approvals import ApprovalRow, ApprovalState

__all__ = ["StoreApprovals", "approval_view"]


def approval_view(row: ApprovalRow) -> ApprovalView:
    """``row`` as the operator sees it."""
    return ApprovalView(
        id=row.id,
        session_id=row.session_id,
        platform=row.source.platform,
        chat_id=row.source.chat_id,
        user_id=row.source.participant_id,
        calls=approval_calls_of(row.calls),
        state=row.state.value,
        created_at=row.created_at,
        expires_at=row.expires_at,
        decided_by=row.decided_by,
        reason=row.reason,
    )


class StoreApprovals:
    """The :class:`~hermes_actors.approval_port.ApprovalDesk` of a store read through ``read``; ``accept`` takes an
    answer in (and returns once it is stored)."""

    __slots__ = ("_accept", "_read")

    def __init__(
        self,
        read: Callable[[], AbstractContextManager[StoreInterface]],
        accept: Callable[[InboundMessage], object],
    ) -> None:
        self._read = read
        self._accept = accept

    def pending(self, *, limit: int = 100) -> list[ApprovalView]:
        """The requests nobody has answered, of live conversations, oldest first."""
        with self._read() as store:
            rows = store.approvals.pending(limit=limit)
            live = {row.session_id for row in rows if (found := store.find_session(row.session_id)) and found.is_live}
        return [approval_view(row) for row in rows if row.session_id in live]

    def decide(self, approval_id: int, *, approved: bool, reason: str | None = None) -> ApprovalView:
        """Answer request ``approval_id`` as the operator (see the module docstring)."""
        with self._read() as store:
            row = store.approvals.get(approval_id)
            record = store.find_session(row.session_id) if row is not None else None
        if row is None or record is None:
            raise ApprovalNotFoundError(f"no approval {approval_id}; GET /api/approvals lists those waiting")
        if row.state is not ApprovalState.PENDING:
            raise ApprovalError(f"approval {approval_id} was answered already ({row.state.value} by {row.decided_by})")
        if not record.is_live:
            raise ApprovalError(f"the conversation of approval {approval_id} ({record.id}) has ended; nothing was run")
        self._accept(operator_decision(row, approved=approved, reason=reason))
        state = ApprovalState.APPROVED if approved else ApprovalState.DENIED
        return msgspec.structs.replace(approval_view(row), state=state.value, decided_by=OPERATOR, reason=reason)
