"""``/approve ID`` and ``/deny ID [reason]``: a person's decision on the tool calls a paused turn waits for.

Every way of answering ends here as such a message: typed in the chat, a platform's button (the adapter turns a
press into the command from the person who pressed it), the API and the console (as the operator, in the name of
the chat that was asked: :func:`operator_decision`), and a request nobody answered in time (:func:`timeout_decision`,
a denial). :func:`decide` checks the request and who answers, then queues the decision as a
:class:`~hermes_actors.lifecycle.work.Decide` turn of the session that asked; the session continues the paused turn
from it. Only the session's principal may answer (and the operator); anyone else is told so and nothing changes.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable

from hermes_actors.lifecycle.commands import Command, CommandName
from hermes_actors.lifecycle.directory import Directory
from hermes_actors.lifecycle.work import Decide, Delivery
from hermes_actors.messages import InboundMessage
from hermes_actors.principal import Principal
from hermes_actors.store import InboxState, StoreInterface
from hermes_actors.store.approvals import ApprovalRow

__all__ = [
    "OPERATOR",
    "OPERATOR_PREFIX",
    "TIMEOUT",
    "TIMEOUT_PREFIX",
    "decide",
    "decided_by",
    "not_yours_text",
    "operator_decision",
    "parse_decision",
    "timeout_decision",
]

OPERATOR = "operator"
TIMEOUT = "timeout"
OPERATOR_PREFIX = "approval-operator-"  # the message id of a decision the operator sent (API admin key, console)
TIMEOUT_PREFIX = "approval-timeout-"  # the message id of the denial of a request nobody answered in time

_DECISION = re.compile(r"^#?(?P<id>\d{1,18})(?:\s+(?P<reason>.+))?$", re.DOTALL)
_USAGE = "Usage: /approve ID, or /deny ID [reason]; the ID is in the question."

_log = logging.getLogger(__name__)

Submit = Callable[[Callable[[StoreInterface], object]], None]


def parse_decision(argument: str) -> tuple[int, str | None] | None:
    """The request id and the reason of ``/approve``'s or ``/deny``'s argument (``"7"``, ``"#7 too risky"``), or
    ``None`` when it names none."""
    found = _DECISION.match(argument.strip())
    if found is None:
        return None
    reason = (found["reason"] or "").strip() or None
    return int(found["id"]), reason


def decided_by(message: InboundMessage) -> str:
    """Who a decision message speaks for: :data:`OPERATOR`, :data:`TIMEOUT`, or the principal that sent it."""
    if message.message_id.startswith(OPERATOR_PREFIX):
        return OPERATOR
    if message.message_id.startswith(TIMEOUT_PREFIX):
        return TIMEOUT
    principal = Principal.of(message.source)
    return principal.memory_key or f"{principal.platform}:?"


def not_yours_text(approval_id: int) -> str:
    """What someone who may not answer request ``approval_id`` is told."""
    return (
        f"Only the person this conversation belongs to (or the operator) can answer approval {approval_id}; "
        "nothing was changed."
    )


def operator_decision(row: ApprovalRow, *, approved: bool, reason: str | None) -> InboundMessage:
    """The message that answers ``row`` as the operator: sent in the name of the chat that was asked, so the
    continued turn's reply goes there."""
    verb = "/approve" if approved else "/deny"
    text = f"{verb} {row.id}" + (f" {reason}" if reason else "")
    return InboundMessage(source=row.source, text=text, message_id=f"{OPERATOR_PREFIX}{uuid.uuid4().hex}")


def timeout_decision(row: ApprovalRow, waited_s: float) -> InboundMessage:
    """The denial of ``row`` when nobody answered within ``waited_s`` seconds (one per request: its id is the
    message's, so a timer that fires twice adds one message)."""
    reason = f"nobody answered within {_duration(waited_s)}"
    return InboundMessage(source=row.source, text=f"/deny {row.id} {reason}", message_id=f"{TIMEOUT_PREFIX}{row.id}")


def _duration(seconds: float) -> str:
    if seconds >= 120 and seconds % 60 == 0:
        return f"{int(seconds // 60)} minutes"
    return f"{seconds:g} s"


def decide(directory: Directory, store: StoreInterface, delivery: Delivery, command: Command, submit: Submit) -> None:
    """Answer ``/approve`` or ``/deny`` (``command``) from ``delivery``'s sender: refuse it with why, or queue it as
    a :class:`Decide` turn of the session that asked (read through ``store``; ``submit`` queues a write)."""
    approved = command.name is CommandName.APPROVE
    parsed = parse_decision(command.argument)
    if parsed is None:
        directory.reply_now(delivery, _USAGE, session_id=None, state=InboxState.REJECTED)
        return
    approval_id, reason = parsed
    row = store.approvals.get(approval_id)
    record = store.find_session(row.session_id) if row is not None else None
    if row is None or record is None:
        directory.reply_now(
            delivery, f"There is no approval {approval_id} waiting here.", session_id=None, state=InboxState.REJECTED
        )
        return
    by = decided_by(delivery.message)
    if by not in (OPERATOR, TIMEOUT) and Principal.of(delivery.message.source) != Principal.of_record(record):
        _log.info("approval %d: %s may not answer it (session %s)", approval_id, by, record.id)
        directory.reply_now(delivery, not_yours_text(approval_id), session_id=None, state=InboxState.REJECTED)
        return
    if not row.is_open:
        answered = f"{row.state.value} by {row.decided_by}" if row.decided_by else row.state.value
        directory.reply_now(
            delivery,
            f"Approval {approval_id} was answered already ({answered}); nothing was changed.",
            session_id=record.id,
            state=InboxState.REJECTED,
        )
        return
    if not record.is_live or directory.is_ending(record.id):
        submit(lambda writing: _close(writing, approval_id, by))
        directory.reply_now(
            delivery,
            f"The conversation that asked for approval {approval_id} has ended, so nothing was run.",
            session_id=None,
            state=InboxState.REJECTED,
        )
        return
    directory.queue_control(
        record.id, Decide(approval_id=approval_id, approved=approved, by=by, reason=reason), delivery
    )


def _close(store: StoreInterface, approval_id: int, by: str) -> None:
    """A request of a session that ended: denied, and done (no turn will continue from it)."""
    store.approvals.decide(approval_id, approved=False, by=by, reason="the conversation ended")
    store.approvals.resume(approval_id)
