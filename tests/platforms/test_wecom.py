"""WeCom application callbacks against a real gateway, a real loopback server and a fake WeCom server API.

The fake (``wecom_fake``) seals, signs and builds callbacks as WeCom documents them, independently of the
adapter's code. App ``main`` is agent 1000002 of corp ``wwcorpa``; app ``other`` the same agent id in corp
``wwcorpb`` (agent ids repeat across corps, which is why the app's name is the account).
"""

from __future__ import annotations

import dataclasses
import http.client
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from hermes_actors.errors import ConfigError
from hermes_actors.media import MediaConfig
from hermes_actors.messages import OutboundDocument, OutboundMessage
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.testing import FakeClock
from platforms import registry
from platforms.base import SendError
from platforms.wecom import WecomAdapter, WecomApp, WecomConfig
from tests.platforms.crash import AdapterWorker, inbox_rows, wait_for_inbox
from tests.platforms.support import StartGateway, inbound_messages
from tests.platforms.wecom_fake import FakeWecom, check_url, message_xml, push, signature

KEY_A = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG"
KEY_B = "ZYXWVUTSRQPONMLKJIHGFEDCBA9876543210zyxwvut"
AGENT = 1000002


@pytest.fixture
def fake() -> Iterator[FakeWecom]:
    fake = FakeWecom()
    fake.secrets |= {"wwcorpa": "secret-a", "wwcorpb": "secret-b"}
    fake.start()
    yield fake
    fake.stop()


def config_for(fake: FakeWecom, **options: Any) -> WecomConfig:
    apps = {
        "main": WecomApp(corp_id="wwcorpa", agent_id=AGENT, secret="secret-a", token="tok-a", encoding_aes_key=KEY_A),
        "other": WecomApp(corp_id="wwcorpb", agent_id=AGENT, secret="secret-b", token="tok-b", encoding_aes_key=KEY_B),
    }
    return WecomConfig(port=0, api_base_url=fake.base_url, apps=apps, **options)


@dataclasses.dataclass(frozen=True)
class Wecom:
    adapter: WecomAdapter
    gateway: Gateway
    fake: FakeWecom
    clock: FakeClock

    def url(self, app: str = "main") -> str:
        return f"{self.adapter.url}/wecom/callback/{app}"

    def post(self, plain: bytes, app: str = "main", **options: Any) -> tuple[int, str]:
        keys = {"token": "tok-a", "encoding_aes_key": KEY_A, "corp_id": "wwcorpa"}
        if app == "other":
            keys = {"token": "tok-b", "encoding_aes_key": KEY_B, "corp_id": "wwcorpb"}
        options = {**keys, "agent_id": AGENT, "timestamp": int(self.clock.now), **options}
        return push(self.url(app), plain, **options)

    def say(self, app: str = "main", **fields: str | None) -> None:
        corp = "wwcorpa" if app == "main" else "wwcorpb"
        assert self.post(message_xml(corp, AGENT, **fields), app) == (200, "")

    def keys(self) -> list[str]:
        with self.gateway.read() as store:
            return sorted(s.routing_key for s in store.list_sessions() if s.routing_key)


StartWecom = Callable[..., Wecom]


@pytest.fixture
def start_wecom(fake: FakeWecom, start_gateway: StartGateway) -> StartWecom:
    def start(*, media: MediaConfig | None = None, **options: Any) -> Wecom:
        clock = FakeClock()
        adapter = WecomAdapter(config_for(fake, **options), environ={}, clock=clock)
        gateway = start_gateway(adapter, clock=clock, media=media)
        return Wecom(adapter=adapter, gateway=gateway, fake=fake, clock=clock)

    return start


