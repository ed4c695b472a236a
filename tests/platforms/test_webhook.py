"""The webhook platform against a real gateway, a real loopback server and a loopback callback receiver.

Requests are signed and callbacks verified by the helpers here, written from the Standard Webhooks scheme and
independent of the adapter's own code, so a mistake on one side cannot hide in the other.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import queue
import socket
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import msgspec
import pytest
from aiohttp import web
from hypothesis import event, given, settings
from hypothesis import strategies as st

from hermes_actors.errors import ConfigError, PlatformError
from hermes_actors.messages import OutboundMessage
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.testing import FakeClock
from platforms.base import Adapter, ReplySender, SendError
from platforms.support.http_host import HttpHost
from platforms.webhook import WebhookAdapter, WebhookConfig, WebhookRoute, new_webhook_secret
from tests.platforms.support import StartGateway

SECRET = "whsec_" + base64.b64encode(b"route secret, 32 bytes long....!").decode()
OTHER_SECRET = "whsec_" + base64.b64encode(b"another secret of 32 bytes.....!").decode()
CALLBACK_SECRET = "whsec_" + base64.b64encode(b"callback secret of 32 bytes....!").decode()


# -- Standard Webhooks, written out independently of the adapter ------------------------------------------------


def signature(secret: str, webhook_id: str, timestamp: str, body: bytes) -> str:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    content = webhook_id.encode() + b"." + timestamp.encode() + b"." + body
    return "v1," + base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()


def signature_is_valid(secret: str, headers: Mapping[str, str], body: bytes) -> bool:
    expected = signature(secret, headers["webhook-id"], headers["webhook-timestamp"], body)
    return any(hmac.compare_digest(offered, expected) for offered in headers["webhook-signature"].split())


def post(url: str, body: bytes, headers: Mapping[str, str], *, chunked: bool = False) -> tuple[int, dict[str, Any]]:
    """POST ``body`` and return the status and the JSON answer."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        if chunked:
            connection.request("POST", parts.path, body=iter([body]), headers=dict(headers), encode_chunked=True)
        else:
            connection.request("POST", parts.path, body=body, headers=dict(headers))
        response = connection.getresponse()
        answer: dict[str, Any] = json.loads(response.read())
        return response.status, answer
    finally:
        connection.close()


# -- the callback receiver -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Callback:
    """One POST the receiver got: lower-cased headers and the raw body."""

    headers: Mapping[str, str]
    body: bytes

    def json(self) -> dict[str, Any]:
        decoded: dict[str, Any] = json.loads(self.body)
        return decoded


class Receiver:
    """Records every callback POST, then answers with the next scripted (status, headers), or 200.

    ``POST /stall`` records the request and answers only once ``release`` is set (for client timeouts).
    """

    def __init__(self) -> None:
        self.received: queue.SimpleQueue[Callback] = queue.SimpleQueue()
        self.script: deque[tuple[int, dict[str, str]]] = deque()
        self.release = threading.Event()
        app = web.Application()
        app.router.add_post("/hook", self._hook)
        app.router.add_post("/stall", self._stall)
        self.host = HttpHost(app, name="callback-receiver")

    @property
    def url(self) -> str:
        return self.host.url + "/hook"

    def take(self) -> Callback:
        return self.received.get(timeout=10)

    async def _hook(self, request: web.Request) -> web.Response:
        self.received.put(
            Callback(headers={k.lower(): v for k, v in request.headers.items()}, body=await request.read())
        )
        status, headers = self.script.popleft() if self.script else (200, {})
        return web.Response(status=status, headers=headers, text="busy" if status >= 300 else "ok")

    async def _stall(self, request: web.Request) -> web.Response:
        self.received.put(Callback(headers=dict(request.headers), body=await request.read()))
        await self.host.blocking(lambda: self.release.wait(10))
        return web.Response(text="late")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    receiver.host.start()
    yield receiver
    receiver.release.set()
    receiver.host.stop()


