"""The user a request speaks for, on every route that runs a turn: the Responses API and runs derive it as chat
completions do (the key's user, the OpenAI ``user`` or ``safety_identifier``, trusted Open WebUI headers), and a key
that speaks for one user sees only that user's stored responses and, over ``/mcp``, that user's sessions."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import openai
import pytest

from hermes_actors.messages import ResponseRecord
from hermes_actors.principal import Principal
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.store import NewMessage, Role
from platforms.api_server import key_fingerprint
from tests.agents.chat_server import ChatServer, completion
from tests.platforms import test_api_contract, test_api_mcp
from tests.platforms.test_api_contract import Serve
from tests.platforms.test_api_server import KEY, Running

model = test_api_contract.model  # a scripted OpenAI-compatible model on 127.0.0.1
serve = test_api_contract.serve  # a gateway whose agent calls it, behind an API server

OWUI = {"X-OpenWebUI-User-Id": "u-alice", "X-OpenWebUI-User-Name": "Alice"}


def _principal(running: Running, session_id: str) -> Principal:
    with running.gateway.read() as store:
        return Principal.of_record(store.get_session(session_id))


def _respond(running: Running, headers: dict[str, str] | None = None, **body: Any) -> str:
    """A response through openai-python; the session it ran in."""
    with running.client() as client:
        raw = client.responses.with_raw_response.create(model="hermes-agent", extra_headers=headers, **body)
    return raw.headers["X-Hermes-Session-Id"]


def test_responses_speak_for_the_openai_user_and_one_user_across_conversations(serve: Serve, model: ChatServer) -> None:
    running = serve()
    model.respond_with(lambda body: completion("ok"))
    first = _respond(running, input="Hello", user="alice")
    second = _respond(running, input="Another topic", safety_identifier="alice")
    assert first != second
    assert _principal(running, first) == _principal(running, second)  # one user: the same memories and search
    assert _principal(running, first).participant == "alice"
    anonymous = _respond(running, input="Hello")
    assert _principal(running, anonymous).participant != "alice"  # without a user, its own user, as before


def test_responses_take_trusted_open_webui_headers_and_the_keys_user_first(serve: Serve, model: ChatServer) -> None:
    trusting = serve(trust_user_headers=True)
    model.respond_with(lambda body: completion("ok"))
    assert _principal(trusting, _respond(trusting, OWUI, input="Hi")).participant == "u-alice"
    trusting.server.stop(10)
    keyed = serve(user="the-key-owner", trust_user_headers=True)
    session = _respond(keyed, OWUI, input="Hi", user="someone-else")
    assert _principal(keyed, session).participant == "the-key-owner"


def test_a_chain_without_a_user_keeps_the_user_that_opened_its_session(serve: Serve, model: ChatServer) -> None:
    running = serve()
    model.respond_with(lambda body: completion("ok"))
    with running.client() as client:
        first = client.responses.create(model="hermes-agent", input="Hello", user="alice")
        second = client.responses.with_raw_response.create(
            model="hermes-agent", input="Again", previous_response_id=first.id
        )
    assert _principal(running, second.headers["X-Hermes-Session-Id"]).participant == "alice"


def test_runs_speak_for_the_keys_user(serve: Serve, model: ChatServer) -> None:
    running = serve(user="the-key-owner")
    model.respond_with(lambda body: completion("ok"))
    auth = {"Authorization": f"Bearer {KEY}"}
    status, _, run = running.request({"input": "hello"}, path="/v1/runs", headers=auth)
    assert status == 202
    deadline = time.monotonic() + 10
    while True:
        status, _, found = running.request(None, path=f"/v1/runs/{run['run_id']}", method="GET", headers=auth)
        if found["status"] == "completed" or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert found["status"] == "completed"
    assert _principal(running, found["session_id"]).participant == "the-key-owner"


def _another_users_response(running: Running) -> str:
    """A response stored under this key for a session of user bob (made before the key spoke for one user)."""
    source = SessionSource(
        platform="api_server", scope_id=key_fingerprint(KEY), chat_type="dm", chat_id="b", user_id="bob"
    )

    def stored(store: Any) -> str:
        session = store.create_session(source)
        store.append_messages(session.id, [NewMessage(role=Role.USER, content="bob's secret")])
        return str(session.id)

    session_id = running.gateway.write(stored)
    response_id = "resp_" + "b" * 32
    body = b'{"id": "' + response_id.encode() + b'", "object": "response", "input_items": []}'
    record = ResponseRecord(
        id=response_id, session_id=session_id, scope=key_fingerprint(KEY), status="completed", body=body, created_at=1.0
    )
    GatewayInbox(running.gateway).save_response(record).result(10)
    return response_id


def test_a_key_that_speaks_for_one_user_sees_only_that_users_responses(serve: Serve, model: ChatServer) -> None:
    running = serve(user="ann")
    model.respond_with(lambda body: completion("ok"))
    theirs = _another_users_response(running)
    with running.client() as client:
        own = client.responses.create(model="hermes-agent", input="mine")
        assert client.responses.retrieve(own.id).id == own.id
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(theirs)
        with pytest.raises(openai.NotFoundError):
            client.responses.input_items.list(theirs)
        with pytest.raises(openai.NotFoundError):
            client.responses.create(model="hermes-agent", input="continue", previous_response_id=theirs)
        with pytest.raises(openai.NotFoundError):
            client.responses.delete(theirs)
    assert GatewayInbox(running.gateway).get_response(theirs, key_fingerprint(KEY)) is not None  # not deleted
    running.server.stop(10)
    anyone = serve()  # a key for every user sees it
    with anyone.client() as client:
        assert client.responses.retrieve(theirs).id == theirs


def test_over_mcp_a_key_that_speaks_for_one_user_lists_reads_and_sends_only_in_that_users_sessions(
    serve: Serve, model: ChatServer
) -> None:
    running = serve(user="ann")
    model.respond_with(lambda body: completion("ok"))
    with running.client() as client:
        mine = client.chat.completions.with_raw_response.create(model="m", messages=[{"role": "user", "content": "a"}])
    own = mine.headers["X-Hermes-Session-Id"]
    theirs = _principal_session(running, "bob")
    url = running.server.url + "/mcp"
    listed = _mcp(url, "sessions_list", {})
    assert [row["tip"]["id"] for row in listed["data"]] == [own]
    assert _mcp(url, "session_read", {"session_id": theirs})["code"] == "session_not_found"
    assert _mcp(url, "session_send", {"session_id": theirs, "message": "hi"})["code"] == "session_not_found"
    assert _mcp(url, "session_read", {"session_id": own})["session_id"] == own


def _principal_session(running: Running, user: str) -> str:
    source = SessionSource(
        platform="api_server", scope_id=key_fingerprint(KEY), chat_type="dm", chat_id=user, user_id=user
    )

    def stored(store: Any) -> str:
        session = store.create_session(source)
        store.append_messages(session.id, [NewMessage(role=Role.USER, content=f"{user}'s words")])
        return str(session.id)

    return str(running.gateway.write(stored))


def _mcp(url: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = asyncio.run(test_api_mcp._call(url, KEY, name, arguments))
    structured = result.structuredContent
    assert isinstance(structured, dict)
    return structured
