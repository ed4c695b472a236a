"""What a turn gives an agent and what the agent gives back: the data of the :class:`~hermes_actors.agents.base.Agent`
calls, and the one error every agent raises."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from hermes_actors.agents.tools import Tool
from hermes_actors.messages import Attachment
from hermes_actors.store.records import MessageRecord, Role

__all__ = ["AgentError", "AgentMessage", "AgentReply", "Memory", "TurnInput"]


class AgentError(Exception):
    """The agent could not produce a reply (the endpoint failed, timed out or answered nonsense)."""


class AgentMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One message the agent produced: assistant text and/or tool calls, or a tool result."""

    role: Role
    content: str | None = None
    tool_calls: str | None = None  # JSON array, OpenAI shape
    tool_name: str | None = None
    tool_call_id: str | None = None


class AgentReply(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of a turn: the messages to store (in order), the text to send, token counts."""

    messages: tuple[AgentMessage, ...]
    text: str
    input_tokens: int = 0
    output_tokens: int = 0


class TurnInput(msgspec.Struct, frozen=True, kw_only=True):
    """What a turn gives the agent: the session, its system prompt, history, the new user text and its tools."""

    session_id: str
    history: Sequence[MessageRecord]  # each content cut to runtime.model_message_cap_chars (``history``)
    user_text: str
    system_prompt: str | None = None
    memories: Sequence[str] = ()
    history_tokens: int = 0  # estimated tokens of ``history`` (four characters a token)
    tools: Sequence[Tool] = ()  # what the agent may call this turn (sessions offer session_search)
    # The files of this turn's messages (hermes_actors.media): ``user_text`` already holds their text stand-ins;
    # an agent that takes some natively (images, for a vision model) sends them with this turn only.
    attachments: Sequence[Attachment] = ()


class Memory(msgspec.Struct, frozen=True, kw_only=True):
    """Something the agent wants kept about a user for later sessions."""

    content: str
