"""What a stateless client's resent conversation replaces of the stored transcript (``runtime.rewind``): the pure
comparison, for the cases the end-to-end tests in ``tests/platforms/test_api_frontends_regenerate.py`` do not reach."""

from __future__ import annotations

from hermes_actors.agents.history import summary_message
from hermes_actors.messages import ContextMessage, Conversation
from hermes_actors.runtime.rewind import rewind_of
from hermes_actors.store import MessageRecord, Role


def _stored(*pairs: tuple[str, str], tool_calls: dict[int, str] | None = None) -> list[MessageRecord]:
    return [
        MessageRecord(
            id=100 + index,
            session_id="s",
            role=role,
            content=content,
            created_at=0.0,
            tool_calls=(tool_calls or {}).get(index),
        )
        for index, (role, content) in enumerate(pairs)
    ]


def _sent(*pairs: tuple[str, str]) -> Conversation:
    return Conversation(history=tuple(ContextMessage(role=r, content=c) for r, c in pairs), whole=True)


def test_a_conversation_that_goes_on_from_the_stored_one_changes_nothing() -> None:
    stored = _stored(("user", "hi"), ("assistant", "hello"))
    assert rewind_of(stored, _sent(("user", "hi"), ("assistant", "hello"))) is None
    assert rewind_of([], _sent()) is None


def test_only_a_whole_conversation_rewinds() -> None:
    stored = _stored(("user", "hi"), ("assistant", "hello"))
    partial = Conversation(history=(), whole=False)  # a run's instructions, a Responses chain
    assert rewind_of(stored, partial) is None
    assert rewind_of(stored, None) is None


def test_a_regenerated_answer_cuts_from_its_question() -> None:
    stored = _stored(("user", "hi"), ("assistant", "hello"), ("user", "colour?"), ("assistant", "blue"))
    rewind = rewind_of(stored, _sent(("user", "hi"), ("assistant", "hello")))
    assert rewind is not None
    assert (rewind.cut_id, rewind.cut_at, rewind.restored) == (102, 2, ())


def test_attachment_stand_ins_and_unread_notes_are_not_differences() -> None:
    stored = _stored(
        ("user", "what is this?\n[attached image photo.png (image/png, 3 KB), saved at media/ab.png]"),
        ("assistant", "a heron"),
        ("user", "[attached image only.png (image/png, 1 KB), saved at media/cd.png]"),  # nothing the client resends
        ("assistant", "another heron"),
    )
    sent = _sent(
        ("user", "what is this?"),
        ("assistant", "I could not read notes.pdf: too large.\n\na heron"),
        ("assistant", "another heron"),
    )
    assert rewind_of(stored, sent) is None


def test_messages_the_client_has_beyond_the_stored_ones_are_stored_before_the_turn() -> None:
    stored = _stored(("user", "hi"))  # a stopped turn: no answer stored
    rewind = rewind_of(stored, _sent(("user", "hi"), ("assistant", "hel")))  # its partial answer, as shown
    assert rewind is not None
    assert rewind.cut_id is None
    assert [(m.role, m.content) for m in rewind.restored] == [(Role.ASSISTANT, "hel")]


def test_hidden_tool_messages_go_with_the_answer_before_them() -> None:
    calls = '[{"id": "c1", "type": "function", "function": {"name": "session_search", "arguments": "{}"}}]'
    stored = _stored(
        ("user", "find it"),
        ("assistant", ""),
        ("tool", "found"),
        ("assistant", "here"),
        ("user", "more"),
        ("assistant", "nothing more"),
        tool_calls={1: calls},
    )
    kept = rewind_of(stored, _sent(("user", "find it"), ("assistant", "here"), ("user", "more")))
    assert kept is not None
    assert (kept.cut_id, kept.restored) == (105, ())  # only the regenerated answer goes
    edited = rewind_of(stored, _sent(("user", "find it"), ("assistant", "there")))
    assert edited is not None
    assert edited.cut_id == 103  # the tool call and its result stay with the question they answered
    assert [m.content for m in edited.restored] == ["there"]


def test_a_compression_child_is_compared_from_where_its_carried_messages_are() -> None:
    stored = _stored(
        ("system", summary_message("They talked about birds.")),
        ("user", "and owls?"),
        ("assistant", "owls too"),
        ("user", "and gulls?"),
        ("assistant", "gulls as well"),
    )
    whole = [("user", "birds?"), ("assistant", "many"), ("user", "and owls?"), ("assistant", "owls too")]
    rewind = rewind_of(stored, _sent(*whole))  # "and gulls?" regenerated
    assert rewind is not None
    assert (rewind.cut_id, rewind.restored) == (103, ())
    assert rewind_of(stored, _sent(("user", "birds?"), ("assistant", "many"))) is None  # reaches back: left alone
