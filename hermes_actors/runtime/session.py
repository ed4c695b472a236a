"""Session turns: the only place a session's turns run, one at a time.

:class:`SessionTurns` holds the logic (load the transcript once, call the agent, commit everything of the turn in
one transaction, hand the reply to the outbox); :class:`SessionActor` is only its mailbox and thread. A turn's
commit holds the user message(s) and their attachment rows, the agent's messages, token counts, the inbox rows'
completion and the outbox row, so after a crash a turn either happened entirely or is replayed from the inbox.
Lifecycle steps (ending a session, titles, compression into a child session) run here too, in order with the turns.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

import msgspec
import pykka

from hermes_actors.agents.base import AgentError, AgentReply, TurnInput
from hermes_actors.agents.history import ModelHistory, is_summary
from hermes_actors.agents.tools import session_search_tool
from hermes_actors.errors import HermesError, LeaseLostError, StaleTurnError, StoreError, TitleInUseError
from hermes_actors.ids import SessionKind, new_session_id
from hermes_actors.lifecycle.auto_titles import AutoTitle
from hermes_actors.lifecycle.commands import title_holder_text
from hermes_actors.media import for_agent, unread_note, user_content
from hermes_actors.messages import Attachment, InboundMessage, OutboundMessage
from hermes_actors.principal import Principal, visible_sessions
from hermes_actors.routing import SessionSource, build_session_key
from hermes_actors.runtime.actors import RuntimeActor
from hermes_actors.runtime.leases import describe_owner, wait_for_lease
from hermes_actors.runtime.protocol import (
    AgentFailure,
    Compress,
    Delivery,
    EndSession,
    FailureKind,
    Handoff,
    RunTurn,
    SessionMessage,
    SessionStopped,
    SetTitle,
    TurnFinished,
    TurnOutcome,
)
from hermes_actors.runtime.services import CancelToken, SessionServices, queue_reply, reply_for
from hermes_actors.store import EndReason, MessageRecord, NewMessage, Role, SessionRecord, Store
from platforms.base import SendError

__all__ = ["SessionActor", "SessionTurns", "estimate_tokens", "source_of", "user_key"]

_log = logging.getLogger(__name__)
T = TypeVar("T")
HANDOFF_PROMPT = (
    "[handoff] This conversation was just handed off here from {platform}. Say so briefly, summarise where we "
    "were, and continue from there."
)
CLEANUP_TIMEOUT_S = 5.0  # how long a reset waits for the agent to release a session's resources


def estimate_tokens(messages: Sequence[MessageRecord]) -> int:
    """Estimate the prompt tokens of ``messages`` (four characters a token)."""
    return sum(len(m.content or "") + len(m.tool_calls or "") for m in messages) // 4


def source_of(record: SessionRecord) -> SessionSource:
    """Return the source a session was opened from."""
    return SessionSource(
        platform=record.source,
        account_id=record.account_id,
        scope_id=record.scope_id,
        chat_type=record.chat_type or "dm",
        chat_id=record.chat_id,
        thread_id=record.thread_id,
        user_id=record.user_id,
        chat_name=record.chat_name,
        user_name=record.user_name,
    )


def _answered(deliveries: Sequence[Delivery]) -> tuple[str, ...]:
    """The platform message ids a reply to ``deliveries`` answers."""
    return tuple(d.message.message_id for d in deliveries)


def _record_attachments(store: Store, deliveries: Sequence[Delivery], ids: Sequence[int], now: float) -> None:
    """Commit the attachment rows of each delivery's user message (the first ``len(deliveries)`` of ``ids``)."""
    for delivery, message_id in zip(deliveries, ids, strict=False):
        for attachment in delivery.message.attachments:
            store.attachments.add(message_id, attachment, at=now)


def user_key(source: SessionSource) -> str | None:
    """Return the key of the principal a session belongs to (memories are kept per principal), or ``None``."""
    return Principal.of(source).memory_key


def _release_lease(store: Store, *, session_id: str, owner: str) -> bool:
    return store.leases.release(session_id, owner)


class _CreatedRow(msgspec.Struct, frozen=True, kw_only=True):
    """What a session's first commit created: its row, and the lease epoch (``None``: another process holds it)."""

    record: SessionRecord
    epoch: int | None


