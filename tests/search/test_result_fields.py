"""What a session_search answer says, field by field, as JSON (what the agent's tool returns): a discovery hit
carries the reference's fields under its names (seed 003: session_id, title, when, source, snippet,
bookend_start, messages, bookend_end, match_message_id, messages_before, messages_after), every one of them in
every hit, so a zero is never mistaken for a field left out; a scroll always counts what lies beyond it."""

from __future__ import annotations

from typing import Any

import msgspec

from hermes_actors.search import SearchHit, session_search
from hermes_actors.store import NewMessage, Role, StoreInterface
from hermes_actors.testing import FakeClock

REFERENCE_HIT_FIELDS = {
    "session_id",
    "title",
    "when",
    "source",
    "snippet",
    "bookend_start",
    "messages",
    "bookend_end",
    "match_message_id",
    "messages_before",
    "messages_after",
}


def _session(store: StoreInterface, clock: FakeClock, texts: list[str], **fields: Any) -> tuple[str, list[int]]:
    clock.advance(60)
    session = store.create_session("telegram", **fields)
    roles = [Role.USER if i % 2 == 0 else Role.ASSISTANT for i in range(len(texts))]
    ids = store.append_messages(session.id, [NewMessage(role=r, content=t) for r, t in zip(roles, texts, strict=True)])
    return session.id, ids


def _json(value: object) -> Any:
    return msgspec.json.decode(msgspec.json.encode(value))


def test_a_message_hit_at_the_start_of_its_session_says_zero_before_under_the_reference_names(
    store: StoreInterface, clock: FakeClock
) -> None:
    session, ids = _session(store, clock, ["kubernetes first of all", "ok", "more", "done"])
    record = store.get_session(session)
    (hit,) = _json(session_search(store, query="kubernetes"))["hits"]
    assert set(hit) >= REFERENCE_HIT_FIELDS
    assert set(hit) == set(SearchHit.__struct_fields__)  # every field, whatever its value
    assert hit["session_id"] == session
    assert hit["title"] is None
    assert hit["when"] == record.started_at
    assert hit["match_message_id"] == ids[0]
    assert [m["id"] for m in hit["messages"]] == ids
    assert [m["id"] for m in hit["messages"] if m.get("anchor")] == [ids[0]]
    assert hit["bookend_start"] == []
    assert hit["bookend_end"] == []
    assert (hit["messages_before"], hit["messages_after"]) == (0, 0)


def test_a_title_hit_carries_every_field_too(store: StoreInterface, clock: FakeClock) -> None:
    session, ids = _session(store, clock, ["hello", "hi"], title="kubernetes notes")
    (hit,) = _json(session_search(store, query="kubernetes"))["hits"]
    assert set(hit) >= REFERENCE_HIT_FIELDS
    assert set(hit) == set(SearchHit.__struct_fields__)  # every field, whatever its value
    assert (hit["session_id"], hit["title"], hit["match_message_id"]) == (session, "kubernetes notes", None)
    assert [m["id"] for m in hit["messages"]] == ids
    assert (hit["messages_before"], hit["messages_after"]) == (0, 0)


def test_a_scroll_at_the_start_says_zero_messages_before(store: StoreInterface, clock: FakeClock) -> None:
    session, ids = _session(store, clock, [f"line {i}" for i in range(8)])
    first = _json(session_search(store, session_id=session, around_message_id=ids[0], window=3))
    assert (first["messages_before"], first["messages_after"]) == (0, 4)
    last = _json(session_search(store, session_id=session, around_message_id=ids[-1], window=3))
    assert (last["messages_before"], last["messages_after"]) == (4, 0)
    whole = _json(session_search(store, session_id=session))
    assert whole["omitted"] == 0
    assert "error" not in whole