def test_the_url_check_is_answered_with_the_decrypted_echostr(start_wecom: StartWecom) -> None:
    wecom = start_wecom()
    now = int(wecom.clock.now)
    keys: dict[str, Any] = {"token": "tok-a", "encoding_aes_key": KEY_A, "timestamp": now}
    assert check_url(wecom.url(), "1616140317555161061", corp_id="wwcorpa", **keys) == (200, "1616140317555161061")
    status, text = check_url(wecom.url(), "x", corp_id="wwcorpb", **keys)  # sealed for another corp
    assert (status, "is for corp 'wwcorpb', not 'wwcorpa'" in text) == (400, True)
    status, text = check_url(wecom.url(), "x", corp_id="wwcorpa", token="forged", encoding_aes_key=KEY_A, timestamp=now)
    assert (status, text) == (401, "msg_signature does not match the token of app 'main'")
    stale = check_url(wecom.url(), "x", corp_id="wwcorpa", token="tok-a", encoding_aes_key=KEY_A, timestamp=now - 600)
    assert stale == (401, "the timestamp is 600 s old, outside the 300 s window")
    bare = http.client.HTTPConnection("127.0.0.1", int(wecom.adapter.url.rsplit(":", 1)[1]), timeout=10)
    try:
        bare.request("GET", "/wecom/callback/main?msg_signature=x&timestamp=1&nonce=n")
        response = bare.getresponse()
        assert (response.status, response.read()) == (400, b"a URL check needs echostr in the query")
    finally:
        bare.close()


def test_a_message_is_keyed_by_corp_and_app_and_the_reply_goes_to_the_user(start_wecom: StartWecom) -> None:
    wecom = start_wecom()
    wecom.say(Content="hello")
    wecom.say("other", Content="hi", MsgId="2")
    sent = wecom.fake.wait_sent(2)
    assert sorted((m.touser, m.agentid, m.text) for m in sent) == [
        ("zhangsan", AGENT, "echo: hello"),
        ("zhangsan", AGENT, "echo: hi"),
    ]
    assert wecom.gateway.wait_idle()
    assert wecom.keys() == ["agent:main:wecom.wwcorpa~main:dm:zhangsan", "agent:main:wecom.wwcorpb~other:dm:zhangsan"]
    assert sorted(wecom.fake.token_requests) == ["wwcorpa", "wwcorpb"]


def test_a_push_retried_three_times_runs_one_turn_and_events_run_none(start_wecom: StartWecom) -> None:
    wecom = start_wecom()
    plain = message_xml("wwcorpa", AGENT, Content="once", MsgId="42")
    assert [wecom.post(plain, nonce=f"n{i}") for i in range(4)] == [(200, "")] * 4
    wecom.fake.wait_sent(1)
    assert wecom.gateway.wait_idle()
    event = message_xml("wwcorpa", AGENT, MsgType="event", Event="enter_agent", Content=None, MsgId=None)
    assert wecom.post(event) == (200, "")
    assert wecom.gateway.wait_idle()
    assert [m.text for m in wecom.fake.sent] == ["echo: once"]
    assert [m.message_id for m in inbound_messages(wecom.gateway, "wecom")] == ["42"]


def test_an_image_is_fetched_with_media_get_into_the_media_store_before_the_push_is_answered(
    start_wecom: StartWecom, tmp_path: Path
) -> None:
    wecom = start_wecom()
    wecom.fake.media["MEDIA_1"] = (b"\x89PNG\r\n\x1a\n" + b"x" * 100, "image/png")
    wecom.fake.revoke_tokens()
    wecom.say(MsgType="image", Content=None, PicUrl="https://example.invalid/p", MediaId="MEDIA_1", MsgId="7")
    (message,) = inbound_messages(wecom.gateway, "wecom")
    assert message.text == "[image]"
    (attachment,) = message.attachments
    assert (attachment.kind, attachment.mime_type, attachment.size, attachment.error) == (
        "image",
        "image/png",
        108,
        None,
    )
    assert attachment.path is not None
    assert Path(attachment.path).read_bytes().startswith(b"\x89PNG")
    wecom.say(MsgType="file", Content=None, MediaId="GONE", FileName="a.pdf", MsgId="8")
    refused = inbound_messages(wecom.gateway, "wecom")[1].attachments[0]
    assert refused.error == "WeCom would not hand it over (errcode 40007: invalid media_id)"
    assert refused.name == "a.pdf"


def test_a_refused_token_is_fetched_again_once(start_wecom: StartWecom) -> None:
    wecom = start_wecom()
    wecom.say(Content="one")
    wecom.fake.wait_sent(1)
    wecom.fake.revoke_tokens()
    wecom.say(Content="two", MsgId="2")
    assert [m.text for m in wecom.fake.wait_sent(2)] == ["echo: one", "echo: two"]
    assert wecom.fake.calls == [0, 40014, 0]
    assert wecom.fake.token_requests == ["wwcorpa", "wwcorpa"]


