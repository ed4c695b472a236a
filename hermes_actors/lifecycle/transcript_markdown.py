"""A conversation as Markdown: ``hermesctl sessions export --format md`` and ``/save``.

Messages are sections headed by role and time; their text is kept as written (it is usually Markdown already).
Tool calls, tool results and a compression summary are quoted blocks holding a fenced block, so they stand apart
from the conversation and no text inside them can end the fence early.
"""

from __future__ import annotations

import re

from hermes_actors.lifecycle.transcript_doc import (
    Entry,
    Link,
    attachment_label,
    document_title,
    entries,
    safe_href,
    segment_line,
    when,
)
from hermes_actors.operator_port import AttachmentView, TranscriptView

__all__ = ["render_markdown"]

_TICKS = re.compile(r"`+")
_LINK_TEXT = re.compile(r"([\\\[\]])")


def _fenced(text: str, language: str = "") -> list[str]:
    """``text`` in a fence longer than any run of backticks inside it."""
    longest = max((len(run) for run in _TICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + language, *text.splitlines(), fence]


def _quoted(lines: list[str]) -> list[str]:
    return [f"> {line}" if line else ">" for line in lines]


def _attachment_line(link: Link | None, attachment: AttachmentView) -> str:
    label = _LINK_TEXT.sub(r"\\\1", attachment_label(attachment))
    address = safe_href(link(attachment) if link is not None else None)
    if address is None and attachment.path is None:
        address = safe_href(attachment.source_url)
    if address is None:
        return f"- 📎 {label}"
    return f"- 📎 [{label}](<{address.replace('>', '%3E').replace(' ', '%20')}>)"


def _entry(entry: Entry, link: Link | None) -> list[str]:
    message = entry.message
    stamp = when(message.created_at)
    if entry.kind == "summary":
        body = _quoted(["**Summary of the earlier conversation** (compression)", "", *_fenced(message.content or "")])
        return [*body, ""]
    if entry.kind == "tool_result":
        title = f"**Tool result** `{message.tool_name or 'tool'}` · {stamp}"
        return [*_quoted([title, "", *_fenced(message.content or "")]), ""]
    lines = [f"### {message.role} · {stamp}", ""]
    if message.content:
        lines += [message.content, ""]
    for call in entry.calls:
        lines += [*_quoted([f"**Tool call** `{call.name}`", "", *_fenced(call.arguments, "json")]), ""]
    if entry.attachments:
        lines += [*(_attachment_line(link, a) for a in entry.attachments), ""]
    return lines


def render_markdown(view: TranscriptView, *, link: Link | None = None) -> str:
    """``view`` as one Markdown document, segments in order; ``link`` says where each attachment is."""
    title = document_title(view)
    lines = [f"# {title}", "", f"Conversation {view.session_id}, {len(view.segments)} part(s).", ""]
    for index, segment in enumerate(view.segments, 1):
        lines += [f"## {segment_line(index, segment)}", ""]
        if segment.carried:
            lines += [f"*{segment.carried} message(s) carried over from part {index - 1} are not repeated.*", ""]
        for entry in entries(segment):
            lines += _entry(entry, link)
    return "\n".join(lines).rstrip() + "\n"
