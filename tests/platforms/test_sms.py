"""SMS through Twilio against a real gateway, a real loopback webhook server and the fake Twilio.

Incoming messages are built, signed and POSTed by ``twilio_fake`` (written from Twilio's documentation, not from the
adapter), and replies are read back from the fake's Messages API, so both wire directions are checked.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_actors.errors import ConfigError
from hermes_actors.media import MediaConfig
from hermes_actors.messages import OutboundMessage
from hermes_actors.testing import GatedAgent, poll_until
from platforms import registry
from platforms.base import SendError
from platforms.sms import EMPTY_TWIML, SmsAdapter, SmsConfig, SmsSender, signature_of, signed
from platforms.sms.config import resolve_keys
from platforms.support.fetch_policy import FetchSettings
from tests.platforms.crash import AdapterWorker, inbox_rows, wait_for_inbox
from tests.platforms.fetch_canary import Canary, running_canary, use_hosts
from tests.platforms.support import RunningAdapter, StartGateway, inbound_messages
from tests.platforms.twilio_fake import Answer, FakeTwilio, deliver, incoming, new_sid, sign

ACCOUNT = "AC" + "3f" * 16
TOKEN = "9c1e5b7a2d4f6e8091a3b5c7d9e1f203"
NUMBER = "+15550001111"
OTHER_NUMBER = "+15550002222"
ALICE = "+15557654321"
BOB = "+447700900123"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
FAKE_FILES = FetchSettings(hosts=["127.0.0.1"], allow_private=["127.0.0.1"])  # the fake serves media on loopback
REFUSED_INSIDE = "its address points into the bot's own network, which the bot does not fetch from"


def dm_key(user: str = ALICE, number: str = NUMBER) -> str:
    return f"agent:main:sms~{number}:dm:{user}"


@pytest.fixture
def twilio() -> Iterator[FakeTwilio]:
    fake = FakeTwilio(account_sid=ACCOUNT, auth_token=TOKEN, numbers=[NUMBER, OTHER_NUMBER]).start()
    yield fake
    fake.stop()


def make_config(twilio: FakeTwilio, **options: Any) -> SmsConfig:
    fields: dict[str, Any] = {
        "port": 0,
        "api_base_url": twilio.base_url,
        "account_sid": ACCOUNT,
        "auth_token": TOKEN,
        "numbers": [NUMBER, OTHER_NUMBER],
        "messages_per_second": 1000.0,
    }
    return SmsConfig(**(fields | options))


@dataclass(frozen=True)
class Running(RunningAdapter[SmsAdapter]):
    db: Path

    @property
    def url(self) -> str:
        return f"{self.adapter.url}/sms/twilio"

    def say(self, text: str, *, sender: str = ALICE, to: str = NUMBER, sid: str | None = None) -> str:
        """Deliver a signed incoming message and check it was acknowledged; return its ``MessageSid``."""
        message_sid = sid or new_sid()
        answer = deliver(self.url, incoming(ACCOUNT, to, sender, text, sid=message_sid), TOKEN)
        assert (answer.status, answer.text) == (200, EMPTY_TWIML), answer
        return message_sid

    def inbox(self) -> list[tuple[str, ...]]:
        return self.inbox_rows("platform_message_id", "routing_key")

    def given_up(self) -> list[str]:
        def reasons() -> list[str]:
            with self.gateway.read() as store:
                rows = store.sql.execute("SELECT last_error FROM outbox WHERE abandoned_at IS NOT NULL ORDER BY id")
            return [str(reason) for (reason,) in rows]

        return poll_until(reasons, 10, what="a reply given up")


Start = Callable[..., Running]


@pytest.fixture
def start(tmp_path: Path, twilio: FakeTwilio, start_gateway: StartGateway) -> Start:
    def run(config: SmsConfig | None = None, *, media: MediaConfig | None = None, **options: Any) -> Running:
        adapter = SmsAdapter(config or make_config(twilio), environ={})
        gateway = start_gateway(adapter, tick_interval_s=0.1, media=media, **options)
        return Running(adapter=adapter, gateway=gateway, db=tmp_path / "state.db")

    return run


# -- messages in, replies out ------------------------------------------------------------------------------------


def test_an_sms_is_acknowledged_with_empty_twiml_and_answered_through_the_messages_api(
    start: Start, twilio: FakeTwilio
) -> None:
    running = start()
    answer = deliver(running.url, incoming(ACCOUNT, NUMBER, ALICE, "hello", sid=(sid := new_sid())), TOKEN)
    assert answer == Answer(200, "text/xml; charset=utf-8", EMPTY_TWIML)
    sent = twilio.take()
    assert (sent.to, sent.sender, sent.body) == (ALICE, NUMBER, "echo: hello")
    assert running.inbox() == [(sid, dm_key())]
    assert running.transcript(dm_key()) == [("user", "hello"), ("assistant", "echo: hello")]
    (inbound,) = inbound_messages(running.gateway, "sms")
    assert (inbound.source.account_id, inbound.source.user_id, inbound.source.chat_type) == (NUMBER, ALICE, "dm")


def test_the_answer_comes_only_after_the_commit(start: Start, twilio: FakeTwilio) -> None:
    agent = GatedAgent()
    running = start(agent=agent)
    try:
        sid = running.say("wait for it")
        assert inbox_rows(running.db) == [(sid, "pending")]  # acknowledged: already committed, turn not done
    finally:
        agent.release.set()
    assert twilio.take().body == "echo: wait for it"


def test_each_receiving_number_is_an_account_of_its_own(start: Start, twilio: FakeTwilio) -> None:
    running = start()
    running.say("to the first", to=NUMBER)
    first = twilio.take()
    running.say("to the second", to=OTHER_NUMBER)
    second = twilio.take()
    assert (first.sender, second.sender) == (NUMBER, OTHER_NUMBER)
    assert running.transcript(dm_key(number=NUMBER))[0] == ("user", "to the first")
    assert running.transcript(dm_key(number=OTHER_NUMBER))[0] == ("user", "to the second")


def test_a_replayed_message_sid_is_answered_200_without_a_second_turn(
    start: Start, twilio: FakeTwilio, caplog: pytest.LogCaptureFixture
) -> None:
    running = start()
    params = incoming(ACCOUNT, NUMBER, ALICE, "once", sid=(sid := new_sid()))
    with caplog.at_level(logging.INFO, logger="platforms.sms"):
        assert deliver(running.url, params, TOKEN).status == 200
        assert twilio.take().body == "echo: once"
        replayed = deliver(running.url, params, TOKEN)
    assert (replayed.status, replayed.text) == (200, EMPTY_TWIML)
    assert f"message {sid} was already stored" in caplog.text
    running.say("barrier")  # the same chat: its reply leaves after anything the replay could have queued
    assert twilio.take().body == "echo: barrier"
    assert [body for _, body in [(s.to, s.body) for s in twilio.sent]] == ["echo: once", "echo: barrier"]
    assert len(running.inbox()) == 2


def test_messages_that_start_no_turn_are_acknowledged_and_skipped(
    start: Start, twilio: FakeTwilio, caplog: pytest.LogCaptureFixture
) -> None:
    running = start()
    with caplog.at_level(logging.INFO, logger="platforms.sms"):
        for params in (
            incoming(ACCOUNT, "+15559990000", ALICE, "not ours"),
            incoming(ACCOUNT, NUMBER, "whatsapp:+15557654321", "not a phone"),
            incoming(ACCOUNT, NUMBER, ALICE, "   "),
        ):
            answer = deliver(running.url, params, TOKEN)
            assert (answer.status, answer.text) == (200, EMPTY_TWIML)
    assert "+15559990000, which is not configured" in caplog.text
    assert "which is not a phone number" in caplog.text
    assert "without text or media" in caplog.text
    running.say("counted")
    assert twilio.take().body == "echo: counted"
    assert len(running.inbox()) == 1


def test_a_message_that_cannot_be_stored_is_a_503(start: Start, caplog: pytest.LogCaptureFixture) -> None:
    running = start()
    running.gateway.stop()  # the store is gone: the commit fails
    sid = new_sid()
    with caplog.at_level(logging.ERROR, logger="platforms.sms"):
        answer = deliver(running.url, incoming(ACCOUNT, NUMBER, ALICE, "lost?", sid=sid), TOKEN)
    assert answer.status == 503
    assert f"could not store message {sid}" in caplog.text


# -- signatures --------------------------------------------------------------------------------------------------


def test_missing_and_forged_signatures_are_403_and_nothing_is_stored(start: Start, twilio: FakeTwilio) -> None:
    running = start()
    params = incoming(ACCOUNT, NUMBER, ALICE, "forged")
    tampered = [(name, "+15550009999" if name == "From" else value) for name, value in params]
    refused = [
        deliver(running.url, params, None),
        deliver(running.url, params, TOKEN, signature=""),
        deliver(running.url, params, "another accounts token"),
        deliver(running.url, params, TOKEN, signed_url="https://elsewhere.example/sms/twilio"),
        deliver(running.url, params, TOKEN, signature=sign(TOKEN, running.url, params) + "x"),
        deliver(running.url, tampered, TOKEN, signature=sign(TOKEN, running.url, params)),
        deliver(running.url, [*params, ("Extra", "1")], TOKEN, signature=sign(TOKEN, running.url, params)),
        deliver(running.url + "?x=1", params, TOKEN, signed_url=running.url),
    ]
    for answer in refused:
        assert answer.status == 403, answer
        assert "X-Twilio-Signature" in answer.text
    assert running.inbox() == []
    running.say("the real one")
    assert twilio.take().body == "echo: the real one"


def test_behind_a_proxy_the_public_url_and_the_query_string_are_what_is_signed(
    start: Start, twilio: FakeTwilio
) -> None:
    public = "https://hermes.example.com/hooks/sms"
    running = start(make_config(twilio, public_url=public))
    params = incoming(ACCOUNT, NUMBER, ALICE, "via the proxy")
    assert deliver(running.url, params, TOKEN).status == 403  # signed for the local address: not what Twilio called
    assert deliver(running.url + "?tenant=a", params, TOKEN, signed_url=public + "?tenant=a").status == 200
    assert twilio.take().body == "echo: via the proxy"
    other = incoming(ACCOUNT, NUMBER, ALICE, "with the port")
    assert deliver(running.url, other, TOKEN, signed_url="https://hermes.example.com:443/hooks/sms").status == 200
    assert twilio.take().body == "echo: with the port"


def test_a_signed_message_of_another_account_is_refused(start: Start) -> None:
    running = start()
    answer = deliver(running.url, incoming("AC" + "00" * 16, NUMBER, ALICE, "hi"), TOKEN)
    assert (answer.status, answer.text) == (403, "the message belongs to another Twilio account")


_names = st.text(st.characters(codec="utf-8"), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(
    params=st.lists(st.tuples(_names, st.text(max_size=30)), max_size=8, unique_by=lambda pair: pair[0]),
    index=st.integers(0, 7),
    extra=st.text(min_size=1, max_size=5),
)
def test_a_signature_holds_for_exactly_the_url_and_parameters_it_was_made_for(
    params: list[tuple[str, str]], index: int, extra: str
) -> None:
    url = "https://hermes.example.com/sms/twilio?a=1"
    header = sign(TOKEN, url, params)  # the fake's own signing, written independently
    assert header == signature_of(TOKEN, url, params)
    assert signed(header, TOKEN, url, list(reversed(params)))
    assert not signed(header, TOKEN, url + "&b=2", params)
    assert not signed(header, TOKEN + "x", url, params)
    if params:
        name = params[index % len(params)][0]
        changed = [(n, v + extra if n == name else v) for n, v in params]
        assert not signed(header, TOKEN, url, changed)


# -- malformed requests ------------------------------------------------------------------------------------------


def test_malformed_requests_get_a_clear_4xx_and_the_adapter_keeps_working(
    start: Start, twilio: FakeTwilio, caplog: pytest.LogCaptureFixture
) -> None:
    running = start(make_config(twilio, max_body_bytes=4096))
    base = incoming(ACCOUNT, NUMBER, ALICE, "x")

    def without(name: str) -> list[tuple[str, str]]:
        return [(n, v) for n, v in base if n != name]

    def replaced(name: str, value: str) -> list[tuple[str, str]]:
        return [(n, value if n == name else v) for n, v in base]

    cases: list[tuple[list[tuple[str, str]], int, str]] = [
        (without("MessageSid"), 400, "MessageSid is missing"),
        (replaced("MessageSid", "SM123"), 400, "MessageSid 'SM123' is not what Twilio sends"),
        (without("From"), 400, "From is missing"),
        (replaced("NumMedia", "many"), 400, "NumMedia"),
        (replaced("NumMedia", "11"), 400, "at most 10"),
        (replaced("NumMedia", "1"), 400, "MediaUrl0 is missing or not an http(s) URL"),
        ([*base, ("Body", "again")], 400, "appears twice"),
        (replaced("Body", "y" * 5000), 413, "platforms.sms.max_body_bytes"),
    ]
    with caplog.at_level(logging.INFO, logger="platforms.sms"):
        for params, status, words in cases:
            answer = deliver(running.url, params, TOKEN)
            assert (answer.status, words in answer.text) == (status, True), (answer, words)
        raw = b"Body=%FF%FE&From=x"
        not_utf8 = deliver(running.url, [], TOKEN, body=raw)
        assert (not_utf8.status, not_utf8.text) == (400, "the form is not UTF-8")
        as_json = deliver(running.url, base, TOKEN, headers={"Content-Type": "application/json"})
        assert as_json.status == 415
    assert "sms webhook: refused a request (400 MessageSid is missing)" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert running.inbox() == []
    running.say("still here")
    assert twilio.take().body == "echo: still here"


# -- media -------------------------------------------------------------------------------------------------------


def test_mms_media_are_downloaded_with_basic_auth_into_the_media_store(
    start: Start, twilio: FakeTwilio, tmp_path: Path
) -> None:
    running = start(make_config(twilio, fetch=FAKE_FILES), media=MediaConfig(max_bytes=1000))
    sid = new_sid("MM")
    picture = twilio.add_media(sid, PNG, "image/png")
    large = twilio.add_media(sid, b"z" * 2000, "video/mp4")
    missing = twilio.base_url + f"/2010-04-01/Accounts/{ACCOUNT}/Messages/{sid}/Media/{new_sid('ME')}"
    params = incoming(
        ACCOUNT,
        NUMBER,
        ALICE,
        "see",
        sid=sid,
        media=[(picture, "image/png"), (large, "video/mp4"), (missing, "image/jpeg")],
    )
    assert deliver(running.url, params, TOKEN).status == 200
    (inbound,) = inbound_messages(running.gateway, "sms")
    assert inbound.text == "see\n[image]\n[video]\n[image]"
    saved, too_large, gone = inbound.attachments
    assert (saved.kind, saved.mime_type, saved.sha256, saved.error) == (
        "image",
        "image/png",
        hashlib.sha256(PNG).hexdigest(),
        None,
    )
    assert saved.path is not None
    assert Path(saved.path).read_bytes() == PNG
    assert too_large.error is not None
    assert "over the" in too_large.error
    assert gone.error is not None
    assert "HTTP 404" in gone.error
    assert all(f.authorized for f in twilio.fetches if "/Media/" in f.path)
    answered = twilio.take().body
    assert "echo: see" in answered
    assert "I could not read the video: it is 2 KB, over the" in answered  # the reply names what was not read


def test_credentials_go_only_to_the_api_origin(start: Start, twilio: FakeTwilio) -> None:
    fake_media = FetchSettings(hosts=["127.0.0.1", "localhost"], allow_private=["127.0.0.1"])
    running = start(make_config(twilio, fetch=fake_media))
    sid = new_sid("MM")
    elsewhere = twilio.add_media(sid, PNG, "image/png").replace("127.0.0.1", "localhost")  # another origin
    params = incoming(ACCOUNT, NUMBER, ALICE, "", sid=sid, media=[(elsewhere, "image/png")])
    assert deliver(running.url, params, TOKEN).status == 200
    (inbound,) = inbound_messages(running.gateway, "sms")
    (refused,) = inbound.attachments
    assert refused.error is not None
    assert "HTTP 401" in refused.error
    assert [f.authorized for f in twilio.fetches] == [False]
    assert "I could not read the image: its download failed (HTTP 401)" in twilio.take().body


@pytest.fixture
def canary() -> Iterator[Canary]:
    with running_canary() as server:
        yield server


def test_media_urls_inside_the_network_are_not_fetched_and_the_text_still_runs(
    start: Start, twilio: FakeTwilio, canary: Canary, caplog: pytest.LogCaptureFixture
) -> None:
    running = start()
    media = [
        (canary.url("/metrics"), "text/plain"),
        ("http://169.254.169.254/latest/meta-data/", "image/png"),
        (canary.url("/admin", host="localhost"), "image/jpeg"),
    ]
    with caplog.at_level(logging.WARNING, logger="platforms.support.downloads"):
        assert deliver(running.url, incoming(ACCOUNT, NUMBER, ALICE, "see", media=media), TOKEN).status == 200
        answered = twilio.take().body
    assert "echo: see" in answered
    (inbound,) = inbound_messages(running.gateway, "sms")
    assert [attachment.error for attachment in inbound.attachments] == [
        REFUSED_INSIDE,
        REFUSED_INSIDE,
        "it is offered from localhost, which is not a Twilio file host",
    ]
    assert canary.hits == []
    assert caplog.text.count("refused by the fetch policy") == 3


def test_twilio_hosts_that_resolve_or_redirect_into_the_network_are_refused_and_the_api_still_serves_media(
    start: Start, twilio: FakeTwilio, canary: Canary, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosts = use_hosts(monkeypatch)
    hosts["api.twilio.com"] = hosts["mms.twiliocdn.com"] = "127.0.0.1"
    twilio.enforce_media_auth = False  # the fake's own origin is 127.0.0.1, so no credentials go to api.twilio.com
    running = start(make_config(twilio, fetch=FetchSettings(allow_private=["api.twilio.com"])))
    sid = new_sid("MM")
    picture = twilio.add_media(sid, PNG, "image/png").replace("127.0.0.1", "api.twilio.com")
    media = [
        (picture, "image/png"),  # the API answers with a redirect to /cdn/...: allowed, and it works
        (canary.redirect(canary.url("/b"), host="api.twilio.com"), "image/png"),
        (canary.url("/c", host="mms.twiliocdn.com"), "image/png"),  # DNS rebinding
        (canary.redirect(canary.url("/d", host="mms.twiliocdn.com"), host="api.twilio.com"), "image/png"),
    ]
    assert deliver(running.url, incoming(ACCOUNT, NUMBER, ALICE, "see", sid=sid, media=media), TOKEN).status == 200
    twilio.take()
    (inbound,) = inbound_messages(running.gateway, "sms")
    saved, *refused = inbound.attachments
    assert (saved.sha256, saved.error) == (hashlib.sha256(PNG).hexdigest(), None)
    assert [attachment.error for attachment in refused] == [REFUSED_INSIDE] * 3
    assert canary.secret_hits() == []
    assert len(canary.redirect_hits()) == 2


# -- replies -----------------------------------------------------------------------------------------------------


def sender_for(twilio: FakeTwilio, **options: Any) -> SmsSender:
    config = make_config(twilio, **options)
    return SmsSender(resolve_keys(config, {}), config, numbers=config.numbers)


def reply(text: str, *, to: str = ALICE, number: str = NUMBER, outbox_id: int = 1) -> OutboundMessage:
    return OutboundMessage(platform="sms", text=text, account_id=number, chat_id=to, outbox_id=outbox_id)


def test_a_long_reply_is_split_at_the_limit_and_a_retry_resumes_after_the_parts_sent(twilio: FakeTwilio) -> None:
    sender = sender_for(twilio, max_message_chars=160)
    text = " ".join(f"word{i}" for i in range(100))  # about 700 characters: five parts
    twilio.fail(500, 20500, "Internal Server Error", after=2)
    with pytest.raises(SendError) as failed:
        sender.send(reply(text))
    assert not failed.value.permanent
    assert len(twilio.sent) == 2
    first = sender.send(reply(text))
    parts = [s.body for s in twilio.sent]
    assert first == twilio.sent[0].sid
    assert all(len(part) <= 160 for part in parts)
    assert " ".join(parts) == text  # each part once, in order


def test_429_asks_to_wait_and_refusals_no_retry_can_fix_give_the_reply_up(twilio: FakeTwilio) -> None:
    twilio.fail(429, 20429, "Too Many Requests", headers={"Retry-After": "5"})
    with pytest.raises(SendError) as limited:
        sender_for(twilio).send(reply("slow"))
    assert (limited.value.retry_after_s, limited.value.permanent) == (5.0, False)
    twilio.unsubscribed.add(BOB)
    with pytest.raises(SendError) as stopped:
        sender_for(twilio).send(reply("hi", to=BOB))
    assert stopped.value.permanent
    assert "21610" in str(stopped.value)
    assert "replied STOP" in str(stopped.value)
    with pytest.raises(SendError) as invalid:
        sender_for(twilio).send(reply("hi", to="+12"))
    assert invalid.value.permanent
    assert "21211" in str(invalid.value)
    wrong = sender_for(twilio, auth_token="0" * 32)
    with pytest.raises(SendError) as unauthorised:
        wrong.send(reply("hi"))
    assert not unauthorised.value.permanent
    assert "check platforms.sms.account_sid and the auth token" in str(unauthorised.value)
    with pytest.raises(SendError) as unknown:
        sender_for(twilio).send(reply("hi", number="+15550003333"))
    assert unknown.value.permanent
    assert twilio.sent == []


def test_sends_are_paced_per_number_and_a_long_wait_goes_back_to_the_outbox(twilio: FakeTwilio) -> None:
    sender = sender_for(twilio, messages_per_second=0.1)
    sender.send(reply("first", number=NUMBER))
    sender.send(reply("other number", number=OTHER_NUMBER))  # a bucket of its own
    with pytest.raises(SendError) as held:
        sender.send(reply("second", number=NUMBER, outbox_id=2))
    assert held.value.retry_after_s is not None
    assert 9.0 < held.value.retry_after_s <= 10.0
    assert [s.body for s in twilio.sent] == ["first", "other number"]


def test_a_reply_twilio_refuses_is_given_up_with_the_reason(start: Start, twilio: FakeTwilio) -> None:
    running = start()
    twilio.unsubscribed.add(ALICE)
    running.say("are you there?")
    (reason,) = running.given_up()
    assert "21610" in reason
    assert "replied STOP" in reason


# -- configuration -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "path", "words"),
    [
        ({"account_sid": "AC1"}, "platforms.sms.account_sid", "AC followed by 32"),
        ({"auth_token": None}, "platforms.sms.auth_token", "auth_token_env"),
        ({"auth_token_env": "TWILIO_AUTH_TOKEN"}, "platforms.sms.auth_token_env", "not both"),
        ({"numbers": []}, "platforms.sms.numbers", "list the account's numbers"),
        ({"numbers": ["5550001111x"]}, "platforms.sms.numbers[0]", "E.164"),
        ({"numbers": [NUMBER, NUMBER]}, "platforms.sms.numbers", "twice"),
        ({"max_message_chars": 1601}, "platforms.sms.max_message_chars", "1600"),
        ({"public_url": "hermes.example.com/sms"}, "platforms.sms.public_url", "http(s) URL"),
        ({"api_base_url": "https://api.twilio.com?x=1"}, "platforms.sms.api_base_url", "no query"),
        ({"port": 70000}, "platforms.sms.port", "TCP port"),
    ],
)
def test_config_errors_name_the_field(fields: dict[str, Any], path: str, words: str) -> None:
    base = {"account_sid": ACCOUNT, "auth_token": TOKEN, "numbers": [NUMBER]}
    with pytest.raises(ConfigError) as caught:
        msgspec.convert({k: v for k, v in (base | fields).items() if v is not None}, SmsConfig)
    assert caught.value.path == path
    assert words in str(caught.value)


def test_the_auth_token_env_is_read_when_the_adapter_is_built_and_the_banner_says_where_to_point_twilio(
    twilio: FakeTwilio,
) -> None:
    config = make_config(twilio, auth_token=None, auth_token_env="TWILIO_AUTH_TOKEN", public_url="https://h.example/s")
    with pytest.raises(ConfigError) as caught:
        SmsAdapter(config, environ={})
    assert caught.value.path == "platforms.sms.auth_token_env"
    (line,) = SmsAdapter(config, environ={"TWILIO_AUTH_TOKEN": TOKEN}).describe()
    assert "https://h.example/s" in line
    assert "auth token from $TWILIO_AUTH_TOKEN" in line
    assert TOKEN not in line
    disabled = msgspec.convert({"enabled": False}, SmsConfig)
    assert not registry.enabled(disabled)


def test_the_registry_builds_the_adapter_from_its_section(twilio: FakeTwilio) -> None:
    section = {"port": 0, "account_sid": ACCOUNT, "auth_token": TOKEN, "numbers": [NUMBER]}
    adapter = registry.build("sms", msgspec.convert(section, registry.config_type("sms")), {})
    assert isinstance(adapter, SmsAdapter)
    assert adapter.capabilities.max_message_chars == 1600


# -- crashes -----------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_kill_between_accept_and_reply_loses_nothing_and_replies_once(tmp_path: Path, twilio: FakeTwilio) -> None:
    db = tmp_path / "state.db"
    config = make_config(twilio)
    worker = AdapterWorker.start(db, "sms", config, agent="hold")
    sid = new_sid()
    try:
        url = worker.url() + "/sms/twilio"
        assert deliver(url, incoming(ACCOUNT, NUMBER, ALICE, "survive", sid=sid), TOKEN).status == 200
        assert wait_for_inbox(db, 1) == [(sid, "pending")]
    finally:
        worker.kill()
    assert twilio.sent == []
    worker = AdapterWorker.start(db, "sms", config, agent="echo")
    try:
        assert twilio.take(timeout=20).body == "echo: survive"
        url = worker.url() + "/sms/twilio"
        # Twilio replaying the request is a duplicate; a later message of the same chat is the barrier.
        assert deliver(url, incoming(ACCOUNT, NUMBER, ALICE, "survive", sid=sid), TOKEN).status == 200
        assert deliver(url, incoming(ACCOUNT, NUMBER, ALICE, "after"), TOKEN).status == 200
        assert twilio.take(timeout=20).body == "echo: after"
    finally:
        worker.stop()
    assert [s.body for s in twilio.sent] == ["echo: survive", "echo: after"]
    assert [state for _, state in wait_for_inbox(db, 2)] == ["done", "done"]


def test_save_sends_the_markdown_as_text_since_mms_media_needs_a_public_url(start: Start, twilio: FakeTwilio) -> None:
    running = start()
    deliver(running.url, incoming(ACCOUNT, NUMBER, ALICE, "hello", sid=new_sid()), TOKEN)
    assert twilio.take().body == "echo: hello"
    deliver(running.url, incoming(ACCOUNT, NUMBER, ALICE, "/save", sid=new_sid()), TOKEN)
    saved = twilio.take()
    assert running.gateway.wait_idle()
    assert saved.body.startswith("# ")
    assert saved.body.index("hello") < saved.body.index("echo: hello")
    assert twilio.nothing_more()
