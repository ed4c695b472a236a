"""Session turns: the only place a session's turns run, one at a time.

:class:`SessionTurns` is what :class:`~hermes_actors.runtime.session.SessionActor` (the mailbox and thread) drives.
Each request passes the :class:`~hermes_actors.runtime.turn_gate.TurnGate`, which decides whether it runs here (the
one place a request that cannot run now is refused, answered or sent elsewhere), then runs as the step it names: an
exchange with the agent (:class:`~hermes_actors.runtime.exchange.Exchange`), a compression
(:class:`~hermes_actors.runtime.compression.Compression`), the decision a paused turn waits for
(:class:`~hermes_actors.runtime.approvals.ApprovalTurns`) or another lifecycle step
(:class:`~hermes_actors.runtime.controls.SessionControls`). All of them work on the session's one
:class:`~hermes_actors.runtime.session_state.SessionState`, which none of them refers back from.
"""

from __future__ import annotations

import logging

from hermes_actors.errors import SessionClosedError
from hermes_actors.runtime.approvals import ApprovalTurns
from hermes_actors.runtime.compression import Compression
from hermes_actors.runtime.controls import SessionControls
from hermes_actors.runtime.exchange import Exchange
from hermes_actors.runtime.protocol import Compress, Decide, EndSession, Handoff, RunTurn, SetTitle, TurnOutcome
from hermes_actors.runtime.records import NewSession
from hermes_actors.runtime.services import SessionServices
from hermes_actors.runtime.session_state import SessionState
from hermes_actors.runtime.turn_gate import TurnGate

__all__ = ["SessionTurns"]

_log = logging.getLogger(__name__)


class SessionTurns:
    """The turns of one session, driven by :class:`SessionActor` (or any single thread); ``create_with`` and
    ``title``: a session that does not exist yet (:class:`SessionState`)."""

    __slots__ = ("_approvals", "_compression", "_controls", "_exchange", "_gate", "_state", "services", "session_id")

    def __init__(
        self,
        session_id: str,
        services: SessionServices,
        *,
        create_with: NewSession | None = None,
        title: str | None = None,
    ) -> None:
        self.session_id = session_id
        self.services = services
        self._state = SessionState(session_id, services, create_with=create_with, title=title)
        self._exchange = Exchange(self._state)
        self._compression = Compression(self._state, self._exchange)
        self._controls = SessionControls(self._state, self._exchange)
        self._gate = TurnGate(self._state, self._exchange)
        self._approvals = ApprovalTurns(self._state, self._exchange)

    @property
    def platform(self) -> str:
        """The platform the session was opened on."""
        return self._state.platform

    def lost_lease(self) -> None:
        """The lease was taken over: forget it, so the next turn takes it again and reads the transcript anew."""
        self._state.lease_ended()

    def release_lease(self) -> None:
        """Give the lease up without waiting for the commit (the actor is stopping)."""
        self._state.release_lease()

    def run(self, request: RunTurn) -> TurnOutcome:
        """Run one turn (or lifecycle step) once it passed the :class:`TurnGate`, and commit it; return what
        happened. A commit refused because the session ended meanwhile is not tried: :meth:`TurnGate.closed`."""
        self._state.apply_background_title()  # a background title stored since the last turn
        admitted = self._gate.admit(request)
        if isinstance(admitted, TurnOutcome):
            return admitted
        try:
            return self._run(admitted)
        except SessionClosedError as exc:
            self._state.reload()
            record = self._state.record
            if record is None or record.is_live:
                raise
            _log.warning("session %s: %s; the turn is not run again", self.session_id, exc)
            return self._gate.closed(admitted.deliveries)

    def _run(self, request: RunTurn) -> TurnOutcome:
        deliveries = request.deliveries
        match request.control:
            case EndSession():
                return self._controls.end(request.control, deliveries, request.token)
            case SetTitle():
                return self._controls.set_title(request.control, deliveries)
            case Compress():
                return self._compression.compress(deliveries, request.token, reply=True)
            case Handoff():
                return self._controls.handoff(request.control, deliveries, request.token)
            case Decide():
                return self._approvals.decide(request.control, deliveries, request.token)
            case None:  # no lifecycle step: an ordinary turn, below
                pass
        if request.reply_override is not None:
            return self._exchange.answer(deliveries, request.reply_override)
        # A message while the last turn waits for a decision on tool calls: the calls are refused, and it answers.
        superseding = self._approvals.supersede(
            deliveries, request.token, steering=request.steering, also_answers=request.also_answers
        )
        if superseding is not None:
            return superseding
        early = self._compression.before_turn(deliveries, request.token)  # compression, or a turn over the window
        if early is not None:
            return early
        return self._exchange.converse(
            deliveries, request.token, steering=request.steering, also_answers=request.also_answers
        )
