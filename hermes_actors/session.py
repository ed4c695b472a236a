"""Session turns: the only place a session's turns run, one at a time.

:class:`SessionTurns` holds the logic (load the transcript once, call the agent, commit everything of the turn in
one transaction, hand the reply to the outbox); :class:`SessionActor` is only its mailbox and thread. A turn's
commit holds the user message(s), the agent's messages, token counts, the inbox rows' completion and the outbox
row, so after a crash a turn either happened entirely or is replayed from the inbox.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from typing import Any, Protocol

import msgspec
import pykka

from hermes_actors.agent import Agent, AgentError, AgentReply, TurnInput
from hermes_actors.leases import describe_owner, wait_for_lease
from hermes_actors.messages import InboundMessage, OutboundMessage, encode
from hermes_actors.routing import SessionSource
from hermes_actors.store import MessageRecord, NewMessage, Role, Store
from hermes_actors.store.readers import ReaderPool
from hermes_actors.store.writer import StoreWriter

__all__ = [
    "CancelToken",
    "Delivery",
    "RunTurn",
    "SessionActor",
    "SessionStopped",
    "SessionTurns",
    "TurnFinished",
    "TurnOutcome",
]

_log = logging.getLogger(__name__)


class CancelToken:
    """Set by ``/stop`` (and later ``/new``) to invalidate a running turn; its late result is dropped."""

    __slots__ = ("_event", "cancelled")

    def __init__(self) -> None:
        self.cancelled = False
        self._event = threading.Event()

    def cancel(self) -> None:
        """Invalidate the turn and wake whoever waits on it."""
        self.cancelled = True
        self._event.set()

    def wake(self) -> None:
        """Wake the waiter without cancelling (the agent finished)."""
        self._event.set()

    def wait(self, timeout: float) -> bool:
        """Wait until woken or ``timeout``; return whether woken."""
        return self._event.wait(timeout)


class Delivery(msgspec.Struct, frozen=True, kw_only=True):
    """A committed inbound message and its inbox row."""

    inbox_id: int
    message: InboundMessage


class RunTurn(msgspec.Struct, frozen=True, kw_only=True):
    """Supervisor → session: run one turn over ``deliveries`` (several when rapid-fire text was merged)."""

    deliveries: tuple[Delivery, ...]
    token: CancelToken
    reply_override: str | None = None  # a control reply (``/stop``): no agent call


class TurnFinished(msgspec.Struct, frozen=True, kw_only=True):
    """Session → supervisor: the turn is committed; send the next one."""

    session_id: str
    outcome: TurnOutcome | None = None


class SessionStopped(msgspec.Struct, frozen=True, kw_only=True):
    """Session → supervisor: the actor has stopped (passivated or evicted)."""

    session_id: str
    actor_urn: str


class TurnOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What a turn did, for statistics and tests."""

    session_id: str
    inbox_ids: tuple[int, ...]
    outbox_id: int | None
    stored_messages: int
    cancelled: bool = False
    failed: str | None = None


class OutboxSink(Protocol):
    """Where committed replies go for delivery."""

    def deliver(self, outbox_id: int, message: OutboundMessage) -> None:
        """Deliver the reply committed as row ``outbox_id``."""
        ...


def _reply_for(source: SessionSource, session_id: str, text: str, reply_to: str | None) -> OutboundMessage:
    return OutboundMessage(
        platform=source.platform,
        account_id=source.account_id or "",
        chat_id=source.chat_id,
        thread_id=source.thread_id,
        user_id=source.participant_id,
        session_id=session_id,
        text=text,
        reply_to=reply_to,
    )


def _release_lease(store: Store, *, session_id: str, owner: str) -> bool:
    return store.leases.release(session_id, owner)


