"""The OpenAI wire format of the API: request bodies decoded once at the edge, the completions and chunks that
answer them, and errors in OpenAI's shape.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TypeVar

import msgspec
from aiohttp import web

from hermes_actors.messages import TokenUsage
from platforms.api_server.tool_wire import ChatTool, DeltaToolCall, ToolCall
from platforms.support import json_guard

__all__ = [
    "HTTP_ERRORS",
    "IGNORED_PARAMETERS",
    "PLATFORM",
    "ApiError",
    "ChatMessage",
    "ChatRequest",
    "Delta",
    "Model",
    "ModelList",
    "ToolProgress",
    "Turn",
    "Usage",
    "content_text",
    "decode_body",
    "decode_chat",
    "json_response",
    "new_turn",
    "sse_event",
    "usage_of",
]

PLATFORM = "api_server"
T = TypeVar("T")


class _ImageUrl(msgspec.Struct, frozen=True, kw_only=True):
    url: str
    detail: str | None = None


class _ContentPart(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    text: str | None = None
    image_url: _ImageUrl | None = None


class ChatMessage(msgspec.Struct, frozen=True, kw_only=True):
    role: str
    content: str | list[_ContentPart] | None = None
    tool_calls: list[ToolCall] | None = None  # an assistant message's calls of the client's tools
    tool_call_id: str | None = None  # a tool message: the call it answers


class _StreamOptions(msgspec.Struct, frozen=True, kw_only=True):
    include_usage: bool = False


class ChatRequest(msgspec.Struct, frozen=True, kw_only=True):
    """The fields of a chat-completions request we use; the rest (temperature, ...) are ignored."""

    messages: list[ChatMessage]
    model: str | None = None
    stream: bool = False
    stream_options: _StreamOptions | None = None
    user: str | None = None
    n: int | None = None
    tools: list[ChatTool] | None = None  # the client's own function tools (platforms.api_server.client_tools)
    tool_choice: str | dict[str, object] | None = None
    hermes_busy: str | None = None  # the message's busy policy (platforms.api_server.busy)
    metadata: dict[str, object] | None = None  # only its hermes_busy is read


IGNORED_PARAMETERS = (
    "audio",
    "frequency_penalty",
    "function_call",
    "functions",
    "logit_bias",
    "logprobs",
    "max_completion_tokens",
    "max_tokens",
    "metadata",
    "modalities",
    "parallel_tool_calls",
    "prediction",
    "presence_penalty",
    "prompt_cache_key",
    "reasoning_effort",
    "response_format",
    "safety_identifier",
    "seed",
    "service_tier",
    "stop",
    "store",
    "temperature",
    "top_logprobs",
    "top_p",
    "verbosity",
    "web_search_options",
)
"""OpenAI's chat-completions parameters a request may send and the server accepts without using them: the agent's
own model settings decide sampling, length and format (LibreChat users need no ``dropParams``). Any other unknown
field is ignored as well; these are the ones published in ``/v1/capabilities``."""

_request_decoder = msgspec.json.Decoder(ChatRequest)
_FIELD_PATH = re.compile(r" - at `\$\.?(?P<path>.*)`$")


class _Usage(msgspec.Struct, frozen=True, kw_only=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


Usage = _Usage  # OpenAI's usage object, as runs report it too


class _Message(msgspec.Struct, frozen=True, kw_only=True):
    role: str
    content: str | None
    tool_calls: list[ToolCall] | msgspec.UnsetType = msgspec.UNSET


class _Choice(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    message: _Message
    finish_reason: str


class _Completion(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: str
    created: int
    model: str
    choices: list[_Choice]
    usage: _Usage


class Delta(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    role: str | None = None
    content: str | None = None
    tool_calls: list[DeltaToolCall] | None = None


class _ChunkChoice(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    delta: Delta
    finish_reason: str | None = None


class _Chunk(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    id: str
    object: str
    created: int
    model: str
    choices: list[_ChunkChoice]
    usage: _Usage | None = None


class Model(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: str
    created: int
    owned_by: str


class ModelList(msgspec.Struct, frozen=True, kw_only=True):
    object: str
    data: list[Model]


class _ErrorDetail(msgspec.Struct, frozen=True, kw_only=True):
    message: str
    type: str
    param: str | None
    code: str | None


class _ErrorBody(msgspec.Struct, frozen=True, kw_only=True):
    error: _ErrorDetail


class ApiError(Exception):
    """A request ends with an OpenAI-shaped error."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = _ErrorBody(error=_ErrorDetail(message=message, type=type, param=param, code=code))
        self.headers = dict(headers or {})

    def response(self) -> web.Response:
        return json_response(self.body, status=self.status, headers=self.headers)


