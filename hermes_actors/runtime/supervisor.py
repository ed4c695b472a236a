"""The supervisor: the routing directory, session activation, backpressure, passivation and lifecycle routing.

One pykka actor. It maps routing keys to session ids (cached, persisted through the store), keeps one
:class:`~hermes_actors.runtime.session.SessionActor` per live session id, and holds each session's queue of work: a
session actor gets one :class:`~hermes_actors.runtime.protocol.RunTurn` at a time and asks for the next by
finishing. Because the queue lives here, a stopping actor's new messages wait for its next activation, in order,
and ``/resume``, handoff and compression only re-point directory entries. Commands that change where a key leads
(``/new``, ``/reset``, ``/resume``, resets by timer) take effect here at once, so a message that arrives while a
session is ending goes to its successor, never to the ended session. Those commands are run by a
:class:`~hermes_actors.lifecycle.handlers.LifecycleCommands` the supervisor holds, through the
:class:`~hermes_actors.lifecycle.handlers.Directory` port the supervisor implements.

The supervisor never waits for a commit: what it writes (a route, a reply of its own, a refusal) is submitted to
the writer, and a reply goes to the outbox once its row has committed (the writer's ``then``, which only tells the
outbox actor). Writes keep their order, so a later turn's commit never overtakes them.
"""

from __future__ import annotations

import logging
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

import msgspec
import pykka

from hermes_actors.ids import SessionKind, new_session_id
from hermes_actors.lifecycle.commands import (
    CommandName,
    parse_command,
)
from hermes_actors.lifecycle.handlers import LifecycleCommands
from hermes_actors.routing import LegacyKeyAction, SessionSource, build_session_key, migrate_legacy_slack_key
from hermes_actors.runtime.actors import RuntimeActor
from hermes_actors.runtime.protocol import (
    Control,
    Deliver,
    Delivery,
    EndDue,
    GetStatistics,
    HandoffResult,
    PassivationTick,
    Rebind,
    RunTurn,
    SessionFor,
    SessionStopped,
    StopSession,
    SupervisorMessage,
    SupervisorStatistics,
    SupervisorTell,
    TurnFinished,
    TurnOutcome,
)
from hermes_actors.runtime.services import CancelToken, SessionServices, queue_reply, reply_for
from hermes_actors.runtime.session import SessionActor
from hermes_actors.runtime.turns import SessionTurns
from hermes_actors.store import Store

__all__ = ["Supervisor", "SupervisorActor"]

_log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_BASE_S = 1.0  # the first wait after the store refused a turn; doubled after each failure in a row
RETRY_MAX_S = 30.0


class _ControlWork(msgspec.Struct, frozen=True, kw_only=True):
    control: Control
    delivery: Delivery | None = None


_Work = Delivery | _ControlWork


class _Live:
    """What the supervisor knows of one session with an actor (or a queue waiting for one)."""

    __slots__ = (
        "busy",
        "create_with",
        "failures",
        "hold_until",
        "last_used",
        "paused_until",
        "queue",
        "ref",
        "stopping",
        "title",
        "token",
    )

    def __init__(self, create_with: tuple[SessionSource, str] | None, *, title: str | None = None) -> None:
        self.ref: pykka.ActorRef[Any] | None = None
        self.queue: deque[_Work] = deque()
        self.busy = False
        self.stopping = False
        self.token = CancelToken()
        self.last_used = 0.0
        self.create_with = create_with
        self.title = title
        self.hold_until: str | None = None  # a session whose end must commit before this one runs
        self.failures = 0  # turns in a row the store refused to save
        self.paused_until: float | None = None  # after a refused save: no turn before this time (then in order)


def _log_failure(done: Future[Any]) -> None:
    if not done.cancelled() and (exc := done.exception()) is not None:
        _log.error("supervisor: a write failed: %s", exc)


