"""A conversation (a compression lineage) as a document to read: what its Markdown and HTML renderings share.

Both render a :class:`~hermes_actors.operator_port.TranscriptView` (the runtime's read of a lineage, the one the
console shows): segments root first, each a session; a compression child's summary is shown once, folded, and the
messages it carried over from its parent are left out (they were shown in the parent). Tool calls and tool results
are folded; attachments are listed under their message, linked where ``link`` gives an address.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from typing import Literal
from urllib.parse import urlsplit

import msgspec

from hermes_actors.operator_port import AttachmentView, MessageView, SegmentView, TranscriptView

__all__ = [
    "Entry",
    "Link",
    "ToolCall",
    "attachment_label",
    "document_name",
    "document_title",
    "entries",
    "safe_href",
    "segment_line",
    "when",
]

Link = Callable[[AttachmentView], "str | None"]
"""Where an attachment can be opened from the document (a relative path, a ``file://`` or ``https://`` URL), or
``None`` to name it without a link."""

EntryKind = Literal["message", "summary", "tool_result"]

_SAFE_SCHEMES = frozenset({"http", "https", "file"})
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """One call in an assistant message's ``tool_calls``; ``arguments`` is the JSON text the model sent."""

    name: str
    arguments: str


class Entry(msgspec.Struct, frozen=True, kw_only=True):
    """One message as the document shows it: its kind, its tool calls and its files."""

    kind: EntryKind
    message: MessageView
    calls: list[ToolCall]
    attachments: list[AttachmentView]


class _Call(msgspec.Struct, kw_only=True):
    name: str = "?"
    arguments: str | dict[str, object] | list[object] | None = None


class _Wire(msgspec.Struct, kw_only=True):
    function: _Call | None = None


_decode_calls = msgspec.json.Decoder(list[_Wire]).decode


def when(timestamp: float) -> str:
    """``timestamp`` as a UTC date and time to the second."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(timestamp))


def document_title(view: TranscriptView) -> str:
    """The conversation's title (its newest titled segment's), else ``Conversation <tip id>``."""
    titled = [s.session.title for s in view.segments if s.session.title]
    return titled[-1] if titled else f"Conversation {view.session_id}"


def document_name(view: TranscriptView, suffix: str) -> str:
    """A file name for the conversation: its title made safe for any file system, then its tip id."""
    titled = [s.session.title for s in view.segments if s.session.title]
    stem = _UNSAFE_NAME.sub("-", titled[-1]).strip("-.")[:60] if titled else ""
    return f"{stem + '-' if stem else ''}{view.session_id}.{suffix}"


def segment_line(index: int, segment: SegmentView) -> str:
    """One line on a segment: its number, session id, platform, when it started and how it ended."""
    session = segment.session
    line = f"Part {index} · session {session.id} · {session.source} · started {when(session.started_at)}"
    if session.ended_at is not None:
        line += f" · ended {when(session.ended_at)}" + (f" ({session.end_reason})" if session.end_reason else "")
    return line


def _calls(message: MessageView) -> list[ToolCall]:
    if not message.tool_calls:
        return []
    try:
        wire = _decode_calls(message.tool_calls)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return [ToolCall(name="(unreadable tool calls)", arguments=message.tool_calls)]
    calls = []
    for item in wire:
        function = item.function or _Call()
        arguments = function.arguments
        text = arguments if isinstance(arguments, str) else msgspec.json.encode(arguments).decode()
        calls.append(ToolCall(name=function.name, arguments=text))
    return calls


def entries(segment: SegmentView) -> Iterator[Entry]:
    """The messages of ``segment`` to show, in order: its summary, then what it did not carry over."""
    files: dict[int, list[AttachmentView]] = {}
    for attachment in segment.attachments:
        files.setdefault(attachment.message_id, []).append(attachment)
    skip = 0
    for message in segment.messages:
        if message.id == segment.summary_id:
            skip = segment.carried
            kind: EntryKind = "summary"
        elif skip:
            skip -= 1
            continue
        else:
            kind = "tool_result" if message.role == "tool" else "message"
        yield Entry(kind=kind, message=message, calls=_calls(message), attachments=files.get(message.id, []))


def attachment_label(attachment: AttachmentView) -> str:
    """An attachment's name, kind and size, and why it was not read when it was not."""
    label = attachment.name or attachment.kind
    details = [attachment.mime_type or attachment.kind]
    if attachment.size is not None:
        details.append(f"{attachment.size:,} bytes")
    if attachment.error:
        details.append(f"not read: {attachment.error}")
    return f"{label} ({', '.join(details)})"


def safe_href(address: str | None) -> str | None:
    """``address`` when a document may link to it: http(s), ``file:`` or a relative path; ``None`` otherwise (a
    ``javascript:`` or ``data:`` URL from a transcript must never become a link)."""
    if not address:
        return None
    try:
        scheme = urlsplit(address).scheme.lower()
    except ValueError:
        return None
    if scheme and scheme not in _SAFE_SCHEMES:
        return None
    if not scheme and (":" in address.split("/", 1)[0] or any(ord(c) < 32 for c in address)):
        return None
    return address
