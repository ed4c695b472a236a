"""The lifecycle steps of a session, run as its turns: end, title and handoff (compression: ``compression.py``).

:class:`SessionControls` runs on the session's thread, in order with the turns, against its
:class:`~hermes_actors.runtime.session_state.SessionState`; its replies and a handoff's turn are
:class:`~hermes_actors.runtime.exchange.Exchange`'s.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future

import msgspec

from hermes_actors.agents.base import cleanup_calls
from hermes_actors.errors import HermesError, SessionNotFoundError, TitleError, TitleInUseError
from hermes_actors.lifecycle.commands import title_holder_text
from hermes_actors.messages import InboundMessage
from hermes_actors.ports import SendError
from hermes_actors.routing import SessionSource, build_session_key
from hermes_actors.runtime.exchange import Exchange
from hermes_actors.runtime.prefix import user_key
from hermes_actors.runtime.protocol import AgentFailure, Delivery, EndSession, Handoff, SetTitle, TurnOutcome
from hermes_actors.runtime.records import source_of
from hermes_actors.runtime.services import CancelToken, queue_reply, reply_for
from hermes_actors.runtime.session_state import SessionState
from hermes_actors.store import StoreInterface
from hermes_actors.titles import check_chosen_title, sanitize_title

__all__ = ["CLEANUP_TIMEOUT_S", "HANDOFF_PROMPT", "SessionControls"]

_log = logging.getLogger(__name__)

HANDOFF_PROMPT = (
    "[handoff] This conversation was just handed off here from {platform}. Say so briefly, summarise where we "
    "were, and continue from there."
)
CLEANUP_TIMEOUT_S = 5.0  # how long a reset waits for the agent to release a session's resources


class SessionControls:
    """The lifecycle steps of one session (see the module docstring)."""

    __slots__ = ("_exchange", "_services", "_state", "session_id")

    def __init__(self, state: SessionState, exchange: Exchange) -> None:
        self._state = state
        self._exchange = exchange
        self._services = state.services
        self.session_id = state.session_id

    def end(self, control: EndSession, deliveries: Sequence[Delivery], token: CancelToken) -> TurnOutcome:
        """End the session: save memories (timer resets), end it, unbind its keys, reply or notify."""
        notes: list[str] = []
        record = self._state.record
        if control.save_memories and self._state.history and (record is None or record.is_live):  # not if ended
            agent = self._state.named_agent.agent
            history = list(self._state.history)
            timeout = self._services.config.agent_timeout_s
            saved = self._state.agent_calls.in_pool(
                lambda: agent.save_memories(history, timeout_s=timeout), CancelToken()
            )
            if isinstance(saved, list):
                notes = [m.content for m in saved]
            else:
                _log.warning("session %s: save-memory turn failed: %s", self.session_id, saved)
        self._release_agent_state()
        source, reply_to = self._state.origin(deliveries)
        outbound = (
            reply_for(source, self.session_id, control.reply, reply_to)
            if control.reply is not None and source is not None
            else None
        )
        owner = self._services.lease_owner

        def commit(store: StoreInterface) -> int | None:
            if not self._state.is_new:
                self._state.fence(store)
                record = store.get_session(self.session_id)
                key = user_key(source_of(record))
                if notes and key is not None:
                    store.memories.add(key, notes, source_session_id=self.session_id)
                store.end_session(self.session_id, control.reason)
                self._services.events.session_ended(store, self.session_id, control.reason.value)
                store.unbind_session(self.session_id)
                store.leases.release(self.session_id, owner)
            for delivery in deliveries:
                store.inbox.complete(delivery.inbox_id, session_id=self.session_id)
            return queue_reply(store, outbound) if outbound is not None else None

        outbox_id = self._services.writer.call(commit)
        self._state.lease_ended()
        if not self._state.is_new:
            _log.info("session %s ended (%s)", self.session_id, control.reason)
            self._services.metrics.resets.labels(control.reason.value).inc()
        if outbound is not None and outbox_id is not None:
            self._services.outbox.deliver(outbox_id, outbound)
        if control.done is not None:
            control.done.set_result(None)
        return TurnOutcome(
            session_id=self.session_id,
            inbox_ids=tuple(d.inbox_id for d in deliveries),
            outbox_id=outbox_id,
            stored_messages=0,
            ended=True,
        )

    def _release_agent_state(self) -> None:
        """Reset steps 3-5: the agent releases the session's resources and stops its background work (bounded); the
        conversation's own state goes with the session's actor, which the supervisor retires."""
        for hook, call in cleanup_calls(self._state.named_agent.agent):
            bound: Callable[[], object] = functools.partial(call, self.session_id, timeout_s=CLEANUP_TIMEOUT_S)
            outcome = self._state.agent_calls.in_pool(bound, CancelToken(), CLEANUP_TIMEOUT_S)
            if isinstance(outcome, AgentFailure):
                _log.warning("session %s: agent %s did not finish: %s", self.session_id, hook, outcome.text)

    def set_title(self, control: SetTitle, deliveries: Sequence[Delivery]) -> TurnOutcome:
        if control.done is not None:
            return self._rename(control.text, control.done)
        if control.text is None or not control.text.strip():
            current = self._state.shown_title()
            text = f"Title: {current}" if current else "This session has no title yet; set one with /title <text>."
            return self._exchange.answer(deliveries, text)
        if self._state.is_new:
            try:
                check_chosen_title(sanitize_title(control.text))
            except TitleError as exc:
                return self._exchange.answer(deliveries, f"Title not changed: {exc}")
            self._state.choose_title(control.text)
            return self._exchange.answer(
                deliveries, f"The title will be set to '{control.text}' when the session starts."
            )
        try:
            text = control.text

            def retitle(store: StoreInterface) -> str | None:
                self._state.fence(store)
                return store.set_title(self.session_id, text)

            title = self._services.writer.call(retitle)
        except TitleInUseError as exc:
            return self._exchange.answer(deliveries, f"Title not changed: {self._title_taken(exc)}")
        except HermesError as exc:
            return self._exchange.answer(deliveries, f"Title not changed: {exc}")
        self._state.retitled(title)
        return self._exchange.answer(deliveries, f"Title set to '{title}'." if title else "Title cleared.")

    def _rename(self, text: str | None, done: Future[str | None]) -> TurnOutcome:
        """An operator's rename (``hermesctl sessions rename`` through hermesd): store it under the lease, keep the
        new title in the actor's record, and answer ``done`` with the stored title or the refusal. A lost lease or
        a store failure is raised: the turn runs again, and answers then."""

        def retitle(store: StoreInterface) -> str | None:
            self._state.fence(store)
            return store.set_title(self.session_id, text)

        try:
            title = self._services.writer.call(retitle)
        except (TitleInUseError, TitleError, SessionNotFoundError) as exc:
            done.set_exception(exc)
        else:
            self._state.retitled(title, by_hand=True)
            done.set_result(title)
        return TurnOutcome(session_id=self.session_id, inbox_ids=(), outbox_id=None, stored_messages=0)

    def _title_taken(self, exc: TitleInUseError) -> str:
        """Why a title was refused, naming the holder only when it is one of this principal's sessions."""
        with self._services.readers.reader() as store:
            holder = store.find_session(exc.holder)
        if holder is None:
            return f"Title '{exc.title}' is already taken; choose another"
        return title_holder_text(source_of(self._state.record) if self._state.record else None, exc.title, holder)

    def handoff(self, control: Handoff, deliveries: Sequence[Delivery], token: CancelToken) -> TurnOutcome:
        """Bind the platform's home chat (a new thread where it has threads) here and run the handoff turn there."""
        origin = deliveries[0].message if deliveries else None
        outbox = self._services.outbox
        if not outbox.enabled(control.platform):
            return self._exchange.answer(
                deliveries, f"Handoff failed: {control.platform} is not enabled on this gateway."
            )
        if self._state.is_new or self._state.record is None:
            return self._exchange.answer(deliveries, "Nothing to hand off yet: send a message first.")
        with self._services.readers.reader() as store:
            home = store.homes.get(control.platform)
        if home is None:
            return self._exchange.answer(
                deliveries,
                f"Handoff failed: {control.platform} has no home channel. Run /sethome in the {control.platform} "
                "chat that should take over, then try again.",
            )
        title = self._state.record.title or f"Handoff of {self.session_id}"
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

        def bind(store: StoreInterface) -> str | None:
            self._state.fence(store)
            previous = store.get_route(key)
            store.set_route(key, self.session_id)
            for delivery in deliveries:
                store.inbox.complete(delivery.inbox_id, session_id=self.session_id)
            return previous

        previous = self._services.writer.call(bind)
        came_from = origin.source.platform if origin is not None else self._state.record.source
        prompt = InboundMessage(
            source=target,
            text=HANDOFF_PROMPT.format(platform=came_from),
            message_id=f"handoff-{self.session_id}-{len(self._state.history)}",
        )
        self._services.handoffs.expect(prompt.message_id)
        outcome = self._exchange.converse([Delivery(inbox_id=0, message=prompt)], token, no_retry=True)
        return msgspec.structs.replace(outcome, rebound=(key,), handoff_previous=previous)
