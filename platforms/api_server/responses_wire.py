"""The wire format of ``/v1/responses`` (OpenAI's Responses API): the request decoded once at the edge, the input
items read into a turn, and the response object, output items and stream events that answer it.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from hermes_actors.messages import ContextMessage
from platforms.api_server.wire import ApiError, decode_body

__all__ = [
    "ConversationRef",
    "ErrorDetail",
    "FunctionCallItem",
    "FunctionCallOutputItem",
    "IncompleteDetails",
    "InputTurn",
    "MessageItem",
    "OutputItem",
    "OutputText",
    "ResponseObject",
    "ResponseUsage",
    "ResponsesRequest",
    "StreamEvent",
    "conversation_of",
    "decode_responses",
    "input_turn",
]


class _InputPart(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    text: str | None = None


class _InputItem(msgspec.Struct, frozen=True, kw_only=True):
    """Any input item: a message (``type`` may be left out), a ``function_call`` or a ``function_call_output``."""

    type: str = "message"
    role: str | None = None
    content: str | list[_InputPart] | None = None
    name: str | None = None
    call_id: str | None = None
    arguments: str | None = None
    output: str | list[_InputPart] | None = None


class ConversationRef(msgspec.Struct, frozen=True, kw_only=True):
    id: str


class ResponsesRequest(msgspec.Struct, frozen=True, kw_only=True):
    """The fields of a Responses request we use; the rest (temperature, tools, ...) are ignored."""

    input: str | list[_InputItem]
    instructions: str | None = None
    previous_response_id: str | None = None
    conversation: str | ConversationRef | None = None
    store: bool = True
    stream: bool = False
    model: str | None = None


_decoder = msgspec.json.Decoder(ResponsesRequest)
_NAME = re.compile(r"[\x20-\x7e]{1,256}")


def decode_responses(body: bytes) -> ResponsesRequest:
    """Decode a Responses body; a malformed one becomes a 400 naming the field path or the problem."""
    return decode_body(_decoder, body)


def conversation_of(request: ResponsesRequest) -> str | None:
    """The conversation name the request follows (a string, or ``{"id": ...}``); a 400 for one that cannot be a
    name or that comes with ``previous_response_id``."""
    given = request.conversation
    name = given.id if isinstance(given, ConversationRef) else given
    if name is None:
        return None
    if not _NAME.fullmatch(name):
        raise ApiError(
            400, "conversation must be 1 to 256 printable ASCII characters", code="invalid_value", param="conversation"
        )
    if request.previous_response_id is not None:
        raise ApiError(
            400,
            "conversation and previous_response_id cannot be used together: a conversation continues from its "
            "newest response by itself; send one of them",
            code="invalid_value",
            param="conversation",
        )
    return name


class InputTurn(msgspec.Struct, frozen=True, kw_only=True):
    """The new turn of a request: the last user message's text, the items before it as history, and the text of
    the system (or developer) messages among them."""

    text: str
    history: tuple[ContextMessage, ...] = ()
    system: str | None = None


def _text(content: str | list[_InputPart] | None, where: str) -> str:
    if not isinstance(content, list):
        return content or ""
    texts = []
    for index, part in enumerate(content):
        if part.type not in ("input_text", "output_text", "text"):
            raise ApiError(
                400,
                f"content part type {part.type!r} is not supported; send input_text or output_text parts (other "
                "files as a link in the text)",
                code="unsupported_content",
                param=f"{where}[{index}].type",
            )
        texts.append(part.text or "")
    return "\n".join(texts)


def input_turn(given: str | list[_InputItem]) -> InputTurn:
    """Read the request's ``input``: the last item must be a user message (the new turn); a 400 names the item
    that cannot be read. Tool calls and their outputs before it become history text."""
    if isinstance(given, str):
        if not given.strip():
            raise ApiError(400, "input is empty; send the user's message", param="input")
        return InputTurn(text=given)
    if not given:
        raise ApiError(400, "input holds no item; send at least one user message", param="input")
    history: list[ContextMessage] = []
    systems: list[str] = []
    for index, item in enumerate(given[:-1]):
        where = f"input[{index}]"
        if item.type == "message" and item.role in ("system", "developer"):
            systems.append(_text(item.content, f"{where}.content"))
        elif item.type == "message" and item.role in ("user", "assistant"):
            history.append(ContextMessage(role=item.role, content=_text(item.content, f"{where}.content")))
        elif item.type == "message":
            raise ApiError(
                400,
                f"{where}.role {item.role!r} is not supported; use user, assistant, system or developer",
                code="invalid_value",
                param=f"{where}.role",
            )
        elif item.type == "function_call":
            called = f"[called tool {item.name or '?'} with {item.arguments or '{}'} (call {item.call_id or '?'})]"
            history.append(ContextMessage(role="assistant", content=called))
        elif item.type == "function_call_output":
            output = _text(item.output, f"{where}.output")
            history.append(
                ContextMessage(role="user", content=f"[tool result of call {item.call_id or '?'}: {output}]")
            )
        else:
            raise ApiError(
                400,
                f"{where}.type {item.type!r} is not supported; send message, function_call or function_call_output",
                code="invalid_value",
                param=f"{where}.type",
            )
    last, where = given[-1], f"input[{len(given) - 1}]"
    if last.type != "message" or last.role != "user":
        raise ApiError(400, f"{where} must be a user message: the input ends with the new turn", param=where)
    text = _text(last.content, f"{where}.content")
    if not text.strip():
        raise ApiError(400, f"{where} has no text; send some", param=f"{where}.content")
    return InputTurn(text=text, history=tuple(history), system="\n".join(s for s in systems if s) or None)


# -- the answer ---------------------------------------------------------------------------------------------------


class OutputText(msgspec.Struct, frozen=True, kw_only=True):
    type: str = "output_text"
    text: str
    annotations: list[object] = []


class MessageItem(msgspec.Struct, frozen=True, kw_only=True):
    type: str = "message"
    id: str
    status: str  # in_progress, completed, incomplete
    role: str = "assistant"
    content: list[OutputText]


class FunctionCallItem(msgspec.Struct, frozen=True, kw_only=True):
    type: str = "function_call"
    id: str
    call_id: str
    name: str
    arguments: str
    status: str = "completed"


class FunctionCallOutputItem(msgspec.Struct, frozen=True, kw_only=True):
    type: str = "function_call_output"
    id: str
    call_id: str
    output: str
    status: str = "completed"


OutputItem = MessageItem | FunctionCallItem | FunctionCallOutputItem


class _Cached(msgspec.Struct, frozen=True):
    cached_tokens: int = 0


class _Reasoning(msgspec.Struct, frozen=True):
    reasoning_tokens: int = 0


class ResponseUsage(msgspec.Struct, frozen=True, kw_only=True):
    input_tokens: int
    output_tokens: int
    total_tokens: int
    input_tokens_details: _Cached = _Cached()
    output_tokens_details: _Reasoning = _Reasoning()


class ErrorDetail(msgspec.Struct, frozen=True, kw_only=True):
    code: str
    message: str


class IncompleteDetails(msgspec.Struct, frozen=True, kw_only=True):
    reason: str  # client_disconnected, timeout, server_stopping


class ResponseObject(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: str = "response"
    created_at: int
    status: str  # in_progress, completed, failed, incomplete
    model: str
    output: list[OutputItem]
    usage: ResponseUsage | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    conversation: ConversationRef | None = None
    error: ErrorDetail | None = None
    incomplete_details: IncompleteDetails | None = None
    store: bool = True
    metadata: dict[str, str] = {}
    parallel_tool_calls: bool = True
    tool_choice: str = "auto"
    tools: list[Any] = []
    temperature: float | None = None
    top_p: float | None = None


class StreamEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One server-sent event of a streamed response; the fields an event type does not have are left out."""

    type: str
    sequence_number: int
    response: ResponseObject | msgspec.UnsetType = msgspec.UNSET
    output_index: int | msgspec.UnsetType = msgspec.UNSET
    item: OutputItem | msgspec.UnsetType = msgspec.UNSET
    item_id: str | msgspec.UnsetType = msgspec.UNSET
    content_index: int | msgspec.UnsetType = msgspec.UNSET
    part: OutputText | msgspec.UnsetType = msgspec.UNSET
    delta: str | msgspec.UnsetType = msgspec.UNSET
    text: str | msgspec.UnsetType = msgspec.UNSET
    logprobs: list[object] | msgspec.UnsetType = msgspec.UNSET

    def sse(self) -> bytes:
        return b"event: " + self.type.encode() + b"\ndata: " + msgspec.json.encode(self) + b"\n\n"
