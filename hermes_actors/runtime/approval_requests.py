"""What a turn paused on tool calls commits, and what the turn that continues from the decision commits.

:class:`Asking` is the request of a turn whose agent ended with
:attr:`~hermes_actors.agents.turn.AgentReply.approval_calls`: in that turn's commit, a row of ``store.approvals``, the
durable timer of its deadline (``approval:<id>``), ``approval.requested`` for the event webhooks, and the reply that
asks the user (in words, :func:`prompt_text`, and as :class:`~hermes_actors.messages.ApprovalRequest` for a
platform's buttons and the API). :class:`Resumption` is a decided request a turn continues from: the decisions the
agent gets, the results the runtime gives it, and the request marked resumed in that turn's commit.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import msgspec

from hermes_actors.agents.turn import ApprovalDecision, ApprovalGate
from hermes_actors.config import EventKind
from hermes_actors.messages import ApprovalCall, ApprovalRequest, OutboundMessage, ToolResult
from hermes_actors.runtime.protocol import Delivery
from hermes_actors.runtime.session_state import SessionState
from hermes_actors.store import StoreInterface
from hermes_actors.store.approvals import ApprovalRow

__all__ = [
    "TIMER_PREFIX",
    "Asking",
    "Resumption",
    "approval_calls_of",
    "approval_request_of",
    "call_arguments",
    "call_name",
    "calls_of",
    "prompt_text",
    "timer_name",
]

TIMER_PREFIX = "approval:"
_ARGUMENTS_SHOWN = 300  # characters of a call's arguments the question shows


def timer_name(approval_id: int) -> str:
    """The durable timer of request ``approval_id``'s deadline."""
    return f"{TIMER_PREFIX}{approval_id}"


def call_name(call: dict[str, Any]) -> str:
    spec = call.get("function")
    return str(spec.get("name") or "?") if isinstance(spec, dict) else "?"


def call_arguments(call: dict[str, Any]) -> str:
    spec = call.get("function")
    value = spec.get("arguments") if isinstance(spec, dict) else None
    return value if isinstance(value, str) else json.dumps(value if value is not None else {})


def calls_of(text: str) -> list[dict[str, Any]]:
    found = json.loads(text)
    return [call for call in found if isinstance(call, dict)] if isinstance(found, list) else []


def prompt_text(approval_id: int, calls: Sequence[ApprovalCall], timeout_s: float) -> str:
    """The question in words: the calls, and how to answer within ``timeout_s``."""
    lines = []
    for call in calls:
        shown = call.arguments if len(call.arguments) <= _ARGUMENTS_SHOWN else call.arguments[:_ARGUMENTS_SHOWN] + "…"
        lines.append(f"• {call.name} {shown}")
    wait = f"{timeout_s / 60:g} minutes" if timeout_s >= 120 else f"{timeout_s:g} seconds"
    return (
        f"Approval {approval_id} needed: the agent wants to run\n"
        + "\n".join(lines)
        + f"\nSend /approve {approval_id} to let it run, or /deny {approval_id} [reason] to refuse. "
        f"No answer within {wait} counts as a refusal."
    )


def approval_calls_of(calls: str) -> tuple[ApprovalCall, ...]:
    """The calls of a request (a JSON array in OpenAI's shape) as the question names them."""
    return tuple(
        ApprovalCall(call_id=str(call.get("id") or ""), name=call_name(call), arguments=call_arguments(call))
        for call in calls_of(calls)
    )


def approval_request_of(row: ApprovalRow) -> ApprovalRequest:
    """The question ``row`` asks, as a reply carries it (:attr:`OutboundMessage.approval`)."""
    return ApprovalRequest(id=row.id, calls=approval_calls_of(row.calls), expires_at=row.expires_at)


class Asking:
    """The request a pausing turn commits (see the module docstring); :meth:`in_commit` runs inside the turn's
    commit (again, when it is retried), :attr:`row` is the stored request once that commit returned."""

    __slots__ = ("_calls", "_clock", "_events", "_message_id", "_session_id", "_source", "_timeout_s", "row")

    def __init__(self, state: SessionState, delivery: Delivery, calls: str) -> None:
        self._session_id = state.session_id
        self._events = state.services.events
        self._clock = state.services.clock
        self._timeout_s = state.approval_settings.timeout_s
        self._source = delivery.message.source
        self._message_id = delivery.message.message_id
        self._calls = calls
        self.row: ApprovalRow | None = None

    def in_commit(self, store: StoreInterface, outbound: OutboundMessage) -> OutboundMessage:
        """Store the request, its timer and event; the reply that asks it (``outbound`` with the question)."""
        calls = approval_calls_of(self._calls)
        deadline = self._clock() + self._timeout_s
        approval_id = store.approvals.add(
            self._session_id, message_id=self._message_id, source=self._source, calls=self._calls, expires_at=deadline
        )
        store.timers.set(timer_name(approval_id), deadline)
        self._events.emit(
            store,
            EventKind.APPROVAL_REQUESTED,
            {
                "approval_id": approval_id,
                "session_id": self._session_id,
                "message_id": self._message_id,
                "platform": self._source.platform,
                "chat_id": self._source.chat_id,
                "calls": [{"name": c.name, "arguments": c.arguments} for c in calls],
                "expires_at": deadline,
            },
            session_id=self._session_id,
        )
        self.row = store.approvals.get(approval_id)
        question = prompt_text(approval_id, calls, self._timeout_s)
        text = f"{outbound.text}\n\n{question}" if outbound.text.strip() else question
        request = ApprovalRequest(id=approval_id, calls=calls, expires_at=deadline)
        return msgspec.structs.replace(outbound, text=text, approval=request)


class Resumption(msgspec.Struct, frozen=True, kw_only=True):
    """A decided request a turn continues from: every call's decision (for the agent), the results the runtime
    gives it (the calls it answered) and, in the continuing turn's commit, the request marked resumed."""

    approval_id: int
    decisions: tuple[ApprovalDecision, ...]
    results: tuple[ToolResult, ...]

    def gate(self, patterns: Sequence[str]) -> ApprovalGate:
        """The continuing turn's :class:`ApprovalGate`."""
        return ApprovalGate(patterns=tuple(patterns), decisions=self.decisions)

    def in_commit(self, store: StoreInterface) -> None:
        """Inside the continuing turn's commit: the request is done, its timer gone."""
        store.approvals.resume(self.approval_id)
        store.timers.cancel(timer_name(self.approval_id))
