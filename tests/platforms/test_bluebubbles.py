"""iMessage through BlueBubbles against a real gateway, a real loopback webhook server and the fake BlueBubbles.

Webhook bodies are built by ``bluebubbles_fake`` in the server's format (written from its documentation, not from
the adapter), and replies are read back from the fake's REST API, so both wire directions are checked.
"""

from __future__ import annotations

import json
import logging
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
from platforms.bluebubbles import BluebubblesAdapter, BluebubblesConfig, BluebubblesSender, temp_guid_of
from platforms.bluebubbles.config import resolve_keys
from tests.platforms.bluebubbles_fake import Answer, FakeBlueBubbles, new_message, post, token
from tests.platforms.crash import AdapterWorker, inbox_rows, wait_for_inbox
from tests.platforms.support import RunningAdapter, StartGateway, inbound_messages

PASSWORD = "correct horse battery"
TOKEN = token()
ALICE = "+15557654321"
BOB = "bob@icloud.com"
DM = f"iMessage;-;{ALICE}"
GROUP = "iMessage;+;chat493857203948572039"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))


@pytest.fixture
def server() -> Iterator[FakeBlueBubbles]:
    fake = FakeBlueBubbles(password=PASSWORD, chats={DM, GROUP}).start()
    yield fake
    fake.stop()


def make_config(server: FakeBlueBubbles, **options: Any) -> BluebubblesConfig:
    fields: dict[str, Any] = {
        "port": 0,
        "server_url": server.url,
        "server_name": "home-mac",
        "password": PASSWORD,
        "webhook_token": TOKEN,
        "messages_per_second": 1000.0,
    }
    return BluebubblesConfig(**(fields | options))


@dataclass(frozen=True)
class Running(RunningAdapter[BluebubblesAdapter]):
    @property
    def url(self) -> str:
        return f"{self.adapter.url}/bluebubbles/{TOKEN}"

    def deliver(self, payload: dict[str, Any]) -> Answer:
        return post(self.url, json.dumps(payload).encode())

    def say(self, text: str, *, chat: str = DM, sender: str = ALICE, **options: Any) -> str:
        payload = new_message(text, chat=chat, sender=sender, **options)
        answer = self.deliver(payload)
        assert answer.status == 200, answer
        return str(payload["data"]["guid"])

    def inbox(self) -> list[tuple[str, ...]]:
        return self.inbox_rows("platform_message_id", "routing_key")


Start = Callable[..., Running]


@pytest.fixture
def start(server: FakeBlueBubbles, start_gateway: StartGateway) -> Start:
    def run(config: BluebubblesConfig | None = None, *, media: MediaConfig | None = None) -> Running:
        adapter = BluebubblesAdapter(config or make_config(server), environ={})
        gateway = start_gateway(adapter, tick_interval_s=0.1, media=media)
        return Running(adapter=adapter, gateway=gateway)

    return run


# -- messages in, replies out ------------------------------------------------------------------------------------


def test_a_direct_message_is_acknowledged_after_the_commit_and_answered_in_its_chat(
    start: Start, server: FakeBlueBubbles
) -> None:
    running = start()
    guid = running.say("hello")
    sent = server.take()
    assert sent.body["chatGuid"] == DM
    assert sent.body["message"] == "echo: hello"
    assert sent.body["method"] == "apple-script"
    assert sent.body["tempGuid"].startswith("hermes-")
    key = f"agent:main:bluebubbles~home-mac:dm:{DM}"
    assert running.inbox() == [(guid, key)]
    assert running.transcript(key) == [("user", "hello"), ("assistant", "echo: hello")]


def test_a_group_chat_is_keyed_per_sender(start: Start, server: FakeBlueBubbles) -> None:
    running = start()
    guid = running.say("dinner?", chat=GROUP, sender=BOB)
    sent = server.take()
    assert (sent.body["chatGuid"], sent.body["message"]) == (GROUP, "echo: dinner?")
    assert running.inbox() == [(guid, f"agent:main:bluebubbles~home-mac:group:{GROUP}:{BOB}")]
    (inbound,) = inbound_messages(running.gateway, "bluebubbles")
    assert inbound.source.chat_name == "Family"


