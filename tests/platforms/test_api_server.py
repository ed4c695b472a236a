from __future__ import annotations

import http.client
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from hermes_actors.agents.base import EchoAgent
from hermes_actors.config import RuntimeConfig
from hermes_actors.errors import ConfigError
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.store.records import MessageRecord
from hermes_actors.testing import GatedAgent, poll_until
from hermes_actors.waiters import ReplyWaiters
from platforms.api_server import SESSION_HEADER, ApiServer, ApiServerConfig

KEY = "sk-hermes-test"


@dataclass
class Running:
    server: ApiServer
    gateway: Gateway
    clients: list[openai.OpenAI] = field(default_factory=list)  # closed when the test ends (their sockets)

    @property
    def waiters(self) -> ReplyWaiters:
        (waiters,) = self.server.senders()
        assert isinstance(waiters, ReplyWaiters)
        return waiters

    def client(self, key: str = KEY) -> openai.OpenAI:
        """An openai client of the server, closed when the test ends if the test does not close it first."""
        client = openai.OpenAI(base_url=self.server.url + "/v1", api_key=key, max_retries=0, timeout=10)
        self.clients.append(client)
        return client

    def close_clients(self) -> None:
        """Close every client :meth:`client` made (closing one twice is harmless)."""
        while self.clients:
            self.clients.pop().close()

    def transcript(self, session_id: str) -> list[tuple[str, str | None]]:
        with self.gateway.read() as store:
            messages: list[MessageRecord] = store.load_transcript(session_id)
        return [(m.role, m.content) for m in messages]

    def connection(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", int(self.server.url.rsplit(":", 1)[1]), timeout=10)

    def request(
        self,
        body: bytes | Mapping[str, Any] | None,
        *,
        path: str = "/v1/chat/completions",
        method: str = "POST",
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, http.client.HTTPMessage, Any]:
        """Send one raw request; return status, headers and the decoded JSON body."""
        payload = body if isinstance(body, bytes | None) else json.dumps(body).encode()
        connection = self.connection()
        try:
            connection.request(
                method, path, body=payload, headers={"Content-Type": "application/json", **(headers or {})}
            )
            response = connection.getresponse()
            return response.status, response.headers, json.loads(response.read())
        finally:
            connection.close()


Start = Callable[..., Running]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    """Start a gateway on ``tmp_path / "state.db"`` and an API server on 127.0.0.1 port 0 in front of it."""
    with ExitStack() as stack:

        def run(
            *,
            agent: EchoAgent | None = None,
            environ: Mapping[str, str] | None = None,
            runtime: RuntimeConfig | None = None,
            **config: Any,
        ) -> Running:
            options: dict[str, Any] = {"port": 0, "key": KEY} | config
            server = ApiServer(ApiServerConfig(**options), environ=environ or {})
            gateway = Gateway(tmp_path / "state.db", config=runtime, agent=agent, senders=server.senders())
            stack.callback(gateway.stop, 10)
            if isinstance(agent, GatedAgent):
                stack.callback(agent.release.set)  # runs first: no turn holds up the gateway's stop
            server.start(GatewayInbox(gateway))
            stack.callback(server.stop, 10)
            running = Running(server=server, gateway=gateway)
            stack.callback(running.close_clients)  # runs before the server stops
            return running

        yield run


@pytest.fixture
def running(start: Start) -> Running:
    return start()


def chat(text: str, *earlier: dict[str, str]) -> list[Any]:
    return [*earlier, {"role": "user", "content": text}]


def ask(running: Running, text: str, **headers: str) -> tuple[str, str]:
    """Send ``text`` through the OpenAI client; return the reply and the session header."""
    with running.client() as client:
        raw = client.chat.completions.with_raw_response.create(
            model="hermes-agent", messages=chat(text), extra_headers=headers
        )
        completion = raw.parse()
    return completion.choices[0].message.content or "", raw.headers[SESSION_HEADER]


# -- the OpenAI client ------------------------------------------------------------------------------------------


def test_a_completion_through_the_openai_client_echoes_the_newest_user_message(running: Running) -> None:
    with running.client() as client:
        raw = client.chat.completions.with_raw_response.create(model="my-model", messages=chat("hello"))
    completion = raw.parse()
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert completion.model == "my-model"
    (choice,) = completion.choices
    assert choice.message.role == "assistant"
    assert choice.message.content == "echo: hello"
    assert choice.finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens > 0
    session_id = raw.headers[SESSION_HEADER]
    assert running.transcript(session_id) == [("user", "hello"), ("assistant", "echo: hello")]


def test_a_streamed_completion_adds_up_to_the_reply_and_finishes_with_stop(running: Running) -> None:
    with running.client() as client:
        stream = client.chat.completions.create(
            model="hermes-agent",
            messages=chat("stream me"),
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert deltas[0].role == "assistant"
    assert "".join(d.content or "" for d in deltas) == "echo: stream me"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop"
    assert all(f is None for f in finishes[:-1])
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens > 0


def test_a_stream_carries_the_session_header_and_ends_with_done(running: Running) -> None:
    connection = running.connection()
    try:
        body = json.dumps({"model": "m", "stream": True, "messages": chat("hi")}).encode()
        connection.request(
            "POST",
            "/v1/chat/completions",
            body=body,
            headers={"Authorization": f"Bearer {KEY}", SESSION_HEADER: "streamer"},
        )
        response = connection.getresponse()
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        session_id = response.headers[SESSION_HEADER]
        events = response.read().decode().split("\n\n")
    finally:
        connection.close()
    assert events[-2:] == ["data: [DONE]", ""]
    assert ("assistant", "echo: hi") in running.transcript(session_id)


def test_models_lists_the_configured_model(start: Start) -> None:
    running = start(model_name="house-agent")
    with running.client() as client:
        models = list(client.models.list())
    assert [(m.id, m.object, m.owned_by) for m in models] == [("house-agent", "model", "hermes-actors")]
    assert models[0].created > 0


def test_a_wrong_or_missing_key_is_refused_and_health_needs_none(running: Running) -> None:
    with running.client("sk-wrong") as client, pytest.raises(openai.AuthenticationError) as refused:
        client.chat.completions.create(model="hermes-agent", messages=chat("hello"))
    assert refused.value.code == "invalid_api_key"
    status, _, body = running.request({"messages": chat("hello")})
    assert status == 401
    assert body["error"]["code"] == "invalid_api_key"
    assert running.request(None, path="/health", method="GET")[2]["status"] == "ok"


def test_the_key_may_come_from_the_environment(start: Start) -> None:
    running = start(key=None, environ={"HERMES_API_KEY": "sk-from-env"})
    assert ask_with_key(running, "sk-from-env") == "echo: hi"
    with pytest.raises(openai.AuthenticationError):
        ask_with_key(running, KEY)


def ask_with_key(running: Running, key: str) -> str:
    with running.client(key) as client:
        completion = client.chat.completions.create(model="hermes-agent", messages=chat("hi"))
    return completion.choices[0].message.content or ""


def test_no_key_configured_means_no_auth_on_loopback(start: Start) -> None:
    running = start(key=None)
    assert ask_with_key(running, "anything") == "echo: hi"
    assert "no key required" in " ".join(running.server.describe())


def test_a_request_without_a_user_message_raises_bad_request(running: Running) -> None:
    with running.client() as client, pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="hermes-agent", messages=[{"role": "system", "content": "be brief"}])
    assert "role 'user'" in refused.value.message


# -- sessions ---------------------------------------------------------------------------------------------------


def test_requests_with_one_session_header_share_a_session_holding_only_the_new_turns(running: Running) -> None:
    with running.client() as client:
        first = client.chat.completions.with_raw_response.create(
            model="hermes-agent", messages=chat("hello"), extra_headers={SESSION_HEADER: "s1"}
        )
        # A client re-sends the whole conversation; only its newest user message is a new turn.
        history = [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "echo: hello"},
        ]
        second = client.chat.completions.with_raw_response.create(
            model="hermes-agent", messages=chat("again", *history), extra_headers={SESSION_HEADER: "s1"}
        )
    session_id = first.headers[SESSION_HEADER]
    assert second.headers[SESSION_HEADER] == session_id
    assert second.parse().choices[0].message.content == "echo: again"
    assert running.transcript(session_id) == [
        ("user", "hello"),
        ("assistant", "echo: hello"),
        ("user", "again"),
        ("assistant", "echo: again"),
    ]


