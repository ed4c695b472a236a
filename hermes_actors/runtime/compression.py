"""A session's compression: a summary of its conversation in a child session that takes over its routing keys.

It runs by hand (``/compress``) or before a turn (:meth:`Compression.before_turn`), when the history reached
``runtime.compress_at_messages`` or the prompt ``runtime.compress_at_ratio`` of the model's context window, and
only when the child's prompt would be smaller than the session's; a turn that would not fit the window even then is
answered instead of being sent.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import msgspec

from hermes_actors.agents.base import model_of, summary_call
from hermes_actors.agents.history import (
    CHARS_PER_TOKEN,
    carried_tokens,
    fit_summary,
    is_summary,
    summary_budget,
    summary_message,
)
from hermes_actors.ids import SessionKind
from hermes_actors.media import user_content
from hermes_actors.messages import OutboundMessage
from hermes_actors.runtime.exchange import Exchange
from hermes_actors.runtime.protocol import Delivery, TurnOutcome
from hermes_actors.runtime.records import source_of
from hermes_actors.runtime.services import CancelToken, queue_reply, reply_for
from hermes_actors.runtime.session_state import SessionState
from hermes_actors.store import EndReason, InboxState, NewMessage, Role, StoreInterface

__all__ = ["Compression"]

_log = logging.getLogger(__name__)


class Compression:
    """The compression of one session, run against its :class:`SessionState`."""

    __slots__ = ("_exchange", "_services", "_state", "session_id")

    def __init__(self, state: SessionState, exchange: Exchange) -> None:
        self._state = state
        self._exchange = exchange
        self._services = state.services
        self.session_id = state.session_id

    def needs_compression(self, deliveries: Sequence[Delivery], tokens: int | None = None) -> bool:
        """Whether a turn answering ``deliveries`` compresses first: the history reached
        ``runtime.compress_at_messages``, or the prompt it would send (:meth:`prompt_tokens`; ``tokens`` when the
        caller counted it already) reached ``runtime.compress_at_ratio`` of the window."""
        config = self._services.config
        history = self._state.history
        if not self._state.summary_may_gain:
            return False  # a summary of this very history did not make the prompt smaller
        # A compression child starts with the summary and the protected recent messages: it compresses again only
        # after 4 new ones, so a summary that alone is over the threshold cannot start a child on every turn.
        carried = config.protected_recent_messages + 1 if history and is_summary(history[0]) else 0
        if len(history) - carried < 4:
            return False
        return (
            len(history) >= config.compress_at_messages
            or (self.prompt_tokens(deliveries) if tokens is None else tokens)
            >= config.compress_at_ratio * self._state.window
        )

    def prompt_tokens(self, deliveries: Sequence[Delivery]) -> int:
        """Estimate the prompt a turn answering ``deliveries`` sends: the frozen prefix (system message with the
        memories, tool list), history, user text."""
        state = self._state
        chars = state.prefix.chars + sum(len(user_content(d.message)) + 1 for d in deliveries)
        # The history as sent: capped messages count capped. A new session's prefix is what its first turn freezes.
        return state.model_history.tokens(state.history) + chars // CHARS_PER_TOKEN

    def before_turn(self, deliveries: Sequence[Delivery], token: CancelToken) -> TurnOutcome | None:
        """Compress first when it is due or the turn would not fit the window; a turn that still would not fit is
        answered instead of being sent over the window. ``None``: run the turn here."""
        window = self._state.window
        tokens = self.prompt_tokens(deliveries)
        over = tokens > window
        if over or self.needs_compression(deliveries, tokens):
            outcome = self.compress((), token, reply=False)
            if outcome.continued_by is not None:
                return msgspec.structs.replace(outcome, requeue=tuple(deliveries))
            if over:
                tokens = self.prompt_tokens(deliveries)  # after a compression that changed nothing here
        if not over:
            return None
        _log.info(
            "session %s: a turn of about %d tokens does not fit the window of %d", self.session_id, tokens, window
        )
        return self._exchange.answer(
            deliveries,
            f"Not sent: with this message the prompt would be about {tokens:,} tokens, more than the model's context "
            f"window of {window:,}, and compressing the conversation cannot make it fit. Send a shorter message "
            "(or split it), or start over with /new.",
            state=InboxState.REJECTED,
        )

    def _unchanged(self, deliveries: Sequence[Delivery], text: str) -> TurnOutcome:
        if not deliveries:
            return TurnOutcome(session_id=self.session_id, inbox_ids=(), outbox_id=None, stored_messages=0)
        return self._exchange.answer(deliveries, text)

    def compress(self, deliveries: Sequence[Delivery], token: CancelToken, *, reply: bool) -> TurnOutcome:
        """Summarise into a child session that takes over every routing key of this one, when the child's prompt
        is smaller than this session's (otherwise nothing changes). Both prompts are counted whole: this session's
        frozen prefix and history, and the child's: the prefix it would freeze now (the memories saved meanwhile
        included), the summary and the protected recent messages. The next message would be in either."""
        state = self._state
        parent = state.record
        if state.is_new or parent is None or len(state.history) < 4:
            return self._unchanged(deliveries, "Nothing to compress yet: this session has fewer than 4 messages.")
        config = self._services.config
        history = list(state.history)
        keep = config.protected_recent_messages
        recent = [m for m in history if m.role in ("user", "assistant") and m.content][-keep:] if keep else []
        cap = state.model_history.cap
        with self._services.readers.reader() as store:
            child_prefix = state.fresh_prefix(store)  # frozen by the child as read here
        growth = (child_prefix.chars - state.prefix.chars) // CHARS_PER_TOKEN
        before = state.prefix.chars // CHARS_PER_TOKEN + state.model_history.tokens(history)
        at_least = child_prefix.chars // CHARS_PER_TOKEN + carried_tokens("", recent, cap)
        if at_least >= before:  # even an empty summary would not gain: do not ask the agent
            state.summary_gained_nothing()
            return self._unchanged(deliveries, _no_gain_text(before, at_least, len(recent), growth))
        budget = summary_budget(config.summary_max_tokens, state.window)
        summarize = summary_call(state.named_agent.agent, budget)
        timeout = config.agent_timeout_s
        summary = state.agent_calls.in_pool(lambda: summarize(history, timeout), token)
        if not isinstance(summary, str):
            failure = summary.text if summary is not None else "the compression was cancelled"
            _log.warning("session %s: compression failed: %s", self.session_id, failure)
            return self._unchanged(deliveries, f"Compression failed; the session is unchanged. {failure}")
        fitted = fit_summary(summary, budget)
        if fitted != summary:
            _log.info("session %s: the summary was cut to its budget of %d tokens", self.session_id, budget)
        after = child_prefix.chars // CHARS_PER_TOKEN + carried_tokens(fitted, recent, cap)
        if after >= before:
            state.summary_gained_nothing()
            return self._unchanged(deliveries, _no_gain_text(before, after, len(recent), growth))
        summary = fitted
        kind = SessionKind.CLI if parent.source == "cli" else SessionKind.GATEWAY
        child_id = self._services.new_id(kind, parent.id)
        carried = [NewMessage(role=Role.SYSTEM, content=summary_message(summary))]
        carried += [NewMessage(role=Role(m.role), content=m.content) for m in recent]
        source, reply_to = state.origin(deliveries)
        owner = self._services.lease_owner
        model = model_of(state.named_agent.agent) or parent.model

        def commit(store: StoreInterface) -> tuple[int, OutboundMessage] | None:
            state.fence(store)
            title = store.next_lineage_title(parent.title) if parent.title else None
            prefix = child_prefix  # the child freezes its own, with the memories of now, as counted above
            child = store.create_session(
                source_of(parent),
                session_id=child_id,
                routing_key=parent.routing_key,
                model=model,
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

        queued = self._services.writer.call(commit)
        state.lease_ended()
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
