"""Hostile HTTP at every entry point a platform (or a client) pushes to, and at the web console's forms, each on a
real loopback server.

Whatever arrives (random bytes, random or deeply nested JSON, huge strings within the body limit, wrong content
types and encodings, random header values), correctly signed where the entry point checks signatures, the answer
is never a 5xx, nothing logs at ERROR, and the next valid request is answered as usual. JSON nested past
:data:`platforms.support.json_guard.MAX_DEPTH` is a 400 naming the depth on every entry point, in its own error shape.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import hmac
import http.client
import json
import logging
import re
import socket
import time
import uuid
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qsl, quote, urlencode

import msgspec
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from hermes_actors.runtime.gateway import Gateway
from platforms.api_server import ApiServer, ApiServerConfig
from platforms.base import Adapter
from platforms.bluebubbles import BluebubblesAdapter, BluebubblesConfig
from platforms.dingtalk import DingtalkAdapter, DingtalkConfig, DingtalkRobot
from platforms.feishu import FeishuAdapter, FeishuApp, FeishuConfig
from platforms.qqbot import QqbotAdapter, QqbotBot, QqbotConfig
from platforms.slack import SlackAdapter, SlackApp, SlackConfig
from platforms.sms import SmsAdapter, SmsConfig
from platforms.support import json_guard
from platforms.support.http_host import HttpAdapter
from platforms.telegram import TelegramAdapter, TelegramBot, TelegramConfig
from platforms.webhook import WebhookAdapter, WebhookConfig, WebhookRoute
from platforms.wecom import WecomAdapter, WecomApp, WecomConfig
from platforms.whatsapp import WhatsappAdapter, WhatsappConfig, WhatsappNumber
from tests.platforms import (
    bluebubbles_fake,
    dingtalk_fake,
    qqbot_fake,
    slack_fake,
    telegram_fake,
    twilio_fake,
    wecom_fake,
    whatsapp_fake,
)
from tests.platforms.console_client import Console, open_console
from tests.platforms.feishu_fake import FakeFeishu, seal
from tests.platforms.feishu_fake import sign as feishu_sign
from tests.platforms.support import LogRecords, StartGateway
from tests.platforms.test_api_operator import ADMIN

BODY_LIMIT = 64 * 1024
API_KEY = "sk-hostile"
WEBHOOK_SECRET = "whsec_" + base64.b64encode(b"route secret, 32 bytes long....!").decode()
SLACK_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
SLACK_TOKEN = "xoxb-17-team-one-main"
FEISHU_ID = "cli_a1b2c3d4e5f60001"
FEISHU_KEY = "kJ4mQ8vX2pL6tN0r"
WA_NUMBER = "106540352242922"
WA_SECRET = "3f1b9c0d2e4a6b8c0d1e2f3a4b5c6d7e"
WA_VERIFY = "meatyhamhock"
WA_TOKEN = "EAAGm0PX4ZCpsBA-main"
TG_TOKEN = "110201543:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
TG_SECRET = "webhook-secret_0123456789"
SMS_ACCOUNT = "AC" + "5e" * 16
SMS_TOKEN = "0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e"
SMS_NUMBER = "+15550001111"
QQ_APP = "102030405"
QQ_SECRET = "DG5g3B4j9X2KOErG"
BB_PASSWORD = "hostile password"
BB_TOKEN = "hostile-webhook-token-0123456789"
BB_CHAT = "iMessage;-;+15557654321"
DING_KEY = "dinghostilekey01"
DING_SECRET = "ding-hostile-secret-0123"
WECOM_CORP = "wwhostile"
WECOM_TOKEN = "wecom-token"
WECOM_AES = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG"


# -- the guard itself ----------------------------------------------------------------------------------------------


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(item) for item in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(item) for item in value.values()), default=0)
    return 0


_bracket_text = st.text(st.sampled_from('[]{}"\\ab'), max_size=12)
_nested = st.recursive(
    st.none() | st.integers() | _bracket_text,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(_bracket_text, inner, max_size=2),
    max_leaves=40,
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(value=_nested, limit=st.integers(0, 12))
@example(value=[[["[[[[[[[[[[[[[[[[["]]], limit=3)
@example(value={'\\"[[[[': [[{"x": "\\\\"}]]}, limit=3)
def test_the_depth_check_measures_exactly_the_nesting_outside_strings(value: Any, limit: int) -> None:
    body = json.dumps(value).encode()
    if _depth(value) > limit:
        message = f"JSON nested deeper than {limit} levels, the maximum recursion depth allowed"
        with pytest.raises(json_guard.NestingError, match=message):
            json_guard.check_depth(body, limit)
    else:
        json_guard.check_depth(body, limit)
        json_guard.check_depth(json.dumps(value, ensure_ascii=False), limit)  # text is measured alike


def test_the_guarded_decode_never_recurses_past_the_limit() -> None:
    decoder = msgspec.json.Decoder()
    assert json_guard.decode(decoder, b"[" * 64 + b"]" * 64) is not None
    for body in (b"[" * 65 + b"]" * 65, b"[" * 100_000, b'{"a":' * 10_000, "[" * 70 + "]" * 70):
        with pytest.raises(json_guard.NestingError):
            json_guard.decode(decoder, body)
    with pytest.raises(msgspec.DecodeError):
        json_guard.decode(decoder, b"[" * 10 + b"}")


# -- the entry points ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def exchange(url: str, method: str, path: str, body: bytes | None, headers: Mapping[str, str | bytes]) -> Answer:
    """One raw HTTP request on a fresh connection (headers go out exactly as given)."""
    port = int(url.rsplit(":", 1)[1])
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        connection.request(method, path, body=body, headers=dict(headers))
        response = connection.getresponse()
        return Answer(response.status, response.getheader("Content-Type", ""), response.read())
    finally:
        connection.close()


@dataclass(frozen=True)
class Entry:
    """An entry point: how to sign a body for it, a valid request, and what its error answers look like."""

    name: str
    adapter: HttpAdapter[Any]
    gateway: Gateway
    path: str
    sign: Callable[[bytes], dict[str, str]]  # the headers that make ``body`` authentic
    valid: Callable[[str], bytes]  # a body that starts a turn with this text
    replied: Callable[[str, Answer], bool]  # whether the reply to that text (answered so) reached the platform

    @property
    def url(self) -> str:
        return self.adapter.url

    def post(self, body: bytes, headers: Mapping[str, str | bytes] | None = None) -> Answer:
        sent: dict[str, str | bytes] = {"Content-Type": "application/json", **(headers or {})}
        return exchange(self.url, "POST", self.path, body, sent | self.sign(body))


def _webhook_sign(body: bytes) -> dict[str, str]:
    key = base64.b64decode(WEBHOOK_SECRET.removeprefix("whsec_"))
    webhook_id, timestamp = f"msg_{uuid.uuid4().hex}", str(int(time.time()))
    digest = hmac.new(key, f"{webhook_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": timestamp,
        "webhook-signature": "v1," + base64.b64encode(digest).decode(),
    }


def _slack_sign(body: bytes) -> dict[str, str]:
    timestamp = str(int(time.time()))
    return {"X-Slack-Request-Timestamp": timestamp, "X-Slack-Signature": slack_fake.sign(SLACK_SECRET, timestamp, body)}


def _feishu_sign(body: bytes) -> dict[str, str]:
    timestamp, nonce = str(int(time.time())), uuid.uuid4().hex
    return {
        "X-Lark-Request-Timestamp": timestamp,
        "X-Lark-Request-Nonce": nonce,
        "X-Lark-Signature": feishu_sign(timestamp, nonce, FEISHU_KEY, body),
    }


StartEntry = Callable[[str], Entry]


@pytest.fixture
def start_entry(start_gateway: StartGateway) -> Iterator[StartEntry]:
    """Start one entry point (and the fake platform its replies go to) on loopback; all stop at the end."""
    with ExitStack() as stack:

        def gateway_for(adapter: HttpAdapter[Any]) -> Gateway:
            return start_gateway(cast(Adapter, adapter), tick_interval_s=0.1)

        def start(name: str) -> Entry:
            if name == "api_server":
                return _api_entry(gateway_for)
            if name == "webhook":
                return _webhook_entry(gateway_for)
            if name == "slack":
                slack = stack.enter_context(_started(slack_fake.FakeSlack(tokens={SLACK_TOKEN: "T1"})))
                return _slack_entry(gateway_for, slack)
            if name == "feishu":
                feishu = FakeFeishu()
                feishu.add_app(FEISHU_ID, app_secret="s", verification_token="tok", encrypt_key=FEISHU_KEY)
                return _feishu_entry(gateway_for, stack.enter_context(_started(feishu)))
            if name == "whatsapp":
                graph = stack.enter_context(_started(whatsapp_fake.FakeGraph(tokens={WA_TOKEN: WA_NUMBER})))
                return _whatsapp_entry(gateway_for, graph)
            if name == "dingtalk":
                ding = dingtalk_fake.FakeDingtalk()
                ding.add_app(DING_KEY, DING_SECRET)
                return _dingtalk_entry(gateway_for, stack.enter_context(_started(ding)))
            if name == "wecom":
                wecom = wecom_fake.FakeWecom()
                wecom.secrets[WECOM_CORP] = "s"
                return _wecom_entry(gateway_for, stack.enter_context(_started(wecom)))
            if name == "sms":
                twilio = twilio_fake.FakeTwilio(account_sid=SMS_ACCOUNT, auth_token=SMS_TOKEN, numbers=[SMS_NUMBER])
                return _sms_entry(gateway_for, stack.enter_context(_started(twilio)))
            if name == "qqbot":
                qq = stack.enter_context(_started(qqbot_fake.FakeQq(secrets={QQ_APP: QQ_SECRET})))
                return _qqbot_entry(gateway_for, qq)
            if name == "bluebubbles":
                bb = bluebubbles_fake.FakeBlueBubbles(password=BB_PASSWORD, chats={BB_CHAT})
                return _bluebubbles_entry(gateway_for, stack.enter_context(_started(bb)))
            telegram = stack.enter_context(telegram_fake.TelegramFake())
            telegram.add_bot(TG_TOKEN)
            return _telegram_entry(gateway_for, telegram)

        yield start


class _started:
    """A fake platform server as a context manager (started on entry, stopped on exit)."""

    def __init__(self, fake: Any) -> None:
        self.fake = fake

    def __enter__(self) -> Any:
        self.fake.start()
        return self.fake

    def __exit__(self, *exc: object) -> None:
        self.fake.stop()


GatewayFor = Callable[[HttpAdapter[Any]], Gateway]


def _api_entry(gateway_for: GatewayFor) -> Entry:
    adapter = ApiServer(ApiServerConfig(port=0, key=API_KEY, max_body_bytes=BODY_LIMIT), environ={})

    def valid(text: str) -> bytes:
        return json.dumps({"model": "hermes-agent", "messages": [{"role": "user", "content": text}]}).encode()

    def replied(text: str, answer: Answer) -> bool:  # the reply is the answer
        return bool(answer.json()["choices"][0]["message"]["content"] == f"echo: {text}")

    return Entry(
        "api_server",
        adapter,
        gateway_for(adapter),
        "/v1/chat/completions",
        lambda body: {"Authorization": f"Bearer {API_KEY}"},
        valid,
        replied,
    )


def _webhook_entry(gateway_for: GatewayFor) -> Entry:
    config = WebhookConfig(port=0, max_body_bytes=BODY_LIMIT, routes={"hook": WebhookRoute(secret=WEBHOOK_SECRET)})
    adapter = WebhookAdapter(config, environ={})
    gateway = gateway_for(adapter)

    def replied(text: str, answer: Answer) -> bool:  # no callback_url: the reply stays in the transcript
        session = gateway.session_for("agent:main:webhook~hook:dm:after")
        if session is None:
            return False
        with gateway.read() as store:
            return f"echo: {text}" in [m.content for m in store.load_transcript(session)]

    return Entry(
        "webhook",
        adapter,
        gateway,
        "/webhooks/hook",
        _webhook_sign,
        lambda text: json.dumps({"text": text, "chat_id": "after"}).encode(),
        replied,
    )


def _slack_entry(gateway_for: GatewayFor, slack: slack_fake.FakeSlack) -> Entry:
    config = SlackConfig(
        port=0,
        api_base_url=slack.api_base_url,
        max_body_bytes=BODY_LIMIT,
        messages_per_second=1000.0,
        apps={"main": SlackApp(signing_secret=SLACK_SECRET, bot_token=SLACK_TOKEN)},
    )
    adapter = SlackAdapter(config, environ={})
    counter = iter(range(1, 1_000_000))

    def valid(text: str) -> bytes:
        event = slack_fake.message(text, channel="D99", channel_type="im", ts=f"1764460800.{next(counter):06d}")
        return json.dumps(slack_fake.event_callback(event, team="T1")).encode()

    def replied(text: str, answer: Answer) -> bool:
        return any(posted.text == f"echo: {text}" for posted in slack.drain())

    return Entry("slack", adapter, gateway_for(adapter), "/slack/events/main", _slack_sign, valid, replied)


def _feishu_entry(gateway_for: GatewayFor, feishu: FakeFeishu) -> Entry:
    app = FeishuApp(
        app_id=FEISHU_ID, app_secret="s", verification_token="tok", encrypt_key=FEISHU_KEY, base_url=feishu.base_url
    )
    adapter = FeishuAdapter(FeishuConfig(port=0, max_body_bytes=BODY_LIMIT, apps={"main": app}), environ={})

    def valid(text: str) -> bytes:
        return seal(json.dumps(feishu.message_event(FEISHU_ID, text, chat_id="oc_after")).encode(), FEISHU_KEY)

    def replied(text: str, answer: Answer) -> bool:
        return any(sent.text == f"echo: {text}" for sent in feishu.sent)

    return Entry("feishu", adapter, gateway_for(adapter), "/feishu/events/main", _feishu_sign, valid, replied)


def _whatsapp_entry(gateway_for: GatewayFor, graph: whatsapp_fake.FakeGraph) -> Entry:
    number = WhatsappNumber(app_secret=WA_SECRET, verify_token=WA_VERIFY, access_token=WA_TOKEN)
    config = WhatsappConfig(
        port=0, graph_base_url=graph.base_url, max_body_bytes=BODY_LIMIT, numbers={WA_NUMBER: number}
    )
    adapter = WhatsappAdapter(config, environ={})

    def valid(text: str) -> bytes:
        return json.dumps(whatsapp_fake.notification(WA_NUMBER, [whatsapp_fake.text_message(text)])).encode()

    def replied(text: str, answer: Answer) -> bool:
        return any(f"echo: {text}" in repr(sent) for sent in graph.sent)

    def sign(body: bytes) -> dict[str, str]:
        return {"X-Hub-Signature-256": whatsapp_fake.sign(WA_SECRET, body)}

    return Entry("whatsapp", adapter, gateway_for(adapter), "/whatsapp/webhook", sign, valid, replied)


def _telegram_entry(gateway_for: GatewayFor, telegram: telegram_fake.TelegramFake) -> Entry:
    bot = TelegramBot(token=TG_TOKEN, mode="webhook", secret_token=TG_SECRET)
    config = TelegramConfig(
        base_url=telegram.base_url,
        port=0,
        max_body_bytes=BODY_LIMIT,
        bots={"hook": bot},
        chat_messages_per_second=1000.0,
        bot_messages_per_second=1000.0,
    )
    adapter = TelegramAdapter(config, environ={})
    alice = telegram_fake.user(5001, "Alice")
    counter = iter(range(1, 1_000_000))

    def valid(text: str) -> bytes:
        number = next(counter)
        update = telegram_fake.message(telegram_fake.private_chat(alice), alice, text, message_id=number)
        return json.dumps({"update_id": 900_000 + number, **update}).encode()

    def replied(text: str, answer: Answer) -> bool:
        return any(sent.get("text") == f"echo: {text}" for sent in telegram.sent(TG_TOKEN))

    return Entry(
        "telegram",
        adapter,
        gateway_for(adapter),
        "/telegram/hook",
        lambda body: {"X-Telegram-Bot-Api-Secret-Token": TG_SECRET},
        valid,
        replied,
    )


def _sms_entry(gateway_for: GatewayFor, twilio: twilio_fake.FakeTwilio) -> Entry:
    config = SmsConfig(
        port=0,
        api_base_url=twilio.base_url,
        max_body_bytes=BODY_LIMIT,
        account_sid=SMS_ACCOUNT,
        auth_token=SMS_TOKEN,
        numbers=[SMS_NUMBER],
        messages_per_second=1000.0,
    )
    adapter = SmsAdapter(config, environ={})

    def valid(text: str) -> bytes:
        return urlencode(twilio_fake.incoming(SMS_ACCOUNT, SMS_NUMBER, "+15557654321", text)).encode()

    def replied(text: str, answer: Answer) -> bool:
        return any(sent.body == f"echo: {text}" for sent in twilio.sent)

    def sign(body: bytes) -> dict[str, str]:  # Twilio signs the parameters of the form it sends
        try:
            params = parse_qsl(body.decode("utf-8"), keep_blank_values=True, errors="strict")
        except ValueError:  # not a form (UnicodeDecodeError included): signed as one without parameters
            params = []
        signature = twilio_fake.sign(SMS_TOKEN, adapter.url + "/sms/twilio", params)
        return {"Content-Type": "application/x-www-form-urlencoded", "X-Twilio-Signature": signature}

    return Entry("sms", adapter, gateway_for(adapter), "/sms/twilio", sign, valid, replied)


def _qqbot_entry(gateway_for: GatewayFor, qq: qqbot_fake.FakeQq) -> Entry:
    config = QqbotConfig(
        port=0,
        token_url=qq.token_url,
        api_base_url=qq.base_url,
        max_body_bytes=BODY_LIMIT,
        messages_per_second=1000.0,
        bots={"main": QqbotBot(app_id=QQ_APP, secret=QQ_SECRET)},
    )
    adapter = QqbotAdapter(config, environ={})

    def valid(text: str) -> bytes:
        data = {"id": f"ROBOT1.0_{uuid.uuid4().hex}", "author": {"user_openid": "U1"}, "content": text}
        return json.dumps({"op": 0, "t": "C2C_MESSAGE_CREATE", "d": data}).encode()

    def replied(text: str, answer: Answer) -> bool:
        return any(sent.body.get("content") == f"echo: {text}" for sent in qq.sent)

    def sign(body: bytes) -> dict[str, str]:
        return qqbot_fake.callback_headers(QQ_SECRET, body, app_id=QQ_APP)

    return Entry("qqbot", adapter, gateway_for(adapter), "/qqbot/main", sign, valid, replied)


def _bluebubbles_entry(gateway_for: GatewayFor, bb: bluebubbles_fake.FakeBlueBubbles) -> Entry:
    config = BluebubblesConfig(
        port=0,
        server_url=bb.url,
        password=BB_PASSWORD,
        webhook_token=BB_TOKEN,
        max_body_bytes=BODY_LIMIT,
        messages_per_second=1000.0,
    )
    adapter = BluebubblesAdapter(config, environ={})

    def valid(text: str) -> bytes:
        return json.dumps(bluebubbles_fake.new_message(text, chat=BB_CHAT, sender="+15557654321")).encode()

    def replied(text: str, answer: Answer) -> bool:
        return any(sent.body.get("message") == f"echo: {text}" for sent in bb.sent)

    # BlueBubbles signs nothing: the secret is the token in the path
    return Entry(
        "bluebubbles", adapter, gateway_for(adapter), f"/bluebubbles/{BB_TOKEN}", lambda body: {}, valid, replied
    )


def _dingtalk_entry(gateway_for: GatewayFor, ding: dingtalk_fake.FakeDingtalk) -> Entry:
    robot = DingtalkRobot(app_key=DING_KEY, app_secret=DING_SECRET)
    config = DingtalkConfig(
        port=0,
        api_base_url=ding.base_url,
        max_body_bytes=BODY_LIMIT,
        chat_messages_per_minute=1000,
        robots={"main": robot},
    )
    adapter = DingtalkAdapter(config, environ={})
    counter = iter(range(1, 1_000_000))

    def valid(text: str) -> bytes:
        expires = int(time.time() * 1000) + 3_600_000
        callback = ding.callback(
            DING_KEY, text, msg_id=f"m{next(counter)}", conversation_id="cid-after", expires_ms=expires
        )
        return json.dumps(callback).encode()

    def replied(text: str, answer: Answer) -> bool:
        return any(sent.text == f"echo: {text}" for sent in ding.sent)

    def sign(body: bytes) -> dict[str, str]:  # the signature covers the timestamp, not the body
        timestamp = str(int(time.time() * 1000))
        return {"timestamp": timestamp, "sign": dingtalk_fake.sign(timestamp, DING_SECRET)}

    return Entry("dingtalk", adapter, gateway_for(adapter), "/dingtalk/robot/main", sign, valid, replied)


@dataclass(frozen=True)
class _QuerySignedEntry(Entry):
    """An entry point whose signature travels in the query (WeCom's ``msg_signature`` of the ``Encrypt`` text)."""

    query: Callable[[bytes], str] = lambda body: ""

    def post(self, body: bytes, headers: Mapping[str, str | bytes] | None = None) -> Answer:
        sent: dict[str, str | bytes] = {"Content-Type": "text/xml", **(headers or {})}
        return exchange(self.url, "POST", f"{self.path}?{self.query(body)}", body, sent)


def _wecom_entry(gateway_for: GatewayFor, wecom: wecom_fake.FakeWecom) -> Entry:
    app = WecomApp(corp_id=WECOM_CORP, agent_id=1000002, secret="s", token=WECOM_TOKEN, encoding_aes_key=WECOM_AES)
    config = WecomConfig(port=0, api_base_url=wecom.base_url, max_body_bytes=BODY_LIMIT, apps={"main": app})
    adapter = WecomAdapter(config, environ={})
    counter = iter(range(1, 1_000_000))

    def valid(text: str) -> bytes:
        plain = wecom_fake.message_xml(WECOM_CORP, 1000002, Content=text, MsgId=str(next(counter)))
        sealed = wecom_fake.seal(plain, WECOM_AES, WECOM_CORP)
        return f"<xml><ToUserName>{WECOM_CORP}</ToUserName><Encrypt><![CDATA[{sealed}]]></Encrypt></xml>".encode()

    def replied(text: str, answer: Answer) -> bool:
        return any(sent.text == f"echo: {text}" for sent in wecom.sent)

    def query(body: bytes) -> str:  # signs whatever the body holds between <Encrypt><![CDATA[ and ]]>
        found = re.search(rb"<Encrypt><!\[CDATA\[(.*?)\]\]></Encrypt>", body, re.DOTALL)
        sealed = found[1].decode("utf-8", "replace") if found else ""
        timestamp, nonce = str(int(time.time())), uuid.uuid4().hex
        mac = wecom_fake.signature(WECOM_TOKEN, timestamp, nonce, sealed)
        return urlencode({"msg_signature": mac, "timestamp": timestamp, "nonce": nonce})

    return _QuerySignedEntry(
        "wecom", adapter, gateway_for(adapter), "/wecom/callback/main", lambda body: {}, valid, replied, query
    )


ENTRY_POINTS = ["api_server", "webhook", "slack", "feishu", "whatsapp", "telegram", "qqbot", "bluebubbles", "dingtalk"]
FORM_ENTRY_POINTS = ["sms", "wecom"]  # form-encoded or XML bodies: no JSON to nest, every other check applies


def _error_of(entry: Entry, answer: Answer) -> str:
    """The reason an entry point gave for refusing a request, checking the error shape is its own."""
    payload = answer.json()
    if entry.name == "api_server":
        assert set(payload["error"]) == {"message", "type", "param", "code"}
        return str(payload["error"]["message"])
    return str(payload["error"])


def _deep_bodies() -> list[bytes]:
    return [
        b"[" * 1000 + b"]" * 1000,
        b'{"a": ' * 1500 + b"1" + b"}" * 1500,
        b'{"messages": [], "event": {"x": ' + b"[" * 5000 + b"]" * 5000 + b"}}",
        b"[" * 30_000,
    ]


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_json_nested_a_thousand_deep_is_a_400_naming_the_depth_on_every_entry_point(
    start_entry: StartEntry, name: str
) -> None:
    entry = start_entry(name)
    records = _recording()
    try:
        for deep in _deep_bodies():
            body = seal(deep, FEISHU_KEY) if name == "feishu" else deep
            answer = entry.post(body)
            assert answer.status == 400, (answer, deep[:40])
            assert "JSON nested deeper than 64 levels" in _error_of(entry, answer)
    finally:
        _stop_recording(records)
    assert [r.getMessage() for r in records.records if r.levelno >= logging.ERROR] == []
    _still_answers(entry, "after the deep ones")


@pytest.mark.parametrize("name", ENTRY_POINTS + FORM_ENTRY_POINTS)
def test_a_deflate_body_that_never_ends_its_stream_is_a_400_also_when_it_comes_after_the_headers(
    start_entry: StartEntry, name: str
) -> None:
    # The body comes only once the server has answered "100 Continue" (the request is in its handler by then): the
    # timing that left aiohttp's own decoding waiting for the end of a body that had ended.
    entry = start_entry(name)
    body = b"[]"  # read as raw deflate: a block that never ends
    headers = {"Content-Type": "application/json", "Content-Encoding": "deflate", **entry.sign(body)}
    head = f"POST {entry.path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\nExpect: 100-continue\r\n"
    head += "".join(f"{key}: {value}\r\n" for key, value in headers.items()) + "\r\n"
    with socket.create_connection(("127.0.0.1", int(entry.url.rsplit(":", 1)[1])), timeout=20) as sock:
        sock.sendall(head.encode())
        stream = sock.makefile("rb")
        assert stream.readline().startswith(b"HTTP/1.1 100 "), "no 100 Continue"
        assert stream.readline() == b"\r\n"
        sock.sendall(body)
        status_line = stream.readline()  # a timeout here is the request left unanswered
    assert status_line.split(b" ", 2)[1] == b"400", status_line


# -- anything at all ----------------------------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
_deep = st.builds(
    lambda depth, opener, closed: (
        (opener * depth + (b"1" if opener == b'{"a":' else b""))
        + ((b"}" if opener == b'{"a":' else b"]") * depth if closed else b"")
    ),
    st.integers(65, 3000),
    st.sampled_from([b"[", b'{"a":']),
    st.booleans(),
)
_huge = st.builds(
    lambda key, unit, size: json.dumps({key: unit * (size // max(1, len(unit.encode())))}).encode(),
    st.sampled_from(["text", "messages", "event", "entry", "message", "encrypt", "x"]),
    st.sampled_from(["a", "\u00e9", "\u4e2d", "\U0001f680", "\\", '"', "[", "\u202e", "\x00"]),
    st.integers(BODY_LIMIT // 2, BODY_LIMIT - 200),
)
_bodies = st.one_of(
    st.binary(max_size=300),
    _json.map(lambda value: json.dumps(value).encode()),
    _deep,
    _huge,
    st.binary(min_size=BODY_LIMIT + 1, max_size=BODY_LIMIT + 10),
)
_header_names = st.sampled_from(
    [
        "Content-Type",
        "Content-Encoding",
        "Accept",
        "Accept-Encoding",
        "User-Agent",
        "X-Hermes-Session-Id",
        "Idempotency-Key",
        "X-Slack-Retry-Num",
        "X-Slack-Retry-Reason",
        "X-Lark-Request-Nonce",
        "X-Forwarded-For",
        "Expect",
        "X-Random",
    ]
)
_header_values = st.one_of(
    st.sampled_from(
        [
            "application/json",
            "application/json; charset=latin-1",
            "application/json; charset=bogus",
            "text/plain",
            "multipart/form-data; boundary=x",
            "application/x-www-form-urlencoded",
            "gzip",
            "deflate",
            "br",
            "",
            "0",
            "-1",
            "99999999999999999999",
            "../../etc/passwd",
        ]
    ),
    st.text(max_size=40).map(str.encode),
    st.binary(max_size=40),
).map(lambda raw: raw.replace(b"\r", b"").replace(b"\n", b"") if isinstance(raw, bytes) else raw)
_headers = st.dictionaries(_header_names, _header_values, max_size=4)


def _recording() -> LogRecords:
    handler = LogRecords()
    logging.getLogger().addHandler(handler)
    return handler


def _stop_recording(handler: LogRecords) -> None:
    logging.getLogger().removeHandler(handler)


def _still_answers(entry: Entry, text: str) -> None:
    """A valid request is accepted and its reply reaches the platform."""
    body = entry.valid(text)
    answer = entry.post(body)
    assert answer.status in (200, 202), (answer.status, answer.body[:300])
    assert entry.gateway.wait_idle(timeout=30)
    deadline = time.monotonic() + 20
    while not entry.replied(text, answer):
        assert time.monotonic() < deadline, f"{entry.name}: no reply to {text!r}"
        assert entry.gateway.wait_idle(timeout=1)


def _check_answer(entry: Entry, answer: Answer, records: LogRecords) -> None:
    event(f"{entry.name}: HTTP {answer.status}")
    errors = [r.getMessage() for r in records.records if r.levelno >= logging.ERROR]
    assert errors == [], errors
    for record in records.records:  # a log file written as UTF-8 takes every line (no lone surrogate of a header)
        record.getMessage().encode("utf-8")
    assert answer.status < 500, (answer.status, answer.body[:300])
    if answer.status >= 400 and answer.content_type.startswith("application/json"):
        assert _error_of(entry, answer)


@pytest.mark.slow
@pytest.mark.parametrize("name", ENTRY_POINTS + FORM_ENTRY_POINTS)
def test_any_signed_request_gets_no_5xx_and_no_error_line_and_the_next_valid_one_is_answered(
    start_entry: StartEntry, name: str
) -> None:
    entry = start_entry(name)
    records = _recording()

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(
        body=_bodies | st.text(max_size=20).map(entry.valid),
        headers=_headers,
        sealed=st.booleans(),
    )
    def check(body: bytes, headers: dict[str, str | bytes], sealed: bool) -> None:
        records.records.clear()
        if entry.name == "feishu" and sealed and len(body) < BODY_LIMIT // 2 and not body.startswith(b'{"encrypt"'):
            body = seal(body, FEISHU_KEY)
        _check_answer(entry, entry.post(body, headers), records)

    try:
        check()
        if name == "whatsapp":
            _handshakes(entry, records)
    finally:
        _stop_recording(records)
    _still_answers(entry, f"{name} still answers")


def _handshakes(entry: Entry, records: LogRecords) -> None:
    """``GET /whatsapp/webhook`` with any query at all."""

    @settings(max_examples=60, deadline=None)
    @given(
        query=st.dictionaries(
            st.sampled_from(["hub.mode", "hub.verify_token", "hub.challenge", "x"]) | st.text(max_size=8),
            st.sampled_from(["subscribe", WA_VERIFY, "1158201444"]) | st.text(max_size=300),
            max_size=4,
        ),
        headers=_headers,
    )
    def check(query: dict[str, str], headers: dict[str, str | bytes]) -> None:
        records.records.clear()
        encoded = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in query.items())
        answer = exchange(entry.url, "GET", f"{entry.path}?{encoded}", None, headers)
        _check_answer(entry, answer, records)
        if answer.status == 200:
            assert answer.body.decode() == query["hub.challenge"]

    check()


# -- the console's forms ------------------------------------------------------------------------------------------

CONSOLE_FORMS = ["login", "logout", "rename", "end", "delete"]
_console_headers = st.dictionaries(
    st.sampled_from(
        [
            *("Content-Type", "Content-Encoding", "Origin", "Transfer-Encoding", "Expect", "Cookie"),
            *("X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "Forwarded"),
        ]
    ),
    st.sampled_from(
        [
            "application/x-www-form-urlencoded",
            "application/x-www-form-urlencoded; charset=latin-1",
            "application/x-www-form-urlencoded; charset=",
            'multipart/form-data; boundary="x"',
            "gzip",
            "deflate",
            "identity",
            "null",
            "https",
            'for=_x;proto=https, for="[::1"',
            b"hermes_console_browser=a.\xff; hermes_console=\xfe",
        ]
    )
    | _header_values,
    max_size=3,
)
_form_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)  # no lone surrogate: it has no UTF-8


@dataclass(frozen=True)
class _ConsoleForm:
    """A form route of a running console, with a browser's cookies and the form's CSRF token."""

    url: str
    path: str
    cookies: str
    csrf: str
    session: str

    def post(self, body: bytes, headers: Mapping[str, str | bytes]) -> Answer:
        sent: dict[str, str | bytes] = {
            "Content-Type": "application/x-www-form-urlencoded",
            "Origin": self.url,
            "Cookie": self.cookies,
            **headers,
        }
        return exchange(self.url, "POST", self.path, body, sent)


def _console_form(running: Console, form: str) -> _ConsoleForm:
    session = running.api.ok("POST", "/api/sessions", {"title": "Hostile"}, status=201)["id"]
    client = running.fresh()
    if form == "login":
        path, csrf = "/console/login", client.get("/console/login").csrf()
    else:
        client.log_in(ADMIN)
        path = "/console/logout" if form == "logout" else f"/console/c/{session}/{form}"
        csrf = client.get(f"/console/c/{session}").csrf()
    cookies = "; ".join(f"{name}={value}" for name, value in client.cookies.items())
    return _ConsoleForm(client.origin, path, cookies, csrf, session)


def _form_bodies(form: _ConsoleForm) -> st.SearchStrategy[bytes]:
    fields = st.dictionaries(
        st.sampled_from(["csrf", "key", "next", "title", "confirm"]) | _form_text,
        st.sampled_from([form.csrf, ADMIN, form.session, "/console/live\r\n", "//evil.example", "\\x"]) | _form_text,
        max_size=5,
    )
    signed = st.builds(lambda f: {"csrf": form.csrf, **f}, fields)
    forms = (fields | signed).map(lambda f: urlencode(f).encode())
    encoded = st.builds(
        lambda body, how: gzip.compress(body) if how == "gzip" else zlib.compress(body) if how == "zlib" else body,
        forms,
        st.sampled_from(["gzip", "zlib", "plain"]),
    )
    spoiled = st.builds(lambda body, tail: body + b"&title=" + tail, forms, st.binary(min_size=1, max_size=8))
    return st.one_of(forms, encoded, spoiled, st.binary(max_size=300), st.binary(min_size=70_000, max_size=70_010))


@pytest.mark.slow
@pytest.mark.parametrize("form", CONSOLE_FORMS)
def test_any_post_to_a_console_form_gets_no_5xx_and_no_error_line_and_the_admin_still_logs_in(
    tmp_path: Path, form: str
) -> None:
    config = ApiServerConfig(port=0, key=API_KEY, trusted_proxies=("127.0.0.1",))
    with open_console(tmp_path, config) as running:
        route = _console_form(running, form)
        records = _recording()

        @settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(body=_form_bodies(route), headers=_console_headers)
        @example(body=b"csrf=" + route.csrf.encode() + b"&key=\xff\xfe", headers={})
        @example(body=gzip.compress(b"csrf=x&key=y"), headers={"Content-Encoding": "gzip"})
        @example(body=urlencode({"csrf": route.csrf, "key": ADMIN, "next": "/console/x\r\nA: b"}).encode(), headers={})
        def check(body: bytes, headers: dict[str, str | bytes]) -> None:
            records.records.clear()
            answer = route.post(body, headers)
            event(f"console {form}: HTTP {answer.status}")
            errors = [r.getMessage() for r in records.records if r.levelno >= logging.ERROR]
            assert errors == [], errors
            assert answer.status < 500, (answer.status, answer.body[:300])

        try:
            check()
        finally:
            _stop_recording(records)
        admin = running.fresh(headers={"X-Forwarded-For": "198.51.100.2"})
        admin.log_in(ADMIN)
        assert admin.get("/console/conversations").status == 200