# -- the adapter under test ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Webhook:
    adapter: WebhookAdapter
    gateway: Gateway
    clock: FakeClock

    def post(
        self,
        payload: Any,
        *,
        route: str = "default",
        secret: str = SECRET,
        webhook_id: str | None = None,
        timestamp: float | None = None,
        chunked: bool = False,
    ) -> tuple[int, dict[str, Any]]:
        """POST ``payload`` (JSON-encoded unless it is bytes), signed like a Standard Webhooks sender would."""
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        webhook_id = webhook_id or f"msg_{uuid.uuid4().hex}"
        stamp = str(int(self.clock.now if timestamp is None else timestamp))
        headers = {
            "content-type": "application/json",
            "webhook-id": webhook_id,
            "webhook-timestamp": stamp,
            "webhook-signature": signature(secret, webhook_id, stamp, body),
        }
        return post(f"{self.adapter.url}/webhooks/{route}", body, headers, chunked=chunked)

    def session_of(self, routing_key: str) -> str:
        with self.gateway.read() as store:
            session_id = store.get_route(routing_key)
        assert session_id is not None, f"no session for {routing_key}"
        return session_id

    def transcript(self, routing_key: str) -> list[tuple[str, str | None]]:
        with self.gateway.read() as store:
            return [(m.role, m.content) for m in store.load_transcript(self.session_of(routing_key))]


StartWebhook = Callable[..., Webhook]


@pytest.fixture
def start_webhook(start_gateway: StartGateway) -> StartWebhook:
    """Start a gateway on ``tmp_path`` with the adapter on port 0; both are stopped at the end."""

    def start(routes: Mapping[str, WebhookRoute] | None = None, **options: Any) -> Webhook:
        clock = FakeClock()
        routes = {"default": WebhookRoute(secret=SECRET)} if routes is None else routes
        adapter = WebhookAdapter(WebhookConfig(port=0, routes=dict(routes), **options), clock=clock)
        gateway = start_gateway(adapter, clock=clock)
        return Webhook(adapter=adapter, gateway=gateway, clock=clock)

    return start


def with_callback(receiver: Receiver) -> dict[str, WebhookRoute]:
    """One route, ``default``, whose replies go to ``receiver`` signed with ``CALLBACK_SECRET``."""
    return {"default": WebhookRoute(secret=SECRET, callback_url=receiver.url, callback_secret=CALLBACK_SECRET)}


# -- accepted requests and their replies -----------------------------------------------------------------------


def test_a_signed_request_is_accepted_and_its_reply_is_posted_signed_to_the_callback(
    receiver: Receiver, start_webhook: StartWebhook
) -> None:
    webhook = start_webhook(with_callback(receiver))
    status, answer = webhook.post({"text": "hello", "chat_id": "c1", "user_id": "u1"}, webhook_id="msg_1")
    assert (status, answer) == (
        202,
        {"accepted": True, "duplicate": False, "routing_key": "agent:main:webhook~default:dm:c1"},
    )
    assert webhook.gateway.wait_idle()
    callback = receiver.take()
    assert signature_is_valid(CALLBACK_SECRET, callback.headers, callback.body)
    assert callback.headers["webhook-timestamp"] == str(int(webhook.clock.now))
    assert callback.headers["content-type"] == "application/json"
    assert callback.json() == {
        "route": "default",
        "session_id": webhook.session_of(answer["routing_key"]),
        "chat_id": "c1",
        "thread_id": None,
        "user_id": "u1",
        "text": "echo: hello",
        "in_reply_to": "msg_1",
        "answers": ["msg_1"],
        "possible_duplicate": False,
    }
    assert receiver.received.empty()


def test_a_redelivered_webhook_id_runs_one_turn_and_gets_one_callback(
    receiver: Receiver, start_webhook: StartWebhook
) -> None:
    webhook = start_webhook(with_callback(receiver))
    answers = [webhook.post({"text": "hello", "chat_id": "c1"}, webhook_id="msg_again")[1] for _ in range(3)]
    assert [a["duplicate"] for a in answers] == [False, True, True]
    assert len({a["routing_key"] for a in answers}) == 1
    assert webhook.gateway.wait_idle()
    assert webhook.transcript(answers[0]["routing_key"]) == [("user", "hello"), ("assistant", "echo: hello")]
    assert receiver.take().json()["text"] == "echo: hello"
    assert receiver.received.empty()


def test_a_route_without_callback_keeps_the_reply_in_the_transcript(start_webhook: StartWebhook) -> None:
    webhook = start_webhook()
    status, answer = webhook.post({"text": "note this", "user_id": 7})
    assert status == 202
    assert webhook.gateway.wait_idle()
    assert webhook.transcript(answer["routing_key"])[-1] == ("assistant", "echo: note this")
    with webhook.gateway.read() as store:
        assert store.outbox.unsent() == []  # no callback is not a failure to retry


# -- refused requests ------------------------------------------------------------------------------------------