def test_a_different_session_header_opens_a_different_session(running: Running) -> None:
    _, one = ask(running, "one", **{SESSION_HEADER: "s1"})
    _, two = ask(running, "two", **{SESSION_HEADER: "s2"})
    assert one != two
    assert running.transcript(two) == [("user", "two"), ("assistant", "echo: two")]


def test_the_user_field_is_mixed_into_the_conversation_a_stateless_client_continues(running: Running) -> None:
    first: list[ChatCompletionMessageParam] = [{"role": "user", "content": "first"}]
    second: list[ChatCompletionMessageParam] = [
        *first,
        {"role": "assistant", "content": "echo: first"},
        {"role": "user", "content": "second"},
    ]
    sessions = set()
    for messages in (first, second):
        with running.client() as client:
            raw = client.chat.completions.with_raw_response.create(
                model="hermes-agent", messages=messages, user="alice"
            )
        sessions.add(raw.headers[SESSION_HEADER])
    (session_id,) = sessions
    with running.gateway.read() as store:
        assert store.get_session(session_id).user_id == "alice"
    assert [c for role, c in running.transcript(session_id) if role == "user"] == ["first", "second"]


def test_without_header_or_user_every_request_is_a_fresh_conversation(running: Running) -> None:
    _, one = ask(running, "one")
    _, two = ask(running, "two")
    assert one != two


