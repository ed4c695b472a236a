"""The wire format of ``/v1/responses`` (OpenAI's Responses API): the request decoded once at the edge, the input
items read into a turn, and the response object, output items and stream events that answer it.

Input items before the new turn are history the model sees as it would have seen them: messages, a client's
``function_call`` items (consecutive ones as one assistant message with those calls) and their
``function_call_output`` items as tool messages, and the gateway's own ``mcp_call`` items (which a client that sends
its whole conversation sends back) as a call with its result. The new turn is the last user message, or the
``function_call_output`` items the input ends with: the results of the calls the previous response ended with.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from hermes_actors.messages import ClientTool, ContextMessage, ToolResult
from platforms.api_server.client_tools import responses_tools
from platforms.api_server.tool_wire import ResponsesTool
from platforms.api_server.wire import ApiError, decode_body

__all__ = [
    "ConversationRef",
    "ErrorDetail",
    "FunctionCallItem",
    "FunctionCallOutputItem",
    "IncompleteDetails",
    "InputItem",
    "InputTurn",
    "McpApprovalRequestItem",
    "McpCallItem",
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
    "item_messages",
    "request_tools",
]


class _InputPart(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    text: str | None = None


class _InputItem(msgspec.Struct, frozen=True, kw_only=True):
    """Any input item: a message (``type`` may be left out), a ``function_call``, a ``function_call_output`` or an
    ``mcp_call`` (a run of the gateway's own tools, as a response listed it)."""

    type: str = "message"
    id: str | None = None
    role: str | None = None
    content: str | list[_InputPart] | None = None
    name: str | None = None
    call_id: str | None = None
    arguments: str | None = None
    output: str | list[_InputPart] | None = None
    approval_request_id: str | None = None  # an mcp_approval_response: the request it answers, approve, why
    approve: bool | None = None
    reason: str | None = None


InputItem = _InputItem


class ConversationRef(msgspec.Struct, frozen=True, kw_only=True):
    id: str


class ResponsesRequest(msgspec.Struct, frozen=True, kw_only=True):
    """The fields of a Responses request we use; the rest (temperature, ...) are ignored."""

    input: str | list[_InputItem]
    instructions: str | None = None
    previous_response_id: str | None = None
    conversation: str | ConversationRef | None = None
    store: bool = True
    stream: bool = False
    background: bool = False
    model: str | None = None
    tools: list[ResponsesTool] | None = None  # the client's own function tools (platforms.api_server.client_tools)
    tool_choice: str | dict[str, object] | None = None
    user: str | None = None  # the OpenAI user (platforms.api_server.principal)
    safety_identifier: str | None = None  # OpenAI's newer name for a stable user id, taken when user is absent
    hermes_busy: str | None = None  # the message's busy policy (platforms.api_server.busy)
    metadata: dict[str, object] | None = None  # only its hermes_busy is read


_decoder = msgspec.json.Decoder(ResponsesRequest)
_NAME = re.compile(r"[\x20-\x7e]{1,256}")


def decode_responses(body: bytes) -> ResponsesRequest:
    """Decode a Responses body; a malformed one becomes a 400 naming the field path or the problem."""
    return decode_body(_decoder, body)


def request_tools(request: ResponsesRequest) -> tuple[ClientTool, ...]:
    """The client's own tools the request offers the model."""
    return responses_tools(request.tools, request.tool_choice)


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
    """The new turn of a request: the last user message's text (or the client's tool results), the items before it
    as history, and the text of the system (or developer) messages among them."""

    text: str
    history: tuple[ContextMessage, ...] = ()
    system: str | None = None
    tool_results: tuple[ToolResult, ...] = ()


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


def _call(item: _InputItem) -> dict[str, Any]:
    function = {"name": item.name or "?", "arguments": item.arguments or "{}"}
    return {"id": item.call_id or item.id or "?", "type": "function", "function": function}


class _History:
    """The history the input items before the new turn make, with a client's consecutive calls as one message."""

    def __init__(self, *, keep_system: bool = False) -> None:
        self.messages: list[ContextMessage] = []
        self.systems: list[str] = []
        self._calls: list[dict[str, Any]] = []
        self._keep_system = keep_system  # system and developer messages among the messages, as ``system`` ones

    def flush(self) -> None:
        if self._calls:
            self.messages.append(ContextMessage(role="assistant", content="", tool_calls=json.dumps(self._calls)))
            self._calls = []

    def add(self, item: _InputItem, where: str) -> None:
        if item.type == "function_call":
            self._calls.append(_call(item))
            return
        self.flush()
        if item.type == "message" and item.role in ("system", "developer") and self._keep_system:
            self.messages.append(ContextMessage(role="system", content=_text(item.content, f"{where}.content")))
        elif item.type == "message" and item.role in ("system", "developer"):
            self.systems.append(_text(item.content, f"{where}.content"))
        elif item.type == "message" and item.role in ("user", "assistant"):
            self.messages.append(ContextMessage(role=item.role, content=_text(item.content, f"{where}.content")))
        elif item.type == "message":
            raise ApiError(
                400,
                f"{where}.role {item.role!r} is not supported; use user, assistant, system or developer",
                code="invalid_value",
                param=f"{where}.role",
            )
        elif item.type == "function_call_output":
            output = _text(item.output, f"{where}.output")
            self.messages.append(ContextMessage(role="tool", content=output, tool_call_id=item.call_id or "?"))
        elif item.type == "mcp_call":  # the gateway's own run: the call and its result
            call = _call(msgspec.structs.replace(item, call_id=item.id))
            self.messages.append(ContextMessage(role="assistant", content="", tool_calls=json.dumps([call])))
            output = _text(item.output, f"{where}.output")
            self.messages.append(ContextMessage(role="tool", content=output, tool_call_id=call["id"]))
        else:
            raise ApiError(
                400,
                f"{where}.type {item.type!r} is not supported; send message, function_call, function_call_output "
                "or mcp_call items",
                code="invalid_value",
                param=f"{where}.type",
            )


def item_messages(items: list[_InputItem], where: str) -> list[ContextMessage]:
    """Input items as the messages a conversation stores (``where[i]`` names a bad one in a 400): system and
    developer messages as ``system`` ones, a client's consecutive calls as one assistant message."""
    history = _History(keep_system=True)
    for index, item in enumerate(items):
        history.add(item, f"{where}[{index}]")
    history.flush()
    return history.messages


def input_turn(given: str | list[_InputItem]) -> InputTurn:
    """Read the request's ``input``: it ends with the new turn, a user message or the ``function_call_output``
    items of the client's tool results; a 400 names the item that cannot be read."""
    if isinstance(given, str):
        if not given.strip():
            raise ApiError(400, "input is empty; send the user's message", param="input")
        return InputTurn(text=given)
    if not given:
        raise ApiError(400, "input holds no item; send at least one user message", param="input")
    start = len(given)
    while start > 0 and given[start - 1].type == "function_call_output":
        start -= 1
    results = tuple(_result_of(given[index], index) for index in range(start, len(given)))
    end = start if results else len(given) - 1
    history = _History()
    for index, item in enumerate(given[:end]):
        history.add(item, f"input[{index}]")
    history.flush()
    system = "\n".join(s for s in history.systems if s) or None
    if results:
        return InputTurn(text="", history=tuple(history.messages), system=system, tool_results=results)
    last, where = given[-1], f"input[{len(given) - 1}]"
    if last.type == "mcp_approval_response":  # the answer to a request for approval: /approve or /deny
        number = (last.approval_request_id or "").removeprefix("mcpr_").partition("_")[0]
        if not number.isdigit() or last.approve is None:
            raise ApiError(400, f"{where} needs approve and an approval_request_id mcpr_<n>", param=where)
        said = f"{'/approve' if last.approve else '/deny'} {number} {(last.reason or '').strip()}"
        return InputTurn(text=said.strip(), system=system)
    if last.type != "message" or last.role != "user":
        raise ApiError(
            400,
            f"{where} must be a user message or a function_call_output: the input ends with the new turn",
            param=where,
        )
    text = _text(last.content, f"{where}.content")
    if not text.strip():
        raise ApiError(400, f"{where} has no text; send some", param=f"{where}.content")
    return InputTurn(text=text, history=tuple(history.messages), system=system)


def _result_of(item: _InputItem, index: int) -> ToolResult:
    """The client's tool result a ``function_call_output`` item carries."""
    if not item.call_id:
        raise ApiError(400, f"input[{index}] needs the call_id of the call it answers", param=f"input[{index}].call_id")
    return ToolResult(call_id=item.call_id, output=_text(item.output, f"input[{index}].output"))


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


class McpCallItem(msgspec.Struct, frozen=True, kw_only=True):
    """A run of one of the gateway's own tools (``session_search``, an MCP server's), as OpenAI lists a hosted MCP
    tool's: a client reads it as done, never as a call to run itself."""

    type: str = "mcp_call"
    id: str
    server_label: str
    name: str
    arguments: str
    output: str | None = None
    status: str = "completed"  # in_progress while it runs


class McpApprovalRequestItem(msgspec.Struct, frozen=True, kw_only=True):
    """A call of the gateway's own tools waiting for approval: answer it with an ``mcp_approval_response``."""

    type: str = "mcp_approval_request"
    id: str  # mcpr_<approval id>_<call>
    server_label: str
    name: str
    arguments: str

    @property
    def status(self) -> str:  # not on the wire (OpenAI's item has none): whole once listed
        return "completed"


OutputItem = MessageItem | FunctionCallItem | FunctionCallOutputItem | McpCallItem | McpApprovalRequestItem


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
    status: str  # queued (background), in_progress, completed, failed, incomplete, cancelled (background)
    model: str
    output: list[OutputItem]
    usage: ResponseUsage | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    conversation: ConversationRef | None = None
    error: ErrorDetail | None = None
    incomplete_details: IncompleteDetails | None = None
    store: bool = True
    background: bool = False
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
