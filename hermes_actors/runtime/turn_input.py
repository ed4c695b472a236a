"""What one turn gives the agent (:class:`~hermes_actors.agents.turn.TurnInput`) and what its reply carries back
to the entry point (usage, or the mark that the agent gave no reply).

A message from a stateless client (an OpenAI-compatible request without a session header) carries its whole
conversation (:class:`~hermes_actors.messages.Conversation`): for that turn the model sees the client's history
and the client's system text after the session's own, not the stored transcript (a Responses chain keeps the
transcript and adds its instructions and input items: ``Conversation.after_transcript``). The transcript still stores
the turn, so the operator can read it and a later request that names the session continues from it.

An API client's own tools (``InboundMessage.client_tools``, of the newest message) are offered for the turn after the
session's frozen ones; a message of a client's tool results (``InboundMessage.tool_results``) is stored as tool
messages instead of a user message, and the reply of a turn that ends with calls of the client's tools carries them
(``OutboundMessage.tool_calls``).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from hermes_actors.agents.base import AgentReply, TurnInput
from hermes_actors.agents.history import ModelHistory
from hermes_actors.agents.tools import Tool
from hermes_actors.agents.turn import ApprovalGate, Steering
from hermes_actors.messages import (
    Attachment,
    ClientTool,
    ContextMessage,
    Conversation,
    OutboundError,
    OutboundMessage,
    TokenUsage,
    ToolResult,
)
from hermes_actors.runtime.interruption import PartialText
from hermes_actors.runtime.prefix import FrozenPrefix
from hermes_actors.runtime.protocol import AgentFailure, Delivery
from hermes_actors.runtime.turn_watch import Cancellable, TurnWatch
from hermes_actors.store import MessageRecord, NewMessage, Role

__all__ = ["conversation_of", "marked_reply", "posted_messages", "turn_input"]

_ROLES = {"user": Role.USER, "assistant": Role.ASSISTANT, "tool": Role.TOOL}


def conversation_of(deliveries: Sequence[Delivery]) -> Conversation | None:
    """The conversation a stateless client sent with the turn's newest message, ``None`` when it sent none."""
    context = deliveries[-1].message.context
    return context if isinstance(context, Conversation) else None


def _client_tools(deliveries: Sequence[Delivery]) -> tuple[ClientTool, ...]:
    tools = deliveries[-1].message.client_tools
    return tools if isinstance(tools, tuple) else ()


def _tool_results(deliveries: Sequence[Delivery]) -> tuple[ToolResult, ...]:
    return tuple(r for d in deliveries if isinstance(d.message.tool_results, tuple) for r in d.message.tool_results)


def posted_messages(
    deliveries: Sequence[Delivery], contents: Sequence[str], now: float
) -> tuple[list[NewMessage], list[int]]:
    """What a turn stores of the messages it answers, in order: each one's user message (``contents``), or, for a
    client's tool results, a tool message per result; and the position of each message's first stored record (its
    attachments are recorded against it)."""
    new = [
        NewMessage(role=Role.USER, content=content, platform_message_id=d.message.message_id, created_at=now)
        for d, content in zip(deliveries, contents, strict=True)
        if d.message.tool_results is msgspec.UNSET  # every message but a client's tool results: one user message
    ]
    if len(new) == len(deliveries):
        return new, list(range(len(new)))
    new, firsts = [], []
    for delivery, content in zip(deliveries, contents, strict=True):
        firsts.append(len(new))
        message = delivery.message
        results = message.tool_results if isinstance(message.tool_results, tuple) else ()
        new.extend(
            NewMessage(
                role=Role.TOOL,
                content=result.output,
                tool_call_id=result.call_id,
                platform_message_id=message.message_id if index == 0 else None,
                created_at=now,
            )
            for index, result in enumerate(results)
        )
        if content or not results:
            new.append(
                NewMessage(
                    role=Role.USER,
                    content=content,
                    platform_message_id=None if results else message.message_id,
                    created_at=now,
                )
            )
    return new, firsts


def _record(session_id: str, message: ContextMessage) -> MessageRecord:
    return MessageRecord(
        id=0,
        session_id=session_id,
        role=_ROLES.get(message.role, Role.USER),
        content=message.content,
        created_at=0,
        tool_calls=message.tool_calls,
        tool_call_id=message.tool_call_id,
    )


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
    steering: Steering | None = None,
    partial: PartialText | None = None,
    also_answers: Sequence[str] = (),
    approvals: ApprovalGate | None = None,
) -> TurnInput:
    """The agent's input for a turn answering ``deliveries`` (and ``also_answers``, the messages of interrupted
    turns) with the user ``text``; built just before the agent is called, so the turn's watchers are told here that
    it has begun (and, through ``token``, when it is stopped). ``steering`` takes messages sent while it runs;
    ``partial`` records the text the agent streams, passing it on to the watchers (when there are watchers, or it
    keeps the text anyway); ``approvals`` says which calls wait for a person and the decisions the turn continues
    from."""
    ids = [*also_answers, *(d.message.message_id for d in deliveries)]
    events = watch.begin(ids, session_id, token)
    if partial is not None and (partial.keep or events is not None):
        partial.watchers = events
        events = partial
    conversation = conversation_of(deliveries)
    client_tools, tool_results = _client_tools(deliveries), _tool_results(deliveries)
    gate = approvals if approvals is not None else ApprovalGate()
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
            client_tools=client_tools,
            tool_results=tool_results,
            steering=steering,
            approvals=gate,
        )
    sent = [_record(session_id, m) for m in conversation.history]
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
        client_tools=client_tools,
        tool_results=tool_results,
        steering=steering,
        approvals=gate,
    )


def marked_reply(
    outbound: OutboundMessage, reply: AgentReply | AgentFailure | None, streamed: str = ""
) -> OutboundMessage:
    """``outbound`` with what a request/response entry point needs to answer honestly: the model's usage for a
    reply (and the calls of the client's tools it ended with), :attr:`OutboundError.AGENT_FAILED` when the agent gave
    none (the text tells a chat user so), with the text it had ``streamed`` before it failed, if any."""
    if isinstance(reply, AgentFailure):
        written = streamed or msgspec.UNSET
        return msgspec.structs.replace(outbound, error=OutboundError.AGENT_FAILED, partial=written)
    if isinstance(reply, AgentReply):
        usage = TokenUsage(
            input_tokens=reply.input_tokens, output_tokens=reply.output_tokens, estimated=reply.tokens_estimated
        )
        calls = reply.client_calls if reply.client_calls is not None else msgspec.UNSET
        return msgspec.structs.replace(outbound, usage=usage, tool_calls=calls)
    return outbound