def test_unsigned_badly_signed_and_stale_requests_are_refused_with_401(start_webhook: StartWebhook) -> None:
    webhook = start_webhook()
    url = f"{webhook.adapter.url}/webhooks/default"
    body = json.dumps({"text": "hi", "chat_id": "c1"}).encode()
    now = webhook.clock.now
    stamp = str(int(now))
    signed = {
        "webhook-id": "msg_x",
        "webhook-timestamp": stamp,
        "webhook-signature": signature(SECRET, "msg_x", stamp, body),
    }
    cases: list[tuple[dict[str, str], str]] = [
        ({}, "unsigned"),
        ({k: v for k, v in signed.items() if k != "webhook-signature"}, "unsigned"),
        ({**signed, "webhook-signature": "v1,AAAA"}, "does not match"),
        (
            {**signed, "webhook-signature": signature(SECRET, "msg_x", stamp, body).replace("v1,", "v2,")},
            "does not match",
        ),
        ({**signed, "webhook-signature": signature(OTHER_SECRET, "msg_x", stamp, body)}, "does not match"),
        ({**signed, "webhook-id": "msg_y"}, "does not match"),  # the signature covers the id
        ({**signed, "webhook-timestamp": "soon"}, "integer"),
        ({**signed, "webhook-id": "two words"}, "printable"),
    ]
    for headers, reason in cases:
        status, answer = post(url, body, headers)
        assert status == 401, headers
        assert reason in answer["error"]
    for offset, reason in [(-360, "360 s old"), (360, "360 s in the future")]:
        status, answer = webhook.post({"text": "hi", "chat_id": "c1"}, timestamp=now + offset)
        assert (status, answer["error"]) == (401, f"webhook-timestamp is {reason}, over the 300 s tolerance")
    # Several signatures are allowed (secret rotation): one valid entry is enough.
    rotating = {**signed, "webhook-signature": f"v1,AAAA {signed['webhook-signature']}"}
    assert post(url, body, rotating)[0] == 202
    assert webhook.gateway.wait_idle()
    with webhook.gateway.read() as store:
        assert len(store.list_sessions()) == 1


def test_malformed_unknown_and_oversized_requests_get_400_404_and_413(start_webhook: StartWebhook) -> None:
    webhook = start_webhook(
        {
            "default": WebhookRoute(secret=SECRET),
            "nested": WebhookRoute(secret=SECRET, text="message.body", chat_id="chat.id", user_name="from.name"),
        },
        max_body_bytes=2048,
    )
    bad: list[tuple[Any, str, str]] = [
        (b"{not json", "default", "the body is not valid JSON"),
        (b"\xff\xfe", "default", "the body is not valid JSON"),
        (b'{"a":' + b"[" * 2000, "default", "the body is not valid JSON"),  # too deep
        (["text"], "default", "the body must be a JSON object"),
        ({"chat_id": "c1"}, "default", "$.text is missing"),
        ({"text": None, "chat_id": "c1"}, "default", "$.text is missing"),
        ({"text": 5, "chat_id": "c1"}, "default", "$.text must be a string, not a number"),
        ({"text": "  ", "chat_id": "c1"}, "default", "$.text is empty"),
        ({"text": "hi", "chat_id": ["c1"]}, "default", "$.chat_id must be a string or an integer, not an array"),
        ({"text": "hi", "chat_id": True}, "default", "$.chat_id must be a string or an integer, not a boolean"),
        ({"text": "hi", "user_id": 1.5}, "default", "$.user_id must be a string or an integer, not a number"),
        ({"text": "hi", "chat_id": "x" * 300}, "default", "$.chat_id is longer than 256 characters"),
        ({"text": "hi"}, "default", "the payload has neither $.chat_id nor $.user_id"),
        ({"message": "hi", "chat": {"id": 1}}, "nested", "$.message is not a JSON object, so $.message.body"),
        ({"message": {"body": "hi"}, "chat": {"id": 1}, "from": {"name": 3}}, "nested", "$.from.name must be a string"),
    ]
    for payload, route, reason in bad:
        status, answer = webhook.post(payload, route=route)
        assert status == 400, payload
        assert answer["error"].startswith(reason), answer
    status, answer = webhook.post({"text": "hi", "chat_id": "c1"}, route="nope")
    assert (status, answer) == (404, {"error": "no webhook route 'nope'; add it under platforms.webhook.routes"})
    large = {"text": "x" * 3000, "chat_id": "c1"}
    for chunked in (False, True):  # refused by Content-Length, or while reading a chunked body
        status, answer = webhook.post(large, chunked=chunked)
        assert status == 413
        assert "larger than 2048 bytes" in answer["error"]
    # The server took all that in its stride.
    status, answer = webhook.post(
        {"message": {"body": "hi"}, "chat": {"id": 42}, "from": {"name": "Ann"}}, route="nested"
    )
    assert (status, answer["routing_key"]) == (202, "agent:main:webhook~nested:dm:42")
    assert webhook.gateway.wait_idle()
    with webhook.gateway.read() as store:
        (session,) = store.list_sessions()
    assert (session.chat_id, session.user_name) == ("42", "Ann")


