"""The supervisor: the routing directory, session activation, backpressure, passivation and lifecycle routing.

One pykka actor. It maps routing keys to session ids (cached, persisted through the store), keeps one
:class:`~hermes_actors.runtime.session.SessionActor` per live session id, and holds each session's queue of work: a
session actor gets one :class:`~hermes_actors.runtime.protocol.RunTurn` at a time and asks for the next by
finishing. Because the queue lives here, a stopping actor's new messages wait for its next activation, in order,
and ``/resume``, handoff and compression only re-point directory entries. Commands that change where a key leads
(``/new``, ``/reset``, ``/resume``, resets by timer, an operator's end) take effect here at once, so a message that
arrives while a session is ending goes to its successor, never to the ended session. A held
:class:`~hermes_actors.lifecycle.handlers.LifecycleCommands` runs those commands (and an operator's
:class:`~hermes_actors.runtime.protocol.AdminChange`) through the
:class:`~hermes_actors.runtime.directory.SupervisorDirectory` port; the routes are a
:class:`~hermes_actors.runtime.routes.Routes`, each session's entry a :class:`~hermes_actors.runtime.live.LiveSession`,
and what happens to a message that reaches a busy session (its busy policy, backpressure, ``/stop``) is
:class:`~hermes_actors.runtime.busy.Arrivals`'s to say.

The supervisor never waits for a commit: what it writes (a route, a reply of its own, a refusal) is submitted to
the writer, and a reply goes to the outbox once its row has committed (the writer's ``then``, which only tells the
outbox actor). Writes keep their order, so a later turn's commit never overtakes them.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from typing import Any

from hermes_actors.ids import SessionKind
from hermes_actors.lifecycle.commands import CommandName, parse_command
from hermes_actors.lifecycle.handlers import LifecycleCommands
from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource, build_session_key
from hermes_actors.runtime.actors import RuntimeActor
from hermes_actors.runtime.busy import Arrivals
from hermes_actors.runtime.directory import SupervisorDirectory
from hermes_actors.runtime.live import ControlWork, LiveSession, evictable_sessions, idle_sessions, statistics_of
from hermes_actors.runtime.log_fields import platform_extra
from hermes_actors.runtime.operator_reads import transcript
from hermes_actors.runtime.protocol import (
    AdminChange,
    Control,
    Deliver,
    DeliverBatch,
    Delivery,
    EndDue,
    GetStatistics,
    HandoffResult,
    PassivationTick,
    Rebind,
    SessionFor,
    SessionStopped,
    StopSession,
    SupervisorMessage,
    SupervisorTell,
    TurnFinished,
    TurnOutcome,
)
from hermes_actors.runtime.records import NewSession
from hermes_actors.runtime.routes import Routes
from hermes_actors.runtime.services import SessionServices
from hermes_actors.runtime.session import SessionActor
from hermes_actors.runtime.turns import SessionTurns

__all__ = ["SupervisorActor"]

_log = logging.getLogger(__name__)


class SupervisorActor(RuntimeActor):
    """Owns the routing directory and the session actors; see the module docstring."""

    use_daemon_thread = True

    def __init__(
        self,
        services: SessionServices,
        *,
        on_turn: Callable[[TurnOutcome], None] | None = None,
        on_activity: Callable[[str, SessionSource | None], None] | None = None,
        on_end: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__()
        self._services = services
        self._config = services.config
        self._writer = services.writer
        self._readers = services.readers
        self._clock = services.clock
        self._on_turn = on_turn
        self._on_activity = on_activity
        self._on_end = on_end
        self._live: OrderedDict[str, LiveSession] = OrderedDict()  # least recently used first
        self._routes = Routes(self._readers, self._writer, self._live)
        self._port = SupervisorDirectory(
            self._routes,
            self._live,
            services=services,
            queue_control=self._queue_control,
            cancel_running=self._cancel_running,
        )
        self._lifecycle = LifecycleCommands(
            self._port,
            config=self._config,
            readers=self._readers,
            writer=self._writer,
            lease_owner=services.lease_owner,
            owner_alive=services.owner_alive,
            read_transcript=transcript,
        )
        self._actors = 0
        self._counts = {"activations": 0, "passivations": 0, "evictions": 0, "turns": 0, "rejected": 0}
        self._arrivals = Arrivals(services, self._port, self._counts)
        self._held: set[str] | None = None  # sessions whose dispatch waits for the batch being queued

    # -- messages ----------------------------------------------------------------------------------------------

    def on_receive(self, message: SupervisorMessage) -> object:
        match message:
            case SessionFor(routing_key=routing_key):
                return self._routes.existing(routing_key)
            case GetStatistics():
                return statistics_of(self._live.values(), self._actors, len(self._routes), self._counts)
            case Rebind(routing_key=routing_key, session_id=session_id):
                return self._routes.store(routing_key, session_id)
            case AdminChange():
                self._lifecycle.admin(message)
                return None
            case (
                Deliver()
                | DeliverBatch()
                | TurnFinished()
                | SessionStopped()
                | StopSession()
                | EndDue()
                | HandoffResult()
                | PassivationTick()
            ):
                try:
                    self._told(message)
                except Exception:
                    # One bad message must not take the directory down with it; an unanswered inbound message stays
                    # pending in the inbox and is replayed at the next start.
                    _log.exception("supervisor: handling %s failed", type(message).__name__)
                return None
            case _:  # a bug: an ask gets it back; a tell reaches on_failure (logged) and stops the supervisor
                raise TypeError(f"SupervisorActor got an unknown message {message!r}")

    def _told(self, message: SupervisorTell) -> None:
        match message:
            case Deliver():
                self._deliver(message)
            case DeliverBatch():
                self._deliver_together(message.delivers)
            case TurnFinished():
                self._finished(message)
            case SessionStopped():
                self._stopped(message)
            case StopSession(routing_key=routing_key):
                self._cancel_running(self._routes.cached(routing_key))
            case EndDue():
                self._lifecycle.end_by_timer(message)
            case HandoffResult():
                self._lifecycle.handoff_result(message)
            case PassivationTick():
                self._passivate_idle()

    def on_failure(self, exception_type: Any, exception_value: Any, traceback: Any) -> None:
        _log.error("supervisor crashed: %s; stopping its session actors", exception_value)
        self.on_stop()

    def on_stop(self) -> None:
        refs = [state.ref for state in self._live.values() if state.ref is not None]
        for ref in refs:
            ref.stop(block=False)
        for ref in refs:
            ref.stop(block=True, timeout=self._config.ask_timeout_s)

    # -- directory -------------------------------------------------------------------------------------------

    def _resolve(self, routing_key: str, message: InboundMessage) -> str:
        """Return the session for ``routing_key``, assigning a new one (created by ``message``'s turn) when needed."""
        routes, source = self._routes, message.source
        session_id = routes.existing(routing_key) or routes.claim_legacy_dm(
            routing_key, source, self._config.key_policy
        )
        if session_id is not None:
            return session_id
        previous = routes.ending_predecessor(routing_key)
        kind = SessionKind.CLI if source.platform == "cli" else SessionKind.GATEWAY
        session_id = routes.fresh_id(self._services.new_id, kind, routing_key)
        state = self._live[session_id] = LiveSession(
            create_with=NewSession.of(routing_key, message), title=self._lifecycle.take_pending_title(routing_key)
        )
        if previous is not None:
            state.hold_until = previous
        routes.cache(routing_key, session_id)
        return session_id

    # -- delivery and turns ------------------------------------------------------------------------------------

    def _deliver(self, message: Deliver) -> None:
        delivery = message.delivery
        self._routes.check(message)  # before a command too: it looks the key up
        command = parse_command(delivery.message.text, reset_triggers=self._config.reset_triggers)
        if command is not None and command.name is not CommandName.STOP:
            self._lifecycle.run(message.routing_key, delivery, command)
            return
        session_id = self._resolve(message.routing_key, delivery.message)
        state = self._state(session_id)
        if self._arrivals.arrive(session_id, state, delivery, stop=command is not None):
            self._dispatch(session_id, state)

    def _deliver_together(self, delivers: tuple[Deliver, ...]) -> None:
        """Queue replayed messages, then start their sessions' turns: each session's policy sees them together."""
        held: set[str] = set()
        self._held = held
        try:
            for deliver in delivers:
                self.on_receive(deliver)  # a failure is logged and the others go on, as for single messages
        finally:
            self._held = None
        for session_id in held:
            if (state := self._live.get(session_id)) is not None:
                self._dispatch(session_id, state)

    def _state(self, session_id: str) -> LiveSession:
        state = self._live.get(session_id)
        if state is None:
            state = self._live[session_id] = LiveSession(create_with=None)
        self._live.move_to_end(session_id)
        state.last_used = self._clock()
        return state

    def _dispatch(self, session_id: str, state: LiveSession) -> None:
        """Hand the next turn to the session's actor if it is free, activating it first when needed."""
        if self._held is not None:  # a batch is being queued: its sessions start after it
            self._held.add(session_id)
            return
        if state.busy or state.stopping or not state.queue or state.hold_until is not None:
            return
        if state.paused_until is not None:
            if state.paused_until > self._clock():
                return  # the tick dispatches it when the pause is over
            state.paused_until = None
        if state.ref is None:
            self._activate(session_id, state)
        turn = state.next_turn(self._config.pending_soft_limit, self._config.key_policy, self._arrivals.collects)
        state.busy = True
        assert state.ref is not None
        state.ref.tell(turn)

    def _activate(self, session_id: str, state: LiveSession) -> None:
        make_turns = partial(SessionTurns, session_id, self._services, create_with=state.create_with, title=state.title)
        state.create_with = state.title = None
        state.ref = SessionActor.start(make_turns, self.actor_ref, session_id)
        self._actors += 1
        self._counts["activations"] += 1
        self._evict_over_cap()

    def _finished(self, message: TurnFinished) -> None:
        self._counts["turns"] += 1
        session_id = message.session_id
        outcome = message.outcome
        state = self._live.get(session_id)
        if self._on_turn is not None and outcome is not None:
            self._on_turn(outcome)
        if state is None:
            return
        state.turn_ended(outcome)
        state.last_used = self._clock()
        self._live.move_to_end(session_id)
        if message.retry is not None:
            self._requeue(session_id, state, message)
            return
        if message.abandon_term is not None and (dropped := state.drop_deliveries(message.abandon_term)):
            _log.info("session %s: %d queued messages wait for the shard's next term", session_id, dropped)
        state.failures = 0
        if outcome is not None and outcome.not_ended and self._routes.is_ending(session_id):
            self._abort_end(session_id, state)
            return
        if outcome is not None and outcome.ended:
            self._retire(session_id, state, outcome)
            return
        if outcome is not None and outcome.rebound:
            for key in outcome.rebound:
                self._routes.cache(key, session_id)
            self._lifecycle.handoff_bound(session_id, outcome.rebound[0], outcome.handoff_previous)
        if outcome is not None and outcome.stored_messages and self._on_activity is not None:
            self._on_activity(session_id, outcome.origin)
        self._dispatch(session_id, state)

    def _requeue(self, session_id: str, state: LiveSession, message: TurnFinished) -> None:
        """Put a turn that saved nothing back at the head of the session's queue: it runs again before anything
        queued after it. After a store failure the session waits, longer after each failure in a row."""
        turn = message.retry
        assert turn is not None
        state.put_back(turn)
        if message.error is not None:
            pause = state.pause_after_failure(self._clock())
            extra = platform_extra(session_id, turn.deliveries)
            _log.warning("session %s: retrying its turn in %.0f s (%s)", session_id, pause, message.error, extra=extra)
        self._dispatch(session_id, state)

    def _abort_end(self, session_id: str, state: LiveSession) -> None:
        """An end that could not run (another process holds the lease): the session keeps its keys, and what was
        queued for a successor comes back to it, in order."""
        keys = self._routes.end_settled(session_id)
        for other_id, other in list(self._live.items()):
            if other.hold_until == session_id and other.ref is None:
                state.queue.extend(other.queue)
                del self._live[other_id]
                self._routes.forget(other_id)
        for key in keys:
            self._routes.cache(key, session_id)
        self._dispatch(session_id, state)

    def _retire(self, session_id: str, state: LiveSession, outcome: TurnOutcome) -> None:
        """The session ended: hand its keys and remaining queue to its successor and stop its actor."""
        self._counts["ended"] = self._counts.get("ended", 0) + 1
        self._routes.end_settled(session_id)
        keys = self._routes.keys_of(session_id)
        self._routes.forget(session_id)
        if self._on_end is not None:
            self._on_end(session_id)
        if outcome.continued_by is not None:
            child = outcome.continued_by
            for key in keys:
                self._routes.cache(key, child)
            successor = self._state(child)
            successor.queue.extendleft(reversed([*outcome.requeue, *state.queue]))
            state.queue.clear()
            self._dispatch(child, successor)
        elif state.queue or outcome.requeue:
            # Work queued behind the end (keys re-resolved before it, or an end in another process): route it anew.
            leftovers = [*outcome.requeue, *state.queue]
            state.queue.clear()
            for work in leftovers:
                if isinstance(work, Delivery):
                    key = build_session_key(work.message.source, self._config.key_policy)
                    self._deliver(Deliver(routing_key=key, delivery=work))
        for other_id, other in list(self._live.items()):
            if other.hold_until == session_id:
                other.hold_until = None
                self._dispatch(other_id, other)
        self._passivate(session_id, state)

    def _cancel_running(self, session_id: str | None) -> None:
        state = self._live.get(session_id) if session_id is not None else None
        if state is not None:
            state.token.cancel()

    def _queue_control(self, session_id: str, control: Control, delivery: Delivery | None) -> None:
        state = self._state(session_id)
        state.queue.append(ControlWork(control=control, delivery=delivery))
        self._dispatch(session_id, state)

    # -- passivation -------------------------------------------------------------------------------------------

    def _passivate(self, session_id: str, state: LiveSession) -> None:
        if state.ref is None or state.stopping:
            if state.ref is None and not state.queue and state.create_with is None:
                self._live.pop(session_id, None)
            return
        state.stopping = True
        state.ref.stop(block=False)

    def _evict_over_cap(self) -> None:
        for session_id in evictable_sessions(self._live, self._actors - self._config.max_live_actors):
            self._passivate(session_id, self._live[session_id])
            self._counts["evictions"] += 1

    def _passivate_idle(self) -> None:
        now = self._clock()
        for session_id, state in list(self._live.items()):
            if state.paused_until is not None and state.paused_until <= now:
                self._dispatch(session_id, state)
        for session_id in idle_sessions(self._live, now - self._config.passivate_after_s):
            self._passivate(session_id, self._live[session_id])
            self._counts["passivations"] += 1
        owner, ttl = self._services.lease_owner, self._config.lease_ttl_s
        self._writer.submit(lambda store: store.leases.heartbeat(owner, ttl))

    def _stopped(self, message: SessionStopped) -> None:
        state = self._live.get(message.session_id)
        if state is None or state.ref is None or state.ref.actor_urn != message.actor_urn:
            return
        self._actors -= 1
        state.ref = None
        state.stopping = False
        state.busy = False
        if state.queue:
            self._dispatch(message.session_id, state)  # work that arrived while it stopped
        else:
            del self._live[message.session_id]
            self._routes.forget(message.session_id)  # the store has them; keep memory bounded
