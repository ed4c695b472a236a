"""``/v1/conversations`` through openai-python's ``conversations`` resource, and ``responses.create(conversation=...)``
running in them: each conversation a stored session, its items the session's messages, the model seeing exactly
them. A real gateway whose agent calls a scripted model on 127.0.0.1."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from hermes_actors.conversation_port import ConversationRecord
from hermes_actors.messages import ContextMessage
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.inbox_port import GatewayInbox
from platforms.api_server import SESSION_HEADER, key_fingerprint
from tests.agents.chat_server import ChatServer, Scripted, completion
from tests.platforms import test_api_contract
from tests.platforms.test_api_contract import Serve
from tests.platforms.test_api_server import KEY, Running

model = test_api_contract.model  # a scripted OpenAI-compatible model on 127.0.0.1
serve = test_api_contract.serve  # a gateway whose agent calls it, behind an API server


def _numbered(model: ChatServer) -> None:
    def answer(body: Any) -> Scripted:
        users = [m["content"] for m in body["messages"] if m["role"] == "user"]
        return completion(f"answer {len(model.completion_bodies)} to {users[-1]}")

    model.respond_with(answer)


def _seen(model: ChatServer) -> list[tuple[str, str]]:
    return [(m["role"], m["content"] or "") for m in model.completion_bodies[-1]["messages"] if m["role"] != "system"]


def _texts(items: list[Any]) -> list[tuple[str, str]]:
    return [(item.role, item.content[0].text) for item in items if item.type == "message"]


def test_a_conversation_is_created_read_updated_and_deleted(serve: Serve, model: ChatServer) -> None:
    running = serve()
    with running.client() as client:
        created = client.conversations.create(
            items=[{"type": "message", "role": "user", "content": "Remember: the gate code is 4411"}],
            metadata={"topic": "gate"},
        )
        assert created.id.startswith("conv_")
        assert created.object == "conversation"
        assert created.metadata == {"topic": "gate"}
        assert client.conversations.retrieve(created.id).metadata == {"topic": "gate"}
        updated = client.conversations.update(created.id, metadata={"topic": "door", "owner": "ann"})
        assert updated.metadata == {"topic": "door", "owner": "ann"}
        assert client.conversations.retrieve(created.id).metadata == {"topic": "door", "owner": "ann"}
        deleted = client.conversations.delete(created.id)
        assert (deleted.id, deleted.deleted, deleted.object) == (created.id, True, "conversation.deleted")
        with pytest.raises(openai.NotFoundError) as missing:
            client.conversations.retrieve(created.id)
        assert missing.value.code == "conversation_not_found"
    with running.gateway.read() as store:
        assert store.list_sessions(limit=None) == []  # its session went with it
    assert len(model.completion_bodies) == 0  # nothing of this asked the model


def test_responses_in_a_conversation_see_its_items_and_add_their_turns(serve: Serve, model: ChatServer) -> None:
    running = serve()
    _numbered(model)
    with running.client() as client:
        conversation = client.conversations.create(
            items=[
                {"type": "message", "role": "user", "content": "The gate code is 4411"},
                {"type": "message", "role": "assistant", "content": "Noted."},
            ]
        )
        first = client.responses.create(model="hermes-agent", input="What is the code?", conversation=conversation.id)
        assert first.output_text == "answer 1 to What is the code?"
        assert first.conversation is not None
        assert first.conversation.id == conversation.id
        assert _seen(model) == [
            ("user", "The gate code is 4411"),
            ("assistant", "Noted."),
            ("user", "What is the code?"),
        ]
        client.conversations.items.create(
            conversation.id, items=[{"type": "message", "role": "user", "content": "It changed to 9090"}]
        )
        second = client.responses.create(model="hermes-agent", input="And now?", conversation=conversation.id)
        assert second.output_text == "answer 2 to And now?"
        assert _seen(model)[-3:] == [
            ("assistant", "answer 1 to What is the code?"),
            ("user", "It changed to 9090"),
            ("user", "And now?"),
        ]
        items = list(client.conversations.items.list(conversation.id, order="asc"))
    assert _texts(items) == [
        ("user", "The gate code is 4411"),
        ("assistant", "Noted."),
        ("user", "What is the code?"),
        ("assistant", "answer 1 to What is the code?"),
        ("user", "It changed to 9090"),
        ("user", "And now?"),
        ("assistant", "answer 2 to And now?"),
    ]
    assert len(model.completion_bodies) == 2  # one model call per response
    with running.gateway.read() as store:
        (session,) = store.list_sessions(limit=None)  # one conversation, one session
        assert session.chat_id == conversation.id


def test_items_are_listed_in_pages_retrieved_and_deleted_one_by_one(serve: Serve, model: ChatServer) -> None:
    running = serve()
    texts = [f"note {n}" for n in range(5)]
    with running.client() as client:
        conversation = client.conversations.create(
            items=[{"type": "message", "role": "user", "content": text} for text in texts]
        )
        newest = client.conversations.items.list(conversation.id, limit=2)
        assert _texts(newest.data) == [("user", "note 4"), ("user", "note 3")]
        assert newest.has_more
        assert newest.last_id is not None
        after = client.conversations.items.list(conversation.id, limit=2, after=newest.last_id)
        assert _texts(after.data) == [("user", "note 2"), ("user", "note 1")]
        every = list(client.conversations.items.list(conversation.id, order="asc"))
        assert _texts(every) == [("user", text) for text in texts]
        third = every[2].id
        assert third is not None
        one = client.conversations.items.retrieve(third, conversation_id=conversation.id)
        assert one.id == third
        after_delete = client.conversations.items.delete(third, conversation_id=conversation.id)
        assert after_delete.id == conversation.id
        assert _texts(list(client.conversations.items.list(conversation.id, order="asc"))) == [
            ("user", text) for text in texts if text != "note 2"
        ]
        with pytest.raises(openai.NotFoundError):
            client.conversations.items.retrieve(third, conversation_id=conversation.id)
        with pytest.raises(openai.NotFoundError):
            client.conversations.items.delete(third, conversation_id=conversation.id)
        added = client.conversations.items.create(
            conversation.id,
            items=[
                {"type": "message", "role": "user", "content": "a question"},
                {"type": "message", "role": "assistant", "content": "an answer"},
            ],
        )
        assert _texts(added.data) == [("user", "a question"), ("assistant", "an answer")]
    with running.gateway.read() as store:
        (session,) = store.list_sessions(limit=None)
        assert store.get_session(session.id).message_count == 6  # the counters follow the items


def _open_elsewhere(running: Running, *, scope: str, user: str) -> str:
    """A conversation stored for another key's ``scope`` (or another ``user``), as that key would have made it."""
    conversation_id = "conv_" + "0" * 32
    record = ConversationRecord(id=conversation_id, session_id="", scope=scope, metadata={}, created_at=1.0)
    source = SessionSource(platform="api_server", scope_id=scope, chat_type="dm", chat_id=conversation_id, user_id=user)
    GatewayInbox(running.gateway).conversations.open(record, source, [ContextMessage(role="user", content="secret")])
    return conversation_id