def test_the_frequency_limit_is_retried_after_a_minute(start_wecom: StartWecom) -> None:
    wecom = start_wecom()
    wecom.fake.fail_next({"errcode": 45009, "errmsg": "api freq out of limit"})
    wecom.say(Content="hello")
    wecom.fake.wait_calls(1)
    assert wecom.gateway.wait_idle()
    with wecom.gateway.read() as store:
        (row,) = store.outbox.unsent()
    assert row.next_attempt_at == pytest.approx(wecom.clock.now + 60)
    wecom.clock.advance(60)
    wecom.gateway.tick()
    assert [m.text for m in wecom.fake.wait_sent(1)] == ["echo: hello"]


def test_send_failures_become_send_errors_that_say_what_happened(fake: FakeWecom) -> None:
    sender = WecomAdapter(config_for(fake), environ={}, clock=FakeClock()).sender
    reply = OutboundMessage(platform="wecom", text="hi", account_id="main", chat_id="zhangsan", outbox_id=3)
    fake.fail_next({"errcode": 81013, "errmsg": "user & party & tag all invalid"})
    with pytest.raises(SendError, match=r"errcode 81013 .*no valid recipient") as gone:
        sender.send(reply)
    assert gone.value.permanent
    fake.fail_next({"errcode": 0, "errmsg": "ok", "invaliduser": "zhangsan", "msgid": "m"})
    with pytest.raises(SendError, match="invalid user") as invalid:
        sender.send(reply)
    assert invalid.value.permanent
    fake.fail_next({"errcode": -1, "errmsg": "system busy"})
    with pytest.raises(SendError, match="slow down") as busy:
        sender.send(reply)
    assert (busy.value.permanent, busy.value.retry_after_s) == (False, 1.0)
    with pytest.raises(SendError, match="not configured") as ghost:
        sender.send(msgspec.structs.replace(reply, account_id="ghost"))
    assert ghost.value.permanent
    assert sender.send(msgspec.structs.replace(reply, text="字" * 1500)) is not None  # 4,500 bytes: three parts
    assert [len(m.text.encode()) for m in fake.sent] == [2046, 2046, 408]


def test_forged_stale_and_replayed_pushes_are_refused_with_401_and_nothing_is_stored(
    start_wecom: StartWecom, caplog: pytest.LogCaptureFixture
) -> None:
    wecom = start_wecom()
    plain = message_xml("wwcorpa", AGENT)
    now = int(wecom.clock.now)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"forge": "0" * 40}, "msg_signature does not match"),
        ({"token": "tok-b"}, "msg_signature does not match"),
        ({"timestamp": now - 301}, "301 s old, outside the 300 s window"),
        ({"timestamp": now + 400}, "400 s in the future"),
        ({"nonce": ""}, "msg_signature, timestamp and nonce are required"),
    ]
    with caplog.at_level(logging.WARNING, logger="platforms.wecom.adapter"):
        for options, reason in cases:
            status, text = wecom.post(plain, **options)
            assert (status, reason in text) == (401, True), (options, text)
    assert sum("refused a request (401" in r.getMessage() for r in caplog.records) == len(cases)
    assert inbound_messages(wecom.gateway, "wecom") == []


