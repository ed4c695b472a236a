"""A transcript as chat-completions messages, and the tool calls in a model's answer.

Stored messages become request messages (calls without a stored result and results without a call are left out:
the API rejects them); a client's tool results continue the transcript as the tool messages of their calls; a
turn's images go into its user message for a vision model; the offered tools are the turn's, then the client's; the
model's tool calls are dumped to their JSON shape and run against the turn's tools, each giving a result the model
can read.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import Any, cast

import openai
from openai.types.chat import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionContentPartParam,
    ChatCompletionMessageParam,
    ChatCompletionMessageToolCallUnionParam,
    ChatCompletionUserMessageParam,
)

from hermes_actors.agents.tools import Tool, error_json, find_tool
from hermes_actors.agents.turn import AgentError
from hermes_actors.agents.turn import system_message as system_text
from hermes_actors.messages import Attachment, AttachmentKind, ClientTool, ToolResult
from hermes_actors.store.records import MessageRecord, Role

__all__ = [
    "called_tools_text",
    "continued_messages",
    "dump_tool_calls",
    "history_messages",
    "offered_specs",
    "run_tool_call",
    "system_text",
    "user_message",
]

_log = logging.getLogger(__name__)


def history_messages(
    history: Iterable[MessageRecord], *, answered_after: Collection[str] = ()
) -> list[ChatCompletionMessageParam]:
    """Convert stored messages to chat-completions messages, oldest first.

    Messages with neither content nor tool calls are skipped, and so are tool calls without a stored result (or one
    in ``answered_after``: results that follow the history) and results without a preceding call, which the API
    would reject.
    """
    records = list(history)
    answered = {r.tool_call_id for r in records if r.role == Role.TOOL and r.tool_call_id} | set(answered_after)
    called: set[str] = set()
    out: list[ChatCompletionMessageParam] = []
    for record in records:
        if record.role == Role.USER:
            if record.content:
                out.append({"role": "user", "content": record.content})
        elif record.role == Role.SYSTEM:
            if record.content:
                out.append({"role": "system", "content": record.content})
        elif record.role == Role.ASSISTANT:
            calls = _parse_tool_calls(record)
            kept = [call for call in calls if call.get("id") in answered]
            content = record.content or (called_tools_text(calls) if calls and not kept else None)
            if content is None and not kept:
                continue
            message: ChatCompletionAssistantMessageParam = {"role": "assistant", "content": content}
            if kept:
                message["tool_calls"] = cast(list[ChatCompletionMessageToolCallUnionParam], kept)
                called.update(str(call["id"]) for call in kept)
            out.append(message)
        elif record.role == Role.TOOL:
            if record.tool_call_id in called:
                out.append({"role": "tool", "content": record.content or "", "tool_call_id": record.tool_call_id})
            else:
                _log.debug("message %d: tool result without a matching call left out of the request", record.id)
        else:
            _log.warning("message %d has unknown role %r; left out of the request", record.id, record.role)
    return out


def continued_messages(
    history: Iterable[MessageRecord], results: Sequence[ToolResult]
) -> list[ChatCompletionMessageParam]:
    """:func:`history_messages`, then a client's tool ``results``: each as the tool message of its call, or as user
    text naming the call when the history holds no such call (the API would reject a tool message)."""
    out = history_messages(history, answered_after={result.call_id for result in results})
    called = {
        str(call.get("id"))
        for message in out
        if message["role"] == "assistant"
        for call in cast(list[dict[str, Any]], message.get("tool_calls") or [])
    }
    for result in results:
        if result.call_id in called:
            out.append({"role": "tool", "content": result.output, "tool_call_id": result.call_id})
        else:
            out.append({"role": "user", "content": f"[tool result of call {result.call_id}: {result.output}]"})
    return out


def offered_specs(tools: Sequence[Tool], client_tools: Sequence[ClientTool]) -> list[dict[str, Any]]:
    """The chat-completions ``tools`` of a turn: its own (frozen with the session), then the client's, as sent.
    Raises :class:`AgentError` when a client tool has the name of one of the turn's own."""
    own = {tool.name for tool in tools}
    clash = sorted(own.intersection(tool.name for tool in client_tools))
    if clash:
        raise AgentError(
            f"the request's tool {clash[0]!r} has the name of one of this gateway's own tools "
            f"({', '.join(sorted(own))}); rename the client's tool"
        )
    specs = [tool.openai_spec() for tool in tools]
    for tool in client_tools:
        function: dict[str, Any] = {"name": tool.name, "parameters": tool.parameters or {"type": "object"}}
        if tool.description:
            function["description"] = tool.description
        specs.append({"type": "function", "function": function})
    return specs