def _unknown_everywhere(client: openai.OpenAI, conversation_id: str) -> None:
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(conversation_id)
    with pytest.raises(openai.NotFoundError):
        client.conversations.update(conversation_id, metadata={"x": "y"})
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.list(conversation_id)
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.create(conversation_id, items=[{"role": "user", "content": "in"}])
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="hermes-agent", input="hi", conversation=conversation_id)
    with pytest.raises(openai.NotFoundError):
        client.conversations.delete(conversation_id)


def test_another_keys_conversation_is_unknown_to_every_route(serve: Serve, model: ChatServer) -> None:
    running = serve()
    conversation_id = _open_elsewhere(running, scope=key_fingerprint("sk-another"), user="bob")
    with running.client() as client:
        _unknown_everywhere(client, conversation_id)
    with running.gateway.read() as store:
        assert [m.content for s in store.list_sessions(limit=None) for m in store.load_transcript(s.id)] == ["secret"]
    assert len(model.completion_bodies) == 0


def test_a_key_that_speaks_for_one_user_sees_only_that_users_conversations(serve: Serve, model: ChatServer) -> None:
    running = serve(user="ann")
    _numbered(model)
    others = _open_elsewhere(running, scope=key_fingerprint(KEY), user="bob")  # the same key, before it was ann's
    with running.client() as client:
        _unknown_everywhere(client, others)
        own = client.conversations.create()
        client.responses.create(model="hermes-agent", input="hi", conversation=own.id)
    with running.gateway.read() as store:
        users = {s.chat_id: s.user_id for s in store.list_sessions(limit=None)}
    assert users == {others: "bob", own.id: "ann"}


def test_a_conversation_name_that_is_not_one_of_ours_keeps_following_its_newest_response(
    serve: Serve, model: ChatServer
) -> None:
    running = serve()
    _numbered(model)
    with running.client() as client:
        first = client.responses.create(model="hermes-agent", input="one", conversation="my-thread")
        second = client.responses.with_raw_response.create(model="hermes-agent", input="two", conversation="my-thread")
    assert second.parse().previous_response_id == first.id
    assert _seen(model) == [("user", "one"), ("assistant", "answer 1 to one"), ("user", "two")]
    assert second.headers[SESSION_HEADER]


def test_malformed_bodies_are_400s_naming_the_field(serve: Serve, model: ChatServer) -> None:
    running = serve()
    auth = {"Authorization": f"Bearer {KEY}"}
    too_many = {"metadata": {f"k{n}": "v" for n in range(17)}}
    status, _, body = running.request(too_many, path="/v1/conversations", headers=auth)
    assert status == 400
    assert body["error"]["param"] == "metadata"
    status, _, body = running.request({"items": []}, path="/v1/conversations/conv_x/items", headers=auth)
    assert status == 400
    bad_role = {"items": [{"type": "message", "role": "critic", "content": "hm"}]}
    status, _, body = running.request(bad_role, path="/v1/conversations", headers=auth)
    assert status == 400
    assert body["error"]["param"] == "items[0].role"
