"""The resume recap: what a terminal shows when it picks a conversation up again.

The last 10 exchanges (an exchange starts at a user message), user text cut at 300 characters, assistant text at
3 lines or 200 characters, an assistant's tool calls folded as ``[N tool calls: a, b]``, tool results left out, a
``… N earlier messages …`` line for what precedes them, and the last reply in full so the user sees exactly where
the conversation stopped.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import msgspec

from hermes_actors.store.content import split_content
from hermes_actors.store.records import MessageRecord, Role

__all__ = ["recap_lines"]

EXCHANGES = 10
USER_CHARS = 300
ASSISTANT_CHARS = 200
ASSISTANT_LINES = 3


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _cut_lines(text: str, lines: int, limit: int) -> str:
    kept = text.splitlines()
    short = "\n".join(kept[:lines])
    cut = _cut(short, limit)
    return cut if len(kept) <= lines or cut.endswith("…") else cut + " …"


def _tool_names(record: MessageRecord) -> list[str]:
    try:
        calls = json.loads(record.tool_calls or "[]")
    except json.JSONDecodeError:
        return ["?"]
    names: list[str] = []
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        names.append(str(name) if name else "?")
    return names


def recap_lines(messages: Sequence[MessageRecord]) -> list[str]:
    """Render the recap of a transcript (oldest first) as lines for a terminal."""
    # An imported multimodal message stores its text then the original structured value: show the text only.
    shown = [
        msgspec.structs.replace(m, content=split_content(m.content)[0]) if m.content and "\x00json:" in m.content else m
        for m in messages
        if m.role in (Role.USER, Role.ASSISTANT)
    ]
    starts = [i for i, m in enumerate(shown) if m.role == Role.USER]
    first = starts[-EXCHANGES] if len(starts) > EXCHANGES else 0
    window = shown[first:]
    last_reply = next(
        (i for i in range(len(window) - 1, -1, -1) if window[i].role == Role.ASSISTANT and window[i].content), None
    )
    lines: list[str] = []
    if first:
        lines.append(f"… {first} earlier messages …")
    pending_tools: list[str] = []
    for index, message in enumerate(window):
        if message.role == Role.USER:
            lines.append(f"you: {_cut(message.content or '', USER_CHARS)}")
            continue
        if message.tool_calls:
            pending_tools.extend(_tool_names(message))
        if not message.content:
            continue
        if pending_tools:
            lines.append(f"  [{len(pending_tools)} tool calls: {', '.join(pending_tools)}]")
            pending_tools = []
        text = message.content if index == last_reply else _cut_lines(message.content, ASSISTANT_LINES, ASSISTANT_CHARS)
        lines.append(f"agent: {text}")
    if pending_tools:
        lines.append(f"  [{len(pending_tools)} tool calls: {', '.join(pending_tools)}]")
    return lines
