"""The supervisor: the routing directory, session activation, backpressure and passivation.

One pykka actor. It maps routing keys to session ids (cached, persisted through the store), keeps one
:class:`~hermes_actors.session.SessionActor` per live session id, and holds each session's queue of committed
messages: a session actor gets one :class:`~hermes_actors.session.RunTurn` at a time and asks for the next by
finishing. Because the queue lives here, a stopping actor's new messages simply wait for its next activation, in
order, and ``/resume`` or handoff only re-point directory entries (:meth:`SupervisorActor.rebind`).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

import msgspec
import pykka

from hermes_actors.agent import Agent
from hermes_actors.config import RuntimeConfig
from hermes_actors.ids import SessionKind, new_session_id
from hermes_actors.leases import lease_owner_alive
from hermes_actors.messages import OutboundMessage, encode
from hermes_actors.routing import SessionSource
from hermes_actors.session import (
    CancelToken,
    Delivery,
    OutboxSink,
    RunTurn,
    SessionActor,
    SessionStopped,
    SessionTurns,
    TurnFinished,
    TurnOutcome,
)
from hermes_actors.store import Store
from hermes_actors.store.readers import ReaderPool
from hermes_actors.store.writer import StoreWriter

__all__ = [
    "Deliver",
    "PassivationTick",
    "Rebind",
    "StopSession",
    "SupervisorActor",
    "SupervisorStatistics",
]

_log = logging.getLogger(__name__)
_STOP_COMMANDS = frozenset({"/stop"})


class Deliver(msgspec.Struct, frozen=True, kw_only=True):
    """Edge → supervisor: a committed inbound message for ``routing_key``."""

    routing_key: str
    delivery: Delivery


class Rebind(msgspec.Struct, frozen=True, kw_only=True):
    """Point ``routing_key`` at ``session_id`` (``/resume``, handoff, compression). Ask it; the reply is ``None``."""

    routing_key: str
    session_id: str


class StopSession(msgspec.Struct, frozen=True, kw_only=True):
    """Invalidate the running turn of the session behind ``routing_key`` (``/stop``)."""

    routing_key: str


class PassivationTick(msgspec.Struct, frozen=True, kw_only=True):
    """Timer → supervisor: passivate idle actors and renew leases."""


class SupervisorStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of the supervisor."""

    live_actors: int
    running: int
    queued_messages: int
    routes_cached: int
    activations: int
    passivations: int
    evictions: int
    turns: int
    rejected: int


class _Live:
    """What the supervisor knows of one session with an actor (or a queue waiting for one)."""

    __slots__ = ("busy", "create_with", "last_used", "queue", "ref", "stopping", "token")

    def __init__(self, create_with: tuple[SessionSource, str] | None) -> None:
        self.ref: pykka.ActorRef[Any] | None = None
        self.queue: deque[Delivery] = deque()
        self.busy = False
        self.stopping = False
        self.token = CancelToken()
        self.last_used = 0.0
        self.create_with = create_with