def test_a_header_naming_a_stored_session_continues_that_session(running: Running) -> None:
    _, session_id = ask(running, "remember me")
    reply, continued = ask(running, "still there?", **{SESSION_HEADER: session_id})
    assert (reply, continued) == ("echo: still there?", session_id)
    assert [c for role, c in running.transcript(session_id) if role == "user"] == ["remember me", "still there?"]


def test_array_content_joins_its_text_parts(running: Running) -> None:
    parts = [{"type": "text", "text": "two"}, {"type": "text", "text": "parts"}]
    status, _, body = running.request(
        {"messages": [{"role": "user", "content": parts}]}, headers={"Authorization": f"Bearer {KEY}"}
    )
    assert status == 200
    assert body["choices"][0]["message"]["content"] == "echo: two\nparts"
    assert body["model"] == "hermes-agent"  # no model in the request: the configured name


# -- concurrency ------------------------------------------------------------------------------------------------


def test_concurrent_requests_to_different_sessions_are_all_answered(running: Running) -> None:
    def one(n: int) -> tuple[str, str]:
        return ask(running, f"message {n}", **{SESSION_HEADER: f"chat-{n}"})

    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(one, range(10)))
    assert [reply for reply, _ in answers] == [f"echo: message {n}" for n in range(10)]
    assert len({session for _, session in answers}) == 10


def test_concurrent_requests_to_one_session_all_get_a_reply(running: Running) -> None:
    def one(n: int) -> tuple[str, str]:
        return ask(running, f"part {n}", **{SESSION_HEADER: "shared"})

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(one, range(6)))
    (session_id,) = {session for _, session in answers}
    for n, (reply, _) in enumerate(answers):
        assert reply.startswith("echo: ")
        assert f"part {n}" in reply  # its own turn, or a turn that merged it with others
    user_text = "\n".join(c or "" for role, c in running.transcript(session_id) if role == "user")
    assert all(f"part {n}" in user_text for n in range(6))


# -- malformed input ------------------------------------------------------------------------------------------