class Turn(msgspec.Struct, frozen=True, kw_only=True):
    """One request's turn, and the OpenAI objects that answer it."""

    completion_id: str
    created: int
    model: str
    prompt: str
    routing_key: str
    deadline: float  # event-loop time

    def completion(
        self, text: str, usage: TokenUsage | None, finish_reason: str = "stop", calls: list[ToolCall] | None = None
    ) -> _Completion:
        """The non-streamed answer; ``usage`` is the model's (estimated from the text when there is none). With
        ``calls`` (of the client's tools) it ends with ``tool_calls``, and empty text is ``null`` content."""
        message = _Message(role="assistant", content=text or None, tool_calls=calls) if calls else None
        message = message or _Message(role="assistant", content=text)
        choice = _Choice(index=0, message=message, finish_reason="tool_calls" if calls else finish_reason)
        return _Completion(
            id=self.completion_id,
            object="chat.completion",
            created=self.created,
            model=self.model,
            choices=[choice],
            usage=usage_of(self.prompt, text, usage),
        )

    def chunk(self, delta: Delta | None, finish_reason: str | None = None, usage: _Usage | None = None) -> bytes:
        """One SSE event; ``delta=None`` makes the choice-less chunk that carries ``usage``."""
        choices = [] if delta is None else [_ChunkChoice(index=0, delta=delta, finish_reason=finish_reason)]
        chunk = _Chunk(
            id=self.completion_id,
            object="chat.completion.chunk",
            created=self.created,
            model=self.model,
            choices=choices,
            usage=usage,
        )
        return sse_event(chunk)


HTTP_ERRORS = {
    404: (
        "unknown_url",
        "no such endpoint; the API serves POST /v1/chat/completions, /v1/responses and /v1/runs, GET /v1/models, "
        "GET /v1/capabilities and GET /health",
    ),
    405: (
        "method_not_allowed",
        "method not allowed here; chat completions, runs and a run's stop take POST, models, health and a run's "
        "status and events take GET",
    ),
}


def json_response(payload: object, *, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(
        body=msgspec.json.encode(payload), status=status, headers=headers, content_type="application/json"
    )


def sse_event(payload: object) -> bytes:
    return b"data: " + msgspec.json.encode(payload) + b"\n\n"


def _estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def usage_of(prompt: str, reply: str, usage: TokenUsage | None = None) -> _Usage:
    """OpenAI's ``usage`` of a turn: the model's own counts, or four characters a token of what was sent and
    answered when the turn has none (an agent without a model, a reply read back from the store)."""
    if usage is not None:
        prompt_tokens, completion_tokens = usage.input_tokens, usage.output_tokens
    else:
        prompt_tokens, completion_tokens = _estimate_tokens(prompt), _estimate_tokens(reply)
    return _Usage(
        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, total_tokens=prompt_tokens + completion_tokens
    )


class ToolProgress(msgspec.Struct, frozen=True, kw_only=True):
    """The data of an ``event: hermes.tool.progress`` SSE event (the reference's shape)."""

    tool: str
    toolCallId: str
    status: str

    def event(self) -> bytes:
        return b"event: hermes.tool.progress\ndata: " + msgspec.json.encode(self) + b"\n\n"


def decode_chat(body: bytes) -> ChatRequest:
    """Decode a chat-completions body; a malformed one becomes a 400 naming the field path or the problem."""
    return decode_body(_request_decoder, body)


def decode_body(decoder: msgspec.json.Decoder[T], body: bytes) -> T:
    """Decode a request body with ``decoder``; a malformed one becomes a 400 naming the field path or the
    problem."""
    try:
        return json_guard.decode(decoder, body)
    except msgspec.ValidationError as exc:
        match = _FIELD_PATH.search(str(exc))
        raise ApiError(
            400, f"invalid request body: {exc}", code="invalid_value", param=match["path"] if match else None
        ) from None
    except json_guard.NestingError as exc:
        raise ApiError(400, f"request body is {exc}; send a flatter JSON object", code="invalid_json") from None
    except msgspec.DecodeError as exc:
        raise ApiError(
            400, f"request body is not valid JSON ({exc}); send a JSON object", code="invalid_json"
        ) from None


def content_text(content: str | list[_ContentPart] | None) -> str:
    """The text of a message's content (its text parts joined with newlines)."""
    if isinstance(content, list):
        return "\n".join(part.text or "" for part in content if part.type == "text")
    return content or ""


def new_turn(messages: Sequence[ChatMessage]) -> tuple[str, list[str], int]:
    """Return the text, image URLs and index of the newest user message: the request's new turn."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role != "user":
            continue
        content = message.content
        images: list[str] = []
        if isinstance(content, list):
            for part_index, part in enumerate(content):
                images.extend(_image_of(part, f"messages[{index}].content[{part_index}]"))
        text = content_text(content)
        if not text.strip() and not images:
            raise ApiError(
                400, "the newest user message has no text or image; send some", param=f"messages[{index}].content"
            )
        return text, images, index
    raise ApiError(400, "messages holds no message with role 'user'; add one", param="messages")


def _image_of(part: _ContentPart, where: str) -> list[str]:
    """The image URL of a content part (none for a text part); a 400 for any other kind of part."""
    if part.type == "text":
        return []
    if part.type != "image_url":
        raise ApiError(
            400,
            f"content part type {part.type!r} is not supported; only 'text' and 'image_url' parts are: send other "
            "files as a link in the text",
            code="unsupported_content",
            param=f"{where}.type",
        )
    if part.image_url is None or not part.image_url.url.strip():
        raise ApiError(400, "an image_url part needs image_url.url", param=f"{where}.image_url")
    return [part.image_url.url.strip()]
