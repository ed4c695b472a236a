"""What a turn gives an agent and what the agent gives back: the data of the :class:`~hermes_actors.agents.base.Agent`
calls, and the one error every agent raises."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from typing import Protocol

import msgspec

from hermes_actors.agents.tools import Tool
from hermes_actors.messages import Attachment, ClientTool, ToolResult
from hermes_actors.ports import ToolStatus, TurnEvents
from hermes_actors.store.records import MessageRecord, Role

__all__ = [
    "AgentError",
    "AgentMessage",
    "AgentReply",
    "ApprovalDecision",
    "ApprovalGate",
    "ClientTool",
    "Memory",
    "Steering",
    "ToolResult",
    "ToolStatus",
    "TurnEvents",
    "TurnInput",
    "system_message",
]


class AgentError(Exception):
    """The agent could not produce a reply (the endpoint failed, timed out or answered nonsense): the only exception
    an agent raises. The turn fails with a reply that says so and keeps the user's message."""


class AgentMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One message the agent produced: assistant text and/or tool calls (``tool_calls``: a JSON array in OpenAI's
    shape, ``[{"id": ..., "type": "function", "function": {"name": ..., "arguments": "<JSON>"}}]``), or a tool
    result (``role=Role.TOOL`` with ``tool_call_id`` and ``tool_name``)."""

    role: Role
    content: str | None = None
    tool_calls: str | None = None  # JSON array, OpenAI shape
    tool_name: str | None = None
    tool_call_id: str | None = None
    token_count: int | None = None  # the model's own count (an assistant message: its completion tokens)


class AgentReply(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of a turn: the messages to store (in order), the text to send, token counts.

    ``messages`` are assistant and tool messages (the runtime stores the user's): an assistant message whose
    ``tool_calls`` asks for calls, then a tool message per call (``tool_call_id``, ``tool_name``, the result as
    ``content``), and last the assistant's answer. ``text`` is what the user is sent: the answer's content, of
    which whatever was streamed through :class:`TurnEvents` is the start.

    ``input_tokens`` and ``output_tokens`` are the model's ``usage`` summed over the turn's calls; when a call
    reported none, its share is estimated (four characters a token) and ``tokens_estimated`` says so.

    ``client_calls`` ends a turn with calls of the client's own tools (:attr:`TurnInput.client_tools`) for the
    client to run: a JSON array in the shape of :attr:`AgentMessage.tool_calls`, of calls the reply's last assistant
    message also carries (followed only by the results of the gateway's own calls of that message); ``text`` is then
    that message's content (``""`` without). The client's next message brings their results
    (:attr:`TurnInput.tool_results`).

    ``approval_calls`` pauses the turn on calls that need a person's approval (:attr:`TurnInput.approvals`): a JSON
    array in the same shape, of calls the reply's last assistant message also carries (followed only by the results
    of the calls of that message that ran). The runtime stores the reply's messages, asks the session's user and
    waits, durably; the decision comes as the next turn: a call of one of :attr:`TurnInput.tools` the runtime ran
    once when approved, its result (or the denial) in :attr:`TurnInput.tool_results`, and every call's decision in
    :attr:`TurnInput.approvals`. ``text`` is what is said before the question (``""`` for nothing).
    :func:`hermes_actors.agents.approvals.request_approval` builds such a reply.
    """

    messages: tuple[AgentMessage, ...]
    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    tokens_estimated: bool = False
    client_calls: str | None = None
    approval_calls: str | None = None


class ApprovalDecision(msgspec.Struct, frozen=True, kw_only=True):
    """A person's answer to a call the previous turn paused on (:attr:`AgentReply.approval_calls`).

    ``answered`` says the runtime answered the call in :attr:`TurnInput.tool_results` (one of
    :attr:`TurnInput.tools`: its result, run once when approved, or the denial). A call of the agent's own it leaves
    to the agent, which runs it when ``approved`` (a call approved before a restart that may have run already comes
    back not approved, with the reason, so a call never runs twice).
    """

    call_id: str
    tool_name: str
    approved: bool
    reason: str | None = None
    answered: bool = False