class SessionTurns:
    """The turn logic of one session, driven by :class:`SessionActor` (or any single thread).

    ``create_with`` is the (source, routing key) of a session that does not exist yet: its first turn creates the
    session row (with ``title``, when one was asked for) and the route in the same transaction as the turn.
    """

    def __init__(
        self,
        session_id: str,
        services: SessionServices,
        *,
        create_with: tuple[SessionSource, str] | None = None,
        title: str | None = None,
    ) -> None:
        self.session_id = session_id
        self._services = services
        self._writer = services.writer
        self._clock = services.clock
        self._timeout = services.config.agent_timeout_s
        self._create_with = create_with
        self._pending_title = title
        self._lease_held = False
        self._epoch = 0  # the tenure of this process's lease: every commit checks it (Leases.fence)
        self._record: SessionRecord | None = None
        self._history: list[MessageRecord] = []
        self._memories: list[str] = []
        self._model_history = ModelHistory(services.config.model_message_cap_chars)  # what the model is sent
        self._auto_title = AutoTitle(services, session_id)
        # Conversation-scoped state, dropped by a reset (model overrides and the like).
        self.overrides: dict[str, str] = {}
        if create_with is None:  # the transcript is read once the lease is taken (_acquire_lease)
            with services.readers.reader() as store:
                self._record = store.get_session(session_id)
                self._load_memories(store, source_of(self._record))
            origin = source_of(self._record)
        else:
            with services.readers.reader() as store:
                self._load_memories(store, create_with[0])
            origin = create_with[0]
        scope = services.sessions.search_scope_for(origin.platform)
        visible = visible_sessions(origin, scope)
        self._tools = (session_search_tool(services.readers.reader, session_id, visible=visible, scope=scope),)

    def _load_memories(self, store: Store, source: SessionSource) -> None:
        key = user_key(source)
        self._memories = store.memories.for_user(key) if key is not None else []

    @property
    def history(self) -> Sequence[MessageRecord]:
        """The cached transcript."""
        return self._history

    @property
    def memories(self) -> Sequence[str]:
        """What earlier sessions remembered about this session's user."""
        return self._memories

    # -- agent calls -------------------------------------------------------------------------------------------

    def _in_pool(
        self, call: Callable[[], T], token: CancelToken, timeout: float | None = None
    ) -> T | AgentFailure | None:
        """Run ``call`` in the agent pool; return its result, how it failed, or ``None`` if cancelled."""
        timeout = self._timeout if timeout is None else timeout
        future: Future[T] = self._services.agent_pool.submit(call)
        token.wait_for(future, timeout)
        if token.cancelled:
            return None
        if not future.done():
            future.cancel()
            _log.warning("session %s: the agent did not answer within %.0f s", self.session_id, timeout)
            return AgentFailure(
                kind=FailureKind.TIMEOUT,
                text=f"Sorry, the agent did not answer within {timeout:.0f} s. Your message is saved; try again.",
            )
        try:
            return future.result()
        except AgentError as exc:
            _log.warning("session %s: agent failed: %s", self.session_id, exc)
            return AgentFailure(
                kind=FailureKind.ERROR, text=f"Sorry, the agent failed: {exc}. Your message is saved; try again."
            )
        except Exception as exc:
            _log.exception("session %s: agent raised", self.session_id)
            return AgentFailure(
                kind=FailureKind.CRASH,
                text=f"Sorry, the agent failed unexpectedly ({type(exc).__name__}). Your message is saved; try again.",
            )

    def _call_agent(
        self, text: str, token: CancelToken, attachments: Sequence[Attachment] = ()
    ) -> AgentReply | AgentFailure | None:
        turn = TurnInput(
            session_id=self.session_id,
            history=self._model_history.of(self._history),
            user_text=text,
            system_prompt=self._record.system_prompt if self._record else None,
            memories=self._memories,
            history_tokens=self._model_history.tokens(self._history),
            tools=self._tools,
            attachments=attachments,
        )
        agent = self._services.agent
        if getattr(agent, "runs_inline", False):
            # An agent that never blocks (the echo agent) runs on the session's thread: no pool hop per turn.
            return self._inline(lambda: agent.run_turn(turn, timeout_s=self._timeout))
        return self._in_pool(lambda: agent.run_turn(turn, timeout_s=self._timeout), token)

    def _inline(self, call: Callable[[], AgentReply]) -> AgentReply | AgentFailure:
        try:
            return call()
        except Exception as exc:
            _log.exception("session %s: agent raised", self.session_id)
            return AgentFailure(
                kind=FailureKind.ERROR, text=f"Sorry, the agent failed: {exc}. Your message is saved; try again."
            )

    # -- leases ------------------------------------------------------------------------------------------------

    def _acquire_lease(self) -> str | None:
        """Take the session's lease, waiting up to ``lease_wait_s``; return the other holder when it stays busy.

        Under a new lease the transcript is read again: another process may have written turns since it was read.
        """
        config = self._services.config
        owner = self._services.lease_owner
        granted: list[int] = []

        def try_acquire() -> str | None:
            result = self._writer.call(lambda store: store.leases.grant(self.session_id, owner, config.lease_ttl_s))
            if isinstance(result, str):
                return result
            granted.append(result)
            return None

        holder = wait_for_lease(
            try_acquire,
            lambda dead: self._writer.call(functools.partial(_release_lease, session_id=self.session_id, owner=dead)),
            wait_s=config.lease_wait_s,
            owner_alive=self._services.owner_alive,
        )
        self._lease_held = holder is None
        if self._lease_held:
            self._epoch = granted[-1]
            self._reload()
        return holder

    def _reload(self) -> None:
        """Read the session and its transcript as the store has them now."""
        with self._services.readers.reader() as store:
            self._record = store.get_session(self.session_id)
            self._history = store.load_transcript(self.session_id)

    def _fence(self, store: Store) -> None:
        """Inside a commit: raise :class:`LeaseLostError` unless this process still holds the lease it took."""
        if self._create_with is None:
            config = self._services.config
            store.leases.fence(self.session_id, self._services.lease_owner, self._epoch, config.lease_ttl_s)

    def lost_lease(self) -> None:
        """The lease was taken over: forget it, so the next turn takes it again and reads the transcript anew."""
        self._lease_held = False

    def still_pending(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """The deliveries whose inbox rows no turn has completed yet (a replay may find some done already).

        Only replayed deliveries are looked up: a fresh one was committed by this process just now, and the commit
        refuses a row that is not pending anyway (:class:`StaleTurnError`).
        """
        ids = [d.inbox_id for d in deliveries if d.inbox_id > 0 and d.replayed]
        if not ids:
            return list(deliveries)
        with self._services.readers.reader() as store:
            pending = store.inbox.pending_among(ids)
        return [d for d in deliveries if d.inbox_id <= 0 or d.inbox_id in pending]

    def release_lease(self) -> None:
        """Give the lease up without waiting for the commit (the actor is stopping)."""
        if self._lease_held:
            self._lease_held = False
            owner = self._services.lease_owner
            self._writer.submit(lambda store: store.leases.release(self.session_id, owner))

    def tell_unsaved(self, request: RunTurn, error: str) -> None:
        """Tell the senders of ``request`` that their message could not be saved (not stored: the store is what
        failed); the supervisor runs the turn again later."""
        for delivery in request.deliveries[:1]:
            first = delivery.message
            text = (
                f"Your message could not be saved: {error}. It is kept and will be answered as soon as the gateway "
                "can write again; nothing needs to be sent again."
            )
            notice = reply_for(
                first.source, self.session_id, text, first.message_id, answers=_answered(request.deliveries)
            )
            try:
                self._services.outbox.notify(msgspec.structs.replace(notice, error="storage_unavailable"))
            except Exception:
                _log.exception("session %s: the notice of an unsaved turn could not be sent", self.session_id)

    # -- turns -------------------------------------------------------------------------------------------------

    def _answer(self, deliveries: Sequence[Delivery], text: str, *, state: str = "done") -> TurnOutcome:
        """Complete ``deliveries`` with a reply and nothing in the transcript."""
        first = deliveries[0].message
        outbound = reply_for(first.source, self.session_id, text, first.message_id, answers=_answered(deliveries))

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
            failed=text if state == "rejected" else None,
        )

    def run(self, request: RunTurn) -> TurnOutcome:
        """Run one turn (or lifecycle step) and commit it; return what happened."""
        deliveries = request.deliveries
        self._record = self._auto_title.applied(self._record)  # a background title stored since the last turn
        if not self._lease_held and self._create_with is None:
            holder = self._acquire_lease()
            if holder is not None:
                refused = isinstance(request.control, EndSession)
                if not deliveries:  # a timer's reset: the lease holder's own timers decide
                    return TurnOutcome(
                        session_id=self.session_id, inbox_ids=(), outbox_id=None, stored_messages=0, not_ended=refused
                    )
                busy = (
                    f"This conversation is busy in {describe_owner(holder)}; "
                    "your message was not run. Send it again when that process has finished."
                )
                return msgspec.structs.replace(self._answer(deliveries, busy, state="rejected"), not_ended=refused)
        if deliveries:
            fresh = self.still_pending(deliveries)
            if len(fresh) < len(deliveries):
                done = [d.inbox_id for d in deliveries if d not in fresh]
                _log.info("session %s: inbox rows %s were answered by another turn already", self.session_id, done)
                if not fresh:
                    return TurnOutcome(session_id=self.session_id, inbox_ids=(), outbox_id=None, stored_messages=0)
                deliveries = tuple(fresh)
                request = msgspec.structs.replace(request, deliveries=deliveries)
        match request.control:
            case EndSession():
                return self._end(request.control, deliveries, request.token)
            case SetTitle():
                return self._set_title(request.control, deliveries)
            case Compress():
                return self._compress(deliveries, request.token, reply=True)
            case Handoff():
                return self._handoff(request.control, deliveries, request.token)
            case None:
                pass
        if request.reply_override is not None:
            return self._answer(deliveries, request.reply_override)
        if self._needs_compression():
            outcome = self._compress((), request.token, reply=False)
            if outcome.continued_by is not None:
                return msgspec.structs.replace(outcome, requeue=tuple(deliveries))
        return self._converse(deliveries, request.token)

    def _converse(self, deliveries: Sequence[Delivery], token: CancelToken, *, no_retry: bool = False) -> TurnOutcome:
        first = deliveries[0].message
        # Attachments reach the agent as records for this turn only; the transcript keeps their text stand-ins.
        contents = [user_content(d.message) for d in deliveries]
        reply = self._call_agent("\n".join(contents), token, for_agent(d.message for d in deliveries))
        cancelled = token.cancelled
        now = self._clock()
        new = [
            NewMessage(role=Role.USER, content=content, platform_message_id=d.message.message_id, created_at=now)
            for d, content in zip(deliveries, contents, strict=True)
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
        elif isinstance(reply, AgentFailure):
            reply_text = reply.text
        unread = unread_note(d.message for d in deliveries)
        if reply_text is not None and unread is not None:
            reply_text = f"{unread}\n\n{reply_text}"
        outbound = (
            reply_for(first.source, self.session_id, reply_text, first.message_id, answers=_answered(deliveries))
            if reply_text is not None
            else None
        )
        if outbound is not None and no_retry:
            outbound = msgspec.structs.replace(outbound, no_retry=True)

        def commit(store: Store) -> tuple[int | None, list[int], _CreatedRow | None]:
            self._fence(store)
            for delivery in deliveries:
                if not store.inbox.complete(delivery.inbox_id, session_id=self.session_id) and delivery.inbox_id > 0:
                    raise StaleTurnError(
                        f"inbox row {delivery.inbox_id} was answered by another turn; this one is rolled back"
                    )
            created = self._create_row(store)
            ids = store.append_messages(self.session_id, new)
            _record_attachments(store, deliveries, ids, now)
            return (queue_reply(store, outbound, session_exists=True) if outbound is not None else None), ids, created

        outbox_id, ids, created = self._writer.call(commit)
        if created is not None:
            self._adopt(created)
        self._remember(ids, new, now)
        if outbound is not None and outbox_id is not None:
            self._services.outbox.deliver(outbox_id, outbound)
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

    def _remember(self, ids: Sequence[int], new: Sequence[NewMessage], now: float) -> None:
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

    def _create_row(self, store: Store) -> _CreatedRow | None:
        """Inside the first commit: create the session row, its route and its lease; ``None`` when the row exists.

        It changes nothing of this object (the commit may be rolled back and run again): :meth:`_adopt` takes the
        result once the commit is durable.
        """
        if self._create_with is None:
            return None
        source, routing_key = self._create_with
        title = self._pending_title
        try:
            record = store.create_session(source, session_id=self.session_id, routing_key=routing_key, title=title)
        except (TitleInUseError, HermesError) as exc:
            if title is None:
                raise
            _log.info("session %s: title %r not applied: %s", self.session_id, title, exc)
            record = store.create_session(source, session_id=self.session_id, routing_key=routing_key)
        store.set_route(routing_key, self.session_id)
        config = self._services.config
        granted = store.leases.grant(self.session_id, self._services.lease_owner, config.lease_ttl_s)
        return _CreatedRow(record=record, epoch=granted if isinstance(granted, int) else None)

    def _adopt(self, created: _CreatedRow) -> None:
        """The first commit is durable: the session has its row (and, unless another process holds it, its lease)."""
        self._lease_held = created.epoch is not None
        self._epoch = created.epoch or 0
        self._record = created.record
        self._create_with = None
        self._pending_title = None

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def _origin(self, deliveries: Sequence[Delivery]) -> tuple[SessionSource | None, str | None]:
        if deliveries:
            return deliveries[0].message.source, deliveries[0].message.message_id
        return (source_of(self._record) if self._record else None), None

    def _end(self, control: EndSession, deliveries: Sequence[Delivery], token: CancelToken) -> TurnOutcome:
        """End the session: save memories (timer resets), end it, unbind its keys, reply or notify."""
        notes: list[str] = []
        if control.save_memories and self._history:
            agent = self._services.agent
            history = list(self._history)
            saved = self._in_pool(lambda: agent.save_memories(history, timeout_s=self._timeout), CancelToken())
            if isinstance(saved, list):
                notes = [m.content for m in saved]
            else:
                _log.warning("session %s: save-memory turn failed: %s", self.session_id, saved)
        self._release_agent_state()
        source, reply_to = self._origin(deliveries)
        outbound = (
            reply_for(source, self.session_id, control.reply, reply_to)
            if control.reply is not None and source is not None
            else None
        )
        owner = self._services.lease_owner

        def commit(store: Store) -> int | None:
            if self._create_with is None:
                self._fence(store)
                record = store.get_session(self.session_id)
                key = user_key(source_of(record))
                if notes and key is not None:
                    store.memories.add(key, notes, source_session_id=self.session_id)
                store.end_session(self.session_id, control.reason)
                store.unbind_session(self.session_id)
                store.leases.release(self.session_id, owner)
            for delivery in deliveries:
                store.inbox.complete(delivery.inbox_id, session_id=self.session_id)
            return queue_reply(store, outbound) if outbound is not None else None

        outbox_id = self._writer.call(commit)
        self._lease_held = False
        if outbound is not None and outbox_id is not None:
            self._services.outbox.deliver(outbox_id, outbound)
        return TurnOutcome(
            session_id=self.session_id,
            inbox_ids=tuple(d.inbox_id for d in deliveries),
            outbox_id=outbox_id,
            stored_messages=0,
            ended=True,
        )

    def _release_agent_state(self) -> None:
        """Reset steps 3-5: release the agent's resources (bounded), drop conversation state, stop background work."""
        agent = self._services.agent
        for hook in ("release_session", "interrupt_background"):
            call = getattr(agent, hook, None)
            if call is None:
                continue
            bound: Callable[[], object] = functools.partial(call, self.session_id, timeout_s=CLEANUP_TIMEOUT_S)
            outcome = self._in_pool(bound, CancelToken(), CLEANUP_TIMEOUT_S)
            if isinstance(outcome, str):
                _log.warning("session %s: agent %s did not finish: %s", self.session_id, hook, outcome)
        self.overrides.clear()

    def _set_title(self, control: SetTitle, deliveries: Sequence[Delivery]) -> TurnOutcome:
        if control.text is None or not control.text.strip():
            current = self._record.title if self._record else self._pending_title
            text = f"Title: {current}" if current else "This session has no title yet; set one with /title <text>."
            return self._answer(deliveries, text)
        if self._create_with is not None:
            self._pending_title = control.text
            return self._answer(deliveries, f"The title will be set to '{control.text}' when the session starts.")
        try:
            text = control.text

            def retitle(store: Store) -> str | None:
                self._fence(store)
                return store.set_title(self.session_id, text)

            title = self._writer.call(retitle)
        except TitleInUseError as exc:
            return self._answer(deliveries, f"Title not changed: {self._title_taken(exc)}")
        except HermesError as exc:
            return self._answer(deliveries, f"Title not changed: {exc}")
        if self._record is not None:
            self._record = msgspec.structs.replace(self._record, title=title)
        return self._answer(deliveries, f"Title set to '{title}'." if title else "Title cleared.")

    def _title_taken(self, exc: TitleInUseError) -> str:
        """Why a title was refused, naming the holder only when it is one of this principal's sessions."""
        with self._services.readers.reader() as store:
            holder = store.find_session(exc.holder)
        if holder is None:
            return f"Title '{exc.title}' is already taken; choose another"
        return title_holder_text(source_of(self._record) if self._record else None, exc.title, holder)

    def _needs_compression(self) -> bool:
        config = self._services.config
        # A compression child starts with the summary and the protected recent messages: it compresses again only
        # after 4 new ones, so a summary that alone is over the threshold cannot start a child on every turn.
        carried = config.protected_recent_messages + 1 if self._history and is_summary(self._history[0]) else 0
        if len(self._history) - carried < 4:
            return False
        window = int(getattr(self._services.agent, "context_window", config.context_window))
        tokens = self._model_history.tokens(self._history)  # the prompt as sent: capped messages count capped
        return len(self._history) >= config.compress_at_messages or tokens >= config.compress_at_ratio * window

    def _compress(self, deliveries: Sequence[Delivery], token: CancelToken, *, reply: bool) -> TurnOutcome:
        """Summarise into a child session that takes over every routing key of this one."""
        if self._create_with is not None or self._record is None or len(self._history) < 4:
            if not deliveries:
                return TurnOutcome(session_id=self.session_id, inbox_ids=(), outbox_id=None, stored_messages=0)
            return self._answer(deliveries, "Nothing to compress yet: this session has fewer than 4 messages.")
        agent = self._services.agent
        history = list(self._history)
        summary = self._in_pool(lambda: agent.summarize(history, timeout_s=self._timeout), token)
        if not isinstance(summary, str):
            failure = summary.text if summary is not None else "the compression was cancelled"
            _log.warning("session %s: compression failed: %s", self.session_id, failure)
            if not deliveries:
                return TurnOutcome(session_id=self.session_id, inbox_ids=(), outbox_id=None, stored_messages=0)
            return self._answer(deliveries, f"Compression failed; the session is unchanged. {failure}")
        parent = self._record
        kind = SessionKind.CLI if parent.source == "cli" else SessionKind.GATEWAY
        child_id = new_session_id(kind)
        keep = self._services.config.protected_recent_messages
        recent = [m for m in history if m.role in ("user", "assistant") and m.content][-keep:] if keep else []
        carried = [NewMessage(role=Role.SYSTEM, content=f"[Summary of the conversation so far]\n{summary}")]
        carried += [NewMessage(role=Role(m.role), content=m.content) for m in recent]
        source, reply_to = self._origin(deliveries)
        owner = self._services.lease_owner

        def commit(store: Store) -> tuple[int, OutboundMessage] | None:
            self._fence(store)
            title = store.next_lineage_title(parent.title) if parent.title else None
            child = store.create_session(
                source_of(parent),
                session_id=child_id,
                routing_key=parent.routing_key,
                model=parent.model,
                title=title,
                system_prompt=parent.system_prompt,
                parent_session_id=parent.id,
            )
            store.append_messages(child.id, carried)
            store.end_session(parent.id, EndReason.COMPRESSION)
            store.repoint_routes(parent.id, child.id)
            store.leases.release(parent.id, owner)
            for delivery in deliveries:
                store.inbox.complete(delivery.inbox_id, session_id=parent.id)
            if not reply or source is None:
                return None
            text = f"Compressed {len(history)} messages; the conversation continues as {child.title or child.id}."
            outbound = reply_for(source, child.id, text, reply_to)
            return queue_reply(store, outbound), outbound

        queued = self._writer.call(commit)
        self._lease_held = False
        if queued is not None:
            self._services.outbox.deliver(*queued)
        return TurnOutcome(
            session_id=self.session_id,
            inbox_ids=tuple(d.inbox_id for d in deliveries),
            outbox_id=queued[0] if queued is not None else None,
            stored_messages=len(carried),
            ended=True,
            continued_by=child_id,
        )

    def _handoff(self, control: Handoff, deliveries: Sequence[Delivery], token: CancelToken) -> TurnOutcome:
        """Bind the platform's home chat (a new thread where it has threads) here and run the handoff turn there."""
        origin = deliveries[0].message if deliveries else None
        outbox = self._services.outbox
        if not outbox.enabled(control.platform):
            return self._answer(deliveries, f"Handoff failed: {control.platform} is not enabled on this gateway.")
        if self._create_with is not None or self._record is None:
            return self._answer(deliveries, "Nothing to hand off yet: send a message first.")
        with self._services.readers.reader() as store:
            home = store.homes.get(control.platform)
        if home is None:
            return self._answer(
                deliveries,
                f"Handoff failed: {control.platform} has no home channel. Run /sethome in the {control.platform} "
                "chat that should take over, then try again.",
            )
        title = self._record.title or f"Handoff of {self.session_id}"
        thread_id = home.thread_id
        try:
            thread_id = (
                outbox.create_thread(control.platform, home.chat_id, title, account_id=home.account_id) or thread_id
            )
        except SendError as exc:
            _log.info("session %s: no thread for the handoff (%s); using the home channel", self.session_id, exc)
        target = SessionSource(
            platform=control.platform,
            account_id=home.account_id or None,
            scope_id=home.scope_id,
            chat_type=home.chat_type or "dm",
            chat_id=home.chat_id,
            thread_id=thread_id,
            user_id=home.set_by,
        )
        key = build_session_key(target, self._services.config.key_policy)

        def bind(store: Store) -> str | None:
            self._fence(store)
            previous = store.get_route(key)
            store.set_route(key, self.session_id)
            for delivery in deliveries:
                store.inbox.complete(delivery.inbox_id, session_id=self.session_id)
            return previous

        previous = self._writer.call(bind)
        came_from = origin.source.platform if origin is not None else self._record.source
        prompt = InboundMessage(
            source=target,
            text=HANDOFF_PROMPT.format(platform=came_from),
            message_id=f"handoff-{self.session_id}-{len(self._history)}",
        )
        self._services.handoffs.expect(prompt.message_id)
        outcome = self._converse([Delivery(inbox_id=0, message=prompt)], token, no_retry=True)
        return msgspec.structs.replace(outcome, rebound=(key,), handoff_previous=previous)


class SessionActor(RuntimeActor):
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

    def on_receive(self, message: SessionMessage) -> None:
        """Run one turn and tell the supervisor it finished. A turn's failure never escapes (its inbox rows stay
        pending for replay); anything but a :class:`RunTurn` is a bug: raised, so an ask gets it back and a tell
        reaches :meth:`on_failure`, which reports the actor stopped."""
        match message:
            case RunTurn():
                assert self._turns is not None
                outcome: TurnOutcome | None = None
                retry: RunTurn | None = None
                error: str | None = None
                try:
                    outcome = self._turns.run(message)
                except LeaseLostError as exc:
                    _log.warning("session %s: %s", self._session_id, exc)
                    self._turns.lost_lease()
                    retry = message
                except StaleTurnError as exc:
                    _log.info("session %s: %s", self._session_id, exc)
                except StoreError as exc:
                    # A full or read-only disk, a refused commit: nothing of the turn was saved. The caller hears so
                    # now; the turn runs again (before any later message of this session) once the store takes it.
                    _log.error("session %s: the turn could not be saved: %s", self._session_id, exc)
                    error = str(exc)
                    retry = message
                    self._turns.tell_unsaved(message, error)
                except Exception:
                    _log.exception("session %s: turn failed; its inbox rows stay pending for replay", self._session_id)
                finally:
                    finished = TurnFinished(session_id=self._session_id, outcome=outcome, retry=retry, error=error)
                    self._tell_supervisor(finished)
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