def test_malformed_hostile_and_misaddressed_pushes_get_400_and_the_adapter_keeps_working(
    start_wecom: StartWecom, caplog: pytest.LogCaptureFixture
) -> None:
    wecom = start_wecom(max_body_bytes=8192)
    bomb = (
        b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;">]><xml><Encrypt>&b;</Encrypt></xml>'
    )
    mac = signature("tok-a", str(int(wecom.clock.now)), "n0nce", "x" * 8)
    cases: list[tuple[dict[str, Any], bytes, int, str]] = [
        ({"raw": b"<xml><Encrypt>"}, message_xml("wwcorpa", AGENT), 400, "not well-formed"),
        ({"raw": bomb}, message_xml("wwcorpa", AGENT), 400, "document type declaration is not allowed"),
        ({"raw": b"<xml><Nothing/></xml>"}, message_xml("wwcorpa", AGENT), 400, "no Encrypt element"),
        ({"raw": b"<xml><Encrypt>xxxxxxxx</Encrypt></xml>", "forge": mac}, b"", 400, "not a whole number"),
        ({"corp_id": "wwcorpb"}, message_xml("wwcorpa", AGENT), 400, "is for corp 'wwcorpb'"),
        ({}, message_xml("wwcorpb", AGENT), 400, "addressed to 'wwcorpb'"),
        ({}, message_xml("wwcorpa", 1000009), 400, "is for agent '1000009'"),
        ({}, message_xml("wwcorpa", AGENT, MsgId=""), 400, "needs a MsgId"),
        ({}, b"<xml><a>" * 300, 400, "not WeCom's XML"),
        ({"raw": b"<xml>" + b"x" * 9000 + b"</xml>"}, b"", 413, "platforms.wecom.max_body_bytes"),
    ]
    with caplog.at_level(logging.WARNING, logger="platforms.wecom.adapter"):
        for options, plain, status, reason in cases:
            got, text = wecom.post(plain, **options)
            assert (got, reason in text) == (status, True), (options, plain[:40], text)
    assert sum("refused a request" in r.getMessage() for r in caplog.records) == len(cases)
    assert wecom.post(message_xml("wwcorpa", AGENT), app="nope")[0] == 404
    assert inbound_messages(wecom.gateway, "wecom") == []
    wecom.say(Content="still here", MsgId="99")
    assert [m.text for m in wecom.fake.wait_sent(1)] == ["echo: still here"]


def test_a_message_that_cannot_be_stored_gets_503(start_wecom: StartWecom) -> None:
    wecom = start_wecom()
    wecom.gateway.stop()
    assert wecom.post(message_xml("wwcorpa", AGENT)) == (503, "the message could not be stored; deliver it again later")


@pytest.mark.parametrize(
    ("app", "path", "problem"),
    [
        ({"token": "t", "encoding_aes_key": KEY_A}, "apps.a.secret", "is required"),
        ({"secret": "s", "encoding_aes_key": KEY_A}, "apps.a.token", "is required"),
        ({"secret": "s", "token": "t", "encoding_aes_key": "short"}, "apps.a.encoding_aes_key", "43 letters"),
        ({"secret": "s", "token": "t", "encoding_aes_key_env": "1X"}, "apps.a.encoding_aes_key_env", "variable name"),
        ({"secret": "s", "token": "t", "encoding_aes_key": KEY_A, "agent_id": 0}, "apps.a.agent_id", "AgentId"),
        ({"secret": "s", "token": "t", "encoding_aes_key": KEY_A, "corp_id": "a b"}, "apps.a.corp_id", "corp id"),
    ],
)
def test_a_bad_section_is_a_config_error_naming_its_field(app: dict[str, Any], path: str, problem: str) -> None:
    section = {"apps": {"a": {"corp_id": "wwcorpa", "agent_id": AGENT, **app}}}
    with pytest.raises(ConfigError) as raised:
        msgspec.convert(section, WecomConfig)  # as the daemon loads config.yaml
    assert raised.value.path == f"platforms.wecom.{path}"
    assert problem in str(raised.value)


def test_secrets_come_from_the_environment_and_a_missing_one_names_its_variable() -> None:
    app = WecomApp(corp_id="ww1", agent_id=AGENT, secret_env="WS", token_env="WT", encoding_aes_key_env="WK")
    config = WecomConfig(apps={"main": app})
    adapter = registry.build("wecom", config, {"WS": "s", "WT": "t", "WK": KEY_A})
    assert "secrets from $WS, $WT, $WK" in adapter.describe()[0]
    with pytest.raises(ConfigError, match="WK is not set") as raised:
        WecomAdapter(config, environ={"WS": "s", "WT": "t"})
    assert raised.value.path == "platforms.wecom.apps.main.encoding_aes_key_env"