def test_a_message_that_cannot_be_stored_gets_503_so_the_sender_delivers_it_again(start_webhook: StartWebhook) -> None:
    webhook = start_webhook()
    webhook.gateway.stop()
    status, answer = webhook.post({"text": "hi", "chat_id": "c1"})
    assert (status, answer) == (503, {"error": "the message could not be stored; deliver it again later"})


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_ids = st.text(max_size=12) | st.integers() | _json
_payloads = st.fixed_dictionaries(
    {"text": st.text(min_size=1) | _json}, optional={"chat_id": _ids, "user_id": _ids, "extra": _json}
)
_header_text = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=40)


@pytest.mark.slow
def test_random_requests_never_get_a_server_error(start_webhook: StartWebhook) -> None:
    webhook = start_webhook(max_body_bytes=1024)
    url = f"{webhook.adapter.url}/webhooks/default"

    @settings(max_examples=150, deadline=None)
    @given(
        body=st.binary(max_size=64)
        | st.binary(min_size=1000, max_size=1100)
        | _payloads.map(lambda p: json.dumps(p).encode())
        | _json.map(lambda p: json.dumps(p).encode()),
        tamper=st.none()
        | st.tuples(st.sampled_from(["webhook-id", "webhook-timestamp", "webhook-signature"]), _header_text),
    )
    def check(body: bytes, tamper: tuple[str, str] | None) -> None:
        webhook_id = f"msg_{uuid.uuid4().hex}"
        stamp = str(int(webhook.clock.now))
        headers = {
            "webhook-id": webhook_id,
            "webhook-timestamp": stamp,
            "webhook-signature": signature(SECRET, webhook_id, stamp, body),
        }
        if tamper is not None:
            headers[tamper[0]] = tamper[1]
        status, answer = post(url, body, headers)
        event(f"HTTP {status}")
        assert status in (202, 400, 401, 413)
        assert answer.get("accepted") is True if status == 202 else isinstance(answer["error"], str)

    check()
    assert webhook.post({"text": "still here", "chat_id": "c1"})[0] == 202


# -- mapping payloads to sessions ------------------------------------------------------------------------------


def test_chat_ids_threads_and_routes_each_reach_their_own_session(start_webhook: StartWebhook) -> None:
    webhook = start_webhook(
        {
            "default": WebhookRoute(secret=SECRET),
            "threads": WebhookRoute(secret=OTHER_SECRET, chat_type="group", thread_id="thread.id"),
        }
    )
    keys = [
        webhook.post({"text": "a", "chat_id": "c1", "user_id": "u1"})[1]["routing_key"],
        webhook.post({"text": "b", "chat_id": "c2", "user_id": "u1"})[1]["routing_key"],
        webhook.post({"text": "c", "chat_id": "c1", "user_id": "u1"}, route="threads", secret=OTHER_SECRET)[1][
            "routing_key"
        ],
        webhook.post({"text": "d", "chat_id": "c1", "thread": {"id": 9}}, route="threads", secret=OTHER_SECRET)[1][
            "routing_key"
        ],
        webhook.post({"text": "e", "user_id": "u1"})[1]["routing_key"],
    ]
    assert keys == [
        "agent:main:webhook~default:dm:c1",
        "agent:main:webhook~default:dm:c2",
        "agent:main:webhook~threads:group:c1:u1",
        "agent:main:webhook~threads:group:c1:9",
        "agent:main:webhook~default:dm:u1",  # without a chat id a DM is keyed by its user
    ]
    assert webhook.gateway.wait_idle()
    assert len({webhook.session_of(key) for key in keys}) == len(keys)
    assert webhook.post({"text": "f", "chat_id": "c1", "user_id": "u1"})[1]["routing_key"] == keys[0]


# -- callback failures -----------------------------------------------------------------------------------------


