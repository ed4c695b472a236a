"""``/mcp``: the sessions as MCP tools, driven with the MCP SDK's own client over Streamable HTTP on 127.0.0.1.

The client key sees only this API's sessions made with it; another key's session or run, or another platform's
session, is answered exactly like an unknown id, by every tool. The admin key sees every session.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import sys
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client

from hermes_actors.agents.base import EchoAgent
from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.store import NewMessage, Role, Store
from hermes_actors.testing import GatedAgent, poll_until
from hermes_actors.waiters import ReplyWaiters
from platforms.api_server import SESSION_HEADER, ApiServer, ApiServerConfig, key_fingerprint
from platforms.api_server.mcp_server import TOOL_NAMES
from platforms.support.shared_http import SharedListener

KEY = "sk-mcp-client-key"
ADMIN = "hk-mcp-admin-key"
OTHER = "sk-someone-else"
SECRET = "zanzibar"
UNKNOWN_SESSION = "20990101_000000_0badf00d"
UNKNOWN_RUN = "run_" + "0" * 32


@dataclass
class Api:
    server: ApiServer
    gateway: Gateway
    inbox: GatewayInbox
    path: Path

    @property
    def url(self) -> str:
        return self.server.url + "/mcp"

    def waiters_waiting(self) -> int:
        (waiters,) = self.server.senders()
        assert isinstance(waiters, ReplyWaiters)
        return waiters.waiting()

    def call(self, name: str, arguments: dict[str, Any], *, key: str = KEY) -> types.CallToolResult:
        return asyncio.run(_call(self.url, key, name, arguments))

    def answer(self, name: str, arguments: dict[str, Any], *, key: str = KEY) -> tuple[bool, dict[str, Any]]:
        """Whether the call failed, and its JSON answer (the text and the structured content agree)."""
        result = self.call(name, arguments, key=key)
        assert isinstance(result.content[0], types.TextContent)
        answer = json.loads(result.content[0].text)
        assert answer == result.structuredContent
        return result.isError, answer

    def chat(self, text: str, session_id: str | None = None) -> str:
        """A turn over ``/v1/chat/completions`` with the client key; the session it went to."""
        headers = {"Authorization": f"Bearer {KEY}", **({SESSION_HEADER: session_id} if session_id else {})}
        body = {"model": "hermes-agent", "messages": [{"role": "user", "content": text}]}
        response = httpx.post(self.server.url + "/v1/chat/completions", json=body, headers=headers, timeout=10)
        assert response.status_code == 200, response.text
        return response.headers[SESSION_HEADER]


async def _call(
    url: str, key: str, name: str, arguments: dict[str, Any], told: list[str] | None = None
) -> types.CallToolResult:
    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        if told is not None and message is not None:
            told.append(message)

    async with (
        httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=10) as client,
        streamable_http_client(url, http_client=client) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        return await session.call_tool(name, arguments, progress_callback=on_progress)


async def _tool_names(url: str, key: str) -> list[str]:
    async with (
        httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=10) as client,
        streamable_http_client(url, http_client=client) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        return [tool.name for tool in (await session.list_tools()).tools]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Any]:
    with ExitStack() as stack:

        def run(agent: EchoAgent | None = None, **config: Any) -> Api:
            options: dict[str, Any] = {"port": 0, "key": KEY} | config
            server = ApiServer(ApiServerConfig(**options), environ={})
            gateway = Gateway(tmp_path / "state.db", senders=server.senders(), agent=agent)
            stack.callback(gateway.stop, 10)
            if isinstance(agent, GatedAgent):
                stack.callback(agent.release.set)
            inbox = GatewayInbox(gateway, admin_key=ADMIN)
            server.start(inbox)
            stack.callback(server.stop, 10)
            return Api(server, gateway, inbox, tmp_path / "state.db")

        yield run


@pytest.fixture
def api(start: Any) -> Api:
    built: Api = start()
    return built


def _stored_session(api: Api, source: SessionSource, text: str) -> str:
    """A session as another key or platform left it in the store, holding ``text``."""
    with Store.open(api.path) as store:
        record = store.create_session(source)
        store.append_messages(
            record.id, [NewMessage(role=Role.USER, content=text), NewMessage(role=Role.ASSISTANT, content="noted")]
        )
    return record.id


def _other_keys_session(api: Api) -> str:
    source = SessionSource(
        platform="api_server", scope_id=key_fingerprint(OTHER), chat_type="dm", chat_id="theirs", user_id="theirs"
    )
    return _stored_session(api, source, f"the {SECRET} plans")


def _other_keys_run(api: Api) -> str:
    """A run another key started (its message is in the inbox, answered)."""
    run_id = f"run_{uuid.uuid4().hex}"
    source = SessionSource(
        platform="api_server", scope_id=key_fingerprint(OTHER), chat_type="dm", chat_id=run_id, user_id="theirs"
    )
    api.inbox.submit(InboundMessage(source=source, text=f"{SECRET} run", message_id=run_id)).result(10)
    poll_until(lambda: (stored := api.inbox.stored_answer("api_server", run_id)) and stored.state != "pending")
    return run_id


# -- the tools ---------------------------------------------------------------------------------------------------


def test_the_six_tools_are_listed_by_their_names(api: Api) -> None:
    assert sorted(asyncio.run(_tool_names(api.url, KEY))) == sorted(TOOL_NAMES)
    assert set(TOOL_NAMES) == {
        "session_search",
        "sessions_list",
        "session_read",
        "session_send",
        "run_status",
        "run_stop",
    }


def test_a_key_searches_lists_and_reads_its_own_sessions(api: Api) -> None:
    mine = api.chat(f"remember the {SECRET} ferry")
    failed, found = api.answer("session_search", {"query": SECRET})
    assert not failed
    assert [hit["session_id"] for hit in found["hits"]] == [mine]
    failed, listed = api.answer("sessions_list", {})
    assert not failed
    assert [row["tip"]["id"] for row in listed["data"]] == [mine]
    assert listed["total"] == 1
    failed, read = api.answer("session_read", {"session_id": mine})
    assert not failed
    assert [(m["role"], m["content"]) for m in read["messages"]] == [
        ("user", f"remember the {SECRET} ferry"),
        ("assistant", f"echo: remember the {SECRET} ferry"),
    ]
    assert read["omitted"] == 0


def test_session_send_streams_the_reply_as_progress_and_continues_the_session(api: Api) -> None:
    mine = api.chat("first")
    progress: list[str] = []
    result = asyncio.run(_call(api.url, KEY, "session_send", {"session_id": mine, "message": "two words"}, progress))
    assert not result.isError
    assert result.structuredContent == {"session_id": mine, "reply": "echo: two words"}
    assert "".join(progress) == "echo: two words"
    assert len(progress) > 1  # word by word, as the agent wrote it
    with api.gateway.read() as store:
        users = [m.content for m in store.load_transcript(mine) if m.role == "user"]
    assert users == ["first", "two words"]


def test_session_send_without_a_session_starts_one_the_key_owns(api: Api) -> None:
    failed, sent = api.answer("session_send", {"message": "hello there"})
    assert not failed
    assert sent["reply"] == "echo: hello there"
    failed, listed = api.answer("sessions_list", {})
    assert [row["tip"]["id"] for row in listed["data"]] == [sent["session_id"]]


def test_session_send_reports_tool_calls_as_progress(api: Api) -> None:
    api.chat(f"the {SECRET} note")
    progress: list[str] = []
    result = asyncio.run(_call(api.url, KEY, "session_send", {"message": f"search: {SECRET}"}, progress))
    assert not result.isError
    assert "[tool session_search: running]" in progress
    assert "[tool session_search: completed]" in progress


def test_run_status_and_run_stop_follow_a_run_of_the_key(start: Any) -> None:
    agent = GatedAgent()
    api: Api = start(agent=agent)
    created = httpx.post(
        api.server.url + "/v1/runs", json={"input": "slow"}, headers={"Authorization": f"Bearer {KEY}"}, timeout=10
    )
    run_id = created.json()["run_id"]
    assert agent.started.wait(10)
    failed, status = api.answer("run_status", {"run_id": run_id})
    assert not failed
    assert status["run_id"] == run_id
    assert status["status"] in ("queued", "running")
    failed, stopped = api.answer("run_stop", {"run_id": run_id})
    assert not failed
    assert stopped["status"] in ("stopping", "cancelled")
    poll_until(lambda: api.answer("run_status", {"run_id": run_id})[1]["status"] == "cancelled")


# -- scope --------------------------------------------------------------------------------------------------------


def _denied(api: Api, name: str, arguments: dict[str, Any], unknown: dict[str, Any], secret: str) -> None:
    """``name`` answers ``arguments`` (naming ``secret``) as it answers ``unknown`` (naming an unknown id)."""
    failed, answer = api.answer(name, arguments)
    unknown_failed, unknown_answer = api.answer(name, unknown)
    assert failed
    assert unknown_failed
    assert SECRET not in json.dumps(answer)
    placeholder = "X"
    expected = json.dumps(unknown_answer).replace(next(iter(unknown.values())), placeholder)
    assert json.dumps(answer).replace(secret, placeholder) == expected


@pytest.mark.parametrize(
    "name", ["session_search", "session_read", "session_send", "run_status", "run_stop", "sessions_list"]
)
def test_every_tool_denies_another_keys_session_or_run_as_if_unknown(api: Api, name: str) -> None:
    theirs = _other_keys_session(api)
    run = _other_keys_run(api)
    api.chat("mine")
    if name == "sessions_list":
        failed, listed = api.answer(name, {"limit": 200})
        assert not failed
        assert theirs not in json.dumps(listed)
        assert SECRET not in json.dumps(listed)
    elif name == "session_search":
        failed, found = api.answer(name, {"query": SECRET})
        assert (failed, found.get("hits", [])) == (False, [])
        _denied(api, name, {"session_id": theirs}, {"session_id": UNKNOWN_SESSION}, theirs)
    elif name in ("run_status", "run_stop"):
        _denied(api, name, {"run_id": run}, {"run_id": UNKNOWN_RUN}, run)
    elif name == "session_send":
        _denied(
            api,
            name,
            {"session_id": theirs, "message": "let me in"},
            {"session_id": UNKNOWN_SESSION, "message": "let me in"},
            theirs,
        )
    else:
        _denied(api, name, {"session_id": theirs}, {"session_id": UNKNOWN_SESSION}, theirs)
    with api.gateway.read() as store:
        assert [m.content for m in store.load_transcript(theirs)] == [f"the {SECRET} plans", "noted"]
    stored = api.inbox.stored_answer("api_server", run)
    assert stored is not None
    assert stored.state == "done"


def test_another_platforms_session_is_as_unknown_to_the_client_key(api: Api) -> None:
    webhook = _stored_session(
        api, SessionSource(platform="webhook", account_id="default", chat_id="ops", user_id="ops"), f"{SECRET} vault"
    )
    _denied(api, "session_read", {"session_id": webhook}, {"session_id": UNKNOWN_SESSION}, webhook)
    failed, found = api.answer("session_search", {"query": SECRET})
    assert (failed, found.get("hits", [])) == (False, [])


def test_the_admin_key_sees_every_session_and_run(api: Api) -> None:
    theirs = _other_keys_session(api)
    run = _other_keys_run(api)
    mine = api.chat("mine")
    failed, listed = api.answer("sessions_list", {"limit": 200}, key=ADMIN)
    assert not failed
    assert {theirs, mine} <= {row["tip"]["id"] for row in listed["data"]}
    failed, found = api.answer("session_search", {"query": SECRET}, key=ADMIN)
    assert theirs in [hit["session_id"] for hit in found["hits"]]
    failed, read = api.answer("session_read", {"session_id": theirs}, key=ADMIN)
    assert not failed
    assert read["messages"][0]["content"] == f"the {SECRET} plans"
    failed, status = api.answer("run_status", {"run_id": run}, key=ADMIN)
    assert (failed, status["status"]) == (False, "completed")
    failed, sent = api.answer("session_send", {"session_id": mine, "message": "from the operator"}, key=ADMIN)
    assert (failed, sent["reply"]) == (False, "echo: from the operator")


def test_a_wrong_key_is_refused_before_the_mcp_server(api: Api) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {OTHER}"}
    response = httpx.post(api.url, json=body, headers=headers, timeout=10)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert response.json()["error"]["code"] == "invalid_api_key"
    missing = httpx.post(api.url, json=body, headers={"Accept": headers["Accept"]}, timeout=10)
    assert missing.status_code == 401


def test_bad_arguments_get_the_error_envelope(api: Api) -> None:
    failed, answer = api.answer("session_read", {"session_id": 7})
    assert failed
    assert answer["code"] == "invalid_arguments"
    assert "session_read" in answer["error"]
    assert "$.session_id" in answer["error"]
    failed, answer = api.answer("session_search", {"query": "a", "session_id": UNKNOWN_SESSION})
    assert failed
    assert "query and session_id do not go together" in answer["error"]


def test_get_and_delete_are_refused_with_405_since_a_stateless_server_has_no_stream_or_session(api: Api) -> None:
    headers = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {KEY}"}
    for method in ("GET", "DELETE"):
        response = httpx.request(method, api.url, headers=headers, timeout=10)
        assert response.status_code == 405, (method, response.status_code, response.text)


def test_without_the_sdk_the_endpoint_is_a_501_naming_the_extra(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp.server.streamable_http_manager", None)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {KEY}"}
    response = httpx.post(api.url, json=body, headers=headers, timeout=10)
    assert response.status_code == 501
    assert response.json()["error"]["code"] == "mcp_unavailable"
    assert "hermes-actors[mcp]" in response.json()["error"]["message"]


def test_calls_and_the_servers_stop_log_no_error(start: Any, caplog: pytest.LogCaptureFixture) -> None:
    api: Api = start()
    api.chat(f"the {SECRET} note")
    for _ in range(3):
        failed, _found = api.answer("session_search", {"query": SECRET})
        assert not failed
    api.server.stop(10)
    gc.collect()  # a task left pending on the closed loop is logged when it is collected
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_a_caller_that_leaves_during_session_send_stops_its_turn(start: Any) -> None:
    agent = GatedAgent()
    api: Api = start(agent=agent)

    async def leave() -> None:
        call = asyncio.create_task(_call(api.url, KEY, "session_send", {"message": "a slow one"}))
        assert await asyncio.to_thread(agent.started.wait, 10)
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await call

    asyncio.run(leave())
    poll_until(lambda: api.waiters_waiting() == 0, what="the end of the abandoned wait")
    # The wait ends once the stop is submitted; the turn is stopped when its session takes the stop, which needs
    # no answer from the agent: released only then, the agent's late answer is dropped. (Released earlier, it
    # could answer before the session took the stop, as a turn that ends before a /stop does.)
    assert api.gateway.wait_idle(10)
    agent.release.set()
    assert api.gateway.wait_idle(10)
    with api.gateway.read() as store:
        (session,) = store.list_sessions(limit=5)
        kept = [(m.role, m.content) for m in store.load_transcript(session.id)]
    assert ("user", "a slow one") in kept
    assert ("assistant", "echo: a slow one") not in kept  # stopped: its answer is not stored


def test_on_the_shared_port_mcp_answers_with_the_security_headers(tmp_path: Path) -> None:
    server = ApiServer(ApiServerConfig(port=0, key=KEY), environ={})
    listener = SharedListener(host="127.0.0.1", port=0)
    assert listener.attach("api_server", server)
    with Gateway(tmp_path / "state.db", senders=server.senders()) as gateway:
        server.start(GatewayInbox(gateway, admin_key=ADMIN))
        listener.start()
        try:
            url = server.url + "/mcp"
            result = asyncio.run(_call(url, KEY, "session_send", {"message": "over one port"}))
            assert result.structuredContent is not None
            assert result.structuredContent["reply"] == "echo: over one port"
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            headers = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {KEY}"}
            response = httpx.post(url, json=body, headers=headers, timeout=10)
            assert response.status_code == 200
            assert response.headers["Content-Security-Policy"] == "default-src 'none'"
            assert response.headers["X-Content-Type-Options"] == "nosniff"
        finally:
            listener.stop(10)