AUDIO_PARTS = [  # image parts are attachments now; audio input is not taken
    {"type": "text", "text": "look"},
    {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("body", "path", "method", "status", "param"),
    [
        pytest.param(b"{not json", "/v1/chat/completions", "POST", 400, None, id="invalid-json"),
        pytest.param(b'{"messages": "hi"}', "/v1/chat/completions", "POST", 400, "messages", id="messages-not-a-list"),
        pytest.param(
            b'{"messages": [{"role": 1}]}', "/v1/chat/completions", "POST", 400, "messages[0].role", id="type"
        ),
        pytest.param(b"{}", "/v1/chat/completions", "POST", 400, None, id="no-messages"),
        pytest.param(
            b'{"messages": [{"role": "assistant", "content": "hi"}]}',
            "/v1/chat/completions",
            "POST",
            400,
            "messages",
            id="no-user-message",
        ),
        pytest.param(
            json.dumps({"messages": [{"role": "user", "content": AUDIO_PARTS}]}).encode(),
            "/v1/chat/completions",
            "POST",
            400,
            "messages[0].content[1].type",
            id="audio-part",
        ),
        pytest.param(b"x" * 8192, "/v1/chat/completions", "POST", 413, None, id="too-large"),
        pytest.param(None, "/v1/embeddings", "POST", 404, None, id="unknown-path"),
        pytest.param(None, "/nowhere", "GET", 404, None, id="unknown-path-without-v1"),
        pytest.param(None, "/v1/chat/completions", "GET", 405, None, id="wrong-method"),
    ],
)
def test_malformed_requests_get_an_openai_error_and_the_server_keeps_answering(
    start: Start, body: bytes | None, path: str, method: str, status: int, param: str | None
) -> None:
    running = start(max_body_bytes=4096)
    got, _, payload = running.request(body, path=path, method=method, headers={"Authorization": f"Bearer {KEY}"})
    assert got == status
    error = payload["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["message"]
    assert error["param"] == param
    assert ask(running, "still fine")[0] == "echo: still fine"


def test_a_decode_error_names_the_field_path(running: Running) -> None:
    status, _, payload = running.request(
        {"messages": [{"role": "user", "content": 5}]}, headers={"Authorization": f"Bearer {KEY}"}
    )
    assert status == 400
    assert "$.messages[0].content" in payload["error"]["message"]


# -- configuration and banner ---------------------------------------------------------------------------------


def test_a_non_loopback_host_without_a_key_is_refused() -> None:
    with pytest.raises(ConfigError) as refused:
        ApiServer(ApiServerConfig(host="0.0.0.0"), environ={})
    assert refused.value.path == "platforms.api_server.key"
    assert "HERMES_API_KEY" in str(refused.value)
    assert ApiServer(ApiServerConfig(host="0.0.0.0"), environ={"HERMES_API_KEY": "k"}).key_required
    assert ApiServer(ApiServerConfig(host="::1"), environ={}).key_required is False


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"port": 70000}, "platforms.api_server.port"),
        ({"port": -1}, "platforms.api_server.port"),
        ({"request_timeout_s": 0}, "platforms.api_server.request_timeout_s"),
        ({"max_body_bytes": 10}, "platforms.api_server.max_body_bytes"),
        ({"keepalive_s": 0}, "platforms.api_server.keepalive_s"),
        ({"key": " "}, "platforms.api_server.key"),
        ({"model_name": ""}, "platforms.api_server.model_name"),
    ],
)
def test_invalid_config_values_name_their_field(fields: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError) as refused:
        ApiServerConfig(**fields)
    assert refused.value.path == path


def test_unknown_config_fields_are_refused() -> None:
    with pytest.raises(msgspec.ValidationError, match="prot"):
        msgspec.convert({"prot": 1}, ApiServerConfig)


def test_describe_names_the_url_and_how_to_authenticate(start: Start) -> None:
    running = start(key=None, environ={"HERMES_API_KEY": "sk-env"})
    first, second = running.server.describe()
    assert first.startswith(f"OpenAI-compatible API: {running.server.url}/v1  (curl {running.server.url}/v1/")
    assert '"Authorization: Bearer $HERMES_API_KEY"' in first
    assert "sk-env" not in first + second
    assert "requires Authorization: Bearer" in second


# -- waiting ----------------------------------------------------------------------------------------------------


