"""The operator API (``/api/sessions``), ``/v1/capabilities``, ``/health/detailed``'s checks, CORS and the security
headers, on a real gateway and a real API server on 127.0.0.1."""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Protocol

import pytest

from hermes_actors.agents.base import EchoAgent
from hermes_actors.agents.turn import AgentError, AgentReply, TurnInput
from hermes_actors.config import RuntimeConfig
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.runtime.operator import GatewayOperator
from hermes_actors.store import Store
from platforms.api_server import SESSION_HEADER, ApiServer, ApiServerConfig
from platforms.api_server.discovery import ENDPOINTS
from platforms.api_server.guards import SECURITY_HEADERS
from platforms.support.shared_http import SharedListener

KEY = "sk-client-key"
ADMIN = "hk-admin-operator-key-for-tests"
PADDING = " and check every table of it twice" * 4  # turns a summary and 2 recent messages are shorter than


class FailingAgent(EchoAgent):
    """Echoes, except that a turn saying ``fail`` fails as a model endpoint's 500 would."""

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        if turn.user_text == "fail":
            raise AgentError("the model endpoint answered 500")
        return super().run_turn(turn, timeout_s=timeout_s)


class Api:
    """A running API server with an operator key, and raw requests to it."""

    def __init__(self, server: ApiServer, gateway: Gateway) -> None:
        self.server = server
        self.gateway = gateway
        self.port = int(server.url.rsplit(":", 1)[1])

    def raw(
        self,
        method: str,
        path: str,
        body: bytes | Mapping[str, Any] | None = None,
        *,
        key: str | None = ADMIN,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        payload = body if isinstance(body, bytes | None) else json.dumps(body).encode()
        sent = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request(method, path, body=payload, headers={**sent, **(headers or {})})
            response = connection.getresponse()
            return response.status, response.headers, response.read()
        finally:
            connection.close()

    def call(self, method: str, path: str, body: Any = None, **options: Any) -> tuple[int, Any]:
        status, _, data = self.raw(method, path, body, **options)
        return status, json.loads(data) if data else None

    def ok(self, method: str, path: str, body: Any = None, *, status: int = 200) -> Any:
        got, data = self.call(method, path, body)
        assert got == status, data
        return data

    def talk(self, session_id: str, *texts: str) -> list[dict[str, Any]]:
        return [self.ok("POST", f"/api/sessions/{session_id}/chat", {"message": text}) for text in texts]

    def compressed(self, title: str | None = None) -> tuple[str, str]:
        """A session talked to, then compressed: (root, tip)."""
        root = self.ok("POST", "/api/sessions", {"title": title} if title else {}, status=201)["id"]
        self.talk(root, "hello", "second" + PADDING, "third" + PADDING, "fourth" + PADDING)
        (reply,) = self.talk(root, "/compress")
        assert reply["session_id"] != root, reply
        return root, reply["session_id"]


class Start(Protocol):
    def __call__(self, *, admin_key: str | None = ADMIN, agent: EchoAgent | None = None, **config: Any) -> Api: ...


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    with ExitStack() as stack:

        def run(*, admin_key: str | None = ADMIN, agent: EchoAgent | None = None, **config: Any) -> Api:
            options: dict[str, Any] = {"port": 0, "key": KEY} | config
            server = ApiServer(ApiServerConfig(**options), environ={})
            gateway = Gateway(
                tmp_path / "state.db",
                config=RuntimeConfig(protected_recent_messages=2),
                senders=server.senders(),
                agent=agent,
            )
            stack.callback(gateway.stop, 10)
            server.start(GatewayInbox(gateway, admin_key=admin_key))
            stack.callback(server.stop, 10)
            return Api(server, gateway)

        yield run


@pytest.fixture
def api(start: Start) -> Api:
    return start()


# -- the admin key ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", [None, "wrong-key", KEY], ids=["no key", "a wrong key", "the client key"])
def test_the_operator_routes_refuse_anything_but_the_admin_key(api: Api, key: str | None) -> None:
    status, headers, body = api.raw("GET", "/api/sessions", key=key)
    assert status == 401
    assert headers["WWW-Authenticate"] == "Bearer"
    error = json.loads(body)["error"]
    assert error["code"] == "invalid_admin_key"
    assert "hermesctl admin-key" in error["message"]
    assert api.call("POST", "/api/sessions", {}, key=key)[0] == 401
    assert api.call("GET", "/api/sessions", key=ADMIN)[0] == 200


def test_the_admin_key_does_not_open_the_client_routes_and_is_not_needed_there(api: Api) -> None:
    assert api.call("GET", "/v1/models", key=ADMIN)[0] == 401
    status, models = api.call("GET", "/v1/models", key=KEY)
    assert status == 200
    assert models["data"][0]["id"] == "hermes-agent"


def test_without_an_admin_key_the_operator_routes_stay_closed(start: Start) -> None:
    api = start(admin_key=None)
    status, body = api.call("GET", "/api/sessions", key=ADMIN)
    assert status == 401
    assert "operator API is off" in body["error"]["message"]
    assert api.call("GET", "/api/sessions", key="")[0] == 401


# -- create, get, patch, end, delete ---------------------------------------------------------------------------


def test_a_session_is_created_read_renamed_ended_and_deleted(api: Api) -> None:
    created = api.ok(
        "POST", "/api/sessions", {"id": "ops-1", "title": "Ops", "system_prompt": "You are terse."}, status=201
    )
    assert (created["id"], created["title"], created["live"], created["source"]) == ("ops-1", "Ops", True, "api_server")
    assert created["system_prompt"] == "You are terse."
    assert api.ok("GET", "/api/sessions/ops-1")["title"] == "Ops"
    assert api.ok("GET", "/api/sessions")["data"][0]["system_prompt"] is None  # listings leave it out
    assert api.ok("PATCH", "/api/sessions/ops-1", {"title": "Ops desk"})["title"] == "Ops desk"
    assert api.ok("PATCH", "/api/sessions/ops-1", {"title": None})["title"] is None
    ended = api.ok("PATCH", "/api/sessions/ops-1", {"end": True})
    assert (ended["live"], ended["end_reason"]) == (False, "operator")
    assert api.ok("DELETE", "/api/sessions/ops-1") == {"id": "ops-1", "object": "session.deleted", "deleted": True}
    status, body = api.call("GET", "/api/sessions/ops-1")
    assert (status, body["error"]["code"]) == (404, "session_not_found")
    assert api.call("DELETE", "/api/sessions/ops-1")[0] == 404


def test_a_live_session_with_a_running_actor_is_ended_then_deleted(api: Api) -> None:
    session = api.ok("POST", "/api/sessions", {"title": "short-lived"}, status=201)["id"]
    api.talk(session, "hello")  # an actor holds it now
    assert api.ok("DELETE", f"/api/sessions/{session}")["deleted"] is True
    assert api.call("GET", f"/api/sessions/{session}")[0] == 404
    assert api.ok("POST", "/api/sessions", {"title": "short-lived"}, status=201)["title"] == "short-lived"


def test_a_created_session_gets_a_generated_id_and_keeps_its_own_system_prompt(api: Api) -> None:
    assert api.ok("POST", "/api/sessions", b"", status=201)["title"] is None  # an empty body is {}
    created = api.ok("POST", "/api/sessions", {"system_prompt": "You are terse."}, status=201)
    assert len(created["id"]) > 8
    (reply,) = api.talk(created["id"], "ping")
    assert reply == {"session_id": created["id"], "reply": "echo: ping"}
    with api.gateway.read() as store:
        assert [m.content for m in store.load_transcript(created["id"])] == ["ping", "echo: ping"]
        record = store.get_session(created["id"])
    assert record.system_prompt is not None
    assert record.system_prompt.startswith("You are terse.")  # frozen by the first turn in place of ours


@pytest.mark.parametrize(
    ("body", "status", "param", "words"),
    [
        (b"{not json", 400, None, "not valid JSON"),
        ({"titel": "x"}, 400, None, "titel"),
        ({"title": 5}, 400, "title", "Expected `str | null`"),
        ({"title": "x" * 101}, 400, "title", "the limit is 100"),
        ({"id": "../etc"}, 400, "id", "letters, digits"),
    ],
)
def test_a_bad_create_gets_a_400_naming_the_field(
    api: Api, body: Any, status: int, param: str | None, words: str
) -> None:
    got, answer = api.call("POST", "/api/sessions", body)
    assert got == status, answer
    assert answer["error"]["param"] == param
    assert words in answer["error"]["message"]


def test_a_taken_id_or_title_is_a_conflict_and_a_patch_needs_a_field(api: Api) -> None:
    api.ok("POST", "/api/sessions", {"id": "one", "title": "taken"}, status=201)
    status, body = api.call("POST", "/api/sessions", {"id": "one"})
    assert (status, body["error"]["code"], body["error"]["param"]) == (409, "session_exists", "id")
    status, body = api.call("POST", "/api/sessions", {"title": "taken"})
    assert (status, body["error"]["code"]) == (409, "title_in_use")
    api.ok("POST", "/api/sessions", {"id": "two"}, status=201)
    assert api.call("PATCH", "/api/sessions/two", {"title": "taken"})[1]["error"]["code"] == "title_in_use"
    status, body = api.call("PATCH", "/api/sessions/two", {})
    assert status == 400
    assert "title" in body["error"]["message"]
    status, body = api.call("PATCH", "/api/sessions/two", {"title": "y" * 150})
    assert (status, body["error"]["param"]) == (400, "title")
    assert "100" in body["error"]["message"]
    assert api.call("PATCH", "/api/sessions/nope", {"title": "z"})[0] == 404


def test_a_session_another_process_holds_is_refused_with_409_and_left_alone(api: Api) -> None:
    session = api.ok("POST", "/api/sessions", {"id": "held", "title": "held"}, status=201)["id"]
    with Store.open(api.gateway.database) as store:
        assert store.leases.acquire(session, "elsewhere:4242:1", 600) is None
    for method, path, body in [
        ("PATCH", "/api/sessions/held", {"title": "grabbed"}),
        ("PATCH", "/api/sessions/held", {"end": True}),
        ("DELETE", "/api/sessions/held", None),
        ("POST", "/api/sessions/held/fork", None),
        ("POST", "/api/sessions/held/chat", {"message": "hi"}),
    ]:
        status, answer = api.call(method, path, body)
        assert (status, answer["error"]["code"]) == (409, "session_busy"), (method, path)
        assert "elsewhere" in answer["error"]["message"]
    after = api.ok("GET", "/api/sessions/held")
    assert (after["title"], after["live"]) == ("held", True)


# -- listing ---------------------------------------------------------------------------------------------------


def test_the_listing_pages_filters_by_source_and_shows_a_lineage_once(api: Api, tmp_path: Path) -> None:
    root, tip = api.compressed("deploy notes")
    for n in range(3):
        api.ok("POST", "/api/sessions", {"id": f"plain-{n}"}, status=201)
    with Store.open(api.gateway.database) as store:
        store.create_session("telegram", session_id="tg-1")
    page = api.ok("GET", "/api/sessions?limit=2")
    assert (page["total"], page["limit"], page["offset"], page["has_more"]) == (5, 2, 0, True)
    assert [row["id"] for row in page["data"]] == ["tg-1", "plain-2"]
    rest = api.ok("GET", "/api/sessions?limit=10&offset=2")
    assert [row["id"] for row in rest["data"]] == ["plain-1", "plain-0", tip]
    assert rest["has_more"] is False
    lineage = rest["data"][-1]
    assert (lineage["lineage"], lineage["title"]) == ([root, tip], "deploy notes #2")
    assert lineage["message_count"] > api.ok("GET", f"/api/sessions/{tip}")["message_count"]
    assert [row["id"] for row in api.ok("GET", "/api/sessions?source=telegram")["data"]] == ["tg-1"]
    every = api.ok("GET", "/api/sessions?include_children=true&source=api_server&limit=50")
    assert {row["id"] for row in every["data"]} == {root, tip, "plain-0", "plain-1", "plain-2"}
    assert every["total"] == 5


@pytest.mark.parametrize(
    ("query", "param"),
    [("limit=0", "limit"), ("limit=201", "limit"), ("limit=x", "limit"), ("offset=-1", "offset"),
     ("include_children=maybe", "include_children")],
)  # fmt: skip
def test_a_bad_listing_query_gets_a_400_naming_the_parameter(api: Api, query: str, param: str) -> None:
    status, body = api.call("GET", f"/api/sessions?{query}")
    assert (status, body["error"]["param"]) == (400, param)


# -- messages, fork, chat --------------------------------------------------------------------------------------


def test_messages_follow_compression_to_the_newest_session(api: Api) -> None:
    root, tip = api.compressed()
    whole = api.ok("GET", f"/api/sessions/{root}/messages")
    assert (whole["session_id"], whole["lineage"]) == (tip, [root, tip])
    contents = [m["content"] for m in whole["data"]]
    assert contents[:2] == ["hello", "echo: hello"]
    assert [m["session_id"] for m in whole["data"]][-1] == tip
    with api.gateway.read() as store:
        tip_messages = [m.content for m in store.load_transcript(tip)]
    assert contents[-len(tip_messages) :] == tip_messages
    only_tip = api.ok("GET", f"/api/sessions/{root}/messages?lineage=false")
    assert (only_tip["lineage"], [m["content"] for m in only_tip["data"]]) == ([tip], tip_messages)
    (reply,) = api.talk(root, "after the compression")
    assert reply["session_id"] == tip  # a chat to the root goes on in the newest session
    assert api.call("GET", "/api/sessions/unknown-id/messages")[0] == 404


def test_a_fork_copies_the_messages_and_ends_the_parent_branched(api: Api) -> None:
    parent = api.ok("POST", "/api/sessions", {"title": "research"}, status=201)["id"]
    api.talk(parent, "first question", "second question")
    child = api.ok("POST", f"/api/sessions/{parent}/fork", status=201)
    assert (child["title"], child["parent_session_id"], child["live"]) == ("research (2)", parent, True)
    assert child["message_count"] == 4
    ended = api.ok("GET", f"/api/sessions/{parent}")
    assert (ended["live"], ended["end_reason"]) == (False, "branched")
    copied = api.ok("GET", f"/api/sessions/{child['id']}/messages")["data"]
    assert [(m["role"], m["content"]) for m in copied] == [
        ("user", "first question"),
        ("assistant", "echo: first question"),
        ("user", "second question"),
        ("assistant", "echo: second question"),
    ]
    (reply,) = api.talk(child["id"], "go on")
    assert reply["session_id"] == child["id"]
    again = api.ok("POST", f"/api/sessions/{parent}/fork", status=201)
    assert again["title"] == "research (3)"
    assert api.ok("POST", f"/api/sessions/{child['id']}/fork", status=201)["title"] == "research (4)"
    assert api.ok("GET", f"/api/sessions/{parent}")["end_reason"] == "branched"  # the first reason stays
    assert api.call("POST", "/api/sessions/unknown-id/fork")[0] == 404


def test_chat_refuses_an_ended_session_an_empty_message_and_an_unknown_one(api: Api) -> None:
    session = api.ok("POST", "/api/sessions", {}, status=201)["id"]
    status, body = api.call("POST", f"/api/sessions/{session}/chat", {"message": "  "})
    assert (status, body["error"]["param"]) == (400, "message")
    assert api.call("POST", f"/api/sessions/{session}/chat", {"text": "hi"})[0] == 400
    assert api.call("POST", "/api/sessions/unknown-id/chat", {"message": "hi"})[0] == 404
    api.ok("PATCH", f"/api/sessions/{session}", {"end": True})
    status, body = api.call("POST", f"/api/sessions/{session}/chat", {"message": "hi"})
    assert (status, body["error"]["code"]) == (409, "session_ended")
    assert "fork" in body["error"]["message"]


def test_the_operator_may_talk_in_another_platforms_session(api: Api) -> None:
    with Store.open(api.gateway.database) as store:
        store.create_session("telegram", session_id="tg-9")
    assert api.talk("tg-9", "hello telegram") == [{"session_id": "tg-9", "reply": "echo: hello telegram"}]
    messages = api.ok("GET", "/api/sessions/tg-9/messages")["data"]
    assert [m["content"] for m in messages] == ["hello telegram", "echo: hello telegram"]


def test_a_turn_the_agent_failed_is_a_502_not_an_answer(start: Start) -> None:
    api = start(agent=FailingAgent())
    session = api.ok("POST", "/api/sessions", {}, status=201)["id"]
    status, body = api.call("POST", f"/api/sessions/{session}/chat", {"message": "fail"})
    assert (status, body["error"]["code"]) == (502, "agent_incomplete")
    status, _, raw = api.raw("POST", f"/api/sessions/{session}/chat/stream", {"message": "fail"})
    assert status == 200
    events = [line.removeprefix("data: ") for line in raw.decode().splitlines() if line.startswith("data: ")]
    assert json.loads(events[0])["error"]["code"] == "agent_incomplete"
    assert events[-1] == "[DONE]"
    assert api.talk(session, "fine again") == [{"session_id": session, "reply": "echo: fine again"}]


def test_chat_stream_sends_the_deltas_then_the_reply_then_done(api: Api) -> None:
    session = api.ok("POST", "/api/sessions", {}, status=201)["id"]
    status, headers, body = api.raw("POST", f"/api/sessions/{session}/chat/stream", {"message": "streamed hello"})
    assert status == 200
    assert headers["Content-Type"].startswith("text/event-stream")
    assert headers["X-Frame-Options"] == "DENY"
    events = [line.removeprefix("data: ") for line in body.decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    *deltas, final = [json.loads(e) for e in events[:-1]]
    assert [d["delta"] for d in deltas] == ["echo: ", "streamed ", "hello"]  # as the agent wrote them
    assert final == {"session_id": session, "reply": "echo: streamed hello"}


# -- discovery, health, CORS, headers --------------------------------------------------------------------------


def test_capabilities_publish_the_model_endpoints_and_features(start: Start) -> None:
    api = start(model_name="house-model", max_body_bytes=65536)
    assert api.call("GET", "/v1/capabilities", key=None)[0] == 401  # a /v1 route: the client key opens it
    capabilities = api.call("GET", "/v1/capabilities", key=KEY)[1]
    assert capabilities["model"] == "house-model"
    paths = {e["path"]: e for e in capabilities["endpoints"]}
    assert paths["/v1/chat/completions"]["methods"] == ["POST"]
    assert paths["/api/sessions"]["auth"] == "admin"
    features = capabilities["features"]
    assert features["streaming"] is features["token_streaming"] is features["tool_progress_events"] is True
    assert features["idempotency"] == "Idempotency-Key"
    assert features["operator_api"] is True
    assert features["session_header"] == SESSION_HEADER
    assert features["max_body_bytes"] == 65536
    assert features["responses"] is features["runs"] is True


def test_capabilities_list_every_route_the_server_answers_and_no_other() -> None:
    app = ApiServer(ApiServerConfig(port=0, key=KEY), environ={})._application()
    served: dict[str, set[str]] = {}
    for route in app.router.routes():
        path = re.sub(r"\{[a-z_]*id\}", "{id}", route.resource.canonical if route.resource else "")
        if route.method not in ("HEAD", "OPTIONS") and not path.startswith("/console"):
            served.setdefault(path, set()).add(route.method)
    published = {e.path: set(e.methods) for e in ENDPOINTS}
    assert served == published


def test_health_detailed_lists_store_disk_agent_and_platform_checks(api: Api) -> None:
    status, body = api.call("GET", "/health/detailed", key=KEY)
    assert status == 200
    checks = body["checks"]
    assert checks["store"] == {"ok": True, "writable": True, "reason": None}
    assert checks["disk"]["ok"] is True
    assert checks["disk"]["free_bytes"] > 0
    assert checks["disk"]["path"] == str(api.gateway.database.parent)
    assert checks["agent"]["kind"] == "echo"
    assert checks["platforms"]["ok"] is True
    assert "vitals" in body


def test_an_origin_outside_cors_origins_is_refused_and_an_allowed_one_is_echoed(start: Start) -> None:
    api = start(cors_origins=("https://chat.example.org",))
    status, headers, body = api.raw("GET", "/v1/models", key=KEY, headers={"Origin": "https://evil.example"})
    assert status == 403
    error = json.loads(body)["error"]
    assert error["code"] == "origin_not_allowed"
    assert "platforms.api_server.cors_origins" in error["message"]
    assert headers["X-Content-Type-Options"] == "nosniff"
    status, headers, _ = api.raw("GET", "/v1/models", key=KEY, headers={"Origin": "https://chat.example.org"})
    assert status == 200
    assert headers["Access-Control-Allow-Origin"] == "https://chat.example.org"
    assert headers["Vary"] == "Origin"
    assert api.raw("GET", "/v1/models", key=KEY)[0] == 200  # no Origin: not a browser page


def test_a_preflight_from_an_allowed_origin_is_answered_without_a_key(start: Start) -> None:
    api = start(cors_origins=("http://localhost:3000",))
    status, headers, _ = api.raw(
        "OPTIONS",
        "/v1/chat/completions",
        key=None,
        headers={"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST"},
    )
    assert status == 204
    assert headers["Access-Control-Allow-Origin"] == "http://localhost:3000"
    allowed = {h.strip().lower() for h in headers["Access-Control-Allow-Headers"].split(",")}
    assert {"authorization", "content-type", "x-hermes-session-id", "idempotency-key"} <= allowed
    assert "POST" in headers["Access-Control-Allow-Methods"]
    assert api.raw("OPTIONS", "/v1/models", key=None, headers={"Origin": "http://other:1"})[0] == 403


def test_no_cors_origins_means_every_browser_origin_is_refused(api: Api) -> None:
    assert api.raw("GET", "/health", key=None, headers={"Origin": "http://localhost:3000"})[0] == 403


def test_every_response_carries_the_security_headers(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: GatewayOperator, **_: Any) -> None:
        raise RuntimeError("a bug")

    seen = {
        200: api.raw("GET", "/health", key=None),
        401: api.raw("GET", "/api/sessions", key=None),
        404: api.raw("GET", "/no/such/route", key=None),
    }
    monkeypatch.setattr(GatewayOperator, "list_sessions", broken)
    seen[500] = api.raw("GET", "/api/sessions")
    for status, (got, headers, _) in seen.items():
        assert got == status
        for name, value in SECURITY_HEADERS.items():
            assert headers[name] == value, (status, name)


def test_a_streamed_completion_carries_the_security_headers(api: Api) -> None:
    body = {"model": "hermes-agent", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    status, headers, _ = api.raw("POST", "/v1/chat/completions", body, key=KEY)
    assert status == 200
    assert headers["Content-Security-Policy"] == "default-src 'none'"


def test_a_bad_cors_origin_in_the_config_names_its_index() -> None:
    from hermes_actors.errors import ConfigError

    with pytest.raises(ConfigError, match=r"cors_origins\[1\].*scheme://host"):
        ApiServerConfig(cors_origins=("https://ok.example", "https://bad.example/path"))


def test_on_the_shared_port_the_operator_api_guards_and_headers_come_along(tmp_path: Path) -> None:
    server = ApiServer(ApiServerConfig(port=0, key=KEY, cors_origins=("https://ok.example",)), environ={})
    listener = SharedListener(host="127.0.0.1", port=0)
    assert listener.attach("api_server", server)
    with Gateway(tmp_path / "state.db", senders=server.senders()) as gateway:
        server.start(GatewayInbox(gateway, admin_key=ADMIN))
        listener.start()
        try:
            api = Api(server, gateway)
            session = api.ok("POST", "/api/sessions", {"title": "shared"}, status=201)["id"]
            assert api.call("GET", "/api/sessions", key=KEY)[0] == 401
            status, headers, body = api.raw("POST", f"/api/sessions/{session}/chat/stream", {"message": "hi"})
            assert status == 200
            assert b"[DONE]" in body
            assert headers["Content-Security-Policy"] == "default-src 'none'"
            status, headers, _ = api.raw("GET", "/v1/models", key=KEY, headers={"Origin": "https://no.example"})
            assert (status, headers["X-Frame-Options"]) == (403, "DENY")
        finally:
            listener.stop(10)
