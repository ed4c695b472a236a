"""Session turns: the only place a session's turns run, one at a time.

:class:`SessionTurns` holds the logic (load the transcript once, call the agent, commit everything of the turn in
one transaction, hand the reply to the outbox); :class:`~hermes_actors.runtime.session.SessionActor` is only its
mailbox and thread. A turn's commit holds the user message(s) and their attachment rows, the agent's messages, token
counts, the inbox rows' completion and the outbox row, so after a crash a turn either happened entirely or is
replayed from the inbox. Lifecycle steps (ending a session, titles, compression into a child session, handoff) run
in order with the turns, in :class:`~hermes_actors.runtime.controls.SessionControls`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import msgspec

from hermes_actors.agents.base import AgentReply, model_of, runs_inline
from hermes_actors.agents.history import ModelHistory
from hermes_actors.agents.tools import agent_tools, session_search_tool
from hermes_actors.errors import SessionClosedError, StaleTurnError
from hermes_actors.lifecycle.auto_titles import AutoTitle
from hermes_actors.media import for_agent, unread_note, user_content
from hermes_actors.messages import Attachment, OutboundError
from hermes_actors.principal import visible_sessions
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.agent_calls import AgentCalls
from hermes_actors.runtime.controls import SessionControls
from hermes_actors.runtime.prefix import FrozenPrefix, fresh_prefix, stored_prefix
from hermes_actors.runtime.protocol import (
    AgentFailure,
    Compress,
    Delivery,
    EndSession,
    Handoff,
    RunTurn,
    SetTitle,
    TurnOutcome,
)
from hermes_actors.runtime.records import (
    CreatedRow,
    NewSession,
    answered,
    appended,
    create_session_row,
    record_attachments,
    source_of,
)
from hermes_actors.runtime.services import CancelToken, SessionServices, queue_reply, reply_for
from hermes_actors.runtime.session_lease import SessionLease
from hermes_actors.runtime.turn_gate import TurnGate
from hermes_actors.runtime.turn_input import marked_reply, posted_messages, turn_input
from hermes_actors.store import InboxState, MessageRecord, NewMessage, SessionRecord, Store

__all__ = ["SessionTurns"]

_log = logging.getLogger(__name__)


class SessionTurns:
    """The turn logic of one session, driven by :class:`SessionActor` (or any single thread).

    ``create_with`` is a session that does not exist yet: its first turn creates the session row (with ``title``,
    when one was asked for) and the route in the same transaction as the turn. Its agent is chosen once, here.
    """

    def __init__(
        self,
        session_id: str,
        services: SessionServices,
        *,
        create_with: NewSession | None = None,
        title: str | None = None,
    ) -> None:
        self.session_id = session_id
        self.services = self._services = services
        self._writer = services.writer
        self._clock = services.clock
        self._timeout = services.config.agent_timeout_s
        self._create_with = create_with
        self._pending_title = title
        self._lease = SessionLease(session_id, services)
        self._record: SessionRecord | None = None
        self._history: list[MessageRecord] = []
        self._model_history = ModelHistory(services.config.model_message_cap_chars)  # what the model is sent
        self._auto_title = AutoTitle(services, session_id)
        # Conversation-scoped state, dropped by a reset (model overrides and the like).
        self.overrides: dict[str, str] = {}
        with services.readers.reader() as store:  # the transcript is read once the lease is taken (acquire_lease)
            if create_with is None:
                self._record = store.get_session(session_id)
                self._origin = source_of(self._record)
                self.named_agent = services.agents.for_record(self._record)
            else:
                self._origin = create_with.source
                self.named_agent = services.agents.for_new(create_with.source, create_with.agent)
            scope = services.sessions.search_scope_for(self._origin.platform)
            visible = visible_sessions(self._origin, scope)
            self._tools = [session_search_tool(services.readers.reader, session_id, visible=visible, scope=scope)]
            # What goes before the conversation: frozen at the start (stored by the first commit), or as stored.
            stored = stored_prefix(self._record) if self._record is not None else None
            self._prefix = stored or self.fresh_prefix(store, self._record.system_prompt if self._record else None)
        self._prefix_unsaved = stored is None and create_with is None  # a session from before schema 6
        self._tools += agent_tools(self.named_agent.agent)  # its MCP tools as last listed (run those frozen)
        self._offered = self._prefix.offered(self._tools)
        self.agent_calls = AgentCalls(services, session_id)
        self._controls = SessionControls(self)
        self._gate = TurnGate(self, self._lease)

    def fresh_prefix(self, store: Store, prompt: str | None = None) -> FrozenPrefix:
        """What a session of this origin starts with now (:func:`~hermes_actors.runtime.prefix.fresh_prefix`)."""
        return fresh_prefix(store, self.named_agent.agent, self._origin, self._tools[:1], prompt=prompt)

    @property
    def platform(self) -> str:
        """The platform the session was opened on."""
        return self._origin.platform

    @property
    def history(self) -> Sequence[MessageRecord]:
        """The cached transcript."""
        return self._history

    @property
    def prefix(self) -> FrozenPrefix:
        """The system message and tool list every model call of this session sends (frozen at its start)."""
        return self._prefix

    @property
    def record(self) -> SessionRecord | None:
        """The session's row as last committed; ``None`` before its first commit."""
        return self._record

    @record.setter
    def record(self, record: SessionRecord | None) -> None:
        self._record = record

    @property
    def is_new(self) -> bool:
        """Whether the session's row does not exist yet (its first commit creates it)."""
        return self._create_with is not None

    @property
    def pending_title(self) -> str | None:
        """The title the first commit gives the session."""
        return self._pending_title

    @pending_title.setter
    def pending_title(self, title: str | None) -> None:
        self._pending_title = title

    @property
    def model_history(self) -> ModelHistory:
        """What the model is sent of the transcript."""
        return self._model_history

    def lease_released(self) -> None:
        """The session's lease was released in the commit that just ended or continued it."""
        self._lease.forget()

    def title_set_by_hand(self) -> None:
        """An operator set or cleared the title: an automatic title computed before must not come back."""
        self._auto_title = AutoTitle(self._services, self.session_id)

    # -- agent calls -------------------------------------------------------------------------------------------

    def _call_agent(
        self, text: str, token: CancelToken, deliveries: Sequence[Delivery], attachments: Sequence[Attachment] = ()
    ) -> AgentReply | AgentFailure | None:
        turn = turn_input(
            self.session_id,
            text=text,
            history=self._history,
            model_history=self._model_history,
            prefix=self._prefix,
            tools=self._offered,
            attachments=attachments,
            deliveries=deliveries,
            watch=self._services.watch,
            token=token,
        )
        agent = self.named_agent.agent
        if runs_inline(agent):
            # An agent that never blocks (the echo agent) runs on the session's thread: no pool hop per turn.
            return self.agent_calls.inline(lambda: agent.run_turn(turn, timeout_s=self._timeout))
        return self.agent_calls.in_pool(lambda: agent.run_turn(turn, timeout_s=self._timeout), token)

    # -- leases ------------------------------------------------------------------------------------------------

    def acquire_lease(self) -> str | None:
        """Take the session's lease (:meth:`SessionLease.acquire`); under a new lease the transcript is read again:
        another process may have written turns since it was read."""
        holder = self._lease.acquire()
        if holder is None:
            self._reload()
        return holder

    def _reload(self) -> None:
        """Read the session and its transcript as the store has them now."""
        with self._services.readers.reader() as store:
            self._record = store.get_session(self.session_id)
            self._history = store.load_transcript(self.session_id)
        stored = stored_prefix(self._record)
        if stored is not None and stored != self._prefix:  # another process froze it (a session from before 6)
            self._prefix, self._prefix_unsaved, self._offered = stored, False, stored.offered(self._tools)

    def fence(self, store: Store) -> None:
        """Inside a commit: raise :class:`LeaseLostError` unless this process still holds the lease it took."""
        if self._create_with is None:
            self._lease.fence(store)

    def lost_lease(self) -> None:
        """The lease was taken over: forget it, so the next turn takes it again and reads the transcript anew."""
        self._lease.forget()

    def release_lease(self) -> None:
        """Give the lease up without waiting for the commit (the actor is stopping)."""
        self._lease.release()

    # -- turns -------------------------------------------------------------------------------------------------

    def answer(
        self,
        deliveries: Sequence[Delivery],
        text: str,
        *,
        state: InboxState = InboxState.DONE,
        error: OutboundError | None = None,
    ) -> TurnOutcome:
        """Complete ``deliveries`` with a reply (a notice, with ``error``) and nothing in the transcript."""
        first = deliveries[0].message
        outbound = reply_for(first.source, self.session_id, text, first.message_id, answers=answered(deliveries))
        outbound = msgspec.structs.replace(outbound, error=error)

        def answer(store: Store) -> int:
            for delivery in deliveries:
                store.inbox.complete(delivery.inbox_id, session_id=self.session_id, state=state)
            return queue_reply(store, outbound)

        outbox_id = self._writer.call(answer)
        self._services.outbox.deliver(outbox_id, outbound)
        return TurnOutcome(
            session_id=self.session_id,
            inbox_ids=tuple(d.inbox_id for d in deliveries),
            outbox_id=outbox_id,
            stored_messages=0,
            failed=text if state is InboxState.REJECTED else None,
        )

    def run(self, request: RunTurn) -> TurnOutcome:
        """Run one turn (or lifecycle step) once it passed the :class:`TurnGate`, and commit it; return what
        happened. A commit refused because the session ended meanwhile is not tried: :meth:`TurnGate.closed`."""
        self._record = self._auto_title.applied(self._record)  # a background title stored since the last turn
        admitted = self._gate.admit(request)
        if isinstance(admitted, TurnOutcome):
            return admitted
        try:
            return self._run(admitted)
        except SessionClosedError as exc:
            self._reload()
            if self._record is None or self._record.is_live:
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
                return self._controls.compress(deliveries, request.token, reply=True)
            case Handoff():
                return self._controls.handoff(request.control, deliveries, request.token)
            case None:  # no lifecycle step: an ordinary turn, below
                pass
        if request.reply_override is not None:
            return self.answer(deliveries, request.reply_override)
        early = self._controls.before_turn(deliveries, request.token)  # compression, or a turn over the window
        if early is not None:
            return early
        return self.converse(deliveries, request.token)

    def converse(self, deliveries: Sequence[Delivery], token: CancelToken, *, no_retry: bool = False) -> TurnOutcome:
        first = deliveries[0].message
        # Attachments reach the agent as records for this turn only; the transcript keeps their text stand-ins.
        contents = [user_content(d.message) for d in deliveries]
        reply = self._call_agent("\n".join(contents), token, deliveries, for_agent(d.message for d in deliveries))
        cancelled = token.settle()  # the verdict: a /stop from now on leaves this turn's result alone
        now = self._clock()
        new, firsts = posted_messages(deliveries, contents, now)  # user messages, or a client's tool results
        reply_text: str | None = None
        if isinstance(reply, AgentReply) and not cancelled:
            new.extend(
                NewMessage(
                    role=m.role,
                    content=m.content,
                    tool_calls=m.tool_calls,
                    tool_name=m.tool_name,
                    tool_call_id=m.tool_call_id,
                    token_count=m.token_count,  # the model's count; a user message has none of its own
                    created_at=now,
                )
                for m in reply.messages
            )
            new[-1] = msgspec.structs.replace(
                new[-1],
                input_tokens=reply.input_tokens,
                output_tokens=reply.output_tokens,
                tokens_estimated=reply.tokens_estimated,
            )
            reply_text = reply.text
        elif isinstance(reply, AgentFailure):
            reply_text = reply.text
        unread = unread_note(d.message for d in deliveries)
        if reply_text is not None and unread is not None:
            reply_text = f"{unread}\n\n{reply_text}"
        outbound = (
            reply_for(first.source, self.session_id, reply_text, first.message_id, answers=answered(deliveries))
            if reply_text is not None
            else None
        )
        outbound = outbound and marked_reply(msgspec.structs.replace(outbound, no_retry=no_retry), reply)
        ahead = outbound is not None and self._services.outbox.counts_ahead(outbound.platform)

        def commit(store: Store) -> tuple[int | None, list[int], CreatedRow | None]:
            self.fence(store)
            for delivery in deliveries:
                if not store.inbox.complete(delivery.inbox_id, session_id=self.session_id) and delivery.inbox_id > 0:
                    raise StaleTurnError(
                        f"inbox row {delivery.inbox_id} was answered by another turn; this one is rolled back"
                    )
            created = self._create_row(store)
            if self._prefix_unsaved:
                store.freeze_prefix(self.session_id, system_prompt=self._prefix.system_prompt, tools=self._prefix.tools)
            ids = store.append_messages(self.session_id, new)
            record_attachments(store, deliveries, [ids[i] for i in firsts], now)
            return queue_reply(store, outbound, session_exists=True, counted=ahead) if outbound else None, ids, created

        outbox_id, ids, created = self._writer.call(commit)
        self._prefix_unsaved = False
        if created is not None:
            self._adopt(created)
        self._history.extend(appended(self.session_id, ids, new, now))
        if outbound is not None and outbox_id is not None:
            self._services.outbox.deliver(outbox_id, outbound, counted=ahead)
        self._auto_title.after_exchange(  # after the reply has left: a title never delays it
            self._record,
            self._history,
            added=len(ids),
            user_text="\n".join(d.message.text for d in deliveries),
            reply_text=reply.text if isinstance(reply, AgentReply) and not cancelled else None,
        )
        return TurnOutcome(
            session_id=self.session_id,
            inbox_ids=tuple(d.inbox_id for d in deliveries),
            outbox_id=outbox_id,
            stored_messages=len(ids),
            cancelled=cancelled,
            failed=reply.text if isinstance(reply, AgentFailure) else None,
            origin=source_of(self._record) if self._record is not None else None,
        )

    def _create_row(self, store: Store) -> CreatedRow | None:
        """Inside the first commit: create the session row, its route and its lease; ``None`` when the row exists.

        It changes nothing of this object (the commit may be rolled back and run again): :meth:`_adopt` takes the
        result once the commit is durable.
        """
        if self._create_with is None:
            return None
        return create_session_row(
            store,
            self.session_id,
            self._create_with,
            title=self._pending_title,
            prefix=self._prefix,
            model=model_of(self.named_agent.agent),
            agent=self.named_agent.name,
            lease_owner=self._services.lease_owner,
            lease_ttl_s=self._services.config.lease_ttl_s,
        )

    def _adopt(self, created: CreatedRow) -> None:
        """The first commit is durable: the session has its row (and, unless another process holds it, its lease)."""
        self._lease.adopt(created.epoch)
        self._record = created.record
        self._create_with = None
        self._pending_title = None

    def origin(self, deliveries: Sequence[Delivery]) -> tuple[SessionSource | None, str | None]:
        """Where a reply to ``deliveries`` goes, and the message it answers (without deliveries: the origin)."""
        if deliveries:
            return deliveries[0].message.source, deliveries[0].message.message_id
        return (source_of(self._record) if self._record else None), None
