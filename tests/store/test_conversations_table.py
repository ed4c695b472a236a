"""Contract tests of the conversations table and of transcript cuts, on both stores: conversations read within a
scope and gone with their session; cut messages take their attachments and search rows, and the session's counters
follow."""

from __future__ import annotations

from hermes_actors.conversation_port import ConversationRecord
from hermes_actors.messages import Attachment, AttachmentKind
from hermes_actors.store import NewMessage, Role, StoreInterface
from hermes_actors.store.conversations import ConversationTable
from hermes_actors.store.transcript_cuts import TranscriptCuts
from hermes_actors.testing import FakeClock


def _conversation(session_id: str, *, scope: str | None = "k1") -> ConversationRecord:
    return ConversationRecord(
        id="conv_1", session_id=session_id, scope=scope, metadata={"topic": "birds"}, created_at=5.0
    )


def test_a_conversation_is_read_back_within_its_scope_with_its_sessions_user(
    store: StoreInterface, clock: FakeClock
) -> None:
    from hermes_actors.routing import SessionSource

    session = store.create_session(SessionSource(platform="api_server", scope_id="k1", chat_id="conv_1", user_id="ann"))
    table = ConversationTable(store.sql, clock)
    table.add(_conversation(session.id))
    found = table.find("conv_1", "k1")
    assert found == ConversationRecord(
        id="conv_1", session_id=session.id, scope="k1", metadata={"topic": "birds"}, created_at=5.0, user_id="ann"
    )
    assert table.find("conv_1", "k2") is None
    assert table.find("conv_1", None) is None
    assert not table.set_metadata("conv_1", "k2", {})
    assert table.set_metadata("conv_1", "k1", {"topic": "fish", "n": "2"})
    updated = table.find("conv_1", "k1")
    assert updated is not None
    assert updated.metadata == {"topic": "fish", "n": "2"}


def test_a_conversation_without_a_scope_is_read_with_none_and_goes_with_its_session(
    store: StoreInterface, clock: FakeClock
) -> None:
    store.create_session("api_server", session_id="s1")
    table = ConversationTable(store.sql, clock)
    table.add(_conversation("s1", scope=None))
    assert table.find("conv_1", None) is not None
    assert store.delete_session("s1")
    assert table.find("conv_1", None) is None


def test_a_cut_tail_leaves_the_rest_and_fixes_the_counters(store: StoreInterface, clock: FakeClock) -> None:
    store.create_session("api_server", session_id="s1")
    store.create_session("api_server", session_id="s2")
    calls = '[{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]'
    ids = store.append_messages(
        "s1",
        [
            NewMessage(role=Role.USER, content="kestrel"),
            NewMessage(role=Role.ASSISTANT, content=None, tool_calls=calls),
            NewMessage(role=Role.TOOL, content="found", tool_call_id="c1"),
            NewMessage(role=Role.ASSISTANT, content="a falcon"),
            NewMessage(role=Role.USER, content="merlin"),
            NewMessage(role=Role.ASSISTANT, content="also a falcon"),
        ],
    )
    (other,) = store.append_messages("s2", [NewMessage(role=Role.USER, content="merlin elsewhere")])
    cuts = TranscriptCuts(store.sql, clock)
    assert cuts.cut_from("s1", ids[1]).messages == 5
    assert [m.content for m in store.load_transcript("s1")] == ["kestrel"]
    record = store.get_session("s1")
    assert (record.message_count, record.tool_call_count) == (1, 0)
    assert cuts.cut("s1", [other]).messages == 0  # another session's message is left alone
    assert [m.content for m in store.load_transcript("s2")] == ["merlin elsewhere"]
    assert cuts.cut_from("nobody", 1).messages == 0


def test_a_cut_message_takes_its_attachments_and_search_rows(store: StoreInterface, clock: FakeClock) -> None:
    store.create_session("api_server", session_id="s1")
    first, second = store.append_messages(
        "s1",
        [NewMessage(role=Role.USER, content="ptarmigan"), NewMessage(role=Role.USER, content="look at this")],
    )
    image = Attachment(kind=AttachmentKind.IMAGE, name="bird.png", mime_type="image/png", path="ab/bird.png")
    store.attachments.add(second, image, at=1.0)
    cut = TranscriptCuts(store.sql, clock).cut("s1", [second, first])
    assert (cut.messages, cut.files) == (2, frozenset({"ab/bird.png"}))
    assert store.load_transcript("s1") == []
    assert store.attachments.for_session("s1") == []
    assert store.fts_query("ptarmigan").hits == []
    (kept,) = store.append_messages("s1", [NewMessage(role=Role.USER, content="ptarmigan again")])
    assert [hit.message_id for hit in store.fts_query("ptarmigan").hits] == [kept]