class ApprovalGate(msgspec.Struct, frozen=True, kw_only=True):
    """What a turn knows of approvals (:attr:`TurnInput.approvals`): which tools need one, and the decisions the
    turn continues from.

    A tool needs approval when it says so (:attr:`Tool.needs_approval`: an MCP server's ``require_approval``) or
    its name matches one of ``patterns`` (shell patterns, ``agent.approvals.tools``), which an agent asks about its
    own tools too (:meth:`required`).
    """

    patterns: tuple[str, ...] = ()
    decisions: tuple[ApprovalDecision, ...] = ()

    def required(self, name: str, tools: Sequence[Tool] = ()) -> bool:
        """Whether a call of the tool ``name`` (one of ``tools``, or the agent's own) waits for approval."""
        if any(tool.name == name and tool.needs_approval for tool in tools):
            return True
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.patterns)

    def decision(self, call_id: str) -> ApprovalDecision | None:
        """The decision on the call ``call_id`` this turn continues from, or ``None``."""
        return next((d for d in self.decisions if d.call_id == call_id), None)


class Steering(Protocol):
    """Messages the user sent while the turn runs, for a
    :class:`~hermes_actors.agents.base.SteerableAgent` to take into it (busy policy ``steer``). Thread-safe."""

    def take(self) -> Sequence[str]:
        """The texts that arrived since the last call, oldest first (each once; empty when none did)."""
        ...


class TurnInput(msgspec.Struct, frozen=True, kw_only=True):
    """What a turn gives the agent: the session, its system prompt, history, the new user text and its tools.

    ``history`` is the transcript before ``user_text`` (a compression summary comes first as a system message);
    ``tools`` are the tools to offer the model, each run by :meth:`Tool.run`; ``events``, when not ``None``, is
    where the agent reports the turn as it happens.

    A session's turns pass the system message frozen when it started (:func:`system_message` of the configured
    prompt and the memories of that moment) as ``system_prompt``, no ``memories``, and the tools frozen with it:
    the same bytes on every call, so the model's prompt cache holds until the session ends or compresses.
    """

    session_id: str
    history: Sequence[MessageRecord]  # each content cut to runtime.model_message_cap_chars (``history``)
    user_text: str
    system_prompt: str | None = None
    memories: Sequence[str] = ()  # added to the system message by the agent (sessions fold them in at start)
    history_tokens: int = 0  # estimated tokens of ``history`` (four characters a token)
    tools: Sequence[Tool] = ()  # what the agent may call this turn (session_search, then the agent's MCP tools)
    # The files of this turn's messages (hermes_actors.media): ``user_text`` already holds their text stand-ins;
    # an agent that takes some natively (images, for a vision model) sends them with this turn only.
    attachments: Sequence[Attachment] = ()
    # Where the agent reports the turn as it happens (streamed text, tool calls), when a client watches it.
    events: TurnEvents | None = None
    # An API client's own tools, offered after ``tools`` for this turn only: the agent never runs them, a call of
    # one ends the turn (``AgentReply.client_calls``). The client sends them with each request, so they are not
    # frozen with the session; a client that sends the same list keeps the prompt's bytes the same.
    client_tools: Sequence[ClientTool] = ()
    # The results of the client tool calls the previous turn ended with: this turn continues from them instead of a
    # user message (``user_text`` is empty unless a user message came too). The runtime stores them as tool messages.
    tool_results: Sequence[ToolResult] = ()
    # Messages sent while this turn runs, for an agent that takes them (SteerableAgent); ``None`` otherwise.
    steering: Steering | None = None
    # Which tools wait for a person's approval, and the decisions this turn continues from (AgentReply.approval_calls).
    approvals: ApprovalGate = ApprovalGate()


class Memory(msgspec.Struct, frozen=True, kw_only=True):
    """Something the agent wants kept about a user for later sessions."""

    content: str


def system_message(prompt: str | None, memories: Sequence[str]) -> str | None:
    """The system message of ``prompt`` and the facts known about the user (``None`` when both are empty)."""
    parts = [prompt] if prompt else []
    facts = [fact.strip() for fact in memories if fact.strip()]
    if facts:
        parts.append("Known about the user:\n" + "\n".join(f"- {fact}" for fact in facts))
    return "\n\n".join(parts) or None
