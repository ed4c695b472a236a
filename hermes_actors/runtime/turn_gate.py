"""What a turn passes before its agent is called: the session's lease, rows still pending, an open session.

An agent call is the costly part of a turn, and its tools may act on the world; so it is made only when its commit
can succeed, and a commit the store refuses for a reason another try cannot change never calls the agent again.
:meth:`TurnGate.admit` lets a turn reach the agent only once this process holds the session's lease (taken,
waiting up to ``lease_wait_s``; a holder that keeps it gets the messages a busy reply), drops the rows another turn
answered meanwhile, and checks that the session is still open. A session that ended in another process (a terminal
chat closed, an operator's end, a compression) is :meth:`TurnGate.closed`: each message goes to the session its
routing key leads to now, or, when the key still leads to the ended session, is answered with
:attr:`~hermes_actors.messages.OutboundError.SESSION_ENDED` and not run; the supervisor then retires the session.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import msgspec

from hermes_actors.messages import OutboundError
from hermes_actors.routing import build_session_key
from hermes_actors.runtime.exchange import Exchange
from hermes_actors.runtime.leases import describe_owner
from hermes_actors.runtime.protocol import Compress, Decide, Delivery, EndSession, Handoff, RunTurn, TurnOutcome
from hermes_actors.runtime.records import still_pending
from hermes_actors.runtime.session_state import SessionState
from hermes_actors.store import InboxState, StoreInterface

__all__ = ["TurnGate", "calls_agent", "ended_text"]

_log = logging.getLogger(__name__)


def calls_agent(request: RunTurn) -> bool:
    """Whether ``request`` may call the agent: an ordinary turn, a compression, a handoff or a decision."""
    return request.reply_override is None and (
        request.control is None or isinstance(request.control, Compress | Handoff | Decide)
    )


def ended_text(session_id: str, reason: str | None) -> str:
    """What the sender of a message that reached ``session_id`` after it ended (with ``reason``) is told."""
    why = f" ({reason})" if reason else ""
    return (
        f"Session {session_id} ended{why} before your message could run, so it was not sent to the agent. "
        "Send it again to start a new conversation."
    )


def _leads_elsewhere(store: StoreInterface, routing_key: str, session_id: str) -> bool:
    """Whether ``routing_key`` leads to a live session other than ``session_id`` now."""
    current = store.get_route(routing_key)
    if current is None or current == session_id:
        return False
    record = store.find_session(current)
    return record is not None and record.is_live


class TurnGate:
    """The checks a turn of one session passes before its agent runs, against its :class:`SessionState`."""

    __slots__ = ("_exchange", "_state")

    def __init__(self, state: SessionState, exchange: Exchange) -> None:
        self._state = state
        self._exchange = exchange

    def admit(self, request: RunTurn) -> RunTurn | TurnOutcome:
        """Return the turn to run (its deliveries that are still pending), or the outcome of a turn that must not
        run here: the lease stayed with another process, every row was answered already, or the session ended."""
        state = self._state
        if not state.lease_held and not state.is_new:
            holder = state.acquire_lease()
            if holder is not None:
                return self._busy(request, holder)
        deliveries = request.deliveries
        if deliveries:
            fresh = still_pending(state.services.readers, deliveries)
            if len(fresh) < len(deliveries):
                done = [d.inbox_id for d in deliveries if d not in fresh]
                _log.info("session %s: inbox rows %s were answered by another turn already", state.session_id, done)
                if not fresh:
                    return TurnOutcome(session_id=state.session_id, inbox_ids=(), outbox_id=None, stored_messages=0)
                request = msgspec.structs.replace(request, deliveries=tuple(fresh))
        if calls_agent(request) and state.record is not None and not state.record.is_live:
            return self.closed(request.deliveries)
        return request

    def _busy(self, request: RunTurn, holder: str) -> TurnOutcome:
        """Another process kept the lease for ``lease_wait_s``: refuse the messages (an end cannot run here)."""
        state = self._state
        refused = isinstance(request.control, EndSession)
        if not request.deliveries:  # a timer's reset: the lease holder's own timers decide
            return TurnOutcome(
                session_id=state.session_id, inbox_ids=(), outbox_id=None, stored_messages=0, not_ended=refused
            )
        busy = (
            f"This conversation is busy in {describe_owner(holder)}; "
            "your message was not run. Send it again when that process has finished."
        )
        outcome = self._exchange.answer(request.deliveries, busy, state=InboxState.REJECTED)
        return msgspec.structs.replace(outcome, not_ended=refused)

    def closed(self, deliveries: Sequence[Delivery]) -> TurnOutcome:
        """The session has ended (in another process): send each of ``deliveries`` to the session its routing key
        leads to now (``requeue``), or answer it with why it was not run; the outcome says the session ended."""
        state = self._state
        session_id = state.session_id
        reason = state.record.end_reason if state.record is not None else None
        policy = state.services.config.key_policy
        with state.services.readers.reader() as store:
            moved = tuple(
                d
                for d in deliveries
                if _leads_elsewhere(store, build_session_key(d.message.source, policy), session_id)
            )
        refused = [d for d in deliveries if d not in moved]
        _log.info(
            "session %s ended (%s) before its turn ran; the agent is not called: %d messages go to their chat's "
            "current session, %d are answered",
            session_id,
            reason,
            len(moved),
            len(refused),
        )
        outcome = TurnOutcome(session_id=session_id, inbox_ids=(), outbox_id=None, stored_messages=0)
        if refused:
            text = ended_text(session_id, reason)
            outcome = self._exchange.answer(refused, text, state=InboxState.REJECTED, error=OutboundError.SESSION_ENDED)
        return msgspec.structs.replace(outcome, ended=True, requeue=moved)