def _text(work: _Work) -> str:
    return work.message.text if isinstance(work, Delivery) else ""


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
        self._routes: dict[str, str] = {}  # cache of the directory for sessions with a live entry
        self._keys: dict[str, set[str]] = {}  # session id -> its cached routing keys
        self._live: OrderedDict[str, _Live] = OrderedDict()  # least recently used first
        self._ending: set[str] = set()  # sessions whose end is queued but not committed yet
        self._successor_of: dict[str, str] = {}  # routing key -> its ending session (the successor waits for it)
        self._lifecycle = LifecycleCommands(
            self,
            config=self._config,
            readers=self._readers,
            writer=self._writer,
            lease_owner=services.lease_owner,
            owner_alive=services.owner_alive,
        )
        self._actors = 0
        self._counts = {"activations": 0, "passivations": 0, "evictions": 0, "turns": 0, "rejected": 0}

    # -- messages ----------------------------------------------------------------------------------------------

    def on_receive(self, message: SupervisorMessage) -> object:
        match message:
            case SessionFor(routing_key=routing_key):
                return self.existing(routing_key)
            case GetStatistics():
                return self._statistics()
            case Rebind(routing_key=routing_key, session_id=session_id):
                return self._store_route(routing_key, session_id)
            case (
                Deliver()
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
            case TurnFinished():
                self._finished(message)
            case SessionStopped():
                self._stopped(message)
            case StopSession(routing_key=routing_key):
                self.cancel_running(self._routes.get(routing_key))
            case EndDue():
                self._lifecycle.end_by_timer(message)
            case HandoffResult():
                self._lifecycle.handoff_result(message)
            case PassivationTick():
                self._passivate_idle()

    def _statistics(self) -> SupervisorStatistics:
        return SupervisorStatistics(
            live_actors=self._actors,
            running=sum(1 for s in self._live.values() if s.busy),
            queued_messages=sum(len(s.queue) for s in self._live.values()),
            routes_cached=len(self._routes),
            **self._counts,
        )

    def on_failure(self, exception_type: Any, exception_value: Any, traceback: Any) -> None:
        _log.error("supervisor crashed: %s; stopping its session actors", exception_value)
        self.on_stop()

    def on_stop(self) -> None:
        refs = [state.ref for state in self._live.values() if state.ref is not None]
        for ref in refs:
            ref.stop(block=False)
        for ref in refs:
            ref.stop(block=True, timeout=self._config.ask_timeout_s)

    # -- directory ---------------------------------------------------------------------------------------------

    def _cache_route(self, routing_key: str, session_id: str) -> None:
        previous = self._routes.get(routing_key)
        if previous is not None and previous != session_id:
            self._keys.get(previous, set()).discard(routing_key)
        self._routes[routing_key] = session_id
        self._keys.setdefault(session_id, set()).add(routing_key)

    def begin_end(self, session_id: str) -> None:
        """Mark ``session_id`` as ending: its keys re-resolve to successors, which wait for the end to commit."""
        self._ending.add(session_id)
        for key in self._keys.get(session_id, set()):
            self._successor_of[key] = session_id
        self._forget_keys(session_id)

    def _forget_keys(self, session_id: str) -> None:
        for key in self._keys.pop(session_id, set()):
            if self._routes.get(key) == session_id:
                del self._routes[key]

    def is_ending(self, session_id: str) -> bool:
        """Return whether ``session_id``'s end is queued but not committed yet."""
        return session_id in self._ending

    def is_active(self, session_id: str) -> bool:
        """Return whether ``session_id`` has a turn running or queued."""
        state = self._live.get(session_id)
        return state is not None and (state.busy or bool(state.queue))

    def awaits_creation(self, session_id: str) -> bool:
        """Return whether ``session_id`` is assigned but its first turn (which creates its row) has not run."""
        state = self._live.get(session_id)
        return state is not None and state.create_with is not None

    def existing(self, routing_key: str) -> str | None:
        """Return the live session ``routing_key`` leads to, without creating one."""
        session_id = self._routes.get(routing_key)
        if session_id is None:
            with self._readers.reader() as store:
                session_id = store.get_route(routing_key)
                if session_id is not None and (session_id not in self._live or self._live[session_id].ref is None):
                    record = store.find_session(session_id)
                    if record is None or not record.is_live:
                        session_id = None
            if session_id is not None:
                self._cache_route(routing_key, session_id)
        if session_id in self._ending:
            return None
        return session_id

    def _resolve(self, routing_key: str, source: SessionSource) -> str:
        """Return the session for ``routing_key``, assigning a new one (created by its first turn) when needed."""
        session_id = self.existing(routing_key) or self._claim_legacy_dm(routing_key, source)
        if session_id is not None:
            return session_id
        previous = self._successor_of.get(routing_key) or self._stored_route(routing_key)
        session_id = self._fresh_id(SessionKind.CLI if source.platform == "cli" else SessionKind.GATEWAY)
        state = self._live[session_id] = _Live(
            create_with=(source, routing_key), title=self._lifecycle.take_pending_title(routing_key)
        )
        if previous in self._ending:
            state.hold_until = previous
        self._cache_route(routing_key, session_id)
        return session_id

    def _claim_legacy_dm(self, routing_key: str, source: SessionSource) -> str | None:
        """Move an imported scope-less Slack DM route to the first workspace that sees the DM (SPEC section 2).

        Hermes keys name no workspace (and no account): ``agent:main:slack:dm:D1``. The first workspace to see D1
        claims that transcript; the old key is deleted in the same transaction, so no second workspace can.
        """
        if source.platform != "slack" or not source.scope_id or source.chat_type != "dm":
            return None
        policy = self._services.config.key_policy
        candidates = {
            build_session_key(msgspec.structs.replace(source, scope_id=None), policy),
            build_session_key(msgspec.structs.replace(source, scope_id=None, account_id=None), policy),
        }
        for legacy in sorted(candidates, key=len, reverse=True):  # the account's own legacy key first
            session_id = self.existing(legacy)
            if session_id is None:
                continue
            decision = migrate_legacy_slack_key(
                legacy, recorded_scope_id=None, observed_scope_id=source.scope_id, dm_already_claimed=False
            )
            if decision.action != LegacyKeyAction.CLAIM:
                continue

            def claim(store: Store, legacy: str = legacy, session_id: str = session_id) -> None:
                store.set_route(routing_key, session_id)
                store.unbind_route(legacy)

            self._submit(claim)
            self._routes.pop(legacy, None)
            self._keys.get(session_id, set()).discard(legacy)
            self._cache_route(routing_key, session_id)
            _log.info("workspace %s claimed the Slack DM transcript of %s (%s)", source.scope_id, legacy, session_id)
            return session_id
        return None

    def _fresh_id(self, kind: SessionKind) -> str:
        """Return a new session id that no live entry and no stored session has (ids repeat with 2^-32 odds)."""
        while True:
            session_id = new_session_id(kind)
            if session_id in self._live:
                continue
            with self._readers.reader() as store:
                if store.find_session(session_id) is None:
                    return session_id

    def _stored_route(self, routing_key: str) -> str | None:
        with self._readers.reader() as store:
            return store.get_route(routing_key)

    def rebind(self, routing_key: str, session_id: str) -> None:
        """Point ``routing_key`` at ``session_id`` (stored, and cached at once)."""
        self._store_route(routing_key, session_id)

    def unbind(self, routing_key: str, session_id: str) -> None:
        """Delete ``routing_key``'s route, which led to ``session_id``."""
        self._submit(lambda store: store.unbind_route(routing_key))
        if self._routes.get(routing_key) == session_id:
            del self._routes[routing_key]
        self._keys.get(session_id, set()).discard(routing_key)

    def _store_route(self, routing_key: str, session_id: str) -> Future[None]:
        committed = self._submit(lambda store: store.set_route(routing_key, session_id))
        self._cache_route(routing_key, session_id)
        return committed

    def _submit(self, work: Callable[[Store], T], then: Callable[[T], object] | None = None) -> Future[T]:
        """Queue a write without waiting for it; a failure is logged (nothing on this thread waits for it)."""
        future = self._writer.submit(work, then=then)
        future.add_done_callback(_log_failure)
        return future

    # -- delivery and turns ------------------------------------------------------------------------------------

    def _deliver(self, message: Deliver) -> None:
        delivery = message.delivery
        command = parse_command(delivery.message.text, reset_triggers=self._config.reset_triggers)
        if command is not None and command.name is not CommandName.STOP:
            self._lifecycle.run(message.routing_key, delivery, command)
            return
        session_id = self._resolve(message.routing_key, delivery.message.source)
        state = self._state(session_id)
        if command is not None:  # /stop: invalidate the running turn now, answer in order
            state.token.cancel()
            state.queue.append(delivery)
        elif len(state.queue) >= self._config.pending_hard_limit:
            self._reject(session_id, delivery, len(state.queue))
            return
        else:
            state.queue.append(delivery)
        self._dispatch(session_id, state)

    def _state(self, session_id: str) -> _Live:
        state = self._live.get(session_id)
        if state is None:
            state = self._live[session_id] = _Live(create_with=None)
        self._live.move_to_end(session_id)
        state.last_used = self._clock()
        return state

    def reply_now(self, delivery: Delivery, text: str, *, session_id: str | None, state: str = "done") -> None:
        """Complete ``delivery`` with a reply straight from the supervisor (nothing goes to a transcript).

        The reply goes to the outbox once its row has committed; the supervisor does not wait for that.
        """
        reply = reply_for(delivery.message.source, session_id, text, delivery.message.message_id)
        outbox = self._services.outbox

        def answer(store: Store) -> int:
            known = session_id if session_id is not None and store.find_session(session_id) else None
            store.inbox.complete(delivery.inbox_id, session_id=known, state=state)
            return queue_reply(store, reply)

        self._submit(answer, then=lambda outbox_id: outbox.deliver(outbox_id, reply))

    def send_now(self, source: SessionSource, text: str, session_id: str | None) -> None:
        """Send ``text`` to ``source``'s chat, answering no inbound message (a later report)."""
        reply = reply_for(source, session_id, text)
        outbox = self._services.outbox
        self._submit(lambda store: queue_reply(store, reply), then=lambda outbox_id: outbox.deliver(outbox_id, reply))

    def _reject(self, session_id: str, delivery: Delivery, queued: int) -> None:
        self._counts["rejected"] += 1
        self.reply_now(
            delivery,
            f"Too many messages are waiting in this conversation ({queued}); this one was not run. "
            "Wait for the replies, then send it again.",
            session_id=None,
            state="rejected",
        )

    def _dispatch(self, session_id: str, state: _Live) -> None:
        """Hand the next turn to the session's actor if it is free, activating it first when needed."""
        if state.busy or state.stopping or not state.queue or state.hold_until is not None:
            return
        if state.paused_until is not None:
            if state.paused_until > self._clock():
                return  # the tick dispatches it when the pause is over
            state.paused_until = None
        if state.ref is None:
            self._activate(session_id, state)
        head = state.queue[0]
        if isinstance(head, _ControlWork):
            state.queue.popleft()
            deliveries = (head.delivery,) if head.delivery is not None else ()
            turn = RunTurn(deliveries=deliveries, token=CancelToken(), control=head.control)
        elif parse_command(head.message.text) is not None:  # /stop, queued behind the turn it stopped
            state.queue.popleft()
            turn = RunTurn(deliveries=(head,), token=CancelToken(), reply_override="Stopped.")
        elif len(state.queue) >= self._config.pending_soft_limit:
            # Rapid-fire text: one turn answers everything queued up to the next command.
            merged: list[Delivery] = []
            while state.queue and isinstance(state.queue[0], Delivery) and parse_command(_text(state.queue[0])) is None:
                merged.append(state.queue.popleft())  # type: ignore[arg-type]
            state.token = CancelToken()
            turn = RunTurn(deliveries=tuple(merged), token=state.token)
        else:
            state.queue.popleft()
            state.token = CancelToken()
            turn = RunTurn(deliveries=(head,), token=state.token)
        state.busy = True
        assert state.ref is not None
        state.ref.tell(turn)

    def _activate(self, session_id: str, state: _Live) -> None:
        create_with, title = state.create_with, state.title
        state.create_with = state.title = None
        services = self._services

        def make_turns() -> SessionTurns:
            return SessionTurns(session_id, services, create_with=create_with, title=title)

        state.ref = SessionActor.start(make_turns, self.actor_ref)
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
        state.busy = False
        state.last_used = self._clock()
        self._live.move_to_end(session_id)
        if message.retry is not None:
            self._requeue(session_id, state, message)
            return
        state.failures = 0
        if outcome is not None and outcome.not_ended and session_id in self._ending:
            self._abort_end(session_id, state)
            return
        if outcome is not None and outcome.ended:
            self._retire(session_id, state, outcome)
            return
        if outcome is not None and outcome.rebound:
            for key in outcome.rebound:
                self._cache_route(key, session_id)
            self._lifecycle.handoff_bound(session_id, outcome.rebound[0], outcome.handoff_previous)
        if outcome is not None and outcome.stored_messages and self._on_activity is not None:
            self._on_activity(session_id, outcome.origin)
        self._dispatch(session_id, state)

    def _requeue(self, session_id: str, state: _Live, message: TurnFinished) -> None:
        """Put a turn that saved nothing back at the head of the session's queue: it runs again before anything
        queued after it. After a store failure the session waits, longer after each failure in a row."""
        turn = message.retry
        assert turn is not None
        items: list[_Work]
        if turn.control is not None:
            items = [_ControlWork(control=turn.control, delivery=turn.deliveries[0] if turn.deliveries else None)]
        else:
            items = list(turn.deliveries)
        state.queue.extendleft(reversed(items))
        if message.error is not None:
            state.failures += 1
            pause = min(RETRY_MAX_S, RETRY_BASE_S * 2 ** (state.failures - 1))
            state.paused_until = self._clock() + pause
            _log.warning("session %s: retrying its turn in %.0f s (%s)", session_id, pause, message.error)
        self._dispatch(session_id, state)

    def _abort_end(self, session_id: str, state: _Live) -> None:
        """An end that could not run (another process holds the lease): the session keeps its keys, and what was
        queued for a successor comes back to it, in order."""
        self._ending.discard(session_id)
        keys = [key for key, ending in self._successor_of.items() if ending == session_id]
        for key in keys:
            del self._successor_of[key]
        for other_id, other in list(self._live.items()):
            if other.hold_until == session_id and other.ref is None:
                state.queue.extend(other.queue)
                del self._live[other_id]
                self._forget_keys(other_id)
        for key in keys:
            self._cache_route(key, session_id)
        self._dispatch(session_id, state)

    def _retire(self, session_id: str, state: _Live, outcome: TurnOutcome) -> None:
        """The session ended: hand its keys and remaining queue to its successor and stop its actor."""
        self._ending.discard(session_id)
        for key in [k for k, ending in self._successor_of.items() if ending == session_id]:
            del self._successor_of[key]
        keys = self._keys.get(session_id, set()).copy()
        self._forget_keys(session_id)
        if self._on_end is not None:
            self._on_end(session_id)
        if outcome.continued_by is not None:
            child = outcome.continued_by
            for key in keys:
                self._cache_route(key, child)
            successor = self._state(child)
            successor.queue.extendleft(reversed([*outcome.requeue, *state.queue]))
            state.queue.clear()
            self._dispatch(child, successor)
        elif state.queue:
            # Work queued behind the end (only possible through keys re-resolved before it): route it anew.
            leftovers = list(state.queue)
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

    def cancel_running(self, session_id: str | None) -> None:
        state = self._live.get(session_id) if session_id is not None else None
        if state is not None:
            state.token.cancel()

    def queue_control(self, session_id: str, control: Control, delivery: Delivery | None) -> None:
        state = self._state(session_id)
        state.queue.append(_ControlWork(control=control, delivery=delivery))
        self._dispatch(session_id, state)

    # -- passivation -------------------------------------------------------------------------------------------

    def _passivate(self, session_id: str, state: _Live) -> None:
        if state.ref is None or state.stopping:
            if state.ref is None and not state.queue and state.create_with is None:
                self._live.pop(session_id, None)
            return
        state.stopping = True
        state.ref.stop(block=False)

    def _evict_over_cap(self) -> None:
        excess = self._actors - self._config.max_live_actors
        if excess <= 0:
            return
        for session_id, state in list(self._live.items()):
            if excess <= 0:
                break
            if state.ref is not None and not state.busy and not state.stopping and not state.queue:
                self._passivate(session_id, state)
                self._counts["evictions"] += 1
                excess -= 1

    def _passivate_idle(self) -> None:
        now = self._clock()
        for session_id, state in list(self._live.items()):
            if state.paused_until is not None and state.paused_until <= now:
                self._dispatch(session_id, state)
        cutoff = now - self._config.passivate_after_s
        for session_id, state in list(self._live.items()):
            if state.last_used > cutoff:
                break  # ordered by last use: the rest are more recent
            if state.ref is not None and not state.busy and not state.queue:
                self._passivate(session_id, state)
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
            self._forget_keys(message.session_id)  # the store has them; keep memory bounded


class Supervisor:
    """A typed handle on a running :class:`SupervisorActor`: tells, and asks that wait up to ``timeout`` seconds."""

    __slots__ = ("_ref", "_timeout")

    def __init__(self, ref: pykka.ActorRef[SupervisorActor], timeout: float) -> None:
        self._ref = ref
        self._timeout = timeout

    @classmethod
    def start(cls, services: SessionServices, **hooks: Any) -> Supervisor:
        """Start the actor (``hooks``: ``on_turn``, ``on_activity``, ``on_end``) and return its handle."""
        return cls(SupervisorActor.start(services, **hooks), services.config.ask_timeout_s)

    def tell(self, message: SupervisorTell) -> None:
        """Send ``message`` without waiting."""
        self._ref.tell(message)

    def session_for(self, routing_key: str) -> str | None:
        """Return the session ``routing_key`` reaches now."""
        answer: str | None = self._ref.ask(SessionFor(routing_key=routing_key), block=True, timeout=self._timeout)
        return answer

    def statistics(self) -> SupervisorStatistics:
        """Return the supervisor's snapshot."""
        answer: SupervisorStatistics = self._ref.ask(GetStatistics(), block=True, timeout=self._timeout)
        return answer

    def rebind(self, routing_key: str, session_id: str) -> None:
        """Point ``routing_key`` at ``session_id`` and wait until the route has committed."""
        committed: Future[None] = self._ref.ask(
            Rebind(routing_key=routing_key, session_id=session_id), block=True, timeout=self._timeout
        )
        committed.result(timeout=self._timeout)

    def stop(self, timeout: float) -> None:
        """Stop the supervisor and its session actors."""
        self._ref.stop(timeout=timeout)