def test_a_callback_that_fails_once_gets_the_reply_once_after_the_retry(
    receiver: Receiver, start_webhook: StartWebhook
) -> None:
    webhook = start_webhook(with_callback(receiver))
    receiver.script.append((500, {}))
    assert webhook.post({"text": "hello", "chat_id": "c1"})[0] == 202
    assert webhook.gateway.wait_idle()
    first = receiver.take()
    with webhook.gateway.read() as store:
        (row,) = store.outbox.unsent()
    assert row.next_attempt_at == pytest.approx(webhook.clock.now + 0.05)
    webhook.clock.advance(0.05)
    webhook.gateway.tick()
    second = receiver.take()
    assert second.headers["webhook-id"] == first.headers["webhook-id"]  # the receiver can tell it is the same reply
    assert second.json() == first.json()
    assert second.json()["possible_duplicate"] is False  # a 500 is a refusal, not an unknown outcome
    assert webhook.gateway.wait_idle()
    assert receiver.received.empty()
    with webhook.gateway.read() as store:
        assert store.outbox.unsent() == []


def test_a_callback_answering_429_is_retried_when_its_retry_after_says(
    receiver: Receiver, start_webhook: StartWebhook
) -> None:
    webhook = start_webhook(with_callback(receiver))
    receiver.script.append((429, {"Retry-After": "7"}))
    assert webhook.post({"text": "hello", "chat_id": "c1"})[0] == 202
    assert webhook.gateway.wait_idle()
    receiver.take()
    with webhook.gateway.read() as store:
        (row,) = store.outbox.unsent()
    assert row.next_attempt_at == pytest.approx(webhook.clock.now + 7)  # not the 0.05 s backoff
    webhook.clock.advance(6.5)
    webhook.gateway.tick()
    assert webhook.gateway.wait_idle()
    assert receiver.received.empty()
    webhook.clock.advance(0.5)
    webhook.gateway.tick()
    assert receiver.take().json()["text"] == "echo: hello"


def reply(route: str = "default") -> OutboundMessage:
    return OutboundMessage(
        platform="webhook", account_id=route, chat_id="c1", text="hi", session_id="s1", answers=("m1",)
    )


def sender_for(url: str, *, timeout_s: float = 10.0) -> ReplySender:
    config = WebhookConfig(routes={"default": WebhookRoute(secret=SECRET, callback_url=url)})
    (sender,) = WebhookAdapter(config, clock=FakeClock(), http_timeout_s=timeout_s).senders()
    return sender


def test_callback_failures_become_send_errors_that_say_what_happened(receiver: Receiver) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    with pytest.raises(SendError, match="cannot be reached") as refused:
        sender_for(f"http://127.0.0.1:{closed_port}/hook").send(reply())
    assert not refused.value.outcome_unknown
    stalled = sender_for(receiver.host.url + "/stall", timeout_s=0.2)
    with pytest.raises(SendError, match="did not answer after the request was sent") as timed_out:
        stalled.send(reply())
    assert timed_out.value.outcome_unknown
    receiver.release.set()
    sender = sender_for(receiver.url)
    receiver.script.extend([(404, {}), (503, {}), (429, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})])
    with pytest.raises(SendError, match="refused the request with HTTP 404"):
        sender.send(reply())
    with pytest.raises(SendError, match="failed with HTTP 503") as unavailable:
        sender.send(reply())
    assert unavailable.value.retry_after_s is None
    with pytest.raises(SendError, match="HTTP 429") as limited:
        sender.send(reply())
    assert limited.value.retry_after_s == 0  # a date in the past: retry now
    webhook_id = sender.send(reply())
    assert webhook_id is not None
    assert webhook_id.startswith("msg_")
    assert sender.send(reply()) == webhook_id  # stable across attempts
    assert sender.send(msgspec.structs.replace(reply(), text="other")) != webhook_id
    assert sender.send(reply("gone")) is None  # a route no longer configured: the reply stays in the transcript


