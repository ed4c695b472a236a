"""What one turn gives the agent (:class:`~hermes_actors.agents.turn.TurnInput`) and what its reply carries back
to the entry point (usage, or the mark that the agent gave no reply).

A message from a stateless client (an OpenAI-compatible request without a session header) carries its whole
conversation (:class:`~hermes_actors.messages.Conversation`): for that turn the model sees the client's history
and the client's system text after the session's own, not the stored transcript (a Responses chain keeps the
transcript and adds its instructions and input items: ``Conversation.after_transcript``). The transcript still stores
the turn, so the operator can read it and a later request that names the session continues from it.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from hermes_actors.agents.base import AgentReply, TurnInput
from hermes_actors.agents.history import ModelHistory
from hermes_actors.agents.tools import Tool
from hermes_actors.messages import Attachment, Conversation, OutboundError, OutboundMessage, TokenUsage
from hermes_actors.runtime.prefix import FrozenPrefix
from hermes_actors.runtime.protocol import AgentFailure, Delivery
from hermes_actors.runtime.turn_watch import Cancellable, TurnWatch
from hermes_actors.store import MessageRecord, Role

__all__ = ["conversation_of", "marked_reply", "turn_input"]

_ROLES = {"user": Role.USER, "assistant": Role.ASSISTANT}


def conversation_of(deliveries: Sequence[Delivery]) -> Conversation | None:
    """The conversation a stateless client sent with the turn's newest message, ``None`` when it sent none."""
    context = deliveries[-1].message.context
    return context if isinstance(context, Conversation) else None


def turn_input(
    session_id: str,
    *,
    text: str,
    history: Sequence[MessageRecord],
    model_history: ModelHistory,
    prefix: FrozenPrefix,
    tools: Sequence[Tool],
    attachments: Sequence[Attachment],
    deliveries: Sequence[Delivery],
    watch: TurnWatch,
    token: Cancellable | None = None,
) -> TurnInput:
    """The agent's input for a turn answering ``deliveries`` with the user ``text``; built just before the agent is
    called, so the turn's watchers are told here that it has begun (and, through ``token``, when it is stopped)."""
    events = watch.begin((d.message.message_id for d in deliveries), session_id, token)
    conversation = conversation_of(deliveries)
    if conversation is None:
        return TurnInput(
            session_id=session_id,
            history=model_history.of(history),
            user_text=text,
            system_prompt=prefix.system_prompt,  # frozen: memories are in it as of the session's start
            history_tokens=model_history.tokens(history),
            tools=tools,
            attachments=attachments,
            events=events,
        )
    sent = [
        MessageRecord(id=0, session_id=session_id, role=_ROLES.get(m.role, Role.USER), content=m.content, created_at=0)
        for m in conversation.history
    ]
    view = ModelHistory(0)  # the client's history goes as the client sent it: it chose what to send
    system = "\n\n".join(part for part in (prefix.system_prompt, conversation.system) if part) or None
    seen, tokens = view.of(sent), view.tokens(sent)
    if conversation.after_transcript:  # a Responses chain: the session's own history comes first
        seen, tokens = [*model_history.of(history), *seen], model_history.tokens(history) + tokens
    return TurnInput(
        session_id=session_id,
        history=seen,
        user_text=text,
        system_prompt=system,
        history_tokens=tokens,
        tools=tools,
        attachments=attachments,
        events=events,
    )


def marked_reply(outbound: OutboundMessage, reply: AgentReply | AgentFailure | None) -> OutboundMessage:
    """``outbound`` with what a request/response entry point needs to answer honestly: the model's usage for a
    reply, :attr:`OutboundError.AGENT_FAILED` when the agent gave none (the text tells a chat user so)."""
    if isinstance(reply, AgentFailure):
        return msgspec.structs.replace(outbound, error=OutboundError.AGENT_FAILED)
    if isinstance(reply, AgentReply):
        usage = TokenUsage(
            input_tokens=reply.input_tokens, output_tokens=reply.output_tokens, estimated=reply.tokens_estimated
        )
        return msgspec.structs.replace(outbound, usage=usage)
    return outbound