def test_a_turn_slower_than_the_request_timeout_answers_504_and_its_reply_is_stored(start: Start) -> None:
    agent = GatedAgent()
    running = start(agent=agent, request_timeout_s=0.2)
    status, headers, payload = running.request(
        {"messages": chat("slow")}, headers={"Authorization": f"Bearer {KEY}", SESSION_HEADER: "slow"}
    )
    assert status == 504
    assert payload["error"]["code"] == "timeout"
    session_id = headers[SESSION_HEADER]
    assert f"runs in session {session_id}, and an answer it gives is stored there" in payload["error"]["message"]
    agent.release.set()
    assert running.gateway.wait_idle(10)
    assert running.transcript(session_id) == [("user", "slow"), ("assistant", "echo: slow")]
    assert running.waiters.waiting() == 0


def test_a_stream_sends_keep_alive_comments_while_the_turn_runs(start: Start) -> None:
    agent = GatedAgent()
    running = start(agent=agent, keepalive_s=0.05)
    connection = running.connection()
    try:
        body = json.dumps({"stream": True, "messages": chat("wait")}).encode()
        connection.request("POST", "/v1/chat/completions", body=body, headers={"Authorization": f"Bearer {KEY}"})
        response = connection.getresponse()
        assert response.status == 200
        assert response.headers[SESSION_HEADER]  # known before the reply: the session the key leads to
        lines = [response.readline()]
        while lines[-1] != b": keepalive\n":
            lines.append(response.readline())
        agent.release.set()
        rest = response.read().decode()
    finally:
        connection.close()
    assert lines[0].startswith(b"data: ")
    assert b'"role":"assistant"' in lines[0]
    contents = [
        json.loads(line[6:])["choices"][0]["delta"].get("content")
        for line in rest.splitlines()
        if line.startswith("data: {")
    ]
    assert "".join(c for c in contents if c) == "echo: wait"
    assert rest.endswith("data: [DONE]\n\n")


