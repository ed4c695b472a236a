"""``/save``: the conversation comes back as a Markdown document, through the runtime with the fake platform."""

from __future__ import annotations

from pathlib import Path

import msgspec

from hermes_actors.lifecycle.save import MAX_TEXT_CHARS, NOTHING_TO_SAVE, save_reply
from hermes_actors.messages import OutboundDocument, OutboundMessage, decode_outbound, encode
from hermes_actors.operator_port import MessageView, SegmentView, SessionView, TranscriptView
from hermes_actors.store import Store
from hermes_actors.testing import FakePlatform, open_fake_gateway


def turn(fake: FakePlatform, text: str, **fields: str | None) -> OutboundMessage:
    fake.push(text, **fields)
    return fake.pop(timeout=10)


def document_of(reply: OutboundMessage) -> OutboundDocument:
    assert isinstance(reply.document, OutboundDocument), f"no document in {reply!r}"
    return reply.document


def test_save_sends_the_whole_lineage_back_as_a_markdown_document(tmp_path: Path) -> None:
    with open_fake_gateway(tmp_path / "state.db", protected_recent_messages=1) as (_, fake):
        for n in range(3):
            turn(fake, f"message {n} " + "padding " * 200)
        compressed = turn(fake, "/compress")
        assert compressed.text.startswith("Compressed"), compressed.text
        turn(fake, "after the compression")
        reply = turn(fake, "/save")
    document = document_of(reply)
    markdown = document.data.decode("utf-8")
    assert document.name.endswith(".md")
    assert document.mime_type.startswith("text/markdown")
    assert "the conversation as Markdown" in document.caption
    positions = [markdown.index(f"message {n} ") for n in range(3)]
    positions += [markdown.index("## Part 2"), markdown.index("Summary of the earlier conversation")]
    positions.append(markdown.index("after the compression"))
    assert positions == sorted(positions)
    assert "/save" not in markdown  # commands are not part of the conversation
    assert reply.text == markdown  # a platform taking no files sends the text itself
    assert decode_outbound(encode(reply)) == reply  # the outbox row keeps the document


def test_save_without_a_conversation_says_so_and_sends_no_document(tmp_path: Path) -> None:
    with open_fake_gateway(tmp_path / "state.db") as (_, fake):
        turn(fake, "hello", chat_id="alice-chat", user_id="alice")
        reply = turn(fake, "/save", chat_id="bob-chat", user_id="bob")
    assert reply.text == NOTHING_TO_SAVE
    assert reply.document is msgspec.UNSET


def _view(text: str) -> TranscriptView:
    session = SessionView(id="s1", source="fake", title="Long", started_at=0.0, last_active_at=0.0, live=True)
    message = MessageView(id=1, session_id="s1", role="user", content=text, created_at=0.0)
    return TranscriptView(session_id="s1", segments=[SegmentView(session=session, messages=[message])])


def test_a_conversation_too_long_for_chat_text_gets_a_note_naming_the_export_command(tmp_path: Path) -> None:
    with Store.open(tmp_path / "state.db") as store:
        reply = save_reply(store, "s1", lambda _store, _id: _view("x" * (MAX_TEXT_CHARS + 1)))
    assert reply.document is not None
    assert len(reply.document.data) > MAX_TEXT_CHARS
    assert reply.text.startswith("Long: the conversation as Markdown (1 messages, 1 part(s)). It is too long")
    assert reply.text.endswith("hermesctl sessions export --format md --session-id s1 conversation.md")
