"""The WhatsApp platform against a real gateway, a real loopback webhook server and the fake Graph API.

Notifications are built, signed and delivered by ``whatsapp_fake`` (written from Meta's documentation, not from the
adapter), and replies are read back from the fake's ``messages`` endpoint, so both wire directions are checked.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_actors.agents.base import EchoAgent
from hermes_actors.errors import ConfigError, PlatformError
from hermes_actors.media import MediaConfig
from hermes_actors.messages import InboundMessage, OutboundMessage
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.testing import FakeClock, FakePlatform, GatedAgent, poll_until
from platforms import registry
from platforms.base import Adapter, SendError
from platforms.support.fetch_policy import FetchSettings
from platforms.whatsapp import WhatsappAdapter, WhatsappConfig, WhatsappNumber, WhatsappSender
from platforms.whatsapp.window import WINDOW_S, ServiceWindows
from tests.platforms.crash import AdapterWorker, inbox_rows, wait_for_inbox
from tests.platforms.fetch_canary import CANARY_BODY, Canary, running_canary, use_hosts
from tests.platforms.support import LogRecords, RunningAdapter, StartGateway, inbound_messages
from tests.platforms.whatsapp_fake import (
    Answer,
    FakeGraph,
    MediaCall,
    deliver,
    handshake,
    message,
    new_wamid,
    notification,
    sign,
    status,
    text_message,
)

NUMBER = "106540352242922"
OTHER_NUMBER = "107655329195345"
SECRET = "3f1b9c0d2e4a6b8c0d1e2f3a4b5c6d7e"
OTHER_SECRET = "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b"
VERIFY = "meatyhamhock"
OTHER_VERIFY = "saltedcaramel"
TOKEN = "EAAGm0PX4ZCpsBA-main"
OTHER_TOKEN = "EAAGm0PX4ZCpsBA-other"
USER = "15551234567"
OTHER_USER = "447700900123"
GROUP = "Y2FwaV9ncm91cDoxNzA1NTU1MDEzOToxMjAzNjM0MDQ2OTQyMzM4MjAZD"
DM_KEY = f"agent:main:whatsapp~{NUMBER}:dm:{USER}"


@pytest.fixture
def graph() -> Iterator[FakeGraph]:
    fake = FakeGraph(tokens={TOKEN: NUMBER, OTHER_TOKEN: OTHER_NUMBER}).start()
    yield fake
    fake.stop()


def main_number(**fields: Any) -> dict[str | int, WhatsappNumber]:
    return {NUMBER: WhatsappNumber(app_secret=SECRET, verify_token=VERIFY, access_token=TOKEN, **fields)}


def two_numbers() -> dict[str | int, WhatsappNumber]:
    other = WhatsappNumber(app_secret=OTHER_SECRET, verify_token=OTHER_VERIFY, access_token=OTHER_TOKEN)
    return {**main_number(), OTHER_NUMBER: other}


@dataclass(frozen=True)
class Running(RunningAdapter[WhatsappAdapter]):
    db: Path

    @property
    def url(self) -> str:
        return f"{self.adapter.url}/whatsapp/webhook"

    def post(self, payload: Any, *, secret: str = SECRET, **kw: Any) -> Answer:
        return deliver(self.url, payload, secret, **kw)

    def say(self, *messages: Mapping[str, Any], number: str = NUMBER, secret: str = SECRET) -> Answer:
        """Deliver ``messages`` to ``number`` in one notification and check it was taken."""
        answer = self.post(notification(number, messages), secret=secret)
        assert answer.status == 200, answer
        return answer

    def inbox(self) -> list[tuple[str, ...]]:
        """(platform message id, routing key) of every inbox row."""
        return self.inbox_rows("platform_message_id", "routing_key")

    def given_up(self, count: int = 1, timeout: float = 10.0) -> list[str]:
        """Wait for ``count`` replies given up by the outbox; return the reason recorded for each."""

        def reasons() -> list[str] | None:
            with self.gateway.read() as store:
                rows = store.sql.execute("SELECT last_error FROM outbox WHERE abandoned_at IS NOT NULL ORDER BY id")
            return [str(reason) for (reason,) in rows] if len(rows) >= count else None

        return poll_until(reasons, timeout, what=f"{count} replies given up")


StartWhatsapp = Callable[..., Running]


@pytest.fixture
def start_whatsapp(tmp_path: Path, graph: FakeGraph, start_gateway: StartGateway) -> StartWhatsapp:
    """Start a gateway on ``tmp_path`` with the adapter on port 0 pointed at the fake; both stop at the end."""

    def start(
        numbers: Mapping[str | int, WhatsappNumber] | None = None,
        *,
        agent: EchoAgent | None = None,
        clock: Callable[[], float] = time.time,
        media: MediaConfig | None = None,
        **options: Any,
    ) -> Running:
        config = WhatsappConfig(
            port=0, graph_base_url=graph.base_url, numbers=dict(numbers or main_number()), **options
        )
        adapter = WhatsappAdapter(config, environ={}, clock=clock)
        gateway = start_gateway(adapter, agent=agent, tick_interval_s=0.1, media=media)
        return Running(adapter=adapter, gateway=gateway, db=tmp_path / "state.db")

    return start


# -- the verification handshake ----------------------------------------------------------------------------------


def test_the_handshake_echoes_the_challenge_as_text_for_a_configured_verify_token(
    start_whatsapp: StartWhatsapp,
) -> None:
    running = start_whatsapp(two_numbers())
    for token in (VERIFY, OTHER_VERIFY):
        answer = handshake(running.url, token=token, challenge="1158201444")
        assert (answer.status, answer.text) == (200, "1158201444")
        assert answer.headers["content-type"].startswith("text/plain")
    refused = [
        (handshake(running.url, token="guess"), 403, "hub.verify_token does not match"),
        (handshake(running.url, token=None), 403, "hub.verify_token does not match"),
        (handshake(running.url, token=""), 403, "hub.verify_token does not match"),
        (handshake(running.url, mode="unsubscribe", token=VERIFY), 400, "hub.mode must be 'subscribe'"),
        (handshake(running.url, mode=None, token=VERIFY), 400, "hub.mode must be 'subscribe'"),
        (handshake(running.url, token=VERIFY, challenge=None), 400, "hub.challenge is missing"),
        (handshake(running.url, token=VERIFY, challenge="<script> x"), 400, "printable"),
    ]
    for answer, code, reason in refused:
        assert answer.status == code
        assert reason in answer.text
        assert "1158201444" not in answer.text
    assert running.inbox() == []


# -- keys and where replies go -----------------------------------------------------------------------------------


def test_a_direct_message_is_keyed_by_number_and_sender_and_answered_to_the_sender(
    start_whatsapp: StartWhatsapp, graph: FakeGraph
) -> None:
    running = start_whatsapp()
    wamid = new_wamid()
    answer = running.post(notification(NUMBER, [text_message("hello", wamid=wamid)], names={USER: "Ana"}))
    assert answer.status == 200
    assert answer.body == {"ok": True, "accepted": 1, "duplicates": 0, "routing_keys": [DM_KEY], "ignored": []}
    sent = graph.take()
    assert (sent.number, sent.token, sent.to, sent.recipient_type) == (NUMBER, TOKEN, USER, "individual")
    assert (sent.body, sent.context) == ("echo: hello", None)
    running.say(text_message("again"))
    assert graph.take().body == "echo: again"
    assert running.transcript(DM_KEY) == [
        ("user", "hello"),
        ("assistant", "echo: hello"),
        ("user", "again"),
        ("assistant", "echo: again"),
    ]
    assert running.inbox()[0] == (wamid, DM_KEY)
    session_id = running.gateway.session_for(DM_KEY)
    assert session_id is not None
    with running.gateway.read() as store:
        record = store.get_session(session_id)
    assert (record.user_id, record.user_name, record.account_id, record.chat_type) == (USER, "Ana", NUMBER, "dm")


def test_group_messages_give_each_member_a_session_and_replies_go_to_the_group_quoting_the_message(
    start_whatsapp: StartWhatsapp, graph: FakeGraph
) -> None:
    running = start_whatsapp()
    first, second = new_wamid(), new_wamid()
    answer = running.say(
        text_message("mine", USER, wamid=first, group_id=GROUP),
        text_message("mine too", OTHER_USER, wamid=second, group_id=GROUP),
    )
    keys = [
        f"agent:main:whatsapp~{NUMBER}:group:{GROUP}:{USER}",
        f"agent:main:whatsapp~{NUMBER}:group:{GROUP}:{OTHER_USER}",
    ]
    assert answer.body["routing_keys"] == keys
    replies = {sent.body: sent for sent in (graph.take(), graph.take())}
    assert {body: (s.to, s.recipient_type, s.context) for body, s in replies.items()} == {
        "echo: mine": (GROUP, "group", first),
        "echo: mine too": (GROUP, "group", second),
    }
    assert running.transcript(keys[0]) == [("user", "mine"), ("assistant", "echo: mine")]
    assert running.transcript(keys[1]) == [("user", "mine too"), ("assistant", "echo: mine too")]
    # The same person writing directly is a conversation of its own.
    running.say(text_message("just us", USER))
    assert graph.take().to == USER
    assert running.transcript(DM_KEY) == [("user", "just us"), ("assistant", "echo: just us")]


def test_two_numbers_with_the_same_user_never_share_a_session_and_each_answers_from_itself(
    start_whatsapp: StartWhatsapp, graph: FakeGraph
) -> None:
    running = start_whatsapp(two_numbers())
    keys = [
        running.say(text_message("same words")).body["routing_keys"][0],
        running.say(text_message("same words"), number=OTHER_NUMBER, secret=OTHER_SECRET).body["routing_keys"][0],
    ]
    assert keys == [DM_KEY, f"agent:main:whatsapp~{OTHER_NUMBER}:dm:{USER}"]
    assert running.gateway.wait_idle()
    sessions = {running.gateway.session_for(key) for key in keys}
    assert len(sessions) == 2
    assert None not in sessions
    sent = sorted((s.number, s.token, s.to) for s in (graph.take(), graph.take()))
    assert sent == sorted([(NUMBER, TOKEN, USER), (OTHER_NUMBER, OTHER_TOKEN, USER)])


def test_a_number_that_is_not_configured_is_acknowledged_and_logged_but_not_stored(
    start_whatsapp: StartWhatsapp, caplog: pytest.LogCaptureFixture
) -> None:
    running = start_whatsapp()
    with caplog.at_level(logging.INFO, logger="platforms.whatsapp"):
        answer = running.post(notification("999999999", [text_message("for someone else")]))
    assert answer.status == 200
    assert answer.body["accepted"] == 0
    assert "phone number id '999999999', which is not configured" in answer.body["ignored"][0]
    assert "which is not configured" in caplog.text
    assert running.inbox() == []


# -- signatures --------------------------------------------------------------------------------------------------


def test_forged_tampered_and_unsigned_notifications_are_refused_with_401_and_nothing_is_stored(
    start_whatsapp: StartWhatsapp,
) -> None:
    running = start_whatsapp()
    payload = notification(NUMBER, [text_message("let me in")])
    body = json.dumps(payload).encode()
    cases: list[tuple[Mapping[str, str | None], str]] = [
        ({"X-Hub-Signature-256": None}, "unsigned request"),
        ({"X-Hub-Signature-256": "sha256=" + "0" * 64}, "does not match"),
        ({"X-Hub-Signature-256": "sha1=" + "0" * 40}, "must be 'sha256=' and 64 hex digits"),
        ({"X-Hub-Signature-256": sign(SECRET, body)[:-2]}, "64 hex digits"),
        ({"X-Hub-Signature-256": "sha256=" + "zz" * 32}, "64 hex digits"),
        ({"X-Hub-Signature-256": sign(OTHER_SECRET, body)}, "does not match"),
        # The signature covers the body: a tampered body fails with the original signature.
        ({"X-Hub-Signature-256": sign(SECRET, body.replace(b"let me in", b"let us in"))}, "does not match"),
    ]
    for headers, reason in cases:
        answer = running.post(body, headers=headers)
        assert answer.status == 401, headers
        assert reason in answer.body["error"], answer.body
    assert running.inbox() == []
    with running.gateway.read() as store:
        assert store.list_sessions() == []
    # Upper-case hex is the same signature.
    assert (
        running.post(body, headers={"X-Hub-Signature-256": sign(SECRET, body).upper().replace("SHA", "sha")}).status
        == 200
    )


def test_an_app_secret_cannot_speak_for_a_number_of_another_app(start_whatsapp: StartWhatsapp) -> None:
    running = start_whatsapp(two_numbers())
    answer = running.post(notification(OTHER_NUMBER, [text_message("spoofed")]), secret=SECRET)
    assert answer.status == 403
    assert answer.body == {"error": f"number {OTHER_NUMBER} belongs to an app whose secret did not sign this request"}
    assert running.inbox() == []


# -- redelivery --------------------------------------------------------------------------------------------------


def test_redeliveries_of_a_message_run_one_turn(start_whatsapp: StartWhatsapp, graph: FakeGraph) -> None:
    running = start_whatsapp()
    wamid = new_wamid()
    payload = notification(NUMBER, [text_message("deploy?", wamid=wamid)])
    answers = [running.post(payload) for _ in range(3)]
    assert [a.status for a in answers] == [200, 200, 200]
    assert [(a.body["accepted"], a.body["duplicates"]) for a in answers] == [(1, 0), (0, 1), (0, 1)]
    assert graph.take().body == "echo: deploy?"
    # A later notification repeating it next to a new message: only the new one is taken.
    mixed = running.say(text_message("deploy?", wamid=wamid), text_message("and now?"))
    assert (mixed.body["accepted"], mixed.body["duplicates"]) == (1, 1)
    assert graph.take().body == "echo: and now?"
    assert running.gateway.wait_idle()
    assert graph.nothing_more()
    inbox = running.inbox()
    assert len(inbox) == 2
    assert inbox[0] == (wamid, DM_KEY)
    assert running.transcript(DM_KEY)[:2] == [("user", "deploy?"), ("assistant", "echo: deploy?")]


def test_the_200_comes_after_the_durable_commit(start_whatsapp: StartWhatsapp) -> None:
    agent = GatedAgent()
    running = start_whatsapp(agent=agent)
    wamid = new_wamid()
    try:
        answer = running.say(text_message("durable?", wamid=wamid))
        assert answer.seconds < 1.0
        # The turn has not even finished, but the message is already committed.
        assert inbox_rows(running.db) == [(wamid, "pending")]
    finally:
        agent.release.set()
    assert running.gateway.wait_idle()


def test_a_notification_that_cannot_be_stored_gets_a_503_that_meta_retries(
    start_whatsapp: StartWhatsapp, caplog: pytest.LogCaptureFixture
) -> None:
    running = start_whatsapp()
    running.gateway.stop()  # the store is gone: accept fails
    wamid = new_wamid()
    with caplog.at_level(logging.ERROR, logger="platforms.whatsapp"):
        answer = running.post(notification(NUMBER, [text_message("lost?", wamid=wamid)]))
    assert answer.status == 503
    assert f"could not accept messages {wamid}" in caplog.text


# -- the 24-hour window ------------------------------------------------------------------------------------------


def test_a_reply_outside_the_24_hour_window_is_given_up_with_the_reason_and_logged(
    start_whatsapp: StartWhatsapp, graph: FakeGraph, caplog: pytest.LogCaptureFixture
) -> None:
    running = start_whatsapp()
    # Meta retried this message for a day and more: by the time it arrives, the window has closed.
    late = text_message("are you there?", timestamp=time.time() - 25 * 3600)
    with caplog.at_level(logging.WARNING, logger="platforms.whatsapp"):
        running.say(late)
        assert running.gateway.wait_idle()
    assert graph.sent == []
    (reason,) = running.given_up()
    assert reason.startswith(f"whatsapp number {NUMBER}: the 24-hour customer service window with {USER} closed at ")
    assert reason.endswith("a template message is needed to reopen the conversation")
    assert "24-hour customer service window" in caplog.text
    assert running.transcript(DM_KEY)[-1] == ("assistant", "echo: are you there?")  # the turn itself ran
    # When the user writes again, the window is open again.
    running.say(text_message("hello again"))
    assert graph.take().body == "echo: hello again"


def test_the_graph_api_re_engagement_error_gives_the_reply_up_the_same_way(
    start_whatsapp: StartWhatsapp, graph: FakeGraph
) -> None:
    running = start_whatsapp()
    graph.fail_next(
        code=131047,
        message="Re-engagement message",
        details="Message failed to send because more than 24 hours have passed since the customer last replied",
    )
    running.say(text_message("hi"))
    (reason,) = running.given_up()
    assert "24-hour customer service window with 15551234567 has closed" in reason
    assert "131047" in reason
    assert "a template message is needed" in reason
    assert len(graph.attempts) == 1  # not retried
    assert graph.sent == []


def test_the_windows_are_rebuilt_from_the_inbox_after_a_restart(tmp_path: Path, graph: FakeGraph) -> None:
    config = WhatsappConfig(port=0, graph_base_url=graph.base_url, numbers=main_number())
    reply = OutboundMessage(platform="whatsapp", text="later", account_id=NUMBER, chat_id=USER)
    group_reply = OutboundMessage(platform="whatsapp", text="to all", account_id=NUMBER, chat_id=GROUP)

    def run(clock: Callable[[], float], check: Callable[[WhatsappAdapter], None]) -> None:
        adapter = WhatsappAdapter(config, environ={}, clock=clock)
        gateway = Gateway(tmp_path / "state.db", senders=adapter.senders(), tick_interval_s=0.1)
        try:
            adapter.start(GatewayInbox(gateway))
            check(adapter)
        finally:
            adapter.stop()
            gateway.stop()

    def first(adapter: WhatsappAdapter) -> None:
        url = f"{adapter.url}/whatsapp/webhook"
        messages = [text_message("remember me"), text_message("group hello", OTHER_USER, group_id=GROUP)]
        assert deliver(url, notification(NUMBER, messages), SECRET).status == 200
        assert {graph.take().body, graph.take().body} == {"echo: remember me", "echo: group hello"}

    def soon(adapter: WhatsappAdapter) -> None:
        assert adapter.sender.send(reply)
        assert adapter.sender.send(group_reply)
        sent = graph.drain()
        assert [(s.to, s.recipient_type) for s in sent] == [(USER, "individual"), (GROUP, "group")]

    def next_day(adapter: WhatsappAdapter) -> None:
        with pytest.raises(SendError, match="is not open: they have not written in the last 24 hours") as error:
            adapter.sender.send(reply)
        assert error.value.permanent
        assert adapter.sender.send(group_reply)  # groups are left to the Graph API
        assert graph.take().recipient_type == "group"

    run(time.time, first)
    run(time.time, soon)
    run(lambda: time.time() + 25 * 3600, next_day)


def test_a_handoff_to_whatsapp_speaks_in_the_home_chat(tmp_path: Path, graph: FakeGraph) -> None:
    adapter = WhatsappAdapter(WhatsappConfig(port=0, graph_base_url=graph.base_url, numbers=main_number()), environ={})
    cli = FakePlatform("cli")
    gateway = Gateway(tmp_path / "state.db", senders=[cli, *adapter.senders()], tick_interval_s=0.1)
    cli.attach(gateway)
    adapter.start(GatewayInbox(gateway))
    try:
        deliver(f"{adapter.url}/whatsapp/webhook", notification(NUMBER, [text_message("/sethome")]), SECRET)
        assert graph.take().body == "This chat is now the home channel for whatsapp."
        cli.push("let us refactor auth", chat_id="terminal")
        assert cli.pop().text == "echo: let us refactor auth"
        assert gateway.wait_idle()  # the reply arrives before the turn is over: a handoff then is refused
        cli.push("/handoff whatsapp", chat_id="terminal")
        first = graph.take()  # no threads on WhatsApp: the home chat itself
        assert (first.to, first.recipient_type, first.context) == (USER, "individual", None)
        assert first.body.startswith("echo: [handoff] This conversation was just handed off here from cli.")
        assert cli.pop().text.startswith("Handed off to whatsapp (chat ")
    finally:
        adapter.stop()
        gateway.stop()


# -- receipts and message types ----------------------------------------------------------------------------------


def test_delivery_statuses_are_logged_and_a_failed_one_names_the_cause(
    start_whatsapp: StartWhatsapp, caplog: pytest.LogCaptureFixture
) -> None:
    running = start_whatsapp()
    window_error = {
        "code": 131047,
        "title": "Re-engagement message",
        "message": "Re-engagement message",
        "error_data": {"details": "more than 24 hours have passed"},
    }
    receipts = [
        status("wamid.A", "sent"),
        status("wamid.A", "delivered"),
        status("wamid.B", "failed", errors=[window_error]),
    ]
    with caplog.at_level(logging.DEBUG, logger="platforms.whatsapp"):
        answer = running.post(notification(NUMBER, statuses=receipts))
    assert answer.status == 200
    assert answer.body == {"ok": True, "accepted": 0, "duplicates": 0, "routing_keys": [], "ignored": []}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"whatsapp number {NUMBER}: reply wamid.B to {USER} was not delivered: 131047 Re-engagement message: more "
        "than 24 hours have passed (the 24-hour window had closed: a template message is needed)"
    ]
    assert any("reply wamid.A is delivered" in r.getMessage() for r in caplog.records)
    assert running.inbox() == []


@pytest.mark.slow
def test_interactive_replies_are_text_and_other_types_become_stand_ins(
    start_whatsapp: StartWhatsapp, graph: FakeGraph, caplog: pytest.LogCaptureFixture
) -> None:
    running = start_whatsapp(fetch=FAKE_FILES)
    for media_id, mime in (("1", "image/jpeg"), ("2", "application/pdf"), ("3", "audio/ogg")):
        graph.add_media(media_id, f"media {media_id}".encode(), mime_type=mime, number=NUMBER)
    attached = {
        "image": "[attached image (image/jpeg, 7 bytes), saved at ",
        "document": "[attached document report].pdf (application/pdf, 7 bytes), saved at ",
        "audio": "[attached audio (audio/ogg, 7 bytes), saved at ",
    }
    cases: list[tuple[dict[str, Any], str]] = [
        (
            message("interactive", interactive={"type": "button_reply", "button_reply": {"id": "y", "title": "Yes"}}),
            "Yes",
        ),
        (
            message(
                "interactive",
                interactive={"type": "list_reply", "list_reply": {"id": "2", "title": "Tuesday", "description": "2pm"}},
            ),
            "Tuesday",
        ),
        (message("button", button={"payload": "STOP", "text": "Stop promotions"}), "Stop promotions"),
        (
            message("image", image={"caption": "my plot", "mime_type": "image/jpeg", "sha256": "x", "id": "1"}),
            "my plot\n[image]",
        ),
        (
            message("document", document={"filename": "report].pdf", "mime_type": "application/pdf", "id": "2"}),
            "[document: report).pdf]",
        ),
        (message("audio", audio={"mime_type": "audio/ogg", "id": "3", "voice": True}), "[audio]"),
        (message("sticker", sticker={"mime_type": "image/webp", "id": "4", "animated": False}), "[sticker]"),
        (
            message(
                "location", location={"latitude": 52.52, "longitude": 13.405, "name": "Office", "address": "Main St 1"}
            ),
            "[location: Office, Main St 1; 52.52000, 13.40500]",
        ),
        (
            message("contacts", contacts=[{"name": {"formatted_name": "Bo"}, "phones": [{"phone": "+1"}]}]),
            "[contact card]",
        ),
        (message("unsupported", errors=[{"code": 131051, "title": "Message type unknown"}]), "[unsupported message]"),
        (message("new_kind", new_kind={}), "[new_kind message]"),
    ]
    for entry, text in cases:
        running.say(entry)
        body = graph.take().body
        if entry["type"] in attached:  # downloaded: the stand-in, then the attachment's line
            assert body.partition("\n[attached")[0] == f"echo: {text}", entry["type"]
            assert f"\n{attached[entry['type']]}{running.gateway.media.directory}/" in body
        else:
            assert body == f"echo: {text}", entry["type"]
    assert [call.media_id for call in graph.downloads] == ["1", "2", "3"]  # the sticker is not fetched
    skipped = [
        message("reaction", reaction={"message_id": "wamid.X", "emoji": "👍"}),
        message("system", system={"body": "User A changed from 1 to 2", "type": "user_changed_number"}),
        text_message("   "),
    ]
    with caplog.at_level(logging.INFO, logger="platforms.whatsapp"):
        answer = running.say(*skipped)
    assert answer.body["accepted"] == 0
    assert [reason.split(": ", 1)[1] for reason in answer.body["ignored"]] == [
        "a reaction (reactions start no turn)",
        "a system notice (a number change or similar)",
        "a message without text",
    ]
    assert "skipped message" in caplog.text
    assert graph.nothing_more()


# -- media ----------------------------------------------------------------------------------------------------------

JPEG = b"\xff\xd8\xff\xe0" + bytes(range(150))
FAKE_FILES = FetchSettings(hosts=["127.0.0.1"], allow_private=["127.0.0.1"])  # the fake serves media on loopback


def test_an_image_is_looked_up_and_downloaded_with_the_access_token_before_the_commit(
    start_whatsapp: StartWhatsapp, graph: FakeGraph, tmp_path: Path
) -> None:
    running = start_whatsapp(fetch=FAKE_FILES)
    image = graph.add_media("1044", JPEG, mime_type="image/jpeg", number=NUMBER) | {"caption": "what is this?"}
    running.say(message("image", image=image))
    assert graph.lookups == [MediaCall(media_id="1044", token=TOKEN, status=200)]
    assert graph.downloads == [MediaCall(media_id="1044", token=TOKEN, status=200)]
    digest = hashlib.sha256(JPEG).hexdigest()
    cached = tmp_path / "media" / digest[:2] / f"{digest}.jpg"
    assert cached.read_bytes() == JPEG
    (accepted,) = inbound_messages(running.gateway, "whatsapp")
    (attachment,) = accepted.attachments  # in the row the 200 acknowledged
    assert (attachment.kind, attachment.mime_type, attachment.size, attachment.sha256, attachment.source_url) == (
        "image",
        "image/jpeg",
        len(JPEG),
        digest,
        None,
    )
    assert graph.take().body == (
        f"echo: what is this?\n[image]\n[attached image (image/jpeg, {len(JPEG)} bytes), saved at {cached}]"
    )
    session = running.gateway.session_for(DM_KEY)
    assert session is not None
    with running.gateway.read() as store:
        (row,) = store.attachments.for_session(session)
    assert (row.sha256, row.error) == (digest, None)


def test_media_over_the_limit_is_refused_from_its_file_size_without_a_download(
    start_whatsapp: StartWhatsapp, graph: FakeGraph, tmp_path: Path
) -> None:
    running = start_whatsapp(media=MediaConfig(max_bytes=1024))
    video = graph.add_media("2055", bytes(4096), mime_type="video/mp4", number=NUMBER) | {"caption": "watch"}
    running.say(message("video", video=video))
    assert graph.take().body == (
        "I could not read the video: it is 4 KB, over the 1 KB limit.\n\n"
        "echo: watch\n[video]\n[video was not read: it is 4 KB, over the 1 KB limit]"
    )
    assert [call.media_id for call in graph.lookups] == ["2055"]
    assert graph.downloads == []
    assert not (tmp_path / "media").exists()


def test_media_that_cannot_be_fetched_become_refused_attachments_and_the_batch_is_still_stored(
    start_whatsapp: StartWhatsapp, graph: FakeGraph, tmp_path: Path
) -> None:
    running = start_whatsapp(two_numbers(), fetch=FAKE_FILES)
    broken = graph.add_media("3001", b"%PDF-1.7", mime_type="application/pdf", number=NUMBER)
    graph.fail_next_download(500)
    theirs = graph.add_media("3002", JPEG, mime_type="image/jpeg", number=OTHER_NUMBER)
    unknown = {"mime_type": "audio/ogg; codecs=opus", "id": "3003", "voice": True}
    fine = graph.add_media("3004", JPEG, mime_type="image/jpeg", number=NUMBER)
    answer = running.say(
        message("document", document=broken | {"filename": "plan.pdf"}),
        message("image", image=theirs),
        message("audio", OTHER_USER, audio=unknown),
        message("image", OTHER_USER, image=fine),
    )
    assert answer.body["accepted"] == 4
    replies = {(sent.to, sent.body.split("\n\n")[0]) for sent in (graph.take() for _ in range(4))}
    assert (USER, "I could not read plan.pdf: its download failed (HTTP 500).") in replies
    no_longer = "WhatsApp no longer has it (media stay downloadable for 30 days)."
    assert (USER, f"I could not read the image: {no_longer}") in replies
    assert (OTHER_USER, f"I could not read the audio: {no_longer}") in replies
    assert (OTHER_USER, "echo: [image]") in {(to, text.split("\n")[0]) for to, text in replies}
    assert [(c.media_id, c.status) for c in graph.lookups] == [
        ("3001", 200),
        ("3002", 400),
        ("3003", 400),
        ("3004", 200),
    ]
    assert [(c.media_id, c.status) for c in graph.downloads] == [("3001", 500), ("3004", 200)]
    assert [p.name for p in (tmp_path / "media").rglob("*") if p.is_file()] == [
        f"{hashlib.sha256(JPEG).hexdigest()}.jpg"
    ]


def test_a_sha256_unlike_the_one_stated_is_logged_and_the_file_kept(
    start_whatsapp: StartWhatsapp, graph: FakeGraph, caplog: pytest.LogCaptureFixture
) -> None:
    running = start_whatsapp(fetch=FAKE_FILES)
    image = graph.add_media("4001", JPEG, mime_type="image/jpeg", number=NUMBER)
    stated = base64.b64encode(hashlib.sha256(b"other bytes").digest()).decode()
    with caplog.at_level(logging.WARNING, logger="platforms.whatsapp"):
        running.say(message("image", image=image | {"sha256": stated}))
        assert "[attached image (image/jpeg" in graph.take().body
    assert f"not the {hashlib.sha256(b'other bytes').hexdigest()} WhatsApp stated; it is kept" in caplog.text


@pytest.fixture
def canary() -> Iterator[Canary]:
    with running_canary() as server:
        yield server


def test_a_media_url_that_redirects_into_the_network_is_refused(
    graph: FakeGraph, start_gateway: StartGateway, canary: Canary, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Graph answers as "localhost" (where the token goes) and only that name may be private, so the canary on
    # 127.0.0.1 is not allowed by the fake's own opt-in.
    hosts = use_hosts(monkeypatch)
    hosts["localhost"] = hosts["lookaside.fbsbx.com"] = hosts["scontent.whatsapp.net"] = "127.0.0.1"
    fetch = FetchSettings(hosts=["localhost"], allow_private=["localhost", "scontent.whatsapp.net"])
    base = graph.base_url.replace("127.0.0.1", "localhost")
    config = WhatsappConfig(port=0, graph_base_url=base, numbers=main_number(), fetch=fetch)
    adapter = WhatsappAdapter(config, environ={})
    running = Running(adapter=adapter, gateway=start_gateway(adapter, tick_interval_s=0.1), db=tmp_path / "state.db")
    inside = graph.add_media("5001", JPEG, mime_type="image/jpeg", number=NUMBER)
    graph.redirect_download("5001", canary.url("/metrics"))
    rebound = graph.add_media("5002", JPEG, mime_type="image/jpeg", number=NUMBER)
    graph.redirect_download("5002", canary.url("/x", host="lookaside.fbsbx.com"))  # Meta's name, this host's address
    fine = graph.add_media("5003", JPEG, mime_type="image/jpeg", number=NUMBER)
    meta = graph.add_media("5004", JPEG, mime_type="image/jpeg", number=NUMBER)
    graph.redirect_download("5004", canary.url("/meta.jpg", host="scontent.whatsapp.net"))  # Meta's, allowed
    running.say(*(message("image", image=media) for media in (inside, rebound, fine, meta)))
    refused = (
        "I could not read the image: its address points into the bot's own network, which the bot does not fetch from."
    )
    replies = [graph.take().body for _ in range(4)]
    assert [reply.split("\n\n")[0] for reply in replies].count(refused) == 2
    assert [(c.media_id, c.status) for c in graph.downloads] == [
        ("5001", 302),
        ("5002", 302),
        ("5003", 200),
        ("5004", 302),
    ]
    assert canary.hits == ["/meta.jpg"]
    saved = sorted(p.read_bytes() for p in (tmp_path / "media").rglob("*") if p.is_file())
    assert saved == sorted([JPEG, CANARY_BODY])


def test_a_long_reply_is_split_into_messages_within_the_limit(start_whatsapp: StartWhatsapp, graph: FakeGraph) -> None:
    running = start_whatsapp(max_message_chars=100)
    words = " ".join(f"word{i}" for i in range(60))
    running.say(text_message(words))
    assert running.gateway.wait_idle()
    parts = list(graph.sent)
    assert len(parts) == 5
    assert all(len(p.body) <= 100 for p in parts)
    assert {(p.to, p.recipient_type) for p in parts} == {(USER, "individual")}
    assert " ".join(p.body for p in parts) == "echo: " + words


# -- sending failures and rates ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_outbox_retries_a_429_and_honours_retry_after(start_whatsapp: StartWhatsapp, graph: FakeGraph) -> None:
    running = start_whatsapp()
    graph.fail_next(status=429, code=130429, message="Rate limit hit", retry_after="1")
    running.say(text_message("patience"))
    assert graph.take().body == "echo: patience"
    assert len(graph.attempts) == 2
    assert graph.attempts[1] - graph.attempts[0] >= 1.0
    assert graph.nothing_more()


@pytest.mark.slow
def test_the_outbox_retries_5xx_and_throttling_answers_and_delivers_once(
    start_whatsapp: StartWhatsapp, graph: FakeGraph
) -> None:
    running = start_whatsapp()
    graph.fail_next(status=500, code=131000)
    graph.fail_next(status=503, code=131016, message="Service unavailable")
    graph.fail_next(
        status=400, code=131056, message="(Business Account, Consumer Account) pair rate limit hit", retry_after="0.2"
    )
    running.say(text_message("eventually"))
    assert graph.take(timeout=15).body == "echo: eventually"
    assert len(graph.attempts) == 4
    assert graph.nothing_more()


def written(*users: str, at: float | None = None) -> list[InboundMessage]:
    """A message from each of ``users`` to the main number (now, or ``at``), as the inbox would hold it."""
    return [
        InboundMessage(
            source=SessionSource(platform="whatsapp", account_id=NUMBER, chat_type="dm", chat_id=user, user_id=user),
            text="hi",
            message_id=new_wamid(),
            received_at=time.time() if at is None else at,
        )
        for user in users
    ]


def sender_for(graph: FakeGraph, *, open_for: tuple[str, ...] = (USER,), **options: Any) -> WhatsappSender:
    """A sender with the window open for ``open_for`` (as if they had just written)."""
    config = WhatsappConfig(graph_base_url=graph.base_url, numbers=main_number(), **options)
    adapter = WhatsappAdapter(config, environ={})
    adapter.windows.load(written(*open_for))
    return adapter.sender


def test_until_the_windows_are_loaded_a_reply_is_held_back_not_given_up(graph: FakeGraph) -> None:
    # The gateway replays unanswered messages before the adapter starts and reads the inbox.
    adapter = WhatsappAdapter(WhatsappConfig(graph_base_url=graph.base_url, numbers=main_number()), environ={})
    with pytest.raises(SendError, match="not read from the inbox yet") as early:
        adapter.sender.send(reply("too soon"))
    assert (early.value.permanent, early.value.retry_after_s) == (False, 1.0)
    assert adapter.windows.load(written(USER, at=time.time() - 3600)) == 1
    assert adapter.sender.send(reply("now"))
    assert graph.take().body == "now"
    with pytest.raises(SendError, match="is not open") as never:
        adapter.sender.send(reply("to a stranger", chat_id=OTHER_USER))
    assert never.value.permanent


def test_a_chat_unknown_here_is_read_from_the_inbox_rows_since_the_last_read() -> None:
    # In cluster mode another replica accepts the message; this one sends the reply.
    clock = FakeClock()
    rows: list[InboundMessage] = []
    reads: list[float] = []

    def read(since: float) -> list[InboundMessage]:
        reads.append(since)
        return list(rows)

    windows = ServiceWindows(clock=clock)
    assert windows.attach(read) == 0
    assert reads == [clock.now - WINDOW_S]
    clock.advance(3600)
    rows.extend(written(USER, at=clock.now))
    assert windows.get(NUMBER, USER) is None
    chat = windows.current(NUMBER, USER)
    assert chat is not None
    assert chat.last_inbound_at == clock.now
    assert reads[1:] == [clock.now - 3600 - 300]  # from the last read, less an overlap for other clocks
    assert windows.current(NUMBER, USER) == chat  # an open window is not read again
    clock.advance(WINDOW_S)
    assert windows.current(NUMBER, USER) == chat  # closed, read again: no newer message
    assert reads[2:] == [clock.now - WINDOW_S]  # never further back than the window
    assert windows.current(NUMBER, OTHER_USER) is None


def reply(text: str, **fields: Any) -> OutboundMessage:
    return OutboundMessage(platform="whatsapp", text=text, account_id=NUMBER, **({"chat_id": USER} | fields))


def test_send_errors_carry_retry_after_permanence_and_the_fix(graph: FakeGraph) -> None:
    cases: list[tuple[dict[str, Any], str, float | None, bool]] = [
        ({"status": 429, "code": 130429, "retry_after": "7"}, "asked to slow down (HTTP 429", 7.0, False),
        (
            {"status": 400, "code": 130429, "message": "Rate limit hit"},
            "asked to slow down (HTTP 400, error 130429",
            1.0,
            False,
        ),
        (
            {"status": 400, "code": 131056, "message": "pair rate limit hit"},
            "too many messages to this user",
            6.0,
            False,
        ),
        ({"status": 400, "code": 80007, "message": "Rate limit issues"}, "asked to slow down", 60.0, False),
        (
            {"status": 400, "code": 131026, "message": "Message undeliverable"},
            "cannot receive this message",
            None,
            True,
        ),
        ({"status": 400, "code": 131030, "message": "Recipient not in allowed list"}, "allowed list", None, True),
        (
            {"status": 401, "code": 190, "message": "Error validating access token"},
            "set a new access_token",
            None,
            False,
        ),
        ({"status": 400, "code": 133010, "message": "Account not registered"}, "not registered", None, False),
        ({"status": 502, "code": 131000}, "failed with HTTP 502", None, False),
        ({"status": 400, "code": 135000, "message": "Generic user error"}, "retried with backoff", None, False),
    ]
    for failure, text, retry_after, permanent in cases:
        graph.fail_next(**failure)
        with pytest.raises(SendError) as error:
            sender_for(graph).send(reply("hi"))  # a fresh sender each: a penalty would pause the next case
        assert text in str(error.value), str(error.value)
        assert (error.value.retry_after_s, error.value.permanent) == (retry_after, permanent), str(error.value)
    sender = sender_for(graph)
    with pytest.raises(SendError, match="no number 'gone' is configured"):
        sender.send(OutboundMessage(platform="whatsapp", text="hi", account_id="gone", chat_id=USER))
    with pytest.raises(SendError, match="without a chat id"):
        sender.send(OutboundMessage(platform="whatsapp", text="hi", account_id=NUMBER))
    assert sender.send(reply("   ")) is None  # nothing to say, nothing sent
    assert graph.sent == []


def test_the_throughput_and_user_penalties_are_kept(graph: FakeGraph) -> None:
    sender = sender_for(graph, open_for=(USER, OTHER_USER))
    graph.fail_next(status=400, code=131056, message="pair rate limit hit", retry_after="30")
    with pytest.raises(SendError):
        sender.send(reply("one"))
    with pytest.raises(SendError, match="held back") as held:
        sender.send(reply("two"))  # the same user is kept quiet without asking the server
    assert held.value.retry_after_s is not None
    assert held.value.retry_after_s > 25
    assert sender.send(reply("other user", chat_id=OTHER_USER))  # another user is not
    assert len(graph.attempts) == 2


def test_a_partly_sent_reply_resumes_after_the_parts_already_sent(graph: FakeGraph) -> None:
    sender = sender_for(graph, max_message_chars=100)
    text = "\n\n".join(f"paragraph {i} " + "x" * 80 for i in range(3))
    graph.fail_next(status=500, after=1)
    with pytest.raises(SendError):
        sender.send(reply(text))
    assert [s.body.split()[1] for s in graph.sent] == ["0"]
    first = graph.sent[0].id
    assert sender.send(reply(text)) == first
    assert [s.body.split()[1] for s in graph.sent] == ["0", "1", "2"]
    sender.send(reply(text, session_id="other"))  # a different reply with the same text starts over
    assert len(graph.sent) == 6


@pytest.mark.slow
def test_sends_are_paced_per_number_and_per_user(graph: FakeGraph) -> None:
    sender = sender_for(graph, open_for=(USER, OTHER_USER), messages_per_second=10.0)
    started = time.monotonic()
    for i in range(13):  # a burst of 10, then 10 per second
        sender.send(reply(f"m{i}", chat_id=(USER, OTHER_USER)[i % 2]))
    assert time.monotonic() - started >= 0.25
    paced = sender_for(graph, open_for=(USER, OTHER_USER), recipient_interval_s=0.1, recipient_burst=2)
    started = time.monotonic()
    for i in range(5):  # to one user: a burst of 2, then one per 0.1 s
        paced.send(reply(f"u{i}"))
    assert time.monotonic() - started >= 0.25
    started = time.monotonic()
    paced.send(reply("elsewhere", chat_id=OTHER_USER))
    assert time.monotonic() - started < 0.1


# -- hostile input -----------------------------------------------------------------------------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
_message_fields = st.sampled_from(
    ["from", "id", "timestamp", "type", "text", "group_id", "interactive", "image", "location"]
)
_value_fields = st.sampled_from(["metadata", "contacts", "messages", "statuses", "errors"])
_texts = st.one_of(
    st.text(max_size=50),
    st.just("x" * 70_000),  # over the test's max_body_bytes: 413
    st.just("y " * 15_000),  # under it: accepted, and its echo is split into many messages
    st.just("\x00\u202e<b>*bold*</b>"),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=10),
)


@st.composite
def _hostile(draw: st.DrawFn) -> tuple[bytes, str]:
    """A request body and how it is signed: a mangled message, value or envelope, a random JSON value, or bytes."""
    kind = draw(st.sampled_from(["message", "value", "envelope", "json", "bytes"]))
    if kind == "message":
        entry = text_message(draw(_texts), draw(st.sampled_from([USER, "", "x y", "1" * 200])))
        for name in draw(st.lists(_message_fields, max_size=3)):
            if draw(st.booleans()):
                entry.pop(name, None)
            else:
                entry[name] = draw(_json_values)
        body = json.dumps(notification(NUMBER, [entry])).encode()
    elif kind == "value":
        payload = notification(NUMBER, [text_message("hi")])
        payload["entry"][0]["changes"][0]["value"][draw(_value_fields)] = draw(_json_values)
        body = json.dumps(payload).encode()
    elif kind == "envelope":
        payload = notification(NUMBER, [text_message("hi")])
        target = draw(st.sampled_from(["object", "entry", "changes", "field", "value"]))
        if target in ("object", "entry"):
            payload[target] = draw(_json_values)
        elif target == "changes":
            payload["entry"][0]["changes"] = draw(_json_values)
        else:
            payload["entry"][0]["changes"][0][target] = draw(_json_values)
        body = json.dumps(payload).encode()
    elif kind == "json":
        body = json.dumps(draw(_json_values)).encode()
    else:
        body = draw(st.binary(max_size=64)) + draw(st.sampled_from([b"", b"\xff\xfe", b'{"object": "\xc3\x28"}']))
    signing = draw(st.sampled_from(["good", "good", "good", "other", "garbled", "none"]))
    return body, signing


@pytest.mark.slow
def test_hostile_payloads_get_a_4xx_or_a_skip_a_log_line_and_the_adapter_keeps_working(
    start_whatsapp: StartWhatsapp, graph: FakeGraph
) -> None:
    running = start_whatsapp(max_body_bytes=64 * 1024, recipient_burst=10_000)
    handler = LogRecords()
    records = handler.records
    logger = logging.getLogger("platforms.whatsapp")
    logger.addHandler(handler)
    previous_level = logger.level
    logger.setLevel(logging.DEBUG)
    statuses: set[int] = set()

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(case=_hostile())
    def check(case: tuple[bytes, str]) -> None:
        body, signing = case
        records.clear()
        headers: dict[str, str | None] = {}
        if signing == "garbled":
            headers["X-Hub-Signature-256"] = "sha256=" + sign(SECRET, body)[7:][::-1]
        if signing == "none":
            headers["X-Hub-Signature-256"] = None
        answer = running.post(body, secret=OTHER_SECRET if signing == "other" else SECRET, headers=headers)
        statuses.add(answer.status)
        assert answer.status in (200, 400, 401, 403, 413), (answer, body[:200])
        if answer.status != 200:
            assert any("refused a request" in r.getMessage() for r in records)
            assert "error" in answer.body
        elif answer.body["ignored"]:
            assert any("skipped" in r.getMessage() for r in records)

    try:
        check()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous_level)
    assert {200, 400, 401} <= statuses
    # Nothing died: a good message still runs a turn and its reply arrives.
    graph.drain()
    answer = running.say(text_message("still there?", "15559999999"))
    assert answer.body["accepted"] == 1
    assert running.gateway.wait_idle(timeout=60)
    assert "echo: still there?" in [sent.body for sent in graph.drain()]


def test_an_oversized_body_is_413(start_whatsapp: StartWhatsapp) -> None:
    running = start_whatsapp(max_body_bytes=2048)
    answer = running.post(notification(NUMBER, [text_message("x" * 5000)]))
    assert answer.status == 413
    assert "larger than 2048 bytes" in answer.body["error"]


def test_a_malformed_message_refuses_the_whole_notification(start_whatsapp: StartWhatsapp) -> None:
    running = start_whatsapp()
    broken = text_message("no timestamp")
    del broken["timestamp"]
    answer = running.post(notification(NUMBER, [text_message("fine"), broken]))
    assert answer.status == 400
    assert answer.body["error"] == (
        "$.entry[0].changes[0].value is not a messages value (Object missing required field `timestamp` - at "
        "`$.entry[0].changes[0].value.messages[1]`)"
    )
    assert running.inbox() == []


# -- configuration -----------------------------------------------------------------------------------------------

_GOOD = {"app_secret": SECRET, "verify_token": VERIFY, "access_token": TOKEN}


@pytest.mark.parametrize(
    ("section", "path", "problem"),
    [
        (
            {"numbers": {NUMBER: {"verify_token": VERIFY, "access_token": TOKEN}}},
            f"numbers.{NUMBER}.app_secret",
            "is required",
        ),
        (
            {"numbers": {NUMBER: {"app_secret": SECRET, "access_token": TOKEN}}},
            f"numbers.{NUMBER}.verify_token",
            "is required",
        ),
        (
            {"numbers": {NUMBER: {"app_secret": SECRET, "verify_token": VERIFY}}},
            f"numbers.{NUMBER}.access_token",
            "is required",
        ),
        ({"numbers": {NUMBER: _GOOD | {"access_token_env": "T"}}}, f"numbers.{NUMBER}.access_token_env", "not both"),
        ({"numbers": {NUMBER: _GOOD | {"app_secret": " s "}}}, f"numbers.{NUMBER}.app_secret", "spaces"),
        (
            {"numbers": {NUMBER: {**_GOOD, "verify_token": None, "verify_token_env": "1X"}}},
            f"numbers.{NUMBER}.verify_token_env",
            "environment variable name",
        ),
        ({"numbers": {"+1 555 0100": _GOOD}}, "numbers.+1 555 0100", "keyed by its phone_number_id"),
        (
            {"numbers": {NUMBER: _GOOD | {"messages_per_second": 0}}},
            f"numbers.{NUMBER}.messages_per_second",
            "positive",
        ),
        ({"numbers": {int(NUMBER): _GOOD, NUMBER: _GOOD}}, f"numbers.{NUMBER}", "configured twice"),
        ({"port": 70000}, "port", "not a TCP port"),
        ({"host": " "}, "host", "must not be empty"),
        ({"graph_base_url": "graph.facebook.com"}, "graph_base_url", "http(s) URL"),
        ({"graph_version": "21"}, "graph_version", "such as v21.0"),
        ({"max_message_chars": 5000}, "max_message_chars", "between 100 and 4096"),
        ({"messages_per_second": 0}, "messages_per_second", "positive"),
        ({"recipient_interval_s": -1}, "recipient_interval_s", "positive"),
        ({"recipient_burst": 0}, "recipient_burst", "at least 1"),
        ({"max_body_bytes": 10}, "max_body_bytes", "at least 1024"),
        ({"http_timeout_s": 0}, "http_timeout_s", "positive"),
    ],
)
def test_a_bad_section_is_a_config_error_naming_its_field(section: dict[Any, Any], path: str, problem: str) -> None:
    with pytest.raises(ConfigError) as error:
        msgspec.convert(section, registry.config_type("whatsapp"))  # as the daemon loads config.yaml
    assert error.value.path == f"platforms.whatsapp.{path}"
    assert problem in str(error.value)


def test_an_unquoted_yaml_number_key_is_read_as_its_id_and_unknown_fields_are_refused(graph: FakeGraph) -> None:
    config = msgspec.convert({"numbers": {int(NUMBER): _GOOD}, "graph_base_url": graph.base_url}, WhatsappConfig)
    adapter = WhatsappAdapter(config, environ={})
    assert adapter.describe()[0].startswith(
        f"WhatsApp number {NUMBER}: callback URL http://127.0.0.1:8648/whatsapp/webhook"
    )
    with pytest.raises(msgspec.ValidationError, match="acess_token"):
        msgspec.convert({"numbers": {NUMBER: {"app_secret": SECRET, "acess_token": TOKEN}}}, WhatsappConfig)


def test_secrets_from_the_environment_are_read_when_the_adapter_is_built(graph: FakeGraph) -> None:
    number = WhatsappNumber(app_secret_env="WA_SECRET", verify_token_env="WA_VERIFY", access_token_env="WA_TOKEN")
    config = WhatsappConfig(graph_base_url=graph.base_url, numbers={NUMBER: number})
    environ = {"WA_SECRET": SECRET, "WA_VERIFY": VERIFY, "WA_TOKEN": TOKEN}
    adapter = WhatsappAdapter(config, environ=environ)
    assert "secrets from $WA_SECRET, $WA_VERIFY, $WA_TOKEN" in adapter.describe()[0]
    adapter.windows.load(written(USER))
    assert adapter.sender.send(OutboundMessage(platform="whatsapp", text="hi", account_id=NUMBER, chat_id=USER))
    assert graph.take().token == TOKEN
    with pytest.raises(ConfigError, match="WA_TOKEN is not set") as missing:
        WhatsappAdapter(config, environ={"WA_SECRET": SECRET, "WA_VERIFY": VERIFY})
    assert missing.value.path == f"platforms.whatsapp.numbers.{NUMBER}.access_token_env"


def test_the_registry_builds_the_adapter_and_the_banner_names_the_callback_url(start_whatsapp: StartWhatsapp) -> None:
    empty: Adapter = registry.build("whatsapp", WhatsappConfig(), {})
    assert not empty.capabilities.threads
    assert empty.capabilities.max_message_chars == 4096
    (line,) = empty.describe()
    assert line.startswith(
        "WhatsApp: http://127.0.0.1:8648/whatsapp/webhook has no numbers; add one under platforms.whatsapp.numbers"
    )
    running = start_whatsapp()
    base = running.adapter.url
    assert not base.endswith(":0")
    graph_base = running.adapter.config.graph_base_url
    assert running.adapter.describe() == [
        f"WhatsApp number {NUMBER}: callback URL {base}/whatsapp/webhook (verify token handshake, X-Hub-Signature-256, "
        f"secrets from config.yaml); replies via {graph_base}/v21.0/{NUMBER}/messages within the 24-hour window, "
        "80/s; images, audio, video and documents are downloaded as attachments"
    ]


def test_a_busy_port_is_a_platform_error_naming_the_address(start_whatsapp: StartWhatsapp) -> None:
    running = start_whatsapp()
    taken = int(running.adapter.url.rsplit(":", 1)[1])
    second = WhatsappAdapter(WhatsappConfig(port=taken, numbers=main_number()), environ={})
    with pytest.raises(PlatformError, match=f"cannot listen on 127.0.0.1:{taken}"):
        second.start(GatewayInbox(running.gateway))


# -- a crash between accept and reply -----------------------------------------------------------------------------


@pytest.mark.slow
def test_a_kill_between_accept_and_reply_loses_nothing_and_replies_once(tmp_path: Path, graph: FakeGraph) -> None:
    db = tmp_path / "state.db"
    config = WhatsappConfig(port=0, graph_base_url=graph.base_url, numbers=main_number())
    wamid = new_wamid()
    payload = notification(NUMBER, [text_message("survive", wamid=wamid)])
    worker = AdapterWorker.start(db, "whatsapp", config, agent="hold")
    try:
        assert deliver(worker.url() + "/whatsapp/webhook", payload, SECRET).status == 200
        assert wait_for_inbox(db, 1) == [(wamid, "pending")]
    finally:
        worker.kill()
    assert graph.sent == []
    worker = AdapterWorker.start(db, "whatsapp", config, agent="echo")
    try:
        sent = graph.take(timeout=20)  # the window was rebuilt from the inbox: the reply may go out
        assert (sent.to, sent.body) == (USER, "echo: survive")
        # Meta, never sure of the first answer, delivers it again after the restart: it is recognised.
        answer = deliver(worker.url() + "/whatsapp/webhook", payload, SECRET)
        assert (answer.status, answer.body["duplicates"]) == (200, 1)
        assert graph.nothing_more(0.3)
    finally:
        worker.stop()
    assert len(graph.sent) == 1


# -- /save -------------------------------------------------------------------------------------------------------


def test_save_uploads_the_markdown_as_plain_text_media_and_sends_one_document_message(
    start_whatsapp: StartWhatsapp, graph: FakeGraph
) -> None:
    running = start_whatsapp()
    running.say(text_message("hello"))
    assert graph.take().body == "echo: hello"
    running.say(text_message("/save"))
    saved = graph.take()
    assert running.gateway.wait_idle()
    ((number, kind, filename, data),) = graph.uploads
    assert (number, kind) == (NUMBER, "text/plain")  # the Cloud API takes no text/markdown documents
    markdown = data.decode("utf-8")
    assert markdown.index("hello") < markdown.index("echo: hello")
    assert (saved.kind, saved.to) == ("document", USER)
    assert saved.document is not None
    assert saved.document["filename"] == filename
    assert filename.endswith(".md")
    assert saved.body.endswith("the conversation as Markdown (2 messages, 1 part(s)).")  # the caption
    assert graph.nothing_more()  # the file instead of the text, not beside it


def test_save_sends_the_text_when_the_media_upload_is_refused(
    start_whatsapp: StartWhatsapp, graph: FakeGraph, caplog: pytest.LogCaptureFixture
) -> None:
    running = start_whatsapp()
    running.say(text_message("hello"))
    graph.take()
    graph.fail_next_upload(message="Media upload error: the file could not be stored")
    with caplog.at_level(logging.WARNING, logger="platforms.support.documents"):
        running.say(text_message("/save"))
        text = graph.take()
        assert running.gateway.wait_idle()
    assert text.kind == "text"
    assert text.body.index("hello") < text.body.index("echo: hello")
    assert graph.uploads == []
    assert "could not be stored" in caplog.text
    assert "the reply's text is sent instead" in caplog.text
