"""A streamed chat completion read off the wire: server-sent ``data:`` lines decoded with msgspec into the few
fields a turn uses, to the end of the body.

Reading to the end (past ``[DONE]``) lets the HTTP client put the connection back in its pool: the SDK's own stream
stops at ``[DONE]`` and drops it, so every streamed turn would open a new connection (a TLS handshake before each
first token against a remote model). Decoding only these fields costs a fraction of building the SDK's models for
every chunk, and a turn streams hundreds of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import msgspec

__all__ = ["StreamedAnswer", "read_stream"]


class _Function(msgspec.Struct, frozen=True):
    name: str | None = None
    arguments: str | None = None


class _CallPiece(msgspec.Struct, frozen=True):
    index: int = 0
    id: str | None = None
    type: str | None = None
    function: _Function | None = None


class _Delta(msgspec.Struct, frozen=True):
    content: str | None = None
    tool_calls: list[_CallPiece] | None = None


class _Choice(msgspec.Struct, frozen=True):
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Usage(msgspec.Struct, frozen=True):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _Error(msgspec.Struct, frozen=True):
    message: str | None = None


class _Chunk(msgspec.Struct, frozen=True):
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: _Error | None = None


_decode_chunk = msgspec.json.Decoder(_Chunk).decode


class StreamedAnswer(msgspec.Struct, kw_only=True):
    """What a stream carried: the text, the tool calls in a non-streamed message's shape, the usage, whether a
    finish reason came (a stream without one broke off) and the error a server sent mid-stream."""

    content: str | None = None
    calls: list[dict[str, Any]] = msgspec.field(default_factory=list)
    usage: tuple[int, int] | None = None
    finished: bool = False
    error: str | None = None
    pieces: int = 0


def read_stream(lines: Iterable[str], on_text: Callable[[str], None]) -> StreamedAnswer:
    """Read every line of a streamed completion; each piece of text goes to ``on_text`` as it arrives. A line that
    is not valid chunk JSON raises :class:`msgspec.DecodeError` (or ``ValidationError``)."""
    texts: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    answer = StreamedAnswer()
    for line in lines:
        if not line.startswith("data:"):
            continue  # comments, event names, blank separators
        data = line[5:].strip()
        if not data or data == "[DONE]":
            continue  # keep reading: the end of the body frees the connection
        chunk = _decode_chunk(data)
        if chunk.error is not None:
            answer.error = chunk.error.message or "the server sent an error in the stream"
            continue
        if chunk.usage is not None:
            answer.usage = (_count(chunk.usage.prompt_tokens), _count(chunk.usage.completion_tokens))
        for choice in chunk.choices or ():
            answer.finished = answer.finished or choice.finish_reason is not None
            delta = choice.delta
            if delta is None:
                continue
            if delta.content:
                texts.append(delta.content)
                on_text(delta.content)
            for piece in delta.tool_calls or ():
                _add_piece(calls.setdefault(piece.index, {}), piece)
    answer.content = "".join(texts) or None
    answer.pieces = len(texts)
    answer.calls = [calls[index] for index in sorted(calls)]
    return answer


def _add_piece(call: dict[str, Any], piece: _CallPiece) -> None:
    """Add one streamed piece of a tool call to what arrived of it so far."""
    if piece.id:
        call["id"] = piece.id
    call.setdefault("type", piece.type or "function")
    function = call.setdefault("function", {"name": "", "arguments": ""})
    if piece.function is not None:
        function["name"] += piece.function.name or ""
        function["arguments"] += piece.function.arguments or ""


def _count(value: int | None) -> int:
    return value if isinstance(value, int) and value >= 0 else 0
