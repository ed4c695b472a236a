"""The lifecycle steps of a session, run as its turns: end, title, compression into a child, handoff.

:class:`SessionControls` is held by a :class:`~hermes_actors.runtime.turns.SessionTurns` and runs on its thread,
in order with the turns; it uses the turn's transcript, lease fence, agent calls and replies through the turn's
public members.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING

import msgspec

from hermes_actors.agents.base import cleanup_calls, context_window_of, model_of, summary_call
from hermes_actors.agents.history import (
    CHARS_PER_TOKEN,
    carried_tokens,
    fit_summary,
    is_summary,
    summary_budget,
    summary_message,
)
from hermes_actors.errors import HermesError, SessionNotFoundError, TitleError, TitleInUseError
from hermes_actors.ids import SessionKind
from hermes_actors.lifecycle.commands import title_holder_text
from hermes_actors.media import user_content
from hermes_actors.messages import InboundMessage, OutboundMessage
from hermes_actors.ports import SendError
from hermes_actors.routing import SessionSource, build_session_key
from hermes_actors.runtime.protocol import AgentFailure, Delivery, EndSession, Handoff, SetTitle, TurnOutcome
from hermes_actors.runtime.records import source_of, user_key
from hermes_actors.runtime.services import CancelToken, queue_reply, reply_for
from hermes_actors.store import EndReason, InboxState, NewMessage, Role, Store
from hermes_actors.titles import check_chosen_title, sanitize_title

if TYPE_CHECKING:
    from hermes_actors.runtime.turns import SessionTurns

__all__ = ["CLEANUP_TIMEOUT_S", "HANDOFF_PROMPT", "SessionControls"]

_log = logging.getLogger(__name__)

HANDOFF_PROMPT = (
    "[handoff] This conversation was just handed off here from {platform}. Say so briefly, summarise where we "
    "were, and continue from there."
)
CLEANUP_TIMEOUT_S = 5.0  # how long a reset waits for the agent to release a session's resources


class SessionControls:
    """The lifecycle steps of one session (see the module docstring)."""

    def __init__(self, turns: SessionTurns) -> None:
        self._turns = turns
        self.session_id = turns.session_id
        self._services = turns.services
        self._writer = turns.services.writer
        self._timeout = turns.services.config.agent_timeout_s
        self._no_gain_at: int | None = None  # history length at which a summary did not make the prompt smaller
        # The agent and the config do not change while the actor lives: the window is asked once.
        named = turns.named_agent
        self._window = context_window_of(named.agent, named.context_window or turns.services.config.context_window)

    def end(self, control: EndSession, deliveries: Sequence[Delivery], token: CancelToken) -> TurnOutcome:
        """End the session: save memories (timer resets), end it, unbind its keys, reply or notify."""
        notes: list[str] = []
        record = self._turns.record
        if control.save_memories and self._turns.history and (record is None or record.is_live):  # not if ended
            agent = self._turns.named_agent.agent
            history = list(self._turns.history)
            saved = self._turns.agent_calls.in_pool(
                lambda: agent.save_memories(history, timeout_s=self._timeout), CancelToken()
            )
            if isinstance(saved, list):
                notes = [m.content for m in saved]
            else:
                _log.warning("session %s: save-memory turn failed: %s", self.session_id, saved)
        self._release_agent_state()
        source, reply_to = self._turns.origin(deliveries)
        outbound = (
            reply_for(source, self.session_id, control.reply, reply_to)
            if control.reply is not None and source is not None
            else None
        )
        owner = self._services.lease_owner

        def commit(store: Store) -> int | None:
            if not self._turns.is_new:
                self._turns.fence(store)
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
        self._turns.lease_released()
        if not self._turns.is_new:
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
        """Reset steps 3-5: release the agent's resources (bounded), drop conversation state, stop background work."""
        for hook, call in cleanup_calls(self._turns.named_agent.agent):
            bound: Callable[[], object] = functools.partial(call, self.session_id, timeout_s=CLEANUP_TIMEOUT_S)
            outcome = self._turns.agent_calls.in_pool(bound, CancelToken(), CLEANUP_TIMEOUT_S)
            if isinstance(outcome, AgentFailure):
                _log.warning("session %s: agent %s did not finish: %s", self.session_id, hook, outcome.text)
        self._turns.overrides.clear()

    def set_title(self, control: SetTitle, deliveries: Sequence[Delivery]) -> TurnOutcome:
        if control.done is not None:
            return self._rename(control.text, control.done)
        if control.text is None or not control.text.strip():
            current = self._turns.record.title if self._turns.record else self._turns.pending_title
            text = f"Title: {current}" if current else "This session has no title yet; set one with /title <text>."
            return self._turns.answer(deliveries, text)
        if self._turns.is_new:
            try:
                check_chosen_title(sanitize_title(control.text))
            except TitleError as exc:
                return self._turns.answer(deliveries, f"Title not changed: {exc}")
            self._turns.pending_title = control.text
            return self._turns.answer(deliveries, f"The title will be set to '{control.text}' when the session starts.")
        try:
            text = control.text

            def retitle(store: Store) -> str | None:
                self._turns.fence(store)
                return store.set_title(self.session_id, text)

            title = self._writer.call(retitle)
        except TitleInUseError as exc:
            return self._turns.answer(deliveries, f"Title not changed: {self._title_taken(exc)}")
        except HermesError as exc:
            return self._turns.answer(deliveries, f"Title not changed: {exc}")
        if self._turns.record is not None:
            self._turns.record = msgspec.structs.replace(self._turns.record, title=title)
        return self._turns.answer(deliveries, f"Title set to '{title}'." if title else "Title cleared.")

    def _rename(self, text: str | None, done: Future[str | None]) -> TurnOutcome:
        """An operator's rename (``hermesctl sessions rename`` through hermesd): store it under the lease, keep the
        new title in the actor's record, and answer ``done`` with the stored title or the refusal. A lost lease or
        a store failure is raised: the turn runs again, and answers then."""

        def retitle(store: Store) -> str | None:
            self._turns.fence(store)
            return store.set_title(self.session_id, text)

        try:
            title = self._writer.call(retitle)
        except (TitleInUseError, TitleError, SessionNotFoundError) as exc:
            done.set_exception(exc)
        else:
            if self._turns.record is not None:
                self._turns.record = msgspec.structs.replace(self._turns.record, title=title)
            self._turns.title_set_by_hand()
            done.set_result(title)
        return TurnOutcome(session_id=self.session_id, inbox_ids=(), outbox_id=None, stored_messages=0)

    def _title_taken(self, exc: TitleInUseError) -> str:
        """Why a title was refused, naming the holder only when it is one of this principal's sessions."""
        with self._services.readers.reader() as store:
            holder = store.find_session(exc.holder)
        if holder is None:
            return f"Title '{exc.title}' is already taken; choose another"
        return title_holder_text(source_of(self._turns.record) if self._turns.record else None, exc.title, holder)

    def window(self) -> int:
        """The model's context window in tokens (the agent's, else its ``context_window``, else the runtime's)."""
        return self._window

    def needs_compression(self, deliveries: Sequence[Delivery]) -> bool:
        """Whether a turn answering ``deliveries`` compresses first: the history reached
        ``runtime.compress_at_messages``, or the prompt it would send (:meth:`prompt_tokens`) reached
        ``runtime.compress_at_ratio`` of the window."""
        config = self._services.config
        if self._no_gain_at == len(self._turns.history):
            return False  # a summary of this very history did not make the prompt smaller
        # A compression child starts with the summary and the protected recent messages: it compresses again only
        # after 4 new ones, so a summary that alone is over the threshold cannot start a child on every turn.
        carried = (
            config.protected_recent_messages + 1 if self._turns.history and is_summary(self._turns.history[0]) else 0
        )
        if len(self._turns.history) - carried < 4:
            return False
        return (
            len(self._turns.history) >= config.compress_at_messages
            or self.prompt_tokens(deliveries) >= config.compress_at_ratio * self.window()
        )

    def prompt_tokens(self, deliveries: Sequence[Delivery]) -> int:
        """Estimate the prompt a turn answering ``deliveries`` sends: the frozen prefix (system message with the
        memories, tool list), history, user text."""
        prefix = self._turns.prefix  # a new session's too: what its first turn will freeze and send
        chars = prefix.chars + sum(len(user_content(d.message)) + 1 for d in deliveries)
        # The history as sent: capped messages count capped.
        return self._turns.model_history.tokens(self._turns.history) + chars // CHARS_PER_TOKEN

    def before_turn(self, deliveries: Sequence[Delivery], token: CancelToken) -> TurnOutcome | None:
        """Compress first when it is due or the turn would not fit the window; a turn that still would not fit is
        answered instead of being sent over the window. ``None``: run the turn here."""
        window = self.window()
        over = self.prompt_tokens(deliveries) > window
        if over or self.needs_compression(deliveries):
            outcome = self.compress((), token, reply=False)
            if outcome.continued_by is not None:
                return msgspec.structs.replace(outcome, requeue=tuple(deliveries))
        if not over:
            return None
        tokens = self.prompt_tokens(deliveries)
        _log.info(
            "session %s: a turn of about %d tokens does not fit the window of %d", self.session_id, tokens, window
        )
        return self._turns.answer(
            deliveries,
            f"Not sent: with this message the prompt would be about {tokens:,} tokens, more than the model's context "
            f"window of {window:,}, and compressing the conversation cannot make it fit. Send a shorter message "
            "(or split it), or start over with /new.",
            state=InboxState.REJECTED,
        )

    def _unchanged(self, deliveries: Sequence[Delivery], text: str) -> TurnOutcome:
        if not deliveries:
            return TurnOutcome(session_id=self.session_id, inbox_ids=(), outbox_id=None, stored_messages=0)
        return self._turns.answer(deliveries, text)

    def compress(self, deliveries: Sequence[Delivery], token: CancelToken, *, reply: bool) -> TurnOutcome:
        """Summarise into a child session that takes over every routing key of this one, when the child's prompt
        is smaller than this session's (otherwise nothing changes). Both prompts are counted whole: this session's
        frozen prefix and history, and the child's: the prefix it would freeze now (the memories saved meanwhile
        included), the summary and the protected recent messages. The next message would be in either."""
        if self._turns.is_new or self._turns.record is None or len(self._turns.history) < 4:
            return self._unchanged(deliveries, "Nothing to compress yet: this session has fewer than 4 messages.")
        config = self._services.config
        history = list(self._turns.history)
        keep = config.protected_recent_messages
        recent = [m for m in history if m.role in ("user", "assistant") and m.content][-keep:] if keep else []
        cap = self._turns.model_history.cap
        with self._services.readers.reader() as store:
            child_prefix = self._turns.fresh_prefix(store)  # frozen by the child as read here
        growth = (child_prefix.chars - self._turns.prefix.chars) // CHARS_PER_TOKEN
        before = self._turns.prefix.chars // CHARS_PER_TOKEN + self._turns.model_history.tokens(history)
        at_least = child_prefix.chars // CHARS_PER_TOKEN + carried_tokens("", recent, cap)
        if at_least >= before:  # even an empty summary would not gain: do not ask the agent
            self._no_gain_at = len(history)
            return self._unchanged(deliveries, _no_gain_text(before, at_least, len(recent), growth))
        budget = summary_budget(config.summary_max_tokens, self.window())
        summarize = summary_call(self._turns.named_agent.agent, budget)
        summary = self._turns.agent_calls.in_pool(lambda: summarize(history, self._timeout), token)
        if not isinstance(summary, str):
            failure = summary.text if summary is not None else "the compression was cancelled"
            _log.warning("session %s: compression failed: %s", self.session_id, failure)
            return self._unchanged(deliveries, f"Compression failed; the session is unchanged. {failure}")
        fitted = fit_summary(summary, budget)
        if fitted != summary:
            _log.info("session %s: the summary was cut to its budget of %d tokens", self.session_id, budget)
        after = child_prefix.chars // CHARS_PER_TOKEN + carried_tokens(fitted, recent, cap)
        if after >= before:
            self._no_gain_at = len(history)
            return self._unchanged(deliveries, _no_gain_text(before, after, len(recent), growth))
        summary = fitted
        parent = self._turns.record
        kind = SessionKind.CLI if parent.source == "cli" else SessionKind.GATEWAY
        child_id = self._services.new_id(kind, parent.id)
        carried = [NewMessage(role=Role.SYSTEM, content=summary_message(summary))]
        carried += [NewMessage(role=Role(m.role), content=m.content) for m in recent]
        source, reply_to = self._turns.origin(deliveries)
        owner = self._services.lease_owner

        def commit(store: Store) -> tuple[int, OutboundMessage] | None:
            self._turns.fence(store)
            title = store.next_lineage_title(parent.title) if parent.title else None
            prefix = child_prefix  # the child freezes its own, with the memories of now, as counted above
            child = store.create_session(
                source_of(parent),
                session_id=child_id,
                routing_key=parent.routing_key,
                model=model_of(self._turns.named_agent.agent) or parent.model,
                agent=parent.agent,  # the lineage keeps the agent its root started with
                title=title,
                system_prompt=prefix.system_prompt,
                parent_session_id=parent.id,
            )
            store.freeze_prefix(child.id, system_prompt=prefix.system_prompt, tools=prefix.tools)
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
        self._turns.lease_released()
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

    def handoff(self, control: Handoff, deliveries: Sequence[Delivery], token: CancelToken) -> TurnOutcome:
        """Bind the platform's home chat (a new thread where it has threads) here and run the handoff turn there."""
        origin = deliveries[0].message if deliveries else None
        outbox = self._services.outbox
        if not outbox.enabled(control.platform):
            return self._turns.answer(deliveries, f"Handoff failed: {control.platform} is not enabled on this gateway.")
        if self._turns.is_new or self._turns.record is None:
            return self._turns.answer(deliveries, "Nothing to hand off yet: send a message first.")
        with self._services.readers.reader() as store:
            home = store.homes.get(control.platform)
        if home is None:
            return self._turns.answer(
                deliveries,
                f"Handoff failed: {control.platform} has no home channel. Run /sethome in the {control.platform} "
                "chat that should take over, then try again.",
            )
        title = self._turns.record.title or f"Handoff of {self.session_id}"
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
            self._turns.fence(store)
            previous = store.get_route(key)
            store.set_route(key, self.session_id)
            for delivery in deliveries:
                store.inbox.complete(delivery.inbox_id, session_id=self.session_id)
            return previous

        previous = self._writer.call(bind)
        came_from = origin.source.platform if origin is not None else self._turns.record.source
        prompt = InboundMessage(
            source=target,
            text=HANDOFF_PROMPT.format(platform=came_from),
            message_id=f"handoff-{self.session_id}-{len(self._turns.history)}",
        )
        self._services.handoffs.expect(prompt.message_id)
        outcome = self._turns.converse([Delivery(inbox_id=0, message=prompt)], token, no_retry=True)
        return msgspec.structs.replace(outcome, rebound=(key,), handoff_previous=previous)


def _no_gain_text(before: int, after: int, kept: int, growth: int) -> str:
    if growth > 0:
        return (
            "Not compressed: a new session would not make the prompt smaller. Its system message would be about "
            f"{growth:,} tokens longer than this session's (memories saved since it started): the prompt is about "
            f"{before:,} tokens now and would be about {after:,} with a summary and the last {kept} messages. "
            "Nothing changed."
        )
    return (
        f"Not compressed: this conversation is too short to gain from it. Its prompt is about {before:,} tokens; "
        f"with a summary and the last {kept} messages it would be about {after:,}. Nothing changed."
    )