class SessionTurns:
    """The turn logic of one session, driven by :class:`SessionActor` (or any single thread).

    ``create_with`` is the (source, routing key) of a session that does not exist yet: its first turn creates the
    session row and the route in the same transaction as the turn.
    """

    def __init__(
        self,
        session_id: str,
        *,
        writer: StoreWriter,
        readers: ReaderPool,
        agent: Agent,
        agent_pool: Executor,
        outbox: OutboxSink,
        agent_timeout_s: float,
        lease_owner: str,
        lease_ttl_s: float = 30.0,
        lease_wait_s: float = 10.0,
        owner_alive: Callable[[str], bool] = lambda owner: True,
        create_with: tuple[SessionSource, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.session_id = session_id
        self._lease_owner = lease_owner
        self._lease_ttl = lease_ttl_s
        self._lease_wait = lease_wait_s
        self._lease_held = False
        self._owner_alive = owner_alive
        self._writer = writer
        self._agent = agent
        self._pool = agent_pool
        self._outbox = outbox
        self._timeout = agent_timeout_s
        self._create_with = create_with
        self._clock = clock
        self._system_prompt: str | None = None
        self._history: list[MessageRecord] = []
        if create_with is None:
            with readers.reader() as store:
                record = store.get_session(session_id)
                self._system_prompt = record.system_prompt
                self._history = store.load_transcript(session_id)

    @property
    def history(self) -> Sequence[MessageRecord]:
        """The cached transcript."""
        return self._history

    def _call_agent(self, text: str, token: CancelToken) -> AgentReply | str | None:
        """Return the reply, an error text for the user, or ``None`` when the turn was cancelled."""
        turn = TurnInput(
            session_id=self.session_id, history=self._history, user_text=text, system_prompt=self._system_prompt
        )
        future: Future[AgentReply] = self._pool.submit(self._agent.run_turn, turn, timeout_s=self._timeout)
        future.add_done_callback(lambda _: token.wake())
        token.wait(self._timeout)
        if token.cancelled:
            return None
        if not future.done():
            future.cancel()
            _log.warning("session %s: the agent did not answer within %.0f s", self.session_id, self._timeout)
            return f"Sorry, the agent did not answer within {self._timeout:.0f} s. Your message is saved; try again."
        try:
            return future.result()
        except AgentError as exc:
            _log.warning("session %s: agent failed: %s", self.session_id, exc)
            return f"Sorry, the agent failed: {exc}. Your message is saved; try again."
        except Exception as exc:
            _log.exception("session %s: agent raised", self.session_id)
            return f"Sorry, the agent failed unexpectedly ({type(exc).__name__}). Your message is saved; try again."

    def _acquire_lease(self) -> str | None:
        """Take the session's lease, waiting up to ``lease_wait_s``; return the other holder when it stays busy."""
        holder = wait_for_lease(
            lambda: self._writer.call(
                lambda store: store.leases.acquire(self.session_id, self._lease_owner, self._lease_ttl)
            ),
            lambda dead: self._writer.call(functools.partial(_release_lease, session_id=self.session_id, owner=dead)),
            wait_s=self._lease_wait,
            owner_alive=self._owner_alive,
        )
        self._lease_held = holder is None
        return holder

    def release_lease(self) -> None:
        """Give the lease up without waiting for the commit (the actor is stopping)."""
        if self._lease_held:
            self._lease_held = False
            self._writer.submit(lambda store: store.leases.release(self.session_id, self._lease_owner))

    def _refuse_busy(self, deliveries: Sequence[Delivery], holder: str) -> TurnOutcome:
        first = deliveries[0].message
        text = (
            f"This conversation is busy in {describe_owner(holder)}; "
            "your message was not run. Send it again when that process has finished."
        )
        outbound = _reply_for(first.source, self.session_id, text, first.message_id)

        def refuse(store: Store) -> int:
            for delivery in deliveries:
                store.inbox.complete(delivery.inbox_id, session_id=self.session_id, state="rejected")
            return store.outbox.add(
                session_id=self.session_id,
                platform=outbound.platform,
                account_id=outbound.account_id,
                chat_id=outbound.chat_id,
                thread_id=outbound.thread_id,
                payload=encode(outbound),
            )

        outbox_id = self._writer.call(refuse)
        self._outbox.deliver(outbox_id, outbound)
        return TurnOutcome(
            session_id=self.session_id,
            inbox_ids=tuple(d.inbox_id for d in deliveries),
            outbox_id=outbox_id,
            stored_messages=0,
            failed=text,
        )

    def run(self, request: RunTurn) -> TurnOutcome:
        """Run one turn and commit it; return what happened."""
        deliveries = request.deliveries
        if not self._lease_held and self._create_with is None:
            holder = self._acquire_lease()
            if holder is not None:
                return self._refuse_busy(deliveries, holder)
        first = deliveries[0].message
        text = "\n".join(d.message.text for d in deliveries)
        reply: AgentReply | str | None
        reply = request.reply_override if request.reply_override is not None else self._call_agent(text, request.token)
        cancelled = request.token.cancelled and request.reply_override is None
        now = self._clock()
        new = [
            NewMessage(role=Role.USER, content=d.message.text, platform_message_id=d.message.message_id, created_at=now)
            for d in deliveries
            if request.reply_override is None
        ]
        reply_text: str | None = None
        if isinstance(reply, AgentReply) and not cancelled:
            new.extend(
                NewMessage(
                    role=m.role,
                    content=m.content,
                    tool_calls=m.tool_calls,
                    tool_name=m.tool_name,
                    tool_call_id=m.tool_call_id,
                    created_at=now,
                )
                for m in reply.messages
            )
            new[-1] = msgspec.structs.replace(
                new[-1], input_tokens=reply.input_tokens, output_tokens=reply.output_tokens
            )
            reply_text = reply.text
        elif isinstance(reply, str):
            reply_text = reply
        outbound = (
            _reply_for(first.source, self.session_id, reply_text, first.message_id) if reply_text is not None else None
        )
        outbox_id, ids = self._writer.call(lambda store: self._commit(store, deliveries, new, outbound))
        self._history.extend(
            MessageRecord(
                id=i,
                session_id=self.session_id,
                role=m.role.value,
                content=m.content,
                created_at=now,
                tool_calls=m.tool_calls,
                tool_name=m.tool_name,
                tool_call_id=m.tool_call_id,
                platform_message_id=m.platform_message_id,
            )
            for i, m in zip(ids, new, strict=True)
        )
        if outbound is not None and outbox_id is not None:
            self._outbox.deliver(outbox_id, outbound)
        return TurnOutcome(
            session_id=self.session_id,
            inbox_ids=tuple(d.inbox_id for d in deliveries),
            outbox_id=outbox_id,
            stored_messages=len(ids),
            cancelled=cancelled,
            failed=reply if isinstance(reply, str) and request.reply_override is None else None,
        )

    def _commit(
        self,
        store: Store,
        deliveries: Sequence[Delivery],
        new: list[NewMessage],
        outbound: OutboundMessage | None,
    ) -> tuple[int | None, list[int]]:
        if self._create_with is not None and store.find_session(self.session_id) is None:
            source, routing_key = self._create_with
            store.create_session(source, session_id=self.session_id, routing_key=routing_key)
            store.set_route(routing_key, self.session_id)
            self._lease_held = store.leases.acquire(self.session_id, self._lease_owner, self._lease_ttl) is None
        ids = store.append_messages(self.session_id, new) if new else []
        for delivery in deliveries:
            store.inbox.complete(delivery.inbox_id, session_id=self.session_id)
        outbox_id = None
        if outbound is not None:
            outbox_id = store.outbox.add(
                session_id=self.session_id,
                platform=outbound.platform,
                account_id=outbound.account_id,
                chat_id=outbound.chat_id,
                thread_id=outbound.thread_id,
                payload=encode(outbound),
            )
        self._create_with = None
        return outbox_id, ids


class SessionActor(pykka.ThreadingActor):
    """The mailbox and thread of one session; the supervisor is its only sender."""

    use_daemon_thread = True

    def __init__(self, turns: Callable[[], SessionTurns], supervisor: pykka.ActorRef[Any]) -> None:
        super().__init__()
        self._make_turns = turns
        self._turns: SessionTurns | None = None
        self._supervisor = supervisor
        self._session_id = ""

    def on_start(self) -> None:
        self._turns = self._make_turns()
        self._session_id = self._turns.session_id

    def on_receive(self, message: Any) -> Any:
        match message:
            case RunTurn():
                assert self._turns is not None
                outcome: TurnOutcome | None = None
                try:
                    outcome = self._turns.run(message)
                except Exception:
                    _log.exception("session %s: turn failed; its inbox rows stay pending for replay", self._session_id)
                finally:
                    self._tell_supervisor(TurnFinished(session_id=self._session_id, outcome=outcome))
                return None
            case _:
                raise TypeError(f"SessionActor got an unknown message {message!r}")

    def _tell_supervisor(self, message: TurnFinished | SessionStopped) -> None:
        with contextlib.suppress(pykka.ActorDeadError):  # the runtime is shutting down; nothing waits for it
            self._supervisor.tell(message)

    def on_stop(self) -> None:
        if self._turns is not None:
            try:
                self._turns.release_lease()
            except Exception as exc:  # the writer may already be closed at shutdown; the lease then expires
                _log.info("session %s: lease not released (%s); it will expire", self._session_id, exc)
        self._tell_supervisor(SessionStopped(session_id=self._session_id, actor_urn=self.actor_urn))

    def on_failure(self, exception_type: Any, exception_value: Any, traceback: Any) -> None:
        _log.error("session %s actor crashed: %s", self._session_id, exception_value)
        self._tell_supervisor(SessionStopped(session_id=self._session_id, actor_urn=self.actor_urn))
