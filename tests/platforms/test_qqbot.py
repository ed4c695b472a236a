"""QQ Bot in HTTP callback mode against a real gateway, a real loopback callback server and the fake QQ.

Callbacks are built and signed by ``qqbot_fake`` (QQ's Ed25519 scheme, written from its documentation, not from
the adapter), and replies are read back from the fake's OpenAPI, so both wire directions are checked.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from hermes_actors.errors import ConfigError, PlatformError
from hermes_actors.media import MediaConfig
from hermes_actors.messages import OutboundMessage
from hermes_actors.testing import poll_until
from platforms import registry
from platforms.base import SendError
from platforms.qqbot import ACK, QqbotAdapter, QqbotBot, QqbotConfig, QqbotSender, msg_seq_of, seed_of
from platforms.qqbot.config import resolve_bots
from platforms.support.fetch_policy import FetchSettings
from tests.platforms.crash import AdapterWorker, inbox_rows, wait_for_inbox
from tests.platforms.fetch_canary import CANARY_BODY, Canary, running_canary, use_hosts
from tests.platforms.qqbot_fake import Answer, FakeQq, callback_headers, key_of, post
from tests.platforms.support import RunningAdapter, StartGateway, inbound_messages

APP = "102030405"
SECRET = "DG5g3B4j9X2KOErG"  # 16 characters: the seed repeats it once
OPENID = "E4F4AEA33253A2797FB897C50B81D7ED"
GROUP = "C9F778FE6ADF9D1D1DBE395BF744A33A"
MEMBER = "8BEA4FBD5AC94F7DBC50E1F7E4E8C0A1"
GUILD = "18700000000001"
CHANNEL = "1492000000"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
FAKE_FILES = FetchSettings(hosts=["127.0.0.1"], allow_private=["127.0.0.1"])  # the fake serves files on loopback
REFUSED_INSIDE = "its address points into the bot's own network, which the bot does not fetch from"


@pytest.fixture
def qq() -> Iterator[FakeQq]:
    fake = FakeQq(secrets={APP: SECRET}).start()
    yield fake
    fake.stop()


def make_config(qq: FakeQq, **options: Any) -> QqbotConfig:
    fields: dict[str, Any] = {
        "port": 0,
        "token_url": qq.token_url,
        "api_base_url": qq.base_url,
        "messages_per_second": 1000.0,
        "bots": {"main": QqbotBot(app_id=APP, secret=SECRET)},
    }
    return QqbotConfig(**(fields | options))


def c2c(text: str, *, message_id: str | None = None, attachments: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "op": 0,
        "id": "C2C_MESSAGE_CREATE:" + secrets.token_hex(8),
        "s": 7,
        "t": "C2C_MESSAGE_CREATE",
        "d": {
            "id": message_id or "ROBOT1.0_" + secrets.token_hex(10),
            "author": {"user_openid": OPENID},
            "content": text,
            "timestamp": "2026-12-02T18:00:00+08:00",
            "attachments": attachments or [],
        },
    }


def group_at(text: str) -> dict[str, Any]:
    return {
        "op": 0,
        "id": "GROUP_AT_MESSAGE_CREATE:" + secrets.token_hex(8),
        "t": "GROUP_AT_MESSAGE_CREATE",
        "d": {
            "id": "ROBOT1.0_" + secrets.token_hex(10),
            "author": {"member_openid": MEMBER},
            "content": " " + text,
            "group_openid": GROUP,
            "timestamp": "2026-12-02T18:00:00+08:00",
        },
    }


def channel_at(text: str) -> dict[str, Any]:
    return {
        "op": 0,
        "id": "AT_MESSAGE_CREATE:" + secrets.token_hex(8),
        "t": "AT_MESSAGE_CREATE",
        "d": {
            "id": "08e0" + secrets.token_hex(10),
            "author": {"id": "1234567890", "username": "alice", "bot": False},
            "channel_id": CHANNEL,
            "guild_id": GUILD,
            "content": "<@!9876543210> " + text,
            "timestamp": "2026-12-02T18:00:00+08:00",
        },
    }


@dataclass(frozen=True)
class Running(RunningAdapter[QqbotAdapter]):
    @property
    def url(self) -> str:
        return f"{self.adapter.url}/qqbot/main"

    def deliver(self, payload: dict[str, Any], **signing: Any) -> Answer:
        body = json.dumps(payload).encode()
        return post(self.url, body, callback_headers(SECRET, body, app_id=APP, **signing))

    def inbox(self) -> list[tuple[str, ...]]:
        return self.inbox_rows("platform_message_id", "routing_key")


Start = Callable[..., Running]


@pytest.fixture
def start(qq: FakeQq, start_gateway: StartGateway) -> Start:
    def run(config: QqbotConfig | None = None, *, media: MediaConfig | None = None) -> Running:
        adapter = QqbotAdapter(config or make_config(qq), environ={})
        gateway = start_gateway(adapter, tick_interval_s=0.1, media=media)
        return Running(adapter=adapter, gateway=gateway)

    return run


# -- messages in, replies out ------------------------------------------------------------------------------------


def test_a_direct_message_is_acked_with_op_12_and_answered_as_a_passive_reply(start: Start, qq: FakeQq) -> None:
    running = start()
    payload = c2c("hello")
    answer = running.deliver(payload)
    assert (answer.status, answer.json()) == (200, ACK)
    sent = qq.take()
    message_id = payload["d"]["id"]
    assert (sent.kind, sent.target) == ("users", OPENID)
    assert sent.body["content"] == "echo: hello"
    assert sent.body["msg_id"] == message_id
    assert sent.body["msg_type"] == 0
    assert isinstance(sent.body["msg_seq"], int)
    key = f"agent:main:qqbot~{APP}:dm:user.{OPENID}"
    assert running.inbox() == [(message_id, key)]
    assert running.transcript(key) == [("user", "hello"), ("assistant", "echo: hello")]


def test_a_group_mention_is_keyed_per_member_and_answered_in_the_group(start: Start, qq: FakeQq) -> None:
    running = start()
    payload = group_at("what time is it")
    assert running.deliver(payload).status == 200
    sent = qq.take()
    assert (sent.kind, sent.target, sent.body["content"]) == ("groups", GROUP, "echo: what time is it")
    assert sent.body["msg_id"] == payload["d"]["id"]
    assert running.inbox() == [(payload["d"]["id"], f"agent:main:qqbot~{APP}:group:group.{GROUP}:{MEMBER}")]


def test_a_guild_channel_mention_has_the_guild_as_scope_and_no_msg_seq(start: Start, qq: FakeQq) -> None:
    running = start()
    payload = channel_at("hi there")
    assert running.deliver(payload).status == 200
    sent = qq.take()
    assert (sent.kind, sent.target, sent.body["content"]) == ("channels", CHANNEL, "echo: hi there")
    assert sent.body["msg_id"] == payload["d"]["id"]
    assert "msg_seq" not in sent.body
    assert running.inbox() == [
        (payload["d"]["id"], f"agent:main:qqbot.{GUILD}~{APP}:group:channel.{CHANNEL}:1234567890")
    ]


def test_the_address_validation_is_answered_with_the_signed_plain_token(start: Start) -> None:
    running = start()
    answer = running.deliver({"op": 13, "d": {"plain_token": "Arq0D5A61EgUu4OxUvOp", "event_ts": "1725442341"}})
    assert answer.status == 200
    reply = answer.json()
    assert reply["plain_token"] == "Arq0D5A61EgUu4OxUvOp"
    key_of(SECRET).public_key().verify(bytes.fromhex(reply["signature"]), b"1725442341Arq0D5A61EgUu4OxUvOp")
    assert running.inbox() == []


def test_the_seed_repeats_a_short_secret_to_32_bytes() -> None:
    assert seed_of("abc") == (b"abc" * 11)[:32]
    assert seed_of("x" * 40) == b"x" * 32


def test_a_redelivered_message_is_acked_again_without_a_second_turn(start: Start, qq: FakeQq) -> None:
    running = start()
    payload = c2c("once", message_id="ROBOT1.0_same")
    assert running.deliver(payload).status == 200
    assert qq.take().body["content"] == "echo: once"
    again = running.deliver(payload)
    assert (again.status, again.json()) == (200, ACK)
    assert running.deliver(c2c("after")).status == 200  # the barrier: its reply follows any for the repeat
    assert qq.take().body["content"] == "echo: after"
    assert next(row[0] for row in running.inbox()) == "ROBOT1.0_same"
    assert len(running.inbox()) == 2


def test_an_image_is_saved_into_the_media_store_before_the_commit(start: Start, qq: FakeQq) -> None:
    running = start(make_config(qq, fetch=FAKE_FILES))
    url = qq.add_file(PNG, "image/png")
    ref = {"content_type": "image/png", "filename": "cat.png", "url": url, "size": len(PNG), "width": 8, "height": 8}
    assert running.deliver(c2c("look", attachments=[ref])).status == 200
    assert qq.take().body["content"].startswith("echo: look\n[image]\n[attached image cat.png (image/png, 72 bytes)")
    (inbound,) = inbound_messages(running.gateway, "qqbot")
    (attachment,) = inbound.attachments
    assert attachment.error is None
    assert attachment.path is not None
    assert Path(attachment.path).read_bytes() == PNG


def test_a_file_over_the_limit_is_refused_by_its_announced_size(start: Start, qq: FakeQq) -> None:
    running = start(media=MediaConfig(max_bytes=10))
    url = qq.add_file(PNG, "image/png")
    ref = {"content_type": "image/png", "filename": "big.png", "url": url, "size": len(PNG)}
    assert running.deliver(c2c("", attachments=[ref])).status == 200
    qq.take()
    (inbound,) = inbound_messages(running.gateway, "qqbot")
    assert inbound.attachments[0].path is None
    assert "limit" in (inbound.attachments[0].error or "")


@pytest.fixture
def canary() -> Iterator[Canary]:
    with running_canary() as server:
        yield server


def test_attachment_urls_inside_the_network_are_not_fetched_and_the_text_still_runs(
    start: Start, qq: FakeQq, canary: Canary, caplog: pytest.LogCaptureFixture
) -> None:
    running = start()
    refs = [
        {"content_type": "text/plain", "filename": "metrics.txt", "url": canary.url("/metrics")},
        {"content_type": "image/png", "filename": "meta.png", "url": "169.254.169.254/latest/meta-data/"},
        {"content_type": "file", "filename": "admin.txt", "url": canary.url("/admin", host="localhost")},
    ]
    with caplog.at_level(logging.WARNING, logger="platforms.support.downloads"):
        assert running.deliver(c2c("quote these", attachments=refs)).status == 200
        reply = qq.take().body["content"]
    assert "echo: quote these" in reply
    assert f"I could not read metrics.txt: {REFUSED_INSIDE}" in reply
    assert f"I could not read meta.png: {REFUSED_INSIDE}" in reply
    assert "I could not read admin.txt: it is offered from localhost, which is not a QQ file host" in reply
    assert canary.hits == []
    assert caplog.text.count("refused by the fetch policy") == 3


def test_a_qq_media_host_that_resolves_or_redirects_into_the_network_is_refused(
    start: Start, qq: FakeQq, canary: Canary, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosts = use_hosts(monkeypatch)
    media, guild = "multimedia.nt.qq.com.cn", "gchat.qpic.cn"
    hosts[media] = hosts[guild] = "127.0.0.1"
    running = start(make_config(qq, fetch=FetchSettings(allow_private=[media])))
    refs = [
        {"content_type": "text/plain", "filename": "a.txt", "url": canary.url("/a", host=guild)},  # DNS rebinding
        {"content_type": "text/plain", "filename": "b.txt", "url": canary.redirect(canary.url("/b"), host=media)},
        {
            "content_type": "text/plain",
            "filename": "c.txt",
            "url": canary.redirect(canary.url("/c", host=guild), host=media),
        },
        {"content_type": "text/plain", "filename": "d.txt", "url": canary.url("/d.txt", host=media)},  # allowed
    ]
    assert running.deliver(c2c("read", attachments=refs)).status == 200
    reply = qq.take().body["content"]
    for name in ("a.txt", "b.txt", "c.txt"):
        assert f"I could not read {name}: {REFUSED_INSIDE}" in reply
    (inbound,) = inbound_messages(running.gateway, "qqbot")
    allowed = inbound.attachments[3]
    assert (allowed.name, allowed.error) == ("d.txt", None)
    assert allowed.path is not None
    assert Path(allowed.path).read_bytes() == CANARY_BODY
    assert canary.secret_hits() == ["/d.txt"]
    assert len(canary.redirect_hits()) == 2


def test_other_events_and_bot_messages_are_acked_and_skipped(start: Start, qq: FakeQq) -> None:
    running = start()
    assert running.deliver({"op": 0, "t": "GROUP_ADD_ROBOT", "d": {"group_openid": GROUP}}).json() == ACK
    bot = channel_at("beep")
    bot["d"]["author"]["bot"] = True
    assert running.deliver(bot).json() == ACK
    assert running.inbox() == []
    assert qq.nothing_more()


# -- hostile requests ---------------------------------------------------------------------------------------------


def test_forged_unsigned_stale_and_foreign_requests_are_refused_and_the_adapter_keeps_working(
    start: Start, qq: FakeQq, caplog: pytest.LogCaptureFixture
) -> None:
    running = start()
    caplog.set_level(logging.INFO, logger="platforms.qqbot.adapter")
    body = json.dumps(c2c("forged")).encode()
    forged = callback_headers("another secret entirely!", body, app_id=APP)
    assert post(running.url, body, forged).status == 403
    unsigned = {"Content-Type": "application/json"}
    assert post(running.url, body, unsigned).status == 403
    stale = callback_headers(SECRET, body, app_id=APP, timestamp=int(time.time()) - 3600)
    answer = post(running.url, body, stale)
    assert answer.status == 403
    assert "stale" in answer.text
    foreign = callback_headers(SECRET, body, app_id="999999")
    assert post(running.url, body, foreign).status == 403
    tampered = callback_headers(SECRET, body, app_id=APP)
    assert post(running.url, body.replace(b"forged", b"f0rged"), tampered).status == 403
    assert post(f"{running.adapter.url}/qqbot/nobody", body, callback_headers(SECRET, body, app_id=APP)).status == 404
    assert running.inbox() == []
    assert "refused a request (403" in caplog.text
    assert running.deliver(c2c("still here")).status == 200
    assert qq.take().body["content"] == "echo: still here"


@pytest.mark.parametrize(
    ("payload", "said"),
    [
        (b"{not json", "payload"),
        (b'{"op": "zero"}', "payload"),
        (b'{"op": 0, "t": "C2C_MESSAGE_CREATE", "d": {"content": "no id"}}', "C2C_MESSAGE_CREATE"),
        (b'{"op": 0, "t": "C2C_MESSAGE_CREATE", "d": {"id": "m1", "author": {}}}', "user_openid"),
        (b'{"op": 0, "t": "GROUP_AT_MESSAGE_CREATE", "d": {"id": "m1", "group_openid": "G"}}', "member_openid"),
        (b'{"op": 13, "d": {"plain_token": 5}}', "validation"),
        (b'{"op": 7}', "op 7"),
        (b"[" * 5000 + b"]" * 5000, "nested deeper than 64 levels"),
    ],
)
def test_a_malformed_signed_payload_is_a_400_naming_the_fault(
    start: Start, qq: FakeQq, payload: bytes, said: str
) -> None:
    running = start()
    answer = post(running.url, payload, callback_headers(SECRET, payload, app_id=APP))
    assert answer.status == 400
    assert said in answer.text
    assert running.deliver(c2c("fine")).status == 200
    assert qq.take().body["content"] == "echo: fine"


# -- the sender ---------------------------------------------------------------------------------------------------


def sender_for(qq: FakeQq, **options: Any) -> QqbotSender:
    config = make_config(qq, **options)
    return QqbotSender(resolve_bots(config, {}), config)


def reply(text: str = "hi", *, outbox_id: int = 41, chat: str = f"user.{OPENID}") -> OutboundMessage:
    return OutboundMessage(
        platform="qqbot", account_id=APP, chat_id=chat, text=text, reply_to="ROBOT1.0_m", outbox_id=outbox_id
    )


def test_a_token_is_fetched_once_and_fetched_again_after_a_401(qq: FakeQq) -> None:
    sender = sender_for(qq)
    sender.send(reply(outbox_id=1))
    sender.send(reply(outbox_id=2))
    assert qq.token_fetches == 1
    qq.revoke_tokens()
    with pytest.raises(SendError, match="access token was refused") as refused:
        sender.send(reply(outbox_id=3))
    assert not refused.value.permanent
    sender.send(reply(outbox_id=3))
    assert qq.token_fetches == 2
    assert [sent.body["msg_seq"] for sent in qq.sent] == [101, 201, 301]


def test_a_rate_limit_comes_back_as_retry_after(qq: FakeQq) -> None:
    sender = sender_for(qq)
    qq.fail(429, 22009, "msg limit exceed", headers={"Retry-After": "7"})
    with pytest.raises(SendError) as limited:
        sender.send(reply())
    assert limited.value.retry_after_s == 7.0
    assert not limited.value.permanent


def test_a_refusal_gives_the_reply_up_with_qqs_code_and_message(qq: FakeQq) -> None:
    sender = sender_for(qq)
    qq.fail(400, 40034024, "被动回复消息已超过有效时间")
    with pytest.raises(SendError, match="code 40034024") as refused:
        sender.send(reply())
    assert refused.value.permanent


def test_a_server_error_is_retried(qq: FakeQq) -> None:
    sender = sender_for(qq)
    qq.fail(500, 500000, "internal error")
    with pytest.raises(SendError) as failed:
        sender.send(reply())
    assert not failed.value.permanent
    assert failed.value.retry_after_s is None


def test_a_retried_part_reuses_its_msg_seq_and_a_repeat_counts_as_sent(qq: FakeQq) -> None:
    sender = sender_for(qq, max_message_chars=12)
    long = "first part.\n\nsecond one.\n\nthird bit."
    message = reply(long, outbox_id=9)
    assert msg_seq_of(message, 0) == 901
    assert msg_seq_of(message, 2) == 903
    sender.send(message)
    first = [sent.body["msg_seq"] for sent in qq.sent]
    assert first == [901, 902, 903]
    sender.send(message)  # as after a crash with the outcome unknown: QQ refuses each repeat, nothing shows twice
    assert len(qq.sent) == 3


def test_a_reply_for_an_unknown_app_or_chat_is_given_up(qq: FakeQq) -> None:
    sender = sender_for(qq)
    with pytest.raises(SendError, match="not configured") as unknown:
        sender.send(msgspec.structs.replace(reply(), account_id="1"))
    assert unknown.value.permanent
    with pytest.raises(SendError, match="not a chat") as chat:
        sender.send(reply(chat="somewhere"))
    assert chat.value.permanent


# -- config ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "path"),
    [
        ({"bots": {"main": {"app_id": "abc", "secret": "s"}}}, "platforms.qqbot.bots.main.app_id"),
        ({"bots": {"main": {"app_id": "1234"}}}, "platforms.qqbot.bots.main.secret"),
        ({"bots": {"main": {"app_id": "1234", "secret": "s", "secret_env": "X"}}}, "platforms.qqbot.bots.main"),
        ({"bots": {"main": {"app_id": "1234", "secret_env": "no-name"}}}, "platforms.qqbot.bots.main.secret_env"),
        ({"bots": {}}, "platforms.qqbot.bots"),
        ({"port": 70000, "bots": {}}, "platforms.qqbot.port"),
        ({"api_base_url": "ftp://x", "bots": {}}, "platforms.qqbot.api_base_url"),
        ({"max_skew_s": 0, "bots": {}}, "platforms.qqbot.max_skew_s"),
    ],
)
def test_config_errors_name_the_field(section: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError) as error:
        msgspec.convert(section, type=registry.config_type("qqbot"))
    assert path in str(error.value)


def test_a_secret_env_that_is_not_set_is_named_when_the_adapter_is_built() -> None:
    config = QqbotConfig(bots={"main": QqbotBot(app_id=APP, secret_env="QQBOT_SECRET")})
    with pytest.raises(ConfigError, match="QQBOT_SECRET"):
        registry.build("qqbot", config, {})
    adapter = registry.build("qqbot", config, {"QQBOT_SECRET": SECRET})
    assert "AppSecret from $QQBOT_SECRET" in adapter.describe()[0]


# -- crash -------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_kill_between_accept_and_reply_loses_nothing_and_replies_once(tmp_path: Path, qq: FakeQq) -> None:
    db = tmp_path / "state.db"
    config = make_config(qq)
    payload = c2c("survive", message_id="ROBOT1.0_crash")
    body = json.dumps(payload).encode()
    worker = AdapterWorker.start(db, "qqbot", config, agent="hold")
    try:
        answer = post(worker.url() + "/qqbot/main", body, callback_headers(SECRET, body, app_id=APP))
        assert answer.status == 200
        assert wait_for_inbox(db, 1) == [("ROBOT1.0_crash", "pending")]
    finally:
        worker.kill()
    assert qq.sent == []
    worker = AdapterWorker.start(db, "qqbot", config, agent="echo")
    try:
        assert qq.take(20).body["content"] == "echo: survive"
        answer = post(worker.url() + "/qqbot/main", body, callback_headers(SECRET, body, app_id=APP))
        assert answer.status == 200  # QQ redelivers: recognised, no second turn
        after = json.dumps(c2c("after")).encode()
        assert post(worker.url() + "/qqbot/main", after, callback_headers(SECRET, after, app_id=APP)).status == 200
        assert qq.take(20).body["content"] == "echo: after"
    finally:
        worker.stop()
    assert [sent.body["content"] for sent in qq.sent] == ["echo: survive", "echo: after"]
    assert poll_until(lambda: len(inbox_rows(db)) == 2, 5, what="two inbox rows")


def test_the_credential_check_fetches_an_access_token_for_every_bot(qq: FakeQq) -> None:
    adapter = QqbotAdapter(make_config(qq), environ={})
    assert registry.check_credentials(adapter, timeout_s=5) == [f"bot 'main' (app {APP}) got an access token"]
    wrong = QqbotAdapter(make_config(qq, bots={"main": QqbotBot(app_id=APP, secret="wrong")}), environ={})
    with pytest.raises(PlatformError, match="invalid appid or secret"):
        registry.check_credentials(wrong, timeout_s=5)


def test_save_sends_the_markdown_as_text_since_qq_bots_cannot_send_files(start: Start, qq: FakeQq) -> None:
    running = start()
    running.deliver(c2c("hello"))
    assert qq.take().body["content"] == "echo: hello"
    running.deliver(c2c("/save"))
    saved = qq.take()
    assert running.gateway.wait_idle()
    content = saved.body["content"]
    assert content.startswith("# ")
    assert content.index("hello") < content.index("echo: hello")
    assert saved.body["msg_type"] == 0
    assert qq.nothing_more()
