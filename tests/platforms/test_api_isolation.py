"""The API continues only sessions it created, with the key that created them; another platform's session, or
another key's, is answered exactly like an unknown id."""

from __future__ import annotations

from pathlib import Path

from hermes_actors.agents.base import EchoAgent
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.store import NewMessage, Role, Store
from platforms.api_server import SESSION_HEADER, ApiServer, ApiServerConfig, key_fingerprint
from tests.platforms import test_api_server
from tests.platforms.test_api_server import KEY, Running, Start, ask, chat

start = test_api_server.start  # the same fixtures: a gateway and an API server on 127.0.0.1
running = test_api_server.running

UNKNOWN = "20990101_000000_0badf00d"


def _webhook_session(path: Path) -> str:
    """A webhook session holding a secret, as another entry point would leave it in the database at ``path``."""
    with Store.open(path) as store:
        record = store.create_session(
            SessionSource(platform="webhook", account_id="default", chat_id="ops", user_id="ops")
        )
        store.append_messages(
            record.id,
            [
                NewMessage(role=Role.USER, content="the vault combination is 4-8-15"),
                NewMessage(role=Role.ASSISTANT, content="noted"),
            ],
        )
    return record.id


def _post(running: Running, session: str, text: str = "hi") -> tuple[int, dict[str, object]]:
    status, _, body = running.request(
        {"model": "hermes-agent", "messages": chat(text)},
        headers={"Authorization": f"Bearer {KEY}", SESSION_HEADER: session},
    )
    return status, body


def test_a_header_naming_another_platforms_session_gets_the_unknown_id_404(running: Running, tmp_path: Path) -> None:
    victim = _webhook_session(tmp_path / "state.db")
    status, body = _post(running, victim, "/compress")
    unknown_status, unknown_body = _post(running, UNKNOWN, "/compress")
    assert (status, unknown_status) == (404, 404)
    assert str(body).replace(victim, "X") == str(unknown_body).replace(UNKNOWN, "X")
    with running.gateway.read() as store:
        record = store.get_session(victim)
        assert record.is_live  # /compress never reached it
        assert store.load_transcript(victim)[0].content == "the vault combination is 4-8-15"


def test_the_search_tool_over_the_api_does_not_reach_other_platforms(running: Running, tmp_path: Path) -> None:
    victim = _webhook_session(tmp_path / "state.db")
    reply, _ = ask(running, "search: vault")
    assert victim not in reply
    assert "4-8-15" not in reply


def test_a_session_made_with_one_key_is_not_continued_with_another(start: Start, tmp_path: Path) -> None:
    first = start()
    _, session_id = ask(first, "made with the first key")
    first.server.stop(10)
    other = ApiServer(ApiServerConfig(port=0, key="sk-another-key"), environ={})
    other.start(GatewayInbox(first.gateway))
    try:
        moved = Running(server=other, gateway=first.gateway)
        status, _, body = moved.request(
            {"model": "hermes-agent", "messages": chat("let me in")},
            headers={"Authorization": "Bearer sk-another-key", SESSION_HEADER: session_id},
        )
        assert status == 404
        assert body["error"]["code"] == "session_not_found"
        assert session_id in body["error"]["message"]
    finally:
        other.stop(10)
    with first.gateway.read() as store:
        users = [m.content for m in store.load_transcript(session_id) if m.role == "user"]
    assert users == ["made with the first key"]


def test_the_key_is_stored_as_a_fingerprint_only(running: Running) -> None:
    _, session_id = ask(running, "who made me?")
    with running.gateway.read() as store:
        record = store.get_session(session_id)
        raw = store.sql.execute("SELECT * FROM sessions WHERE id = ?", (session_id,))
    assert record.scope_id == key_fingerprint(KEY)
    assert KEY not in str(raw)


def test_the_same_key_continues_its_own_session(running: Running) -> None:
    _, session_id = ask(running, "first")
    reply, continued = ask(running, "second", **{SESSION_HEADER: session_id})
    assert (reply, continued) == ("echo: second", session_id)


def test_without_a_key_api_sessions_are_continued_but_others_are_not(start: Start, tmp_path: Path) -> None:
    running = start(key=None, agent=EchoAgent())
    with running.client(key="unused") as client:
        raw = client.chat.completions.with_raw_response.create(model="hermes-agent", messages=chat("open"))
    session_id = raw.headers[SESSION_HEADER]
    status, _, _ = running.request(
        {"model": "hermes-agent", "messages": chat("again")}, headers={SESSION_HEADER: session_id}
    )
    assert status == 200
    victim = _webhook_session(tmp_path / "state.db")
    status, _, body = running.request(
        {"model": "hermes-agent", "messages": chat("peek")}, headers={SESSION_HEADER: victim}
    )
    assert status == 404
    assert body["error"]["code"] == "session_not_found"