class SupervisorActor(pykka.ThreadingActor):
    """Owns the routing directory and the session actors; see the module docstring."""

    use_daemon_thread = True

    def __init__(
        self,
        *,
        config: RuntimeConfig,
        writer: StoreWriter,
        readers: ReaderPool,
        agent: Agent,
        agent_pool: Executor,
        outbox: OutboxSink,
        lease_owner: str,
        on_turn: Callable[[TurnOutcome], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        self._config = config
        self._writer = writer
        self._readers = readers
        self._agent = agent
        self._pool = agent_pool
        self._outbox = outbox
        self._lease_owner = lease_owner
        self._on_turn = on_turn
        self._clock = clock
        self._routes: dict[str, str] = {}  # cache of the directory for sessions with a live entry
        self._keys: dict[str, set[str]] = {}  # session id -> its cached routing keys
        self._live: OrderedDict[str, _Live] = OrderedDict()  # least recently used first
        self._actors = 0
        self._counts = {"activations": 0, "passivations": 0, "evictions": 0, "turns": 0, "rejected": 0}

    # -- messages ----------------------------------------------------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        match message:
            case Deliver():
                self._deliver(message)
            case TurnFinished():
                self._finished(message)
            case SessionStopped():
                self._stopped(message)
            case Rebind():
                self._rebind(message)
            case StopSession():
                self._stop_turn(message.routing_key)
            case PassivationTick():
                self._passivate_idle()
            case _:
                raise TypeError(f"SupervisorActor got an unknown message {message!r}")
        return None

    def statistics(self) -> SupervisorStatistics:
        """Return a snapshot (call through the proxy or ``ask``)."""
        return SupervisorStatistics(
            live_actors=self._actors,
            running=sum(1 for s in self._live.values() if s.busy),
            queued_messages=sum(len(s.queue) for s in self._live.values()),
            routes_cached=len(self._routes),
            **self._counts,
        )

    def session_for(self, routing_key: str) -> str | None:
        """Return the session id ``routing_key`` reaches now, or ``None``."""
        cached = self._routes.get(routing_key)
        if cached is not None:
            return cached
        with self._readers.reader() as store:
            return store.get_route(routing_key)

    def on_stop(self) -> None:
        refs = [state.ref for state in self._live.values() if state.ref is not None]
        for ref in refs:
            ref.stop(block=False)
        for ref in refs:
            ref.stop(block=True, timeout=self._config.ask_timeout_s)

    # -- routing -----------------------------------------------------------------------------------------------

    def _resolve(self, routing_key: str, source: SessionSource) -> str:
        """Return the session for ``routing_key``, assigning a new one (created by its first turn) when needed."""
        session_id = self._routes.get(routing_key)
        if session_id is not None:
            return session_id
        with self._readers.reader() as store:
            session_id = store.get_route(routing_key)
            if session_id is not None:
                record = store.find_session(session_id)
                if record is None or not record.is_live:
                    session_id = None
        if session_id is None:
            kind = SessionKind.CLI if source.platform == "cli" else SessionKind.GATEWAY
            session_id = new_session_id(kind)
            self._live[session_id] = _Live(create_with=(source, routing_key))
        self._cache_route(routing_key, session_id)
        return session_id

    def _cache_route(self, routing_key: str, session_id: str) -> None:
        previous = self._routes.get(routing_key)
        if previous is not None and previous != session_id:
            self._keys.get(previous, set()).discard(routing_key)
        self._routes[routing_key] = session_id
        self._keys.setdefault(session_id, set()).add(routing_key)

    def _rebind(self, message: Rebind) -> None:
        self._writer.call(lambda store: store.set_route(message.routing_key, message.session_id))
        self._cache_route(message.routing_key, message.session_id)

    # -- turns ---------------------------------------------------------------------------------------------------

    def _deliver(self, message: Deliver) -> None:
        delivery = message.delivery
        source = delivery.message.source
        session_id = self._resolve(message.routing_key, source)
        state = self._live.get(session_id)
        if state is None:
            state = self._live[session_id] = _Live(create_with=None)
        self._live.move_to_end(session_id)
        state.last_used = self._clock()
        if delivery.message.text.strip().lower() in _STOP_COMMANDS:
            state.token.cancel()
            state.queue.append(delivery)
        elif len(state.queue) >= self._config.pending_hard_limit:
            self._reject(session_id, delivery, len(state.queue))
            return
        else:
            state.queue.append(delivery)
        self._dispatch(session_id, state)

    def _reject(self, session_id: str, delivery: Delivery, queued: int) -> None:
        source = delivery.message.source
        reply = OutboundMessage(
            platform=source.platform,
            account_id=source.account_id or "",
            chat_id=source.chat_id,
            thread_id=source.thread_id,
            user_id=source.participant_id,
            session_id=session_id,
            reply_to=delivery.message.message_id,
            text=(
                f"Too many messages are waiting in this conversation ({queued}); this one was not run. "
                "Wait for the replies, then send it again."
            ),
        )

        def refuse(store: Store) -> int:
            store.inbox.complete(delivery.inbox_id, session_id=None, state="rejected")
            return store.outbox.add(
                session_id=None,
                platform=reply.platform,
                account_id=reply.account_id,
                chat_id=reply.chat_id,
                thread_id=reply.thread_id,
                payload=encode(reply),
            )

        self._counts["rejected"] += 1
        self._outbox.deliver(self._writer.call(refuse), reply)

    def _dispatch(self, session_id: str, state: _Live) -> None:
        """Hand the next turn to the session's actor if it is free, activating it first when needed."""
        if state.busy or state.stopping or not state.queue:
            return
        if state.ref is None:
            self._activate(session_id, state)
        head = state.queue[0]
        if head.message.text.strip().lower() in _STOP_COMMANDS:
            state.queue.popleft()
            turn = RunTurn(deliveries=(head,), token=CancelToken(), reply_override="Stopped.")
        elif len(state.queue) >= self._config.pending_soft_limit:
            # Rapid-fire text: one turn answers everything queued up to the next /stop.
            merged: list[Delivery] = []
            while state.queue and state.queue[0].message.text.strip().lower() not in _STOP_COMMANDS:
                merged.append(state.queue.popleft())
            state.token = CancelToken()
            turn = RunTurn(deliveries=tuple(merged), token=state.token)
        else:
            state.token = CancelToken()
            turn = RunTurn(deliveries=(state.queue.popleft(),), token=state.token)
        state.busy = True
        assert state.ref is not None
        state.ref.tell(turn)

    def _activate(self, session_id: str, state: _Live) -> None:
        create_with = state.create_with
        state.create_with = None

        def make_turns() -> SessionTurns:
            return SessionTurns(
                session_id,
                writer=self._writer,
                readers=self._readers,
                agent=self._agent,
                agent_pool=self._pool,
                outbox=self._outbox,
                agent_timeout_s=self._config.agent_timeout_s,
                lease_owner=self._lease_owner,
                lease_ttl_s=self._config.lease_ttl_s,
                lease_wait_s=self._config.lease_wait_s,
                owner_alive=lease_owner_alive,
                create_with=create_with,
                clock=self._clock,
            )

        state.ref = SessionActor.start(make_turns, self.actor_ref)
        self._actors += 1
        self._counts["activations"] += 1
        self._evict_over_cap()

    def _finished(self, message: TurnFinished) -> None:
        self._counts["turns"] += 1
        state = self._live.get(message.session_id)
        if self._on_turn is not None and message.outcome is not None:
            self._on_turn(message.outcome)
        if state is None:
            return
        state.busy = False
        state.last_used = self._clock()
        self._live.move_to_end(message.session_id)
        self._dispatch(message.session_id, state)

    def _stop_turn(self, routing_key: str) -> None:
        session_id = self._routes.get(routing_key)
        state = self._live.get(session_id) if session_id is not None else None
        if state is not None:
            state.token.cancel()

    # -- passivation ---------------------------------------------------------------------------------------------

    def _passivate(self, session_id: str, state: _Live) -> None:
        if state.ref is None or state.stopping:
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
        cutoff = self._clock() - self._config.passivate_after_s
        for session_id, state in list(self._live.items()):
            if state.last_used > cutoff:
                break  # ordered by last use: the rest are more recent
            if state.ref is not None and not state.busy and not state.queue:
                self._passivate(session_id, state)
                self._counts["passivations"] += 1
        self._writer.submit(lambda store: store.leases.heartbeat(self._lease_owner, self._config.lease_ttl_s))

    def _stopped(self, message: SessionStopped) -> None:
        state = self._live.get(message.session_id)
        if state is None or state.ref is None or state.ref.actor_urn != message.actor_urn:
            return
        self._actors -= 1
        state.ref = None
        state.stopping = False
        state.busy = False
        if state.queue:
            self._dispatch(message.session_id, state)  # messages that arrived while it stopped
        else:
            del self._live[message.session_id]
            for key in self._keys.pop(message.session_id, set()):  # the store has them; keep memory bounded
                if self._routes.get(key) == message.session_id:
                    del self._routes[key]