@pytest.mark.slow
def test_a_kill_between_accept_and_reply_loses_nothing_and_replies_once(tmp_path: Path, fake: FakeWecom) -> None:
    db = tmp_path / "state.db"
    config = config_for(fake)
    plain = message_xml("wwcorpa", AGENT, Content="survive", MsgId="crash-1")
    keys: dict[str, Any] = {"token": "tok-a", "encoding_aes_key": KEY_A, "corp_id": "wwcorpa", "agent_id": AGENT}
    worker = AdapterWorker.start(db, "wecom", config, agent="hold")
    try:
        assert push(worker.url() + "/wecom/callback/main", plain, timestamp=int(time.time()), **keys) == (200, "")
        assert wait_for_inbox(db, 1) == [("crash-1", "pending")]
    finally:
        worker.kill()
    assert fake.sent == []
    worker = AdapterWorker.start(db, "wecom", config, agent="echo")
    try:
        (sent,) = fake.wait_sent(1, timeout=20)
        # WeCom retries the push it saw no answer for: recognised, nothing more is sent.
        assert push(worker.url() + "/wecom/callback/main", plain, timestamp=int(time.time()), **keys) == (200, "")
    finally:
        worker.stop()
    assert (sent.touser, sent.text) == ("zhangsan", "echo: survive")
    assert [m.text for m in fake.sent] == ["echo: survive"]
    assert [state for _, state in inbox_rows(db)] == ["done"]


def test_save_uploads_the_markdown_and_sends_one_file_message(start_wecom: StartWecom) -> None:
    wecom = start_wecom()
    wecom.say(Content="hello", MsgId="1")
    wecom.fake.wait_sent(1)
    wecom.say(Content="/save", MsgId="2")
    _, saved = wecom.fake.wait_sent(2)
    assert wecom.gateway.wait_idle()
    assert (saved.msgtype, saved.touser, saved.agentid) == ("file", "zhangsan", AGENT)
    assert saved.media_id is not None
    name, content_type, data = wecom.fake.uploads[saved.media_id]
    assert name.endswith(".md")
    assert content_type == "text/markdown"
    markdown = data.decode("utf-8")
    assert markdown.index("hello") < markdown.index("echo: hello")
    assert len(wecom.fake.sent) == 2  # the file instead of the text, not beside it


def test_save_sends_the_text_when_wecom_refuses_the_upload(
    start_wecom: StartWecom, caplog: pytest.LogCaptureFixture
) -> None:
    wecom = start_wecom()
    wecom.say(Content="hello", MsgId="1")
    wecom.fake.wait_sent(1)
    wecom.fake.upload_failures.append({"errcode": 40006, "errmsg": "invalid media size"})
    with caplog.at_level(logging.WARNING, logger="platforms.support.documents"):
        wecom.say(Content="/save", MsgId="2")
        _, text = wecom.fake.wait_sent(2)
        assert wecom.gateway.wait_idle()
    assert text.msgtype == "text"
    assert text.text.index("hello") < text.text.index("echo: hello")
    assert wecom.fake.uploads == {}
    assert "invalid media size" in caplog.text
    assert "the reply's text is sent instead" in caplog.text


def test_a_file_message_whose_answer_was_lost_is_retried_with_the_same_media_and_shown_once(fake: FakeWecom) -> None:
    (sender,) = WecomAdapter(config_for(fake), environ={}).senders()
    document = OutboundDocument(name="chat.md", mime_type="text/markdown", data=b"# chat\n", caption="the chat")
    reply = OutboundMessage(
        platform="wecom", account_id="main", chat_id="zhangsan", text="# chat", outbox_id=7, document=document
    )
    fake.fail_next({"errcode": -1, "errmsg": "system busy"})
    with pytest.raises(SendError) as busy:
        sender.send(reply)
    assert busy.value.retry_after_s is not None  # the file is retried later, not swapped for the text
    fake.lose_next_answer()
    with pytest.raises(SendError) as lost:
        sender.send(reply)
    assert lost.value.outcome_unknown
    msgid = sender.send(msgspec.structs.replace(reply, possible_duplicate=True))
    assert len(fake.uploads) == 1  # every attempt named the one upload
    assert [(m.msgtype, m.media_id) for m in fake.sent] == [("file", next(iter(fake.uploads)))]  # shown once
    assert msgid is not None
    assert fake.calls == [-1, 0, 0]