def test_our_own_messages_tapbacks_and_other_events_are_acknowledged_and_skipped(
    start: Start, server: FakeBlueBubbles
) -> None:
    running = start()
    running.say("sent from the Mac", from_me=True)
    running.say("", reaction=2000)
    assert running.deliver({"type": "typing-indicator", "data": {"display": True, "guid": DM}}).status == 200
    assert running.deliver({"type": "updated-message", "data": {"guid": "X"}}).status == 200
    assert running.inbox() == []
    assert server.nothing_more()


def test_a_replayed_message_is_acknowledged_without_a_second_turn(start: Start, server: FakeBlueBubbles) -> None:
    running = start()
    payload = new_message("once", chat=DM, sender=ALICE)
    assert running.deliver(payload).status == 200
    assert server.take().body["message"] == "echo: once"
    assert running.deliver(payload).status == 200
    after = running.say("after")  # the barrier: its reply leaves after any reply to the repeat
    assert server.take().body["message"] == "echo: after"
    assert [row[0] for row in running.inbox()] == [payload["data"]["guid"], after]


def test_a_stale_message_is_acknowledged_and_skipped(
    start: Start, server: FakeBlueBubbles, caplog: pytest.LogCaptureFixture
) -> None:
    running = start()
    caplog.set_level(logging.INFO, logger="platforms.bluebubbles.adapter")
    running.say("from yesterday", sent_at=time.time() - 86_400)
    assert running.inbox() == []
    assert "a stale message" in caplog.text
    assert server.nothing_more()


def test_an_attachment_is_fetched_with_the_password_into_the_media_store(start: Start, server: FakeBlueBubbles) -> None:
    running = start()
    ref = server.add_attachment(PNG, "image/png", "IMG_0001.png")
    running.say("look", attachments=[ref])
    assert server.take().body["message"].startswith("echo: look\n[image]\n[attached image IMG_0001.png")
    assert server.downloads == [ref["guid"]]
    (inbound,) = inbound_messages(running.gateway, "bluebubbles")
    (attachment,) = inbound.attachments
    assert attachment.path is not None
    assert Path(attachment.path).read_bytes() == PNG
    assert attachment.source_url is None  # the download URL holds the password


def test_a_file_over_the_limit_is_refused_without_fetching_it(start: Start, server: FakeBlueBubbles) -> None:
    running = start(media=MediaConfig(max_bytes=10))
    ref = server.add_attachment(PNG, "image/png", "big.png")
    running.say("", attachments=[ref])
    server.take()
    assert server.downloads == []
    (inbound,) = inbound_messages(running.gateway, "bluebubbles")
    assert "limit" in (inbound.attachments[0].error or "")


# -- hostile requests ---------------------------------------------------------------------------------------------


def test_a_request_without_the_webhook_token_is_refused_and_the_adapter_keeps_working(
    start: Start, server: FakeBlueBubbles
) -> None:
    running = start()
    body = json.dumps(new_message("forged", chat=DM, sender=ALICE)).encode()
    assert post(f"{running.adapter.url}/bluebubbles/{token()}", body).status == 403
    assert post(f"{running.adapter.url}/bluebubbles/{TOKEN[:-1]}", body).status == 403
    assert post(f"{running.adapter.url}/bluebubbles", body).status in (404, 405)
    assert running.inbox() == []
    running.say("still here")
    assert server.take().body["message"] == "echo: still here"


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b"{not json", "not what BlueBubbles sends"),
        (b'{"data": {}}', "not what BlueBubbles sends"),
        (b'{"type": "new-message", "data": {"text": "no guid"}}', "not what BlueBubbles sends"),
        (b'{"type": "new-message", "data": {"guid": "G1", "chats": []}}', "$.data.chats"),
        (b'{"type": "new-message", "data": {"guid": "G1", "chats": [{"guid": "nonsense"}]}}', "$.data.chats"),
        (b'{"type": "new-message", "data": {"guid": "G1", "isFromMe": "yes"}}', "isFromMe"),
        (
            b'{"type": "new-message", "data": {"guid": "G1", "chats": [{"guid": "iMessage;-;+1"}], '
            b'"attachments": [{"guid": ""}]}}',
            "$.data.attachments[0].guid",
        ),
        (b"[" * 5000 + b"]" * 5000, "nested deeper than 64 levels"),
    ],
)
def test_a_malformed_body_is_a_400_naming_the_fault(
    start: Start, server: FakeBlueBubbles, body: bytes, said: str
) -> None:
    running = start()
    answer = post(running.url, body)
    assert answer.status == 400
    assert said in answer.text
    running.say("fine")
    assert server.take().body["message"] == "echo: fine"