def user_message(text: str, attachments: Sequence[Attachment]) -> ChatCompletionUserMessageParam:
    """The turn's user message: its text, and each image attachment as an ``image_url`` part after it."""
    parts: list[ChatCompletionContentPartParam] = []
    for attachment in attachments:
        url = _image_url(attachment) if attachment.kind == AttachmentKind.IMAGE else None
        if url is not None:
            parts.append({"type": "image_url", "image_url": {"url": url}})
    if not parts:
        return {"role": "user", "content": text}
    return {"role": "user", "content": [{"type": "text", "text": text}, *parts]}


def _image_url(attachment: Attachment) -> str | None:
    """A saved image as a base64 data URL, else its http(s) source URL; ``None`` (logged) if neither works."""
    if attachment.path is not None:
        try:
            data = Path(attachment.path).read_bytes()
        except OSError as exc:
            _log.warning("image %s cannot be read (%s); the model gets its text stand-in only", attachment.path, exc)
            return None
        mime = attachment.mime_type or "image/png"
        return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
    if attachment.source_url is not None and attachment.source_url.startswith(("http://", "https://")):
        return attachment.source_url
    return None


def _parse_tool_calls(record: MessageRecord) -> list[dict[str, Any]]:
    if not record.tool_calls:
        return []
    try:
        value: object = json.loads(record.tool_calls)
    except ValueError:
        value = None
    if not isinstance(value, list) or not all(isinstance(call, dict) for call in value):
        _log.warning("message %d: tool_calls is not a JSON array of objects; calls left out", record.id)
        return []
    return cast(list[dict[str, Any]], value)


def dump_tool_calls(calls: Iterable[object] | None) -> list[dict[str, Any]]:
    dumped: list[dict[str, Any]] = []
    for call in calls or ():
        if isinstance(call, openai.BaseModel):
            dumped.append(call.model_dump(mode="json", exclude_none=True))
        elif isinstance(call, dict):
            dumped.append(cast(dict[str, Any], call))
    return dumped


def run_tool_call(tools: Sequence[Tool], call: dict[str, Any]) -> tuple[str, str, str]:
    """Run one tool call of the model; return (tool name, call id, result text)."""
    call_id = str(call.get("id") or "")
    spec: object = call.get("function") or call.get("custom")
    name = str(spec.get("name") or "?") if isinstance(spec, dict) else "?"
    tool = find_tool(tools, name) if call.get("type", "function") == "function" else None
    if tool is None:
        available = ", ".join(t.name for t in tools)
        return name, call_id, error_json(f"there is no function tool named {name!r}; the tools are: {available}")
    raw: object = spec.get("arguments") if isinstance(spec, dict) else None
    try:
        arguments: object = json.loads(raw) if isinstance(raw, str) and raw.strip() else {}
    except ValueError as exc:
        return name, call_id, error_json(f"the arguments of {name} are not JSON ({exc}); send a JSON object")
    if not isinstance(arguments, dict):
        return name, call_id, error_json(f"the arguments of {name} must be a JSON object, not {raw!r:.100}")
    return name, call_id, tool.run(cast(dict[str, Any], arguments))


def called_tools_text(calls: Sequence[dict[str, Any]]) -> str:
    names = []
    for call in calls:
        spec: object = call.get("function") or call.get("custom")
        name = spec.get("name") if isinstance(spec, dict) else None
        names.append(str(name or "?"))
    return f"[called tools: {', '.join(names)}]"
