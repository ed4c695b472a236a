"""A conversation as one self-contained HTML page: ``hermesctl sessions export --format html``.

Everything from the transcript is escaped (text, names, tool arguments, addresses), links are only http(s),
``file:`` or relative, and the page carries a Content-Security-Policy allowing no script at all, so a transcript
holding ``<script>`` shows it as text. The style is inline; the page needs nothing else. Tool calls, tool results
and a compression summary are folded into ``<details>``.
"""

from __future__ import annotations

from html import escape

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

__all__ = ["CONTENT_POLICY", "render_html"]

CONTENT_POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data: file: https:"
"""No script, no frame, no fetch: the page shows what it holds and nothing runs."""

_STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; max-width: 52rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
h1 { font-size: 1.5rem; } h2 { font-size: 1rem; color: #555; border-top: 1px solid #ddd; padding-top: 1rem; }
.message { margin: 1rem 0; padding: .5rem .75rem; border-radius: 6px; background: #f6f6f6; }
.message.user { background: #eef4ff; } .message.assistant { background: #f3f9f1; }
.meta { font-size: .8rem; color: #666; } .text { white-space: pre-wrap; overflow-wrap: anywhere; }
details { margin: .5rem 0; } summary { cursor: pointer; color: #444; }
pre { background: #fff; border: 1px solid #ddd; padding: .5rem; overflow-x: auto; white-space: pre-wrap; }
.note { font-style: italic; color: #666; }
""".strip()


def _text(value: str | None) -> str:
    return escape(value or "", quote=True)


def _folded(summary: str, body: str) -> str:
    return f"<details><summary>{summary}</summary><pre>{_text(body)}</pre></details>"


def _attachment(link: Link | None, attachment: AttachmentView) -> str:
    label = _text(attachment_label(attachment))
    address = safe_href(link(attachment) if link is not None else None)
    if address is None and attachment.path is None:
        address = safe_href(attachment.source_url)
    if address is None:
        return f"<li>{label}</li>"
    return f'<li><a href="{_text(address)}" rel="noopener noreferrer">{label}</a></li>'


def _entry(entry: Entry, link: Link | None) -> str:
    message = entry.message
    stamp = _text(when(message.created_at))
    if entry.kind == "summary":
        return _folded(f"Summary of the earlier conversation (compression) · {stamp}", message.content or "")
    if entry.kind == "tool_result":
        name = _text(message.tool_name or "tool")
        return _folded(f"Tool result <code>{name}</code> · {stamp}", message.content or "")
    role = _text(message.role)
    parts = [f'<div class="message {role}">', f'<div class="meta">{role} · {stamp}</div>']
    if message.content:
        parts.append(f'<div class="text">{_text(message.content)}</div>')
    parts += [_folded(f"Tool call <code>{_text(call.name)}</code>", call.arguments) for call in entry.calls]
    if entry.attachments:
        parts += ["<ul>", *(_attachment(link, a) for a in entry.attachments), "</ul>"]
    parts.append("</div>")
    return "\n".join(parts)


def render_html(view: TranscriptView, *, link: Link | None = None) -> str:
    """``view`` as one HTML page, segments in order; ``link`` says where each attachment is."""
    title = _text(document_title(view))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_POLICY}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{title}</title>",
        f"<style>\n{_STYLE}\n</style>",
        "</head>",
        "<body>",
        f"<h1>{title}</h1>",
        f'<p class="meta">Conversation {_text(view.session_id)}, {len(view.segments)} part(s).</p>',
    ]
    for index, segment in enumerate(view.segments, 1):
        parts.append(f"<section>\n<h2>{_text(segment_line(index, segment))}</h2>")
        if segment.carried:
            parts.append(
                f'<p class="note">{segment.carried} message(s) carried over from part {index - 1} are not repeated.</p>'
            )
        parts += [_entry(entry, link) for entry in entries(segment)]
        parts.append("</section>")
    parts += ["</body>", "</html>"]
    return "\n".join(parts) + "\n"