# -- the sender ---------------------------------------------------------------------------------------------------


def sender_for(server: FakeBlueBubbles, **options: Any) -> BluebubblesSender:
    config = make_config(server, **options)
    return BluebubblesSender(resolve_keys(config, {}), config)


def reply(text: str = "hi", *, outbox_id: int = 5, chat: str = DM) -> OutboundMessage:
    return OutboundMessage(
        platform="bluebubbles", account_id="home-mac", chat_id=chat, text=text, reply_to="MSG-1", outbox_id=outbox_id
    )


def test_parts_carry_temp_guids_derived_from_the_outbox_id_and_a_retry_resumes(server: FakeBlueBubbles) -> None:
    sender = sender_for(server, max_message_chars=12)
    message = reply("first part.\n\nsecond one.\n\nthird bit.", outbox_id=77)
    server.fail(500, "Message Send Error")  # the first part fails
    with pytest.raises(SendError) as failed:
        sender.send(message)
    assert not failed.value.permanent
    assert sender.send(message)
    assert [sent.body["tempGuid"] for sent in server.sent] == [temp_guid_of(message, part) for part in range(3)]
    assert temp_guid_of(message, 1) == "hermes-77-1"


def test_the_private_api_quotes_the_message_answered(server: FakeBlueBubbles) -> None:
    sender_for(server, method="private-api").send(reply())
    body = server.take().body
    assert (body["method"], body["selectedMessageGuid"], body["partIndex"]) == ("private-api", "MSG-1", 0)


def test_an_unknown_chat_is_given_up_with_the_servers_message(server: FakeBlueBubbles) -> None:
    with pytest.raises(SendError, match="Chat does not exist") as refused:
        sender_for(server).send(reply(chat="iMessage;-;+15550000000"))
    assert refused.value.permanent


def test_a_wrong_password_is_retried_with_a_hint(server: FakeBlueBubbles) -> None:
    with pytest.raises(SendError, match="refused the password") as refused:
        sender_for(server, password="wrong").send(reply())
    assert not refused.value.permanent


def test_a_rate_limit_comes_back_as_retry_after(server: FakeBlueBubbles) -> None:
    server.fail(429, "Too many requests", headers={"Retry-After": "12"})
    with pytest.raises(SendError) as limited:
        sender_for(server).send(reply())
    assert limited.value.retry_after_s == 12.0


def test_a_reply_for_another_server_is_given_up(server: FakeBlueBubbles) -> None:
    with pytest.raises(SendError, match="not configured") as refused:
        sender_for(server).send(msgspec.structs.replace(reply(), account_id="office-mac"))
    assert refused.value.permanent


# -- config ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "path"),
    [
        ({"password": "p", "webhook_token": TOKEN}, "platforms.bluebubbles.server_url"),
        ({"server_url": "http://mac:1234", "webhook_token": TOKEN}, "platforms.bluebubbles.password"),
        ({"server_url": "http://mac:1234", "password": "p"}, "platforms.bluebubbles.webhook_token"),
        (
            {"server_url": "http://mac:1234", "password": "p", "webhook_token": "short"},
            "platforms.bluebubbles.webhook_token",
        ),
        (
            {"server_url": "http://mac:1234", "password_env": "1X", "webhook_token": TOKEN},
            "platforms.bluebubbles.password_env",
        ),
        ({"enabled": False, "server_name": "a b"}, "platforms.bluebubbles.server_name"),
        ({"enabled": False, "max_age_s": -1}, "platforms.bluebubbles.max_age_s"),
        ({"enabled": False, "method": "carrier-pigeon"}, "$.method"),
    ],
)
def test_config_errors_name_the_field(section: dict[str, Any], path: str) -> None:
    with pytest.raises((ConfigError, msgspec.ValidationError)) as error:
        msgspec.convert(section, type=registry.config_type("bluebubbles"))
    assert path in str(error.value)