# -- configuration ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("routes", "path", "problem"),
    [
        ({"default": {}}, "platforms.webhook.routes.default.secret", "every route needs a secret; generate one"),
        ({"default": {"secret": "abc"}}, "platforms.webhook.routes.default.secret", "must be 'whsec_'"),
        ({"default": {"secret": "whsec_***"}}, "platforms.webhook.routes.default.secret", "must be 'whsec_'"),
        (
            {"default": {"secret": "whsec_c2hvcnQ="}},
            "platforms.webhook.routes.default.secret",
            "at least 24 random bytes",
        ),
        ({"bad name": {"secret": SECRET}}, "platforms.webhook.routes.bad name", "a route name is 1 to 64"),
        ({"x" * 65: {"secret": SECRET}}, "platforms.webhook.routes." + "x" * 65, "a route name is 1 to 64"),
        ({"r": {"secret": SECRET, "secret_env": "S"}}, "platforms.webhook.routes.r.secret_env", "not both"),
        ({"r": {"secret_env": "1BAD"}}, "platforms.webhook.routes.r.secret_env", "environment variable name"),
        ({"r": {"secret": SECRET, "text": "a..b"}}, "platforms.webhook.routes.r.text", "dotted path"),
        ({"r": {"secret": SECRET, "chat_type": "room"}}, "platforms.webhook.routes.r.chat_type", "must be one of"),
        ({"r": {"secret": SECRET, "callback_url": "ftp://x/y"}}, "platforms.webhook.routes.r.callback_url", "http://"),
        (
            {"r": {"secret": SECRET, "callback_url": "http://x:99999/"}},
            "platforms.webhook.routes.r.callback_url",
            "http",
        ),
        (
            {"r": {"secret": SECRET, "callback_secret": SECRET}},
            "platforms.webhook.routes.r.callback_secret",
            "set both",
        ),
        (
            {"r": {"secret": SECRET, "callback_url": "http://x/", "callback_secret": "nope"}},
            "platforms.webhook.routes.r.callback_secret",
            "must be 'whsec_'",
        ),
    ],
)
def test_a_bad_route_is_a_config_error_naming_its_field(routes: dict[str, Any], path: str, problem: str) -> None:
    with pytest.raises(ConfigError) as error:
        msgspec.convert({"routes": routes}, WebhookConfig)  # as the daemon loads config.yaml
    assert error.value.path == path
    assert problem in str(error.value)


def test_unknown_config_fields_are_refused() -> None:
    with pytest.raises(msgspec.ValidationError, match="secrte"):
        msgspec.convert({"routes": {"r": {"secrte": SECRET}}}, WebhookConfig)


def test_a_secret_from_the_environment_is_read_when_the_adapter_is_built() -> None:
    config = WebhookConfig(routes={"r": WebhookRoute(secret_env="HOOK_SECRET")})
    adapter = WebhookAdapter(config, environ={"HOOK_SECRET": SECRET})
    assert "secret from $HOOK_SECRET" in adapter.describe()[0]
    with pytest.raises(ConfigError, match="HOOK_SECRET is not set") as missing:
        WebhookAdapter(config, environ={})
    assert missing.value.path == "platforms.webhook.routes.r.secret_env"
    with pytest.raises(ConfigError, match="the value of HOOK_SECRET must be 'whsec_'") as malformed:
        WebhookAdapter(config, environ={"HOOK_SECRET": "plain"})
    assert malformed.value.path == "platforms.webhook.routes.r.secret_env"


def test_new_secrets_are_valid_and_distinct() -> None:
    first, second = new_webhook_secret(), new_webhook_secret()
    assert first != second
    assert len(base64.b64decode(first.removeprefix("whsec_"))) == 24
    WebhookConfig(routes={"a": WebhookRoute(secret=first), "b": WebhookRoute(secret=second)})


def test_the_banner_names_each_route_url_and_where_replies_go(receiver: Receiver, start_webhook: StartWebhook) -> None:
    empty: Adapter = WebhookAdapter(WebhookConfig())
    (line,) = empty.describe()
    assert line.startswith("Webhooks: http://127.0.0.1:8644 has no routes; add one under platforms.webhook.routes")
    webhook = start_webhook({**with_callback(receiver), "quiet": WebhookRoute(secret=SECRET)})
    base = webhook.adapter.url
    assert base.startswith("http://127.0.0.1:")
    assert not base.endswith(":0")
    assert webhook.adapter.describe() == [
        f"Webhook route 'default': POST {base}/webhooks/default (Standard Webhooks signature, secret in config.yaml); "
        f"replies POSTed to {receiver.url}",
        f"Webhook route 'quiet': POST {base}/webhooks/quiet (Standard Webhooks signature, secret in config.yaml); "
        "replies stay in the transcript (no callback_url)",
    ]


def test_a_busy_port_is_a_platform_error_naming_the_address(start_webhook: StartWebhook) -> None:
    webhook = start_webhook()
    taken = urlsplit(webhook.adapter.url).port
    second = WebhookAdapter(WebhookConfig(port=taken or 0, routes={}))
    with pytest.raises(PlatformError, match=f"cannot listen on 127.0.0.1:{taken}"):
        second.start(GatewayInbox(webhook.gateway))
