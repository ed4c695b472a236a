"""Who the user of a chat-completions request is: the key's configured user, the OpenAI ``user`` field, and Open
WebUI's forwarded user headers when they are trusted; memories and search follow that user across conversations.
Real gateway, real HTTP on 127.0.0.1."""

from __future__ import annotations

from typing import Any

from hermes_actors.principal import Principal
from platforms.api_server import SESSION_HEADER
from tests.agents.chat_server import ChatServer, completion
from tests.platforms import test_api_contract
from tests.platforms.test_api_contract import Serve, user
from tests.platforms.test_api_server import KEY, Running

model = test_api_contract.model  # a scripted OpenAI-compatible model on 127.0.0.1
serve = test_api_contract.serve  # a gateway whose agent calls it, behind an API server

AUTH = {"Authorization": f"Bearer {KEY}"}


def _owui(user_id: str, email: str = "", name: str = "") -> dict[str, str]:
    """The headers Open WebUI adds with ENABLE_FORWARD_USER_INFO_HEADERS."""
    headers = {**AUTH, "X-OpenWebUI-User-Id": user_id, "X-OpenWebUI-User-Role": "user"}
    if email:
        headers["X-OpenWebUI-User-Email"] = email
    if name:
        headers["X-OpenWebUI-User-Name"] = name
    return headers


def _ask(running: Running, text: str, headers: dict[str, str], **body: Any) -> tuple[str, Principal]:
    """Send ``text`` as a new conversation; the session it was stored in, and that session's principal."""
    status, answer_headers, answer = running.request({"model": "m", "messages": [user(text)], **body}, headers=headers)
    assert status == 200, answer
    session_id = answer_headers[SESSION_HEADER]
    with running.gateway.read() as store:
        return session_id, Principal.of_record(store.get_session(session_id))


def test_trusted_open_webui_headers_make_one_user_across_conversations(serve: Serve, model: ChatServer) -> None:
    running = serve(trust_user_headers=True)
    model.respond_with(lambda body: completion("ok"))
    first, alice = _ask(running, "Hello", _owui("u-alice", "alice@example.org", "Alice"))
    second, alice_again = _ask(running, "Another topic", _owui("u-alice", "alice@example.org", "Alice"))
    other, bob = _ask(running, "Hello", _owui("u-bob"))
    assert len({first, second, other}) == 3  # Bob opening alike does not land in Alice's conversation
    assert alice == alice_again  # one principal: the same memories and search scope in both conversations
    assert alice.participant == "u-alice"
    assert alice.memory_key is not None
    assert alice.memory_key.endswith(":u-alice")
    assert bob.participant == "u-bob"
    assert alice.owns(_record(running, second))
    assert not bob.owns(_record(running, first))
    _, by_email = _ask(running, "Hi", {**AUTH, "X-OpenWebUI-User-Email": "carol@example.org"})
    assert by_email.participant == "carol@example.org"


def test_user_headers_are_ignored_unless_trusted(serve: Serve, model: ChatServer) -> None:
    running = serve()
    model.respond_with(lambda body: completion("ok"))
    first, alice = _ask(running, "Hello", _owui("u-alice"))
    second, mallory = _ask(running, "Another topic", _owui("u-alice"))
    assert alice != mallory  # each stateless conversation is its own user: a header alone names nobody
    assert alice.participant != "u-alice"
    assert mallory.participant != "u-alice"
    assert first != second


def test_the_openai_user_field_comes_before_the_headers(serve: Serve, model: ChatServer) -> None:
    running = serve(trust_user_headers=True)
    model.respond_with(lambda body: completion("ok"))
    _, principal = _ask(running, "Hello", _owui("u-alice"), user="alice-from-the-body")
    assert principal.participant == "alice-from-the-body"


def test_the_keys_configured_user_comes_first(serve: Serve, model: ChatServer) -> None:
    running = serve(user="the-key-owner", trust_user_headers=True)
    model.respond_with(lambda body: completion("ok"))
    _, by_body = _ask(running, "Hello", _owui("u-alice"), user="someone-else")
    _, by_header = _ask(running, "Another", _owui("u-bob"))
    assert by_body.participant == by_header.participant == "the-key-owner"


def test_a_malformed_user_is_a_400_naming_it(serve: Serve, model: ChatServer) -> None:
    running = serve()
    status, _, answer = running.request({"model": "m", "messages": [user("hi")], "user": "x" * 300}, headers=AUTH)
    assert status == 400
    assert answer["error"]["param"] == "user"


def _record(running: Running, session_id: str) -> Any:
    with running.gateway.read() as store:
        return store.get_session(session_id)