def test_a_client_that_disconnects_stops_waiting(start: Start) -> None:
    agent = GatedAgent()
    running = start(agent=agent, keepalive_s=0.05)
    body = json.dumps({"messages": chat("bye")}).encode()
    port = int(running.server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {KEY}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        assert agent.started.wait(10)
        assert running.waiters.waiting() == 1
    # the server notices the disconnect within one poll (here 0.05 s)
    poll_until(lambda: running.waiters.waiting() == 0, 10, what="the end of the abandoned wait")
    agent.release.set()
    assert running.gateway.wait_idle(10)
    assert ask(running, "next")[0] == "echo: next"


def test_a_stopped_gateway_answers_503(running: Running) -> None:
    running.gateway.stop(10)
    status, _, payload = running.request({"messages": chat("anyone?")}, headers={"Authorization": f"Bearer {KEY}"})
    assert status == 503
    assert payload["error"]["code"] == "service_unavailable"
    assert running.request(None, path="/health", method="GET")[0] == 200


def test_stopping_the_server_drains_then_answers_a_request_still_waiting_503(start: Start) -> None:
    agent = GatedAgent()
    running = start(agent=agent)
    answers: list[tuple[int, Any]] = []

    def wait_for_reply() -> None:
        status, _, payload = running.request(
            {"messages": chat("long")}, headers={"Authorization": f"Bearer {KEY}", SESSION_HEADER: "long"}
        )
        answers.append((status, payload))

    waiting = threading.Thread(target=wait_for_reply)
    waiting.start()
    assert agent.started.wait(10)
    started = time.monotonic()
    running.server.stop(1)  # the turn outlives the drain
    waiting.join(10)
    assert 0.9 < time.monotonic() - started < 5
    ((status, payload),) = answers
    assert status == 503
    assert payload["error"]["code"] == "gateway_draining"
    assert "its turn is not stopped" in payload["error"]["message"]
    agent.release.set()
    assert running.gateway.wait_idle(10)


def test_a_draining_server_refuses_new_requests_and_gives_waiting_ones_their_reply(start: Start) -> None:
    agent = GatedAgent()
    running = start(agent=agent)
    answers: list[tuple[int, Any]] = []

    def wait_for_reply() -> None:
        status, _, payload = running.request(
            {"messages": chat("finish me")}, headers={"Authorization": f"Bearer {KEY}", SESSION_HEADER: "drain"}
        )
        answers.append((status, payload))

    waiting = threading.Thread(target=wait_for_reply)
    waiting.start()
    assert agent.started.wait(10)
    stopping = threading.Thread(target=running.server.stop, args=(10,))
    stopping.start()
    poll_until(lambda: running.server._service.draining, 5, what="the drain")
    status, headers, payload = running.request(
        {"messages": chat("too late")}, headers={"Authorization": f"Bearer {KEY}"}
    )
    assert (status, payload["error"]["code"], headers["Retry-After"]) == (503, "gateway_draining", "1")
    agent.release.set()
    waiting.join(10)
    stopping.join(15)
    ((status, payload),) = answers
    assert status == 200
    assert payload["choices"][0]["message"]["content"] == "echo: finish me"


# -- hostile input ----------------------------------------------------------------------------------------------


def test_json_nested_a_thousand_deep_gets_a_400_naming_the_depth_and_logs_no_error(
    running: Running, caplog: pytest.LogCaptureFixture
) -> None:
    deep = b'{"messages": [{"role": "user", "content": "hi"}], "tools": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    for body in (deep, b"[" * 100_000, b'{"a": ' * 5000 + b"1" + b"}" * 5000):
        status, _, payload = running.request(body, headers={"Authorization": f"Bearer {KEY}"})
        assert status == 400, payload
        assert set(payload["error"]) == {"message", "type", "param", "code"}
        assert payload["error"]["code"] == "invalid_json"
        assert "JSON nested deeper than 64 levels" in payload["error"]["message"]
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert ask(running, "still fine")[0] == "echo: still fine"


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(b"caf\xc3\xa9", id="utf-8"),
        pytest.param(b"\xff\xfe", id="invalid-utf-8"),
        pytest.param(b"a\tb", id="tab"),
        pytest.param(b"../sessions", id="dot-dot"),
        pytest.param(b"a/b", id="slash"),
        pytest.param(b"a\\b", id="backslash"),
        pytest.param(b"x" * 257, id="too-long"),
    ],
)
def test_a_session_header_that_is_not_a_plain_name_gets_a_400_naming_the_header(
    running: Running, value: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    headers: dict[str, Any] = {"Authorization": f"Bearer {KEY}", SESSION_HEADER: value}
    status, _, payload = running.request({"messages": chat("hi")}, headers=headers)
    assert status == 400, payload
    error = payload["error"]
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", "invalid_header", SESSION_HEADER)
    assert error["message"].startswith(f"{SESSION_HEADER} must be")
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
    with running.gateway.read() as store:
        assert store.list_sessions() == []  # refused before anything was stored


@pytest.mark.parametrize("value", [b"a\x01b", b"a\x7fb", b"a\x00b"], ids=["control", "delete", "nul"])
def test_a_control_character_in_a_header_is_refused_by_the_http_parser_without_an_error_line(
    running: Running, value: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """aiohttp's parser refuses these bytes before any handler runs (a plain-text 400); it is no server error."""
    caplog.set_level(logging.INFO)
    connection = running.connection()
    try:
        connection.request(
            "POST",
            "/v1/chat/completions",
            body=json.dumps({"messages": chat("hi")}).encode(),
            headers={"Authorization": f"Bearer {KEY}", SESSION_HEADER: value},
        )
        assert connection.getresponse().status == 400
    finally:
        connection.close()
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert "api_server: refused a malformed HTTP request (400 Invalid header value char" in caplog.text
    assert ask(running, "still fine")[0] == "echo: still fine"


def test_a_session_header_of_256_printable_characters_is_a_name(running: Running) -> None:
    name = "s" * 250 + "-._~:@"
    reply, session_id = ask(running, "hi", **{SESSION_HEADER: name})
    assert reply == "echo: hi"
    for padded in (name, f"  {name}\t"):  # the spaces around it are not part of the name
        status, headers, payload = running.request(
            {"messages": chat("again")}, headers={"Authorization": f"Bearer {KEY}", SESSION_HEADER: padded}
        )
        assert (status, payload["choices"][0]["message"]["content"]) == (200, "echo: again")
        assert headers[SESSION_HEADER] == session_id
