"""The turn that continues a turn paused on tool calls, from a person's decision.

The decision comes as a :class:`~hermes_actors.lifecycle.work.Decide` turn (:meth:`ApprovalTurns.decide`), from
``/approve``, ``/deny``, a button, the API, the console or the deadline; any other message first denies the request
it waits on (:meth:`ApprovalTurns.supersede`). The commit that records an approval claims the calls: they run after
it, on this thread, and their results are kept (``store.approvals.record_results``) before the agent continues. A
decision replayed after a crash finds the request decided: calls that ran are answered with their kept results,
calls that may have been running get an error result instead of running again. The continuation is an ordinary
exchange (:class:`~hermes_actors.runtime.approval_requests.Resumption`) whose message carries the results
(:attr:`~hermes_actors.messages.InboundMessage.tool_results`) and whose commit marks the request resumed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence

import msgspec

from hermes_actors.agents.tools import agent_tools, error_json, find_tool
from hermes_actors.agents.turn import ApprovalDecision
from hermes_actors.lifecycle.approvals import decided_by
from hermes_actors.lifecycle.work import Decide
from hermes_actors.messages import InboundMessage, ToolResult
from hermes_actors.runtime.approval_requests import Resumption, call_arguments, call_name, calls_of
from hermes_actors.runtime.exchange import Exchange
from hermes_actors.runtime.protocol import Delivery, TurnOutcome
from hermes_actors.runtime.services import CancelToken
from hermes_actors.runtime.session_state import SessionState
from hermes_actors.runtime.steering import SteerChannel
from hermes_actors.store import InboxState, StoreInterface
from hermes_actors.store.approvals import ApprovalRow, ApprovalState

__all__ = ["INTERRUPTED", "SUPERSEDED", "ApprovalTurns"]

INTERRUPTED = (
    "The gateway stopped while this call may have been running, so it was not run again; ask the user whether to "
    "try again."
)
SUPERSEDED = "the user sent a new message instead of answering"

_log = logging.getLogger(__name__)


class ApprovalTurns:
    """The decisions of one session's requests, run against its :class:`SessionState` (see the module
    docstring)."""

    __slots__ = ("_exchange", "_state")

    def __init__(self, state: SessionState, exchange: Exchange) -> None:
        self._state = state
        self._exchange = exchange

    def decide(self, control: Decide, deliveries: Sequence[Delivery], token: CancelToken) -> TurnOutcome:
        """Record ``control``'s decision (unless the request was decided already: a replay) and continue the paused
        turn from it; a request that is not this session's open one is answered with why nothing happened."""
        state = self._state
        approval_id = control.approval_id
        with state.services.readers.reader() as store:
            row = store.approvals.get(approval_id)
        if row is None or row.session_id != state.session_id or not row.is_open:
            why = (
                f"Approval {approval_id} was answered already; nothing was changed."
                if row is not None and row.session_id == state.session_id
                else f"There is no approval {approval_id} waiting here."
            )
            if not deliveries:
                return TurnOutcome(session_id=state.session_id, inbox_ids=(), outbox_id=None, stored_messages=0)
            return self._exchange.answer(deliveries, why, state=InboxState.REJECTED)
        return self._continue(row, deliveries, token, approved=control.approved, by=control.by, reason=control.reason)

    def supersede(
        self,
        deliveries: Sequence[Delivery],
        token: CancelToken,
        *,
        steering: SteerChannel | None = None,
        also_answers: tuple[str, ...] = (),
    ) -> TurnOutcome | None:
        """A message that is not a decision while a request waits: the request is denied (or, decided already and
        not continued, taken as it was decided) and the turn answers the message after the calls' results; ``None``
        when no request waits."""
        row = self._state.paused
        if row is None or not deliveries:
            return None
        by = decided_by(deliveries[0].message)
        return self._continue(
            row,
            deliveries,
            token,
            approved=False,
            by=by,
            reason=SUPERSEDED,
            keep_text=True,
            steering=steering,
            also_answers=also_answers,
        )

    def _continue(
        self,
        row: ApprovalRow,
        deliveries: Sequence[Delivery],
        token: CancelToken,
        *,
        approved: bool,
        by: str,
        reason: str | None,
        keep_text: bool = False,
        steering: SteerChannel | None = None,
        also_answers: tuple[str, ...] = (),
    ) -> TurnOutcome:
        state = self._state
        claimed = False
        if row.state is ApprovalState.PENDING:

            def claim(store: StoreInterface) -> tuple[bool, ApprovalRow | None]:
                state.fence(store)
                decided = store.approvals.decide(row.id, approved=approved, by=by, reason=reason)
                return decided, store.approvals.get(row.id)

            claimed, stored = state.services.writer.call(claim)
            row = stored or row
        resumption = self._resolve(row, claimed=claimed)
        _log.info(
            "session %s: approval %d %s by %s; the turn continues",
            state.session_id,
            row.id,
            row.state.value,
            row.decided_by,
        )
        carrying = _carrying(deliveries, row, resumption.results, keep_text=keep_text)
        return self._exchange.converse(
            carrying, token, resumed=resumption, steering=steering, also_answers=also_answers
        )

    def _resolve(self, row: ApprovalRow, *, claimed: bool) -> Resumption:
        """Every call's decision, and the results of the calls the runtime answers: those of the session's tools
        (run now when this turn's commit approved them, kept results or an error after a restart, the denial)."""
        state = self._state
        kept: dict[str, str] = json.loads(row.results) if row.results else {}
        decisions: list[ApprovalDecision] = []
        results: list[ToolResult] = []
        ran: dict[str, str] = {}
        for call in calls_of(row.calls):
            call_id, name = str(call.get("id") or ""), call_name(call)
            tool = find_tool(state.offered, name)
            approved = row.state is ApprovalState.APPROVED
            if tool is None:  # the agent's own tool: it runs it, unless it may have run already
                why = row.reason if not approved else None if claimed else INTERRUPTED
                decisions.append(
                    ApprovalDecision(call_id=call_id, tool_name=name, approved=approved and claimed, reason=why)
                )
                continue
            if not approved:
                output = error_json(
                    f"The user did not approve this call ({row.reason or 'no reason given'}); it was not run."
                )
            elif claimed:
                # The agent's MCP tools as their servers list them now: a process that started since the pause may
                # not have listed them yet, and the frozen tool would answer that it is gone.
                live = find_tool(agent_tools(state.named_agent.agent, fresh=True), name) or tool
                output = ran[call_id] = _run(live.run, call_arguments(call))
            else:
                output = kept.get(call_id) or error_json(INTERRUPTED)
            results.append(ToolResult(call_id=call_id, output=output))
            decisions.append(
                ApprovalDecision(call_id=call_id, tool_name=name, approved=approved, reason=row.reason, answered=True)
            )
        if ran:
            state.services.writer.call(lambda store: store.approvals.record_results(row.id, json.dumps(ran)))
        return Resumption(approval_id=row.id, decisions=tuple(decisions), results=tuple(results))


def _run(run: Callable[[dict[str, object]], str], arguments: str) -> str:
    """Run a tool once with the call's ``arguments`` (JSON text); an error result for arguments that are no object."""
    try:
        decoded = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        decoded = None
    if not isinstance(decoded, dict):
        return error_json("the call's arguments are not a JSON object; it was not run")
    return run(decoded)


def _carrying(
    deliveries: Sequence[Delivery], row: ApprovalRow, results: tuple[ToolResult, ...], *, keep_text: bool
) -> list[Delivery]:
    """The deliveries of the continuing turn: the first one's message carries the calls' results (without the
    command's text: a decision is no message to the agent), or, with none, a stand-in in the asked chat's name."""
    if not deliveries:
        message = InboundMessage(source=row.source, text="", message_id=f"approval-{row.id}")
        deliveries = [Delivery(inbox_id=0, message=message)]
    first = deliveries[0]
    text = first.message.text if keep_text else ""
    carried = msgspec.structs.replace(first.message, text=text, tool_results=results or msgspec.UNSET)
    return [msgspec.structs.replace(first, message=carried), *deliveries[1:]]
