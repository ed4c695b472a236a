"""A client's own tools on the wire, as the OpenAI contract shapes them: the ``tools`` of a chat-completions or
Responses request, and the tool calls an answer hands the client or a client sends back in its history.
(:mod:`platforms.api_server.client_tools` reads a request's tools into the turn.)
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

__all__ = [
    "ChatTool",
    "DeltaToolCall",
    "FunctionCall",
    "ResponsesTool",
    "ToolCall",
    "ToolName",
    "calls_of",
    "delta_calls",
    "dump_calls",
]

ToolName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
"""A function name as OpenAI takes it: 1 to 64 letters, digits, ``_`` and ``-``."""


class _FunctionSpec(msgspec.Struct, frozen=True, kw_only=True):
    name: ToolName
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ChatTool(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of a chat-completions request's ``tools``."""

    type: str
    function: _FunctionSpec | None = None


class ResponsesTool(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of a Responses request's ``tools`` (a function tool has its fields at the top level)."""

    type: str
    name: ToolName | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class FunctionCall(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    arguments: str = ""


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """A function tool call as chat completions carry it (an assistant message's, or an answer's)."""

    id: str
    type: str = "function"
    function: FunctionCall


class DeltaToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call in a streamed chunk's delta, whole in one chunk."""

    index: int
    id: str
    type: str = "function"
    function: FunctionCall


_calls = msgspec.json.Decoder(list[ToolCall])


def calls_of(tool_calls: str | None) -> list[ToolCall]:
    """The calls of a reply's ``tool_calls`` (JSON, OpenAI's shape); none for ``None``."""
    return _calls.decode(tool_calls) if tool_calls else []


def dump_calls(calls: list[ToolCall]) -> str:
    """Calls as the JSON array a stored assistant message carries."""
    return msgspec.json.encode(calls).decode()


def delta_calls(calls: list[ToolCall]) -> list[DeltaToolCall]:
    """The calls of a reply as one streamed delta."""
    return [DeltaToolCall(index=i, id=call.id, type=call.type, function=call.function) for i, call in enumerate(calls)]
