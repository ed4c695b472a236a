"""One exchange of a session: its messages, the agent's call and the commit of all of it; or an answer alone.

A turn's commit holds the user message(s) and their attachment rows, the agent's messages, token counts, the inbox
rows' completion and the outbox row, so after a crash a turn either happened entirely or is replayed from the inbox.
An answer (:meth:`Exchange.answer`: a refusal, a notice, a lifecycle step's reply) completes the inbox rows with a
reply and stores nothing in the transcript.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from hermes_actors.agents.base import AgentReply, runs_inline, takes_steering
from hermes_actors.config import InterruptedOutput
from hermes_actors.errors import StaleTurnError
from hermes_actors.media import for_agent, unread_note, user_content
from hermes_actors.messages import Attachment, OutboundError, OutboundMessage
from hermes_actors.runtime.approval_requests import Asking, Resumption
from hermes_actors.runtime.interruption import PartialText, partial_message
from hermes_actors.runtime.protocol import AgentFailure, Delivery, TurnOutcome
from hermes_actors.runtime.records import CreatedRow, answered, record_attachments, source_of
from hermes_actors.runtime.rewind import rewind_of
from hermes_actors.runtime.services import CancelToken, queue_reply, queuing_reply, reply_for
from hermes_actors.runtime.session_state import SessionState
from hermes_actors.runtime.steering import SteerChannel, steered_messages
from hermes_actors.runtime.turn_input import conversation_of, marked_reply, posted_messages, turn_input
from hermes_actors.store import InboxState, StoreInterface
from hermes_actors.store.transcript import FENCED_APPEND_MAX
from hermes_actors.store.transcript_cuts import TranscriptCuts

__all__ = ["Exchange"]


class Exchange:
    """The exchanges of one session, run against its :class:`SessionState`."""

    __slots__ = ("_services", "_state", "session_id")

    def __init__(self, state: SessionState) -> None:
        self._state = state
        self._services = state.services
        self.session_id = state.session_id

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

        def answer(store: StoreInterface) -> int:
            for delivery in deliveries:
                store.inbox.complete(delivery.inbox_id, session_id=self.session_id, state=state)
            return queue_reply(store, outbound)

        outbox_id = self._services.writer.call(answer)
        self._services.outbox.deliver(outbox_id, outbound)
        return TurnOutcome(
            session_id=self.session_id,
            inbox_ids=tuple(d.inbox_id for d in deliveries),
            outbox_id=outbox_id,
            stored_messages=0,
            failed=text if state is InboxState.REJECTED else None,
        )

    def _call_agent(
        self,
        text: str,
        token: CancelToken,
        deliveries: Sequence[Delivery],
        attachments: Sequence[Attachment] = (),
        *,
        steering: SteerChannel | None = None,
        partial: PartialText | None = None,
        also_answers: tuple[str, ...] = (),
        resumed: Resumption | None = None,
    ) -> AgentReply | AgentFailure | None:
        state = self._state
        agent = state.named_agent.agent
        if steering is not None and takes_steering(agent):
            steering.open()
        else:
            steering = None
        turn = turn_input(
            self.session_id,
            text=text,
            history=state.history,
            model_history=state.model_history,
            prefix=state.prefix,
            tools=state.offered,
            attachments=attachments,
            deliveries=deliveries,
            watch=self._services.watch,
            token=token,
            steering=steering,
            partial=partial,
            also_answers=also_answers,
            approvals=state.approval_gate(resumed.decisions if resumed is not None else ()),
        )
        timeout = self._services.config.agent_timeout_s
        if runs_inline(agent):
            # An agent that never blocks (the echo agent) runs on the session's thread: no pool hop per turn.
            return state.agent_calls.inline(lambda: agent.run_turn(turn, timeout_s=timeout))
        return state.agent_calls.in_pool(lambda: agent.run_turn(turn, timeout_s=timeout), token)

    def converse(
        self,
        deliveries: Sequence[Delivery],
        token: CancelToken,
        *,
        no_retry: bool = False,
        steering: SteerChannel | None = None,
        also_answers: tuple[str, ...] = (),
        resumed: Resumption | None = None,
    ) -> TurnOutcome:
        """Run an ordinary turn answering ``deliveries``: call the agent, commit the exchange, hand the reply to the
        outbox (``no_retry``: a failed send is not tried again). The messages the agent took from ``steering`` are
        committed with it, and its reply answers ``also_answers`` too (the messages of interrupted turns). A turn
        ``resumed`` from a decision gives the agent the decisions and marks the request resumed; a reply that ends
        with calls waiting for approval commits the request and asks it (:mod:`~.approval_requests`)."""
        state = self._state
        first = deliveries[0].message
        # Attachments reach the agent as records for this turn only; the transcript keeps their text stand-ins.
        contents = [user_content(d.message) for d in deliveries]
        keeps = self._services.busy.interrupted_output is InterruptedOutput.PARTIAL
        partial = PartialText(keep=keeps)  # records only when watched or kept
        reply = self._call_agent(
            "\n".join(contents),
            token,
            deliveries,
            for_agent(d.message for d in deliveries),
            steering=steering,
            partial=partial,
            also_answers=also_answers,
            resumed=resumed,
        )
        cancelled = token.settle()  # the verdict: a /stop from now on leaves this turn's result alone
        taken = steering.close() if steering is not None else ()
        now = self._services.clock()
        new, firsts = posted_messages(deliveries, contents, now)  # user messages, or a client's tool results
        rewind = rewind_of(state.history, conversation_of(deliveries))  # a regenerated or edited tail, replaced
        if rewind is not None and rewind.restored:
            new = [msgspec.structs.replace(m, created_at=now) for m in rewind.restored] + new
            firsts = [first + len(rewind.restored) for first in firsts]
        reply_text: str | None = None
        steered: tuple[Delivery, ...] = ()  # what the agent took into this turn: committed with it
        if isinstance(reply, AgentReply) and not cancelled:
            steered = taken
            new.extend(steered_messages(reply.messages, steered, now))
            new[-1] = msgspec.structs.replace(
                new[-1],
                input_tokens=reply.input_tokens,
                output_tokens=reply.output_tokens,
                tokens_estimated=reply.tokens_estimated,
            )
            reply_text = reply.text
        elif isinstance(reply, AgentFailure):
            reply_text = reply.text
        elif token.interrupted and partial.keep and (kept := partial_message(partial.written(), now)):
            new.append(kept)
        answering = (*deliveries, *steered)
        unread = unread_note(d.message for d in deliveries)
        if reply_text is not None and unread is not None:
            reply_text = f"{unread}\n\n{reply_text}"
        answers = (*also_answers, *answered(answering))
        outbound = (
            reply_for(first.source, self.session_id, reply_text, first.message_id, answers=answers)
            if reply_text is not None
            else None
        )
        streamed = partial.written() if isinstance(reply, AgentFailure) else ""
        outbound = outbound and marked_reply(msgspec.structs.replace(outbound, no_retry=no_retry), reply, streamed)
        ahead = outbound is not None and self._services.outbox.counts_ahead(outbound.platform)
        waiting = reply.approval_calls if isinstance(reply, AgentReply) and not cancelled else None
        asking = Asking(state, deliveries[0], waiting) if waiting else None  # the turn pauses on these calls

        # A turn that only completes its rows, appends and queues its reply (no session row to create, nothing to
        # cut, no approval to record) writes all of it under the fence: one statement on a shard host.
        fused = 0 < len(new) <= FENCED_APPEND_MAX and not state.starts_rows and resumed is None and asking is None
        fused = fused and (rewind is None or rewind.cut_id is None)

        def commit(
            store: StoreInterface,
        ) -> tuple[int | None, list[int], CreatedRow | None, OutboundMessage | None]:
            completion = store.inbox.completion([d.inbox_id for d in answering], session_id=self.session_id)
            appended = store.appending_messages(self.session_id, new) if fused else None
            queued = queuing_reply(store, outbound, counted=ahead) if fused and outbound is not None else None
            # the rows completed (and, fused, the turn's writes) under the fence
            state.fence(store, [w for w in (completion if answering else None, appended, queued) if w is not None])
            for delivery in answering:
                if delivery.inbox_id not in completion.done and delivery.inbox_id > 0:
                    raise StaleTurnError(
                        f"inbox row {delivery.inbox_id} was answered by another turn; this one is rolled back"
                    )
            created = None if fused else state.start_rows(store)
            if rewind is not None and rewind.cut_id is not None:
                TranscriptCuts(store.sql, self._services.clock).cut_from(self.session_id, rewind.cut_id)
            ids = appended.ids if appended is not None else store.append_messages(self.session_id, new)
            record_attachments(store, deliveries, [ids[i] for i in firsts], now)
            if resumed is not None:
                resumed.in_commit(store)
            sent = asking.in_commit(store, outbound) if asking is not None and outbound is not None else outbound
            self._services.events.turn_completed(store, self.session_id, answering, sent, cancelled)
            if queued is not None:
                return queued.id, ids, created, sent
            return queue_reply(store, sent, session_exists=True, counted=ahead) if sent else None, ids, created, sent

        outbox_id, ids, created, outbound = self._services.writer.call(commit)
        if rewind is not None:
            state.cut(rewind.cut_at)
        state.committed(created, ids, new, now)
        asked = asking.row if asking is not None else None
        state.approval_committed(asked, resumed=resumed is not None)
        if asked is not None:
            self._services.arm_approval(asked.id, asked.expires_at)
        if outbound is not None and outbox_id is not None:
            self._services.outbox.deliver(outbox_id, outbound, counted=ahead)
        state.after_exchange(  # after the reply has left: a title never delays it
            added=len(ids),
            user_text="\n".join(d.message.text for d in answering),
            reply_text=reply.text if isinstance(reply, AgentReply) and not cancelled else None,
        )
        return TurnOutcome(
            session_id=self.session_id,
            inbox_ids=tuple(d.inbox_id for d in answering),
            outbox_id=outbox_id,
            stored_messages=len(ids),
            cancelled=cancelled,
            failed=reply.text if isinstance(reply, AgentFailure) else None,
            origin=source_of(state.record) if state.record is not None else None,
            interrupted=(*also_answers, *answered(deliveries)) if cancelled and token.interrupted else (),
        )
