"""The approvals port: requests for approval as the operator sees them (``inbox.approvals``: the API server's
``/api/approvals`` and the console's Approvals page).

A request is a turn's tool calls waiting for a person's decision. The operator answers any of them; the answer is
sent as ``/approve ID`` or ``/deny ID reason`` in the name of the chat that was asked (so the continued turn's reply
goes there), and the session continues the turn as it would for its own user.

Errors: :class:`ApprovalNotFoundError` (no such request), :class:`ApprovalError` (it was answered already, or its
conversation has ended).
"""

from __future__ import annotations

from typing import Protocol

import msgspec

from hermes_actors.errors import HermesError
from hermes_actors.messages import ApprovalCall

__all__ = ["ApprovalDesk", "ApprovalError", "ApprovalNotFoundError", "ApprovalView"]


class ApprovalError(HermesError):
    """A request cannot be answered (answered already, or its conversation ended); the message says which."""


class ApprovalNotFoundError(ApprovalError):
    """No request has that id."""


class ApprovalView(msgspec.Struct, frozen=True, kw_only=True):
    """One request as the operator sees it: where it was asked (platform, chat, user), the calls waiting, when it
    was asked and when no answer counts as a denial; ``state`` is ``pending``, ``approved`` or ``denied``."""

    id: int
    session_id: str
    platform: str
    chat_id: str | None
    user_id: str | None
    calls: tuple[ApprovalCall, ...]
    state: str
    created_at: float
    expires_at: float
    decided_by: str | None = None
    reason: str | None = None


class ApprovalDesk(Protocol):
    """The operator's view of requests for approval, and the operator's answer."""

    def pending(self, *, limit: int = 100) -> list[ApprovalView]:
        """The requests nobody has answered, oldest first."""
        ...

    def decide(self, approval_id: int, *, approved: bool, reason: str | None = None) -> ApprovalView:
        """Answer request ``approval_id`` as the operator (sent once it is stored; the session continues the turn);
        the request as it was answered. Raises :class:`ApprovalNotFoundError` or :class:`ApprovalError`."""
        ...