def test_secrets_from_the_environment_are_read_when_the_adapter_is_built() -> None:
    config = BluebubblesConfig(
        server_url="http://mac:1234", password_env="BB_PASSWORD", webhook_token_env="BB_WEBHOOK_TOKEN"
    )
    with pytest.raises(ConfigError, match="BB_PASSWORD"):
        registry.build("bluebubbles", config, {"BB_WEBHOOK_TOKEN": TOKEN})
    with pytest.raises(ConfigError, match="24 to 128"):
        registry.build("bluebubbles", config, {"BB_PASSWORD": "p", "BB_WEBHOOK_TOKEN": "short"})
    adapter = registry.build("bluebubbles", config, {"BB_PASSWORD": "p", "BB_WEBHOOK_TOKEN": TOKEN})
    (line,) = adapter.describe()
    assert "password from $BB_PASSWORD" in line
    assert TOKEN not in line


# -- crash -------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_kill_between_accept_and_reply_loses_nothing_and_replies_once(
    tmp_path: Path, server: FakeBlueBubbles
) -> None:
    db = tmp_path / "state.db"
    config = make_config(server)
    payload = new_message("survive", chat=DM, sender=ALICE, guid="CRASH-1")
    worker = AdapterWorker.start(db, "bluebubbles", config, agent="hold")
    try:
        assert post(f"{worker.url()}/bluebubbles/{TOKEN}", json.dumps(payload).encode()).status == 200
        assert wait_for_inbox(db, 1) == [("CRASH-1", "pending")]
    finally:
        worker.kill()
    assert server.sent == []
    worker = AdapterWorker.start(db, "bluebubbles", config, agent="echo")
    try:
        assert server.take(20).body["message"] == "echo: survive"
        assert post(f"{worker.url()}/bluebubbles/{TOKEN}", json.dumps(payload).encode()).status == 200
        after = new_message("after", chat=DM, sender=ALICE)
        assert post(f"{worker.url()}/bluebubbles/{TOKEN}", json.dumps(after).encode()).status == 200
        assert server.take(20).body["message"] == "echo: after"
    finally:
        worker.stop()
    assert [sent.body["message"] for sent in server.sent] == ["echo: survive", "echo: after"]
    assert poll_until(lambda: len(inbox_rows(db)) == 2, 5, what="two inbox rows")


def test_the_credential_check_pings_the_server_with_the_password(server: FakeBlueBubbles) -> None:
    adapter = BluebubblesAdapter(make_config(server), environ={})
    assert registry.check_credentials(adapter, timeout_s=5) == [f"server 'home-mac' at {server.url} answered the ping"]
    wrong = BluebubblesAdapter(make_config(server, password="wrong"), environ={})
    with pytest.raises(PlatformError, match="HTTP 401 \\(Unauthorized\\); check the server password"):
        registry.check_credentials(wrong, timeout_s=5)


# -- /save -------------------------------------------------------------------------------------------------------


def test_save_sends_one_attachment_with_the_markdown(start: Start, server: FakeBlueBubbles) -> None:
    running = start()
    running.say("hello")
    assert server.take().body["message"] == "echo: hello"
    running.say("/save")
    saved = server.take()
    assert running.gateway.wait_idle()
    assert saved.file is not None
    assert (saved.body["chatGuid"], saved.body["name"]) == (DM, saved.file.filename)
    assert saved.body["tempGuid"].endswith("-file")
    assert saved.file.filename.endswith(".md")
    markdown = saved.file.data.decode("utf-8")
    assert markdown.index("hello") < markdown.index("echo: hello")
    assert server.nothing_more()  # the file instead of the text, not beside it


def test_save_sends_the_text_when_the_server_refuses_the_attachment(
    start: Start, server: FakeBlueBubbles, caplog: pytest.LogCaptureFixture
) -> None:
    running = start()
    running.say("hello")
    server.take()
    server.fail(400, "Attachment upload failed: the file could not be written")
    with caplog.at_level(logging.WARNING, logger="platforms.support.documents"):
        running.say("/save")
        text = server.take()
        assert running.gateway.wait_idle()
    assert text.file is None
    assert text.body["message"].index("hello") < text.body["message"].index("echo: hello")
    assert "could not be written" in caplog.text
    assert "the reply's text is sent instead" in caplog.text
