"""``/save``: the conversation sent back to the chat as a Markdown document.

The reply carries the document (:class:`~hermes_actors.messages.OutboundDocument`); a platform whose sender takes
files sends it as a file with a short caption, any other sends the reply's text instead: the Markdown itself when
it is short enough to read in a chat (:data:`MAX_TEXT_CHARS`), else a note naming the ``hermesctl`` command that
exports it. The conversation is the whole compression lineage the chat leads to, read as the console reads it
(``read_transcript``, the runtime's, is handed in: this layer sits below the runtime).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from hermes_actors.lifecycle.transcript_doc import document_name, document_title
from hermes_actors.lifecycle.transcript_markdown import render_markdown
from hermes_actors.messages import OutboundDocument
from hermes_actors.operator_port import TranscriptView
from hermes_actors.store import StoreInterface

__all__ = ["MAX_DOCUMENT_BYTES", "MAX_TEXT_CHARS", "NOTHING_TO_SAVE", "ReadTranscript", "SavedReply", "save_reply"]

MAX_TEXT_CHARS = 16_000  # past this a chat gets a note instead of the text (a dozen messages or more)
MAX_DOCUMENT_BYTES = 20 * 1024 * 1024  # an outbox row, and the smallest upload limit of the platforms that take files
NOTHING_TO_SAVE = "Nothing to save yet: this chat has no conversation."

ReadTranscript = Callable[[StoreInterface, str], TranscriptView]
"""The runtime's read of the lineage through a session (:func:`hermes_actors.runtime.operator_reads.transcript`)."""


class SavedReply(msgspec.Struct, frozen=True, kw_only=True):
    """What ``/save`` answers: ``text`` for a platform that takes no files, ``document`` for one that does."""

    text: str
    document: OutboundDocument | None = None


def _export_hint(session_id: str) -> str:
    return f"hermesctl sessions export --format md --session-id {session_id} conversation.md"


def save_reply(store: StoreInterface, session_id: str, read_transcript: ReadTranscript) -> SavedReply:
    """The reply to ``/save`` in a chat that leads to ``session_id`` (the caller checked the sender may read it)."""
    view = read_transcript(store, session_id)
    markdown = render_markdown(view)
    data = markdown.encode("utf-8")
    messages = sum(len(s.messages) for s in view.segments)
    title = document_title(view)
    if len(data) > MAX_DOCUMENT_BYTES:
        return SavedReply(
            text=f"{title} is too large to send here ({len(data):,} bytes as Markdown). The gateway's operator can "
            f"export it with: {_export_hint(view.session_id)}"
        )
    caption = f"{title}: the conversation as Markdown ({messages} messages, {len(view.segments)} part(s))."
    if len(markdown) <= MAX_TEXT_CHARS:
        text = markdown
    else:
        text = (
            f"{caption} It is too long to send here as text ({len(markdown):,} characters), and this platform takes "
            f"no files. The gateway's operator can export it with: {_export_hint(view.session_id)}"
        )
    document = OutboundDocument(
        name=document_name(view, "md"), mime_type="text/markdown; charset=utf-8", data=data, caption=caption
    )
    return SavedReply(text=text, document=document)
