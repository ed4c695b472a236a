"""The Telegram platform against a real gateway and a local fake of the Bot API (tests/platforms/telegram_fake.py).

Updates are queued on the fake and fetched by the adapter's real long polls, or POSTed to its webhook server the
way Telegram does; replies are read back from what the fake received.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import msgspec
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from hermes_actors.errors import ConfigError, StoreError
from hermes_actors.media import MediaConfig
from hermes_actors.messages import InboundMessage, OutboundMessage
from hermes_actors.ports import Inbox
from hermes_actors.testing import FakeClock, FakePlatform, poll_until
from platforms import registry
from platforms.base import Adapter, ConnectionReporter, SendError, ThreadCreator
from platforms.support.text import utf16_length
from platforms.telegram import (
    SECRET_HEADER,
    TelegramAdapter,
    TelegramBot,
    TelegramConfig,
    UpdateError,
    decode_update,
    inbound_from_update,
)
from tests.platforms.crash import AdapterWorker, wait_for_inbox
from tests.platforms.support import RunningAdapter, StartGateway
from tests.platforms.telegram_fake import Call, TelegramFake, group_chat, message, post_update, private_chat, user

TOKEN = "111111:" + "A" * 35
OTHER_TOKEN = "222222:" + "B" * 35
SECRET = "webhook-secret_0123456789"
ALICE = user(5001, "Alice", username="alice")
BOB = user(5002, "Bob")
CAROL = user(5003, "Carol", username="carol")


# -- harness -----------------------------------------------------------------------------------------------------


@pytest.fixture
def fake() -> Iterator[TelegramFake]:
    with TelegramFake() as server:
        server.add_bot(TOKEN)
        yield server


def make_config(fake: TelegramFake, bots: Mapping[str, TelegramBot] | None = None, **options: Any) -> TelegramConfig:
    """Fast settings against ``fake``: quick retries, rates that never get in the way unless a test sets them."""
    settings: dict[str, Any] = {
        "base_url": fake.base_url,
        "bots": dict(bots) if bots is not None else {"main": TelegramBot(token=TOKEN)},
        "port": 0,
        "poll_timeout_s": 5,
        "poll_retry_s": 0.05,
        "poll_retry_max_s": 0.2,
        "request_timeout_s": 5.0,
        "chat_messages_per_second": 1000.0,
        "chat_burst": 10,
        "group_messages_per_minute": 60_000.0,
        "bot_messages_per_second": 1000.0,
    }
    return TelegramConfig(**(settings | options))


@dataclass(frozen=True)
class Running(RunningAdapter[TelegramAdapter]):
    def cursor(self, bot: str = "main") -> str | None:
        with self.gateway.read() as store:
            return store.kv.get_cursor("telegram", bot)

    def inbox(self) -> list[str]:
        return [message_id for (message_id,) in self.inbox_rows("platform_message_id")]


Start = Callable[..., Running]


@pytest.fixture
def start(fake: TelegramFake, start_gateway: StartGateway) -> Start:
    """Start a gateway on ``tmp_path / "state.db"`` and the adapter; both stop at the end (or when told to)."""

    def run(
        config: TelegramConfig | None = None,
        *,
        clock: Callable[[], float] = time.time,
        gateway_for: Callable[[Inbox], Inbox] | None = None,
        extra_senders: tuple[FakePlatform, ...] = (),
        media: MediaConfig | None = None,
    ) -> Running:
        adapter = TelegramAdapter(config or make_config(fake), environ={}, clock=clock, monotonic=clock)
        gateway = start_gateway(
            adapter,
            senders=extra_senders,
            clock=clock,
            tick_interval_s=0.1,
            media=media,
            inbox_for=gateway_for,
        )
        return Running(adapter, gateway)

    return run


def wait_sent(fake: TelegramFake, count: int, token: str = TOKEN) -> list[dict[str, Any]]:
    """Wait until ``count`` messages were sent by the bot; return all it sent."""
    fake.wait_for(lambda: len(fake.sent(token)) >= count)
    return fake.sent(token)


def wait_calls(fake: TelegramFake, method: str, count: int) -> list[Call]:
    """Wait until ``method`` was called ``count`` times; return every call of it."""
    fake.wait_for(lambda: len(fake.calls(method)) >= count)
    return fake.calls(method)


def by_text(sent: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {params["text"]: params for params in sent}


# -- chats, topics and accounts ----------------------------------------------------------------------------------


def test_a_private_message_is_answered_in_its_chat_and_the_offset_is_stored_with_it(
    fake: TelegramFake, start: Start
) -> None:
    telegram = start()
    update_id = fake.push(TOKEN, message(private_chat(ALICE), ALICE, "hello", message_id=41))
    (reply,) = wait_sent(fake, 1)
    assert reply == {"chat_id": 5001, "text": "echo: hello"}  # no quote in a private chat
    key = "agent:main:telegram~main:dm:5001"
    assert telegram.transcript(key) == [("user", "hello"), ("assistant", "echo: hello")]
    assert telegram.inbox() == ["5001:41"]
    assert telegram.cursor() == str(update_id + 1)
    with telegram.gateway.read() as store:
        (session,) = store.list_sessions()
    assert (session.source, session.chat_id, session.chat_type, session.user_name, session.chat_name) == (
        "telegram",
        "5001",
        "dm",
        "@alice",
        "Alice",
    )


def test_group_members_have_their_own_sessions_and_a_forum_topic_is_one_shared_conversation(
    fake: TelegramFake, start: Start
) -> None:
    forum = group_chat(-100777, "Team", forum=True)
    fake.add_forum(-100777, 17)
    telegram = start()
    fake.push(TOKEN, message(forum, ALICE, "alice in general", message_id=1))
    fake.push(TOKEN, message(forum, BOB, "bob in general", message_id=2))
    fake.push(TOKEN, message(forum, ALICE, "alice in topic", message_id=3, topic=17))
    fake.push(TOKEN, message(forum, BOB, "bob in topic", message_id=4, topic=17))
    # A reply chain in a group has a message_thread_id but is no topic: it stays in the member's session.
    fake.push(TOKEN, message(forum, BOB, "bob replying", message_id=5, message_thread_id=2))
    replies = by_text(wait_sent(fake, 5))
    assert replies["echo: alice in general"] == {
        "chat_id": -100777,
        "text": "echo: alice in general",
        "reply_parameters": {"message_id": 1, "allow_sending_without_reply": True},
    }
    assert replies["echo: alice in topic"]["message_thread_id"] == 17
    assert replies["echo: bob in topic"]["message_thread_id"] == 17
    assert "message_thread_id" not in replies["echo: bob replying"]
    assert telegram.gateway.wait_idle()
    alice, bob, topic = (f"agent:main:telegram~main:group:-100777:{part}" for part in ("5001", "5002", "17"))
    assert [m for _, m in telegram.transcript(alice)] == ["alice in general", "echo: alice in general"]
    assert [m for role, m in telegram.transcript(bob) if role == "user"] == ["bob in general", "bob replying"]
    assert [m for role, m in telegram.transcript(topic) if role == "user"] == ["alice in topic", "bob in topic"]
    assert len({telegram.session_of(key) for key in (alice, bob, topic)}) == 3


def test_two_bots_seeing_the_same_chat_ids_never_share_a_session(fake: TelegramFake, start: Start) -> None:
    fake.add_bot(OTHER_TOKEN, username="second_bot")
    bots = {"first": TelegramBot(token=TOKEN), "second": TelegramBot(token=OTHER_TOKEN)}
    telegram = start(make_config(fake, bots))
    group = group_chat(-100555, "Shared")
    for token in (TOKEN, OTHER_TOKEN):
        fake.push(token, message(private_chat(ALICE), ALICE, f"dm via {token[:6]}", message_id=9))
        fake.push(token, message(group, ALICE, f"group via {token[:6]}", message_id=9))
    first, second = wait_sent(fake, 2, TOKEN), wait_sent(fake, 2, OTHER_TOKEN)
    assert {p["text"] for p in first} == {"echo: dm via 111111", "echo: group via 111111"}
    assert {p["text"] for p in second} == {"echo: dm via 222222", "echo: group via 222222"}
    assert telegram.gateway.wait_idle()
    keys = [
        "agent:main:telegram~first:dm:5001",
        "agent:main:telegram~second:dm:5001",
        "agent:main:telegram~first:group:-100555:5001",
        "agent:main:telegram~second:group:-100555:5001",
    ]
    assert len({telegram.session_of(key) for key in keys} - {None}) == 4
    assert telegram.inbox().count("5001:9") == 2  # the same message id, one per bot
    assert telegram.cursor("first") is not None
    assert telegram.cursor("second") is not None


def test_channel_posts_media_stand_ins_and_service_messages(fake: TelegramFake, start: Start) -> None:
    telegram = start()
    channel = group_chat(-100999, "News", kind="channel")
    chat = private_chat(ALICE)
    fake.add_file("p", b"\xff\xd8 a jpeg", file_path="photos/file_1.jpg")
    fake.add_file("d", b"%PDF-1.7 a report", file_path="documents/report.pdf")
    fake.push(TOKEN, message(channel, None, "breaking", kind="channel_post", sender_chat=channel))
    fake.push(TOKEN, message(chat, ALICE, photo=[{"file_id": "p", "width": 1, "height": 1}], caption="look"))
    fake.push(TOKEN, message(chat, ALICE, document={"file_id": "d", "file_name": "report.pdf"}))
    fake.push(TOKEN, message(chat, ALICE, sticker={"file_id": "s", "emoji": "👍"}))
    fake.push(TOKEN, message(chat, ALICE, voice={"file_id": "v", "duration": 2}))
    last = fake.push(TOKEN, message(group_chat(-100777, "Team"), None, new_chat_members=[BOB]))  # no turn
    fake.push(TOKEN, {"edited_message": message(chat, ALICE, "edited", message_id=1)["message"]})  # no turn
    texts = {p["text"] for p in wait_sent(fake, 5)}
    assert {text.split("\n")[0] for text in texts} == {
        "echo: breaking",
        "echo: [image] look",
        "echo: [file: report.pdf]",
        "echo: [sticker 👍]",
        "echo: [voice message]",
    }
    # The photo and the document were downloaded: their stand-ins follow the text (stickers, voice: text only).
    media = str(telegram.gateway.media.directory)
    attached = sorted(text.split("\n", 1)[1] for text in texts if "\n" in text)
    assert [line.split(", saved at ")[0] for line in attached] == [
        "[attached document report.pdf (application/pdf, 17 bytes)",
        "[attached image photo.jpg (image/jpeg, 9 bytes)",
    ]
    assert all(f", saved at {media}/" in line for line in attached)
    fake.wait_for(lambda: telegram.cursor() == str(last + 2))  # dropped updates are confirmed all the same
    assert telegram.gateway.wait_idle()
    assert len(fake.sent(TOKEN)) == 5
    assert telegram.session_of("agent:main:telegram~main:channel:-100999:-100999") is not None


def test_a_photo_arrives_as_an_image_attachment_downloaded_through_the_bot_api(
    fake: TelegramFake, start: Start, tmp_path: Path
) -> None:
    telegram = start(media=MediaConfig(max_bytes=1024))
    chat = private_chat(ALICE)
    jpeg = b"\xff\xd8\xff\xe0" + bytes(range(200))
    fake.add_file("large", jpeg, file_path="photos/file_7.jpg")
    sizes = [{"file_id": "thumb", "width": 90, "height": 60}, {"file_id": "large", "width": 900, "height": 600}]
    fake.push(TOKEN, message(chat, ALICE, photo=sizes, caption="what is this?", message_id=70))
    (reply,) = wait_sent(fake, 1)
    assert telegram.gateway.wait_idle()
    # Only the largest size was asked for and downloaded, once, into the media store, named by its sha256.
    assert [c.params["file_id"] for c in fake.calls("getFile")] == ["large"]
    assert [c.params["path"] for c in fake.calls("file")] == ["photos/file_7.jpg"]
    digest = hashlib.sha256(jpeg).hexdigest()
    cached = tmp_path / "media" / digest[:2] / f"{digest}.jpg"
    assert cached.read_bytes() == jpeg
    assert (
        reply["text"]
        == f"echo: [image] what is this?\n[attached image photo.jpg (image/jpeg, 204 bytes), saved at {cached}]"
    )
    session = telegram.session_of("agent:main:telegram~main:dm:5001")
    assert session is not None
    with telegram.gateway.read() as store:
        (row,) = store.attachments.for_session(session)
        (user, _) = store.load_transcript(session)
    assert (row.message_id, row.kind, row.mime_type, row.size, row.sha256, row.name, row.error) == (
        user.id,
        "image",
        "image/jpeg",
        204,
        digest,
        "photo.jpg",
        None,
    )
    assert row.path == f"{digest[:2]}/{digest}.jpg"  # relative to the media directory
    assert row.source_url is None  # the download URL holds the token


def test_a_photo_over_the_limit_or_unknown_to_telegram_is_not_read_and_the_text_still_runs(
    fake: TelegramFake, start: Start, tmp_path: Path
) -> None:
    start(media=MediaConfig(max_bytes=1024))
    chat = private_chat(ALICE)
    fake.add_file("big", bytes(4096), file_path="photos/big.jpg")
    big = [{"file_id": "big", "width": 4000, "height": 3000, "file_size": 4096}]
    fake.push(TOKEN, message(chat, ALICE, photo=big, caption="too big?", message_id=80))
    fake.push(TOKEN, message(chat, ALICE, document={"file_id": "gone", "file_name": "notes.txt"}, message_id=81))
    first, second = (p["text"] for p in wait_sent(fake, 2))
    assert first == (
        "I could not read photo.jpg: it is 4 KB, over the 1 KB limit.\n\n"
        "echo: [image] too big?\n[image photo.jpg was not read: it is 4 KB, over the 1 KB limit]"
    )
    assert second.startswith(
        "I could not read notes.txt: Telegram did not hand it over (Bad Request: invalid file_id)."
    )
    assert second.endswith(
        "echo: [file: notes.txt]\n[document notes.txt was not read: Telegram did not hand it over "
        "(Bad Request: invalid file_id)]"
    )
    assert [c.params["file_id"] for c in fake.calls("getFile")] == ["gone"]  # the update said the photo is too big
    assert fake.calls("file") == []
    assert not (tmp_path / "media").exists()


# -- the offset and crashes --------------------------------------------------------------------------------------


def test_a_restart_resumes_after_the_stored_offset_and_processes_nothing_twice(
    fake: TelegramFake, start: Start
) -> None:
    telegram = start()
    fake.push(TOKEN, message(private_chat(ALICE), ALICE, "one"))
    second = fake.push(TOKEN, message(private_chat(BOB), BOB, "two"))
    wait_sent(fake, 2)
    assert telegram.gateway.wait_idle()
    assert telegram.cursor() == str(second + 1)
    telegram.stop()
    polls_before = len(fake.offsets(TOKEN))
    telegram = start()
    fake.push(TOKEN, message(private_chat(ALICE), ALICE, "three"))
    wait_sent(fake, 3)
    assert telegram.gateway.wait_idle()
    assert fake.offsets(TOKEN)[polls_before] == second + 1  # the first poll after the restart confirms the batch
    assert sorted(p["text"] for p in fake.sent(TOKEN)) == ["echo: one", "echo: three", "echo: two"]
    assert fake.pending(TOKEN) <= 1  # only the last update may still await confirmation by the next poll


class FailingFirstCommit:
    """An inbox whose first ``accept_many`` fails, as if the process died before the commit."""

    def __init__(self, inbox: Inbox) -> None:
        self._inbox = inbox
        self.failed = 0

    def accept_many(self, batch: list[InboundMessage], **options: Any) -> Any:
        if not self.failed:
            self.failed += 1
            raise StoreError("disk full (simulated)")
        return self._inbox.accept_many(batch, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inbox, name)


def test_a_batch_that_was_not_committed_is_fetched_again_and_processed_once(
    fake: TelegramFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    update_id = fake.push(TOKEN, message(private_chat(ALICE), ALICE, "survive", message_id=7))
    telegram = start(gateway_for=lambda inbox: cast(Inbox, FailingFirstCommit(inbox)))
    wait_sent(fake, 1)
    assert telegram.gateway.wait_idle()
    offsets = fake.offsets(TOKEN)
    assert offsets[:2] == [None, None]  # nothing was confirmed: the same update came again
    assert [p["text"] for p in fake.sent(TOKEN)] == ["echo: survive"]
    assert telegram.inbox() == ["5001:7"]
    assert telegram.cursor() == str(update_id + 1)
    assert "telegram bot 'main': the poll failed; polling again" in caplog.text


@pytest.mark.slow
def test_a_kill_between_accept_and_reply_loses_nothing_and_replies_once(tmp_path: Path, fake: TelegramFake) -> None:
    db = tmp_path / "state.db"
    config = make_config(fake)
    worker = AdapterWorker.start(db, "telegram", config, agent="hold")
    try:
        update_id = fake.push(TOKEN, message(private_chat(ALICE), ALICE, "survive", message_id=3))
        assert wait_for_inbox(db, 1) == [("5001:3", "pending")]
    finally:
        worker.kill()
    assert fake.sent(TOKEN) == []
    polls_before = len(fake.offsets(TOKEN))
    worker = AdapterWorker.start(db, "telegram", config, agent="echo")
    try:
        wait_sent(fake, 1)
        fake.push(TOKEN, message(private_chat(ALICE), ALICE, "and after", message_id=4))
        wait_sent(fake, 2)
    finally:
        worker.stop()
    assert fake.offsets(TOKEN)[polls_before] == update_id + 1  # the stored offset, not the update again
    assert [p["text"] for p in fake.sent(TOKEN)] == ["echo: survive", "echo: and after"]


# -- replies -----------------------------------------------------------------------------------------------------


def long_text() -> str:
    paragraph = "Telegram counts UTF-16 units, so 🦊 counts twice. " * 30
    return "\n\n".join(f"{n}. {paragraph}" for n in range(6))  # about 9,300 units


def test_a_long_reply_is_split_at_4096_utf16_units_at_paragraphs_and_only_the_first_part_quotes(
    fake: TelegramFake, start: Start
) -> None:
    start()
    text = long_text()
    fake.push(TOKEN, message(group_chat(-100321, "Long"), ALICE, text, message_id=12))
    parts = wait_sent(fake, 3)
    assert len(parts) == 3
    assert all(utf16_length(p["text"]) <= 4096 for p in parts)
    assert " ".join(p["text"] for p in parts).split() == f"echo: {text}".split()
    assert all(p["text"].rstrip().endswith(".") for p in parts)  # cut at paragraph ends, not inside words
    assert parts[0]["reply_parameters"]["message_id"] == 12
    assert all("reply_parameters" not in p for p in parts[1:])


def test_a_429_is_retried_when_retry_after_says_and_a_split_reply_resumes_after_the_parts_sent(
    fake: TelegramFake, start: Start
) -> None:
    clock = FakeClock()
    telegram = start(clock=clock)
    fake.fail("sendMessage", 429, "Too Many Requests: retry after 7", retry_after=7, after=1)
    fake.push(TOKEN, message(private_chat(ALICE), ALICE, long_text()))
    wait_calls(fake, "sendMessage", 2)
    assert telegram.gateway.wait_idle()
    with telegram.gateway.read() as store:
        (row,) = store.outbox.unsent()
    assert row.next_attempt_at == pytest.approx(clock.now + 7)
    clock.advance(6.5)
    telegram.gateway.tick()
    assert telegram.gateway.wait_idle()
    assert len(fake.calls("sendMessage")) == 2
    clock.advance(0.5)
    telegram.gateway.tick()
    parts = wait_sent(fake, 3)
    assert telegram.gateway.wait_idle()
    assert [c.status for c in fake.calls("sendMessage")] == [200, 429, 200, 200]
    assert " ".join(p["text"] for p in parts).split() == f"echo: {long_text()}".split()  # part 1 once


def test_server_errors_are_retried_with_backoff_and_the_reply_arrives_once(fake: TelegramFake, start: Start) -> None:
    clock = FakeClock()
    telegram = start(clock=clock)
    fake.fail("sendMessage", 502, "", raw_body=b"<html>502 Bad Gateway</html>")
    fake.fail("sendMessage", 500, "Internal Server Error")
    fake.push(TOKEN, message(private_chat(ALICE), ALICE, "hello"))
    for failures in (1, 2):
        wait_calls(fake, "sendMessage", failures)
        assert telegram.gateway.wait_idle()
        clock.advance(0.05 * failures)
        telegram.gateway.tick()
    assert [p["text"] for p in wait_sent(fake, 1)] == ["echo: hello"]
    assert telegram.gateway.wait_idle()
    with telegram.gateway.read() as store:
        assert store.outbox.unsent() == []


@pytest.mark.slow
def test_replies_are_paced_per_chat_below_telegrams_flood_limit(tmp_path: Path, start: Start) -> None:
    with TelegramFake(flood_interval_s=0.1) as strict:
        strict.add_bot(TOKEN)
        start(make_config(strict, chat_messages_per_second=5.0, chat_burst=1))
        strict.push(TOKEN, message(private_chat(ALICE), ALICE, long_text()))
        calls = wait_calls(strict, "sendMessage", 3)
    assert strict.floods == 0
    gaps = [later.at - earlier.at for earlier, later in itertools.pairwise(calls)]
    assert min(gaps) >= 0.1  # 5 a second, with room for timer slack


@pytest.mark.slow
def test_flood_control_answers_are_honoured_when_pacing_allows_bursts(tmp_path: Path, start: Start) -> None:
    with TelegramFake(flood_interval_s=0.2, flood_retry_after=1) as strict:
        strict.add_bot(TOKEN)
        telegram = start(make_config(strict, chat_burst=10))
        strict.push(TOKEN, message(private_chat(ALICE), ALICE, long_text()))
        parts = wait_sent(strict, 3)
        assert telegram.gateway.wait_idle()
    assert strict.floods >= 1
    assert " ".join(p["text"] for p in parts).split() == f"echo: {long_text()}".split()


def test_a_reply_to_a_group_that_became_a_supergroup_goes_to_the_supergroup(fake: TelegramFake, start: Start) -> None:
    fake.migrate(-500, -100500)
    telegram = start()
    old_group = group_chat(-500, "Old", kind="group")
    fake.push(TOKEN, message(old_group, ALICE, "first", message_id=3))
    assert wait_sent(fake, 1)[0]["chat_id"] == -100500
    fake.push(TOKEN, message(old_group, ALICE, "second", message_id=4))
    wait_sent(fake, 2)
    assert telegram.gateway.wait_idle()
    assert [(c.params["chat_id"], c.status) for c in fake.calls("sendMessage")] == [
        (-500, 400),
        (-100500, 200),
        (-100500, 200),  # remembered: no second refusal
    ]


def test_send_failures_become_send_errors_that_say_what_happened(fake: TelegramFake) -> None:
    adapter = TelegramAdapter(make_config(fake), environ={})
    (sender,) = adapter.senders()
    reply = OutboundMessage(platform="telegram", account_id="main", chat_id="5001", text="hi")
    fake.fail("sendMessage", 403, "Forbidden: bot was blocked by the user")
    with pytest.raises(SendError, match="Forbidden: bot was blocked by the user") as refused:
        sender.send(reply)
    assert (refused.value.retry_after_s, refused.value.outcome_unknown, refused.value.permanent) == (None, False, True)
    assert TOKEN not in str(refused.value)
    fake.fail("sendMessage", 429, "Too Many Requests: retry after 3", retry_after=3)
    with pytest.raises(SendError, match="Telegram asked to slow down") as limited:
        sender.send(reply)
    assert limited.value.retry_after_s == 3
    with pytest.raises(SendError, match="held back"):  # the chat stays quiet until then
        sender.send(reply)
    gone = TelegramAdapter(make_config(fake, base_url="http://127.0.0.1:9"), environ={}).senders()[0]
    with pytest.raises(SendError, match="cannot be reached") as unreachable:
        gone.send(reply)
    assert TOKEN not in str(unreachable.value)
    assert "<token>" in str(unreachable.value)
    assert sender.send(msgspec.structs.replace(reply, account_id="nobody")) is None  # logged, stays in transcript


# -- handoff topics ----------------------------------------------------------------------------------------------


def test_a_handoff_opens_a_forum_topic_and_the_conversation_continues_in_it(fake: TelegramFake, start: Start) -> None:
    forum = group_chat(-100900, "Desk", forum=True)
    fake.add_forum(-100900)
    cli = FakePlatform("cli")
    telegram = start(extra_senders=(cli,))
    cli.attach(telegram.gateway)
    cli.push("/title billing bug", chat_id="terminal")
    cli.pop()
    cli.push("the invoice total is wrong", chat_id="terminal")
    cli.pop()
    fake.push(TOKEN, message(forum, ALICE, "/sethome"))
    assert wait_sent(fake, 1)[0]["text"] == "This chat is now the home channel for telegram."
    assert telegram.gateway.wait_idle()  # the reply arrives before the turn is over: a handoff then is refused
    cli.push("/handoff telegram", chat_id="terminal")
    assert cli.pop().text.startswith("Handed off to telegram (chat ")
    (topic_call,) = fake.calls("createForumTopic")
    assert topic_call.params == {"chat_id": -100900, "name": "billing bug"}
    first = wait_sent(fake, 2)[1]
    topic = first["message_thread_id"]
    assert first["chat_id"] == -100900
    assert first["text"].startswith("echo: [handoff]")
    fake.push(TOKEN, message(forum, BOB, "picking it up", topic=topic, message_id=77))
    assert wait_sent(fake, 3)[2] == {
        "chat_id": -100900,
        "message_thread_id": topic,
        "text": "echo: picking it up",
        "reply_parameters": {"message_id": 77, "allow_sending_without_reply": True},
    }
    session = telegram.gateway.session_for("agent:main:telegram~main:group:-100900:" + str(topic))
    assert session is not None
    assert session == telegram.gateway.session_for("agent:main:cli:dm:terminal")


def test_topics_cannot_be_opened_outside_a_forum_and_the_error_says_why(fake: TelegramFake) -> None:
    (sender,) = TelegramAdapter(make_config(fake), environ={}).senders()
    assert isinstance(sender, ThreadCreator)
    with pytest.raises(SendError, match=r"the chat is not a forum.*forum supergroup"):
        sender.create_thread("-100123", "x", account_id="main")
    fake.add_forum(-100123)
    assert sender.create_thread("-100123", "t" * 300) == "100"  # the only bot; the name is cut to 128
    assert len(fake.calls("createForumTopic")[-1].params["name"]) == 128
    with pytest.raises(SendError, match="no bot named 'ghost'"):
        sender.create_thread("-100123", "x", account_id="ghost")


# -- webhooks ----------------------------------------------------------------------------------------------------


def webhook_config(fake: TelegramFake, **options: Any) -> TelegramConfig:
    bot = TelegramBot(
        token=TOKEN, mode="webhook", secret_token=SECRET, webhook_url="https://bots.example.com/telegram/hook"
    )
    return make_config(fake, {"hook": bot, "poller": TelegramBot(token=OTHER_TOKEN)}, **options)


def an_update(update_id: int, text: str = "hello", message_id: int = 1) -> dict[str, Any]:
    return {"update_id": update_id, **message(private_chat(ALICE), ALICE, text, message_id=message_id)}


def test_a_webhook_update_with_the_secret_is_committed_once_and_answered(fake: TelegramFake, start: Start) -> None:
    fake.add_bot(OTHER_TOKEN)
    telegram = start(webhook_config(fake))
    assert fake.webhook(TOKEN) == {
        "url": "https://bots.example.com/telegram/hook",
        "secret_token": SECRET,
        "allowed_updates": ["message", "channel_post", "callback_query"],
    }
    url = telegram.adapter.url + "/telegram/hook"
    answers = [post_update(url, an_update(10), SECRET) for _ in range(3)]  # Telegram retrying
    assert answers[0] == (200, {"ok": True, "accepted": True, "duplicate": False})
    assert answers[1:] == [(200, {"ok": True, "accepted": True, "duplicate": True})] * 2
    assert [p["text"] for p in wait_sent(fake, 1)] == ["echo: hello"]
    assert telegram.gateway.wait_idle()
    assert len(fake.sent(TOKEN)) == 1
    assert telegram.transcript("agent:main:telegram~hook:dm:5001") == [("user", "hello"), ("assistant", "echo: hello")]
    assert fake.calls("getUpdates", TOKEN) == []  # a webhook bot is not polled


def test_webhook_requests_without_the_right_secret_get_401_and_nothing_is_stored(
    fake: TelegramFake, start: Start
) -> None:
    fake.add_bot(OTHER_TOKEN)
    telegram = start(webhook_config(fake))
    url = telegram.adapter.url + "/telegram/hook"
    for secret, reason in [
        (None, f"the {SECRET_HEADER} header is missing"),
        ("wrong", "does not match"),
        (SECRET + "x", "does not match"),
        ("é", "does not match"),
    ]:
        status, answer = post_update(url, an_update(11), secret)
        assert status == 401
        assert reason in answer["error"]
    for path in ("/telegram/nobody", "/telegram/poller"):
        status, answer = post_update(telegram.adapter.url + path, an_update(12), SECRET)
        assert status == 404
        assert "mode: webhook" in answer["error"]
    assert telegram.gateway.wait_idle()
    assert telegram.inbox() == []
    assert fake.sent(TOKEN) == []


def test_malformed_and_oversized_webhook_bodies_get_4xx_and_the_adapter_keeps_working(
    fake: TelegramFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="platforms.telegram")
    fake.add_bot(OTHER_TOKEN)
    telegram = start(webhook_config(fake, max_body_bytes=4096))
    url = telegram.adapter.url + "/telegram/hook"
    bad: list[tuple[bytes, str]] = [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe\x00", "not valid JSON"),
        (b'{"update_id": 1, "deep": ' + b"[" * 1500 + b"]" * 1500 + b"}", "maximum recursion depth"),
        (b"[]", "Expected `object`, got `array`"),
        (b'{"edited_message": {}}', "missing required field `update_id`"),
        (b'{"update_id": 1, "message": {}}', "missing required field `message_id` - at `$.message`"),
        (json.dumps({"update_id": "1"}).encode(), "Expected `int`, got `str` - at `$.update_id`"),
        (json.dumps({"update_id": 1, "message": {"message_id": 1}}).encode(), "`chat`"),
        (
            json.dumps(
                {"update_id": 1, "message": {"message_id": 1, "chat": {"id": True, "type": "private"}}}
            ).encode(),
            "`$.message.chat.id`",
        ),
        (json.dumps(an_update(1) | {"message": {**an_update(1)["message"], "text": 5}}).encode(), "$.message.text"),
        (
            json.dumps(
                {"update_id": 1, "message": {**an_update(1)["message"], "chat": {"id": 1, "type": "x"}}}
            ).encode(),
            "chat type 'x'",
        ),
        (
            json.dumps({"update_id": 1, "message": {**an_update(1)["message"], "message_id": 2**70}}).encode(),
            "out of range",
        ),
    ]
    for body, reason in bad:
        status, answer = post_update(url, None, SECRET, raw=body)
        assert status == 400, body
        assert reason in answer["error"], (body, answer)
    status, answer = post_update(url, an_update(13, "x" * 5000), SECRET)
    assert status == 413
    assert "larger than 4096 bytes" in answer["error"]
    assert "refused a webhook request (400 not valid JSON" in caplog.text
    edited = {"update_id": 14, "edited_message": an_update(14)["message"]}
    assert post_update(url, edited, SECRET) == (200, {"ok": True, "accepted": False})
    assert post_update(url, an_update(15, "still here", 2), SECRET)[0] == 200
    assert [p["text"] for p in wait_sent(fake, 1)] == ["echo: still here"]


def test_a_webhook_document_is_downloaded_before_the_update_is_answered(
    fake: TelegramFake, start: Start, tmp_path: Path
) -> None:
    fake.add_bot(OTHER_TOKEN)
    telegram = start(webhook_config(fake))
    fake.add_file("doc-1", b"line one\nline two\n", file_path="documents/file_3.txt")
    document = {"file_id": "doc-1", "file_name": "notes.txt", "mime_type": "text/plain", "file_size": 18}
    update = {"update_id": 30, **message(private_chat(ALICE), ALICE, message_id=30, document=document)}
    assert post_update(telegram.adapter.url + "/telegram/hook", update, SECRET)[0] == 200
    assert [c.params["path"] for c in fake.calls("file", TOKEN)] == ["documents/file_3.txt"]  # before the 200
    (reply,) = wait_sent(fake, 1)
    digest = hashlib.sha256(b"line one\nline two\n").hexdigest()
    assert reply["text"] == (
        f"echo: [file: notes.txt]\n[attached document notes.txt (text/plain, 18 bytes), saved at "
        f"{tmp_path / 'media' / digest[:2] / digest}.txt]\nIts text:\nline one\nline two\n"
    )


def test_a_webhook_update_that_cannot_be_stored_gets_503_so_telegram_sends_it_again(
    fake: TelegramFake, start: Start
) -> None:
    fake.add_bot(OTHER_TOKEN)
    telegram = start(webhook_config(fake))
    telegram.gateway.stop()
    status, answer = post_update(telegram.adapter.url + "/telegram/hook", an_update(16), SECRET)
    assert (status, answer) == (503, {"error": "the message could not be stored; Telegram will deliver it again"})


# -- hostile input -----------------------------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
_chat = st.fixed_dictionaries(
    {"id": st.integers() | _json, "type": st.sampled_from(["private", "group", "supergroup", "channel"]) | _json},
    optional={"title": st.text() | _json, "is_forum": st.booleans() | _json},
)
_message = st.fixed_dictionaries(
    {"message_id": st.integers() | _json, "chat": _chat | _json},
    optional={
        "text": st.text(max_size=300) | _json,
        "from": st.fixed_dictionaries({"id": st.integers() | _json}, optional={"first_name": st.text() | _json})
        | _json,
        "message_thread_id": st.integers() | _json,
        "is_topic_message": st.booleans() | _json,
        "caption": st.text() | _json,
        "photo": _json,
        "document": st.fixed_dictionaries({}, optional={"file_name": st.text() | _json}) | _json,
        "sender_chat": _chat | _json,
    },
)
_updates = st.fixed_dictionaries(
    {"update_id": st.integers() | _json},
    optional={"message": _message | _json, "channel_post": _message | _json, "edited_message": _json},
)
_bodies = (
    st.binary(max_size=64)
    | _updates.map(lambda u: json.dumps(u).encode())
    | _json.map(lambda u: json.dumps(u).encode())
    | st.text().map(lambda t: json.dumps(t).encode())
)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(body=_bodies)
def test_any_body_decodes_to_a_message_none_or_an_update_error(body: bytes) -> None:
    try:
        inbound = inbound_from_update(decode_update(body), "main", received_at=0.0)
    except UpdateError:
        event("UpdateError")
        return
    event("ignored" if inbound is None else "message")
    if inbound is not None:
        assert inbound.text.strip()
        assert inbound.source.chat_type in ("dm", "group", "channel")
        assert inbound.message_id.startswith(f"{inbound.source.chat_id}:")
        msgspec.msgpack.encode(inbound)  # it can be stored


@pytest.mark.slow
def test_random_webhook_requests_never_get_a_server_error(fake: TelegramFake, start: Start) -> None:
    fake.add_bot(OTHER_TOKEN)
    telegram = start(webhook_config(fake, max_body_bytes=2048))
    url = telegram.adapter.url + "/telegram/hook"

    @settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        body=_bodies | st.binary(min_size=2100, max_size=2200),
        secret=st.just(SECRET)
        | st.none()
        | st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=30),
    )
    def check(body: bytes, secret: str | None) -> None:
        status, answer = post_update(url, None, secret, raw=body)
        event(f"HTTP {status}")
        assert status in (200, 400, 401, 413)
        if status == 401:
            assert secret != SECRET
        assert answer.get("ok") is True if status == 200 else isinstance(answer["error"], str)

    check()
    assert post_update(url, an_update(99, "after the storm", 99_999), SECRET)[0] == 200
    fake.wait_for(lambda: "echo: after the storm" in {p["text"] for p in fake.sent(TOKEN)})


def test_hostile_updates_in_a_poll_are_logged_and_stepped_over(
    fake: TelegramFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    base = fake.push(TOKEN, {"poll_answer": {"poll_id": "1"}})  # an update kind we do not ask for: ignored
    hostile = [
        b'{"update_id": %d, "message": {"message_id": "7", "chat": {"id": 1, "type": "private"}}}',
        b'{"update_id": %d, "message": {"message_id": 7, "chat": {"id": 1, "type": "secret"}, "text": "x"}}',
        b'{"update_id": %d, "message": {"message_id": 7, "chat": {"id": 1, "type": "private"}, "text": [1]}}',
        b'{"update_id": %d, "message": {"message_id": 7, "chat": {"id": 99999999999999999999999, "type": "private"},'
        b' "text": "huge"}}',
        b'{"update_id": %d, "message": 5}',
    ]
    for offset, template in enumerate(hostile, 1):
        fake.push_raw(TOKEN, template % (base + offset), update_id=base + offset)
    fake.push_raw(TOKEN, b'{"no_update_id": true}')
    fake.push_raw(TOKEN, b"[1, 2]")
    telegram = start()
    fake.push(TOKEN, message(private_chat(ALICE), ALICE, "still fine"))
    assert [p["text"] for p in wait_sent(fake, 1)] == ["echo: still fine"]
    for offset in range(1, len(hostile) + 1):
        assert f"telegram bot 'main': skipped update {base + offset}:" in caplog.text
    assert "skipped an update without an update_id" in caplog.text
    assert telegram.gateway.wait_idle()
    assert len(telegram.inbox()) == 1


@pytest.mark.slow
def test_poll_failures_are_logged_with_the_fix_and_polling_recovers(
    fake: TelegramFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    fake.fail("getUpdates", 502, "", raw_body=b"<html>bad gateway</html>")
    fake.fail("getUpdates", 409, "Conflict: terminated by other getUpdates request")
    fake.fail("getUpdates", 429, "Too Many Requests: retry after 1", retry_after=1)
    start()
    fake.push(TOKEN, message(private_chat(ALICE), ALICE, "through"))
    wait_sent(fake, 1)
    calls = fake.calls("getUpdates")
    assert [c.status for c in calls[:4]] == [502, 409, 429, 200]
    assert calls[3].at - calls[2].at >= 0.9  # retry_after, not the 0.05 s backoff
    assert "HTTP 502 without a Bot API answer" in caplog.text
    assert "another program polls with this token, or a webhook is set for it" in caplog.text
    assert "Telegram asked to wait 1 s before polling again" in caplog.text


def test_a_refused_token_is_logged_and_polling_resumes_once_it_is_valid(
    fake: TelegramFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    start(make_config(fake, {"main": TelegramBot(token=OTHER_TOKEN)}))
    fake.wait_for(lambda: fake.calls("getUpdates", OTHER_TOKEN))
    assert fake.calls("getUpdates", OTHER_TOKEN)[0].status == 401
    fake.wait_for(lambda: "Telegram refused the token (Unauthorized)" in caplog.text)
    assert TOKEN not in caplog.text
    assert OTHER_TOKEN not in caplog.text
    fake.add_bot(OTHER_TOKEN)
    fake.push(OTHER_TOKEN, message(private_chat(ALICE), ALICE, "now"))
    assert [p["text"] for p in wait_sent(fake, 1, OTHER_TOKEN)] == ["echo: now"]


def test_stop_ends_a_long_poll_at_once(fake: TelegramFake, start: Start) -> None:
    telegram = start(make_config(fake, poll_timeout_s=50))
    fake.wait_for(lambda: fake.polling(TOKEN))
    began = time.monotonic()
    telegram.adapter.stop()
    assert time.monotonic() - began < 2


def test_a_failing_poll_is_a_connection_problem_naming_the_bot_until_a_poll_is_answered(
    fake: TelegramFake, start: Start
) -> None:
    telegram = start()
    assert isinstance(telegram.adapter, ConnectionReporter)
    assert telegram.adapter.connection_problem() is None  # the first poll is still waiting: starting, not down
    fake.push(TOKEN, message(private_chat(ALICE), ALICE, "one"))
    wait_sent(fake, 1)
    assert telegram.adapter.connection_problem() is None
    fake.fail("getUpdates", 502, "", raw_body=b"<html>bad gateway</html>", times=1000)
    fake.push(TOKEN, message(private_chat(ALICE), ALICE, "two"))  # ends the waiting poll; the next ones fail
    problem = poll_until(telegram.adapter.connection_problem, what="the failed poll to be reported")
    assert problem.startswith("bot 'main': reconnecting (getUpdates: HTTP 502 without a Bot API answer")
    fake.push(TOKEN, message(private_chat(ALICE), ALICE, "three"))  # answers the first poll after the heal at once
    fake.heal()
    poll_until(lambda: telegram.adapter.connection_problem() is None, what="the answered poll to clear the problem")
    assert [p["text"] for p in wait_sent(fake, 3)] == ["echo: one", "echo: two", "echo: three"]


def test_a_refused_token_is_a_connection_problem_naming_the_setting_to_fix(fake: TelegramFake, start: Start) -> None:
    telegram = start(make_config(fake, {"main": TelegramBot(token=OTHER_TOKEN)}))
    problem = poll_until(telegram.adapter.connection_problem, what="the refused token to be reported")
    assert problem == (
        "bot 'main': reconnecting (Telegram refused the token (Unauthorized); check "
        "platforms.telegram.bots.main.token or the variable named by token_env)"
    )
    assert OTHER_TOKEN not in problem
    fake.add_bot(OTHER_TOKEN)
    fake.push(OTHER_TOKEN, message(private_chat(ALICE), ALICE, "now"))  # the next poll is answered at once
    poll_until(lambda: telegram.adapter.connection_problem() is None, what="the accepted token to clear the problem")


def test_webhook_bots_hold_no_connection_to_report(fake: TelegramFake, start: Start) -> None:
    telegram = start(make_config(fake, {"hook": TelegramBot(token=TOKEN, mode="webhook", secret_token=SECRET)}))
    assert telegram.adapter.connection_problem() is None


# -- configuration and banner ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "path", "problem"),
    [
        ({"base_url": "ftp://x"}, "platforms.telegram.base_url", "http(s) URL"),
        ({"port": 70000}, "platforms.telegram.port", "not a TCP port"),
        ({"poll_timeout_s": 90}, "platforms.telegram.poll_timeout_s", "1..50"),
        ({"chat_messages_per_second": 0}, "platforms.telegram.chat_messages_per_second", "positive rate"),
        ({"poll_retry_s": 5, "poll_retry_max_s": 1}, "platforms.telegram.poll_retry_max_s", "not be smaller"),
        ({"bots": {"a b": {"token": TOKEN}}}, "platforms.telegram.bots.a b", "1 to 64 letters"),
        ({"bots": {"b": {}}}, "platforms.telegram.bots.b.token", "is required"),
        ({"bots": {"b": {"token": TOKEN, "token_env": "T"}}}, "platforms.telegram.bots.b.token_env", "not both"),
        ({"bots": {"b": {"token": "nope"}}}, "platforms.telegram.bots.b.token", "@BotFather"),
        ({"bots": {"b": {"token": "1:a/b"}}}, "platforms.telegram.bots.b.token", "@BotFather"),
        ({"bots": {"b": {"token_env": "9X"}}}, "platforms.telegram.bots.b.token_env", "environment variable name"),
        ({"bots": {"b": {"token": TOKEN, "mode": "push"}}}, "platforms.telegram.bots.b.mode", "polling, webhook"),
        ({"bots": {"b": {"token": TOKEN, "mode": "webhook"}}}, "platforms.telegram.bots.b.secret_token", "required"),
        (
            {"bots": {"b": {"token": TOKEN, "mode": "webhook", "secret_token": "has space"}}},
            "platforms.telegram.bots.b.secret_token",
            "1 to 256 letters",
        ),
        (
            {"bots": {"b": {"token": TOKEN, "webhook_url": "https://x/y"}}},
            "platforms.telegram.bots.b.webhook_url",
            "only used with mode: webhook",
        ),
        (
            {"bots": {"b": {"token": TOKEN, "mode": "webhook", "secret_token": "s", "webhook_url": "x"}}},
            "platforms.telegram.bots.b.webhook_url",
            "public https:// URL",
        ),
    ],
)
def test_a_bad_section_is_a_config_error_naming_its_field(section: dict[str, Any], path: str, problem: str) -> None:
    with pytest.raises(ConfigError) as error:
        msgspec.convert(section, TelegramConfig)  # as the daemon loads config.yaml
    assert error.value.path == path
    assert problem in str(error.value)


def test_unknown_fields_are_refused_and_the_section_round_trips_through_json() -> None:
    with pytest.raises(msgspec.ValidationError, match="tokne"):
        msgspec.convert({"bots": {"b": {"tokne": TOKEN}}}, TelegramConfig)
    config = TelegramConfig(bots={"b": TelegramBot(token=TOKEN)}, chat_burst=2)
    assert msgspec.json.decode(msgspec.json.encode(config), type=registry.config_type("telegram")) == config


def test_tokens_and_secrets_from_the_environment_are_read_when_the_adapter_is_built() -> None:
    bot = TelegramBot(token_env="TG_TOKEN", mode="webhook", secret_token_env="TG_SECRET")
    config = TelegramConfig(bots={"b": bot})
    adapter = registry.build("telegram", config, {"TG_TOKEN": TOKEN, "TG_SECRET": SECRET})
    assert "token from $TG_TOKEN" in adapter.describe()[0]
    cases: list[tuple[dict[str, str], str, str]] = [
        ({"TG_SECRET": SECRET}, "platforms.telegram.bots.b.token_env", "TG_TOKEN is not set"),
        ({"TG_TOKEN": "x", "TG_SECRET": SECRET}, "platforms.telegram.bots.b.token_env", "the value of TG_TOKEN"),
        ({"TG_TOKEN": TOKEN}, "platforms.telegram.bots.b.secret_token_env", "TG_SECRET is not set"),
        ({"TG_TOKEN": TOKEN, "TG_SECRET": "a b"}, "platforms.telegram.bots.b.secret_token_env", "value of TG_SECRET"),
    ]
    for environ, path, problem in cases:
        with pytest.raises(ConfigError, match=problem) as error:
            TelegramAdapter(config, environ=environ)
        assert error.value.path == path


def test_the_banner_says_how_each_bot_receives_and_replies(fake: TelegramFake, start: Start) -> None:
    empty: Adapter = TelegramAdapter(TelegramConfig(), environ={})
    assert empty.describe() == [
        "Telegram: no bots; add one under platforms.telegram.bots in config.yaml "
        "(token_env: TELEGRAM_BOT_TOKEN holding the token from @BotFather)"
    ]
    fake.add_bot(OTHER_TOKEN)
    telegram = start(webhook_config(fake))
    hook, poller = telegram.adapter.describe()
    assert hook == (
        f"Telegram bot 'hook' (token in config.yaml): webhook POST {telegram.adapter.url}/telegram/hook "
        f"(checks {SECRET_HEADER}), registered as https://bots.example.com/telegram/hook; replies by sendMessage "
        "in parts of 4096 UTF-16 units; photos and documents are saved as attachments, other media arrive as "
        "stand-ins like [voice message]"
    )
    assert poller.startswith(f"Telegram bot 'poller' (token in config.yaml): long-polls {fake.base_url} getUpdates")
    assert TOKEN not in hook + poller
    assert telegram.adapter.capabilities.threads
    assert telegram.adapter.capabilities.max_message_chars == 4096


def test_save_comes_back_as_a_markdown_document_uploaded_with_send_document(fake: TelegramFake, start: Start) -> None:
    start()
    fake.push(TOKEN, message(private_chat(ALICE), ALICE, "hello", message_id=51))
    wait_sent(fake, 1)
    fake.push(TOKEN, message(private_chat(ALICE), ALICE, "/save", message_id=52))
    (upload,) = wait_calls(fake, "senddocument", 1)
    name, mime_type, data = upload.params["document"]
    assert name.endswith(".md")
    assert mime_type.startswith("text/markdown")
    markdown = data.decode("utf-8")
    assert markdown.index("hello") < markdown.index("echo: hello")
    assert upload.params["chat_id"] == "5001"
    assert upload.params["caption"].endswith("the conversation as Markdown (2 messages, 1 part(s)).")
    assert len(fake.sent(TOKEN)) == 1  # the document instead of the text, not beside it


def test_save_sends_the_markdown_as_text_when_telegram_refuses_the_document(
    fake: TelegramFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    start()
    fake.push(TOKEN, message(private_chat(ALICE), ALICE, "hello", message_id=61))
    wait_sent(fake, 1)
    fake.fail("sendDocument", 400, "Bad Request: not enough rights to send documents to the chat")
    with caplog.at_level(logging.WARNING, logger="platforms.support.documents"):
        fake.push(TOKEN, message(private_chat(ALICE), ALICE, "/save", message_id=62))
        sent = wait_sent(fake, 2)
    assert [c.status for c in fake.calls("sendDocument")] == [400]  # tried once, not retried as a file
    markdown = sent[1]["text"]
    assert markdown.index("hello") < markdown.index("echo: hello")
    assert "not enough rights to send documents" in caplog.text
    assert "the reply's text is sent instead" in caplog.text
