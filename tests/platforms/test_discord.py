"""The Discord platform against a real gateway and a local fake of Discord (tests/platforms/discord_fake.py).

Users post through the fake, which dispatches ``MESSAGE_CREATE`` over the adapter's real websocket; replies are
read back from what the fake's REST API created. Connection trouble (drops, op 7, op 9, missing heartbeat ACKs,
restarts, kills) is provoked on the fake.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import random
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
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
from hermes_actors.store.attachments import AttachmentRecord
from hermes_actors.testing import FakeClock, FakePlatform, poll_until
from platforms import registry
from platforms.base import Adapter, ConnectionReporter, SendError, ThreadCreator
from platforms.discord import (
    INTENTS,
    Buckets,
    ChannelCache,
    DiscordAdapter,
    DiscordBot,
    DiscordConfig,
    EventError,
    Message,
    ResumeState,
    decode_data,
    decode_frame,
    inbound_from_message,
)
from platforms.discord.events import Channel, MessageAttachment, Skipped
from platforms.discord.files import mime_type_of, source_url_of
from platforms.discord.rest import MESSAGES_ROUTE
from platforms.support.fetch_policy import FetchSettings
from tests.platforms.crash import AdapterWorker, wait_for_inbox
from tests.platforms.discord_fake import CDN_PREFIX, MESSAGES_BUCKET, DiscordFake, user
from tests.platforms.fetch_canary import CANARY_BODY, Canary, running_canary, use_hosts
from tests.platforms.support import RunningAdapter, StartGateway, wait_problem

TOKEN = "MTAxMDEwMTAxMDEwMTAx.GaBcDe.first_bot_token_abcdefghijklmnopqrstu"
OTHER_TOKEN = "MjAyMDIwMjAyMDIwMjAy.GfGhIj.second_bot_token_abcdefghijklmnopqr"
BOT_ID, OTHER_BOT_ID = "900", "901"
GUILD, GENERAL, THREAD, FORUM = "1001", "2001", "2002", "2003"
ALICE = user("501", "alice", global_name="Alice")
BOB = user("502", "bob")
MESSAGES = "POST /channels/{channel_id}/messages"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(100))
FAKE_FILES = FetchSettings(hosts=["127.0.0.1"], allow_private=["127.0.0.1"])  # the fake CDN is on loopback
REFUSED_INSIDE = "its address points into the bot's own network, which the bot does not fetch from"


# -- harness -----------------------------------------------------------------------------------------------------


def setup_guild(fake: DiscordFake, *tokens: str) -> None:
    fake.add_guild(GUILD, "Guild", bots=tokens)
    fake.add_channel(GENERAL, GUILD, "general")
    fake.add_channel(THREAD, GUILD, "design talk", type=11, parent_id=GENERAL)
    fake.add_channel(FORUM, GUILD, "help", type=15)


MakeFake = Callable[..., DiscordFake]


@pytest.fixture
def make_fake() -> Iterator[MakeFake]:
    """Start fakes of Discord with the bot ``TOKEN`` in the guild; they stop after the adapters (see ``start``)."""
    with ExitStack() as stack:

        def make(*, message_content: bool = True, **options: Any) -> DiscordFake:
            server = stack.enter_context(DiscordFake(**options))
            server.add_bot(TOKEN, BOT_ID, message_content=message_content)
            setup_guild(server, TOKEN)
            return server

        yield make


@pytest.fixture
def fake(make_fake: MakeFake) -> DiscordFake:
    return make_fake()


def make_config(fake: DiscordFake, bots: dict[str, DiscordBot] | None = None, **options: Any) -> DiscordConfig:
    """Fast settings against ``fake``: quick reconnects and re-identifies."""
    settings: dict[str, Any] = {
        "api_base_url": fake.api_base,
        "bots": bots if bots is not None else {"main": DiscordBot(token=TOKEN)},
        "request_timeout_s": 5.0,
        "reconnect_min_s": 0.05,
        "reconnect_max_s": 0.2,
        "identify_wait_min_s": 0.05,
        "identify_wait_max_s": 0.1,
        "hello_timeout_s": 5.0,
    }
    return DiscordConfig(**(settings | options))


class HalfRandom(random.Random):
    """Jitter fixed at one half: the first heartbeat comes half an interval after Hello."""

    def random(self) -> float:
        return 0.5


@dataclass(frozen=True)
class Running(RunningAdapter[DiscordAdapter]):
    def inbox(self) -> list[str]:
        return [message_id for (message_id,) in self.inbox_rows("platform_message_id")]

    def attachments(self, key: str) -> list[AttachmentRecord]:
        session = self.session_of(key)
        assert session is not None, f"no session for {key}"
        with self.gateway.read() as store:
            return store.attachments.for_session(session)

    def stored_session(self, bot: str = "main") -> ResumeState | None:
        with self.gateway.read() as store:
            cursor = store.kv.get_cursor("discord", bot)
        return None if cursor is None else msgspec.json.decode(cursor, type=ResumeState)


Start = Callable[..., Running]


@pytest.fixture
def start(make_fake: MakeFake, fake: DiscordFake, start_gateway: StartGateway) -> Start:
    """Start a gateway on ``tmp_path / "state.db"`` and the adapter; both stop at the end (or when told to).

    ``make_fake`` is set up first, so every fake outlives the adapters connected to it.
    """

    def run(
        config: DiscordConfig | None = None,
        *,
        clock: Callable[[], float] = time.time,
        gateway_for: Callable[[Inbox], Inbox] | None = None,
        extra_senders: tuple[FakePlatform, ...] = (),
        rng: random.Random | None = None,
        media: MediaConfig | None = None,
    ) -> Running:
        adapter = DiscordAdapter(config or make_config(fake), environ={}, clock=clock, monotonic=clock, rng=rng)
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


def wait_texts(fake: DiscordFake, count: int, token: str = TOKEN) -> list[str]:
    """Wait until the bot created ``count`` messages; return their texts."""
    fake.wait_for(lambda: len(fake.sent(token)) >= count)
    return fake.texts(token)


def key(*parts: str, bot: str = "main") -> str:
    return ":".join([f"agent:main:discord.{GUILD}~{bot}", "group", *parts])


def cached(tmp_path: Path, data: bytes, suffix: str) -> Path:
    """Where the media store keeps ``data``: named by its sha256 under ``media/``."""
    digest = hashlib.sha256(data).hexdigest()
    return tmp_path / "media" / digest[:2] / f"{digest}{suffix}"


# -- chats, threads and accounts ---------------------------------------------------------------------------------


def test_a_dm_is_answered_in_its_channel_and_keyed_by_it(fake: DiscordFake, start: Start) -> None:
    discord = start()
    fake.wait_ready(TOKEN)
    dm = fake.dm_channel(TOKEN, ALICE)
    message_id = fake.post(dm, ALICE, "hello")
    (reply,) = fake.wait_for(lambda: fake.sent(TOKEN))
    assert reply.channel_id == dm
    assert reply.body["content"] == "echo: hello"
    assert "message_reference" not in reply.body  # no quote needed in a DM
    assert reply.body["allowed_mentions"] == {"parse": []}
    dm_key = f"agent:main:discord~main:dm:{dm}"
    assert discord.transcript(dm_key) == [("user", "hello"), ("assistant", "echo: hello")]
    assert discord.inbox() == [message_id]
    with discord.gateway.read() as store:
        (session,) = store.list_sessions()
    assert (session.source, session.chat_id, session.chat_type, session.user_name) == ("discord", dm, "dm", "Alice")


def test_guild_members_have_their_own_sessions_and_a_thread_is_one_shared_conversation(
    fake: DiscordFake, start: Start
) -> None:
    discord = start()
    fake.wait_ready(TOKEN)
    first = fake.post(GENERAL, ALICE, "alice in general")
    fake.post(GENERAL, BOB, "bob in general")
    fake.post(THREAD, ALICE, "alice in thread")
    fake.post(THREAD, BOB, "bob in thread")
    fake.wait_for(lambda: len(fake.sent(TOKEN)) >= 4)
    by_text = {s.body["content"]: s for s in fake.sent(TOKEN)}
    assert by_text["echo: alice in general"].channel_id == GENERAL
    assert by_text["echo: alice in general"].body["message_reference"] == {
        "message_id": first,
        "fail_if_not_exists": False,
    }
    assert by_text["echo: alice in thread"].channel_id == THREAD  # a thread is a channel of its own
    assert by_text["echo: bob in thread"].channel_id == THREAD
    assert discord.gateway.wait_idle()
    alice, bob, thread = key(GENERAL, "501"), key(GENERAL, "502"), key(GENERAL, THREAD)
    assert [m for _, m in discord.transcript(alice)] == ["alice in general", "echo: alice in general"]
    assert [m for role, m in discord.transcript(bob) if role == "user"] == ["bob in general"]
    assert [m for role, m in discord.transcript(thread) if role == "user"] == ["alice in thread", "bob in thread"]
    assert len({discord.session_of(k) for k in (alice, bob, thread)}) == 3
    with discord.gateway.read() as store:
        names = {s.chat_name for s in store.list_sessions()}
    assert names == {"#general", "design talk"}
    assert fake.calls("GET /channels") == []  # GUILD_CREATE told the adapter what each channel is


def test_channels_missing_from_guild_create_are_looked_up_once(make_fake: MakeFake, start: Start) -> None:
    bare = make_fake(guild_creates=False)
    discord = start(make_config(bare))
    bare.wait_ready(TOKEN)
    bare.post(THREAD, ALICE, "one")
    bare.post(THREAD, ALICE, "two")
    bare.post(GENERAL, ALICE, "three")
    wait_texts(bare, 3)
    assert discord.gateway.wait_idle()
    assert [c.path for c in bare.calls("GET /channels")] == [f"/channels/{THREAD}", f"/channels/{GENERAL}"]
    assert [m for r, m in discord.transcript(key(GENERAL, THREAD)) if r == "user"] == ["one", "two"]
    assert discord.session_of(key(GENERAL, "501")) is not None


def test_a_channel_that_cannot_be_looked_up_is_keyed_as_a_channel_with_a_warning(
    make_fake: MakeFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    bare = make_fake(guild_creates=False)
    bare.fail("GET /channels/{channel_id}", 403, {"message": "Missing Access", "code": 50001})
    discord = start(make_config(bare))
    bare.wait_ready(TOKEN)
    bare.post(THREAD, ALICE, "where am I")
    assert wait_texts(bare, 1) == ["echo: where am I"]
    assert discord.gateway.wait_idle()
    assert discord.session_of(key(THREAD, "501")) is not None
    assert f"cannot tell what channel {THREAD} is" in caplog.text


def test_two_bots_in_one_guild_never_share_a_session_and_ignore_each_other(fake: DiscordFake, start: Start) -> None:
    fake.add_bot(OTHER_TOKEN, OTHER_BOT_ID, "second")
    fake.add_guild(GUILD, "Guild", bots=[TOKEN, OTHER_TOKEN])
    bots = {"first": DiscordBot(token=TOKEN), "second": DiscordBot(token=OTHER_TOKEN)}
    discord = start(make_config(fake, bots))
    fake.wait_ready(TOKEN)
    fake.wait_ready(OTHER_TOKEN)
    message_id = fake.post(GENERAL, ALICE, "hello bots")
    assert wait_texts(fake, 1, TOKEN) == ["echo: hello bots"]
    assert wait_texts(fake, 1, OTHER_TOKEN) == ["echo: hello bots"]
    assert discord.gateway.wait_idle()
    first, second = key(GENERAL, "501", bot="first"), key(GENERAL, "501", bot="second")
    assert None not in (discord.session_of(first), discord.session_of(second))
    assert discord.session_of(first) != discord.session_of(second)
    assert discord.inbox() == [message_id, message_id]  # one row per bot
    fake.post(GENERAL, ALICE, "again")  # each bot saw the other's reply as a bot message: no loop of echoes
    wait_texts(fake, 2, TOKEN)
    wait_texts(fake, 2, OTHER_TOKEN)
    assert discord.gateway.wait_idle()
    assert len(fake.sent()) == 4


def test_bots_webhooks_and_system_messages_start_no_turn_and_attachments_keep_their_stand_ins(
    fake: DiscordFake, start: Start, tmp_path: Path
) -> None:
    discord = start(make_config(fake, fetch=FAKE_FILES))
    fake.wait_ready(TOKEN)
    fake.post(GENERAL, user("777", "otherbot", bot=True), "beep")
    fake.post(GENERAL, user("778", "hook"), "from a webhook", webhook_id="778")
    fake.post(GENERAL, ALICE, "", type=7)  # a member joined
    fake.post(GENERAL, ALICE, "", embeds=[{"title": "link preview"}])  # nothing to read
    attachment = fake.attachment(GENERAL, "plot.png", PNG)
    fake.post(GENERAL, ALICE, f"<@{BOT_ID}> what is this?", attachments=[attachment])
    fake.post(GENERAL, BOB, f"<@!{BOT_ID}>", sticker_items=[{"id": "5", "name": "wave", "format_type": 1}])
    fake.post(GENERAL, BOB, f"<@{BOT_ID}>")  # a bare mention still asks for an answer
    texts = wait_texts(fake, 3)
    assert discord.gateway.wait_idle()
    saved = cached(tmp_path, PNG, ".png")
    assert sorted(texts) == sorted(
        [
            "echo: what is this?\n[image: plot.png]\n"
            f"[attached image plot.png (image/png, 108 bytes), saved at {saved}]",
            "echo: [sticker: wave]",
            f"echo: <@{BOT_ID}>",
        ]
    )
    assert len(discord.inbox()) == 3


# -- attachments -------------------------------------------------------------------------------------------------


def test_attachments_are_downloaded_from_the_cdn_into_the_media_store_before_the_message_is_accepted(
    fake: DiscordFake, start: Start, tmp_path: Path
) -> None:
    discord = start(make_config(fake, fetch=FAKE_FILES))
    fake.wait_ready(TOKEN)
    notes = b"line one\nline two\n"
    image = fake.attachment(GENERAL, "plot.png", PNG)
    document = fake.attachment(GENERAL, "notes.txt", notes, content_type=None)  # a type Discord does not know
    fake.post(GENERAL, ALICE, "look", attachments=[image, document])
    (reply,) = wait_texts(fake, 1)
    assert discord.gateway.wait_idle()
    png, txt = cached(tmp_path, PNG, ".png"), cached(tmp_path, notes, ".txt")
    assert png.read_bytes() == PNG
    assert txt.read_bytes() == notes
    assert reply == (
        "echo: look\n[image: plot.png]\n[file: notes.txt]\n"
        f"[attached image plot.png (image/png, 108 bytes), saved at {png}]\n"
        f"[attached document notes.txt (text/plain, 18 bytes), saved at {txt}]\nIts text:\nline one\nline two\n"
    )
    # Each file was fetched once, at its signed URL, and nothing of the bot's credentials went to the CDN.
    downloads = fake.downloads()
    assert [d.path for d in downloads] == [
        f"{CDN_PREFIX}/{GENERAL}/{image['id']}/plot.png",
        f"{CDN_PREFIX}/{GENERAL}/{document['id']}/notes.txt",
    ]
    assert all(d.status == 200 and {"ex", "is", "hm"} <= d.query.keys() for d in downloads)
    assert all("authorization" not in d.headers and TOKEN not in repr(d.headers) for d in downloads)
    rows = discord.attachments(key(GENERAL, "501"))
    assert [(r.kind, r.mime_type, r.name, r.size, r.sha256, r.error) for r in rows] == [
        ("image", "image/png", "plot.png", 108, hashlib.sha256(PNG).hexdigest(), None),
        ("document", "text/plain", "notes.txt", 18, hashlib.sha256(notes).hexdigest(), None),
    ]
    # The source URL is kept without its expiring signature.
    assert [r.source_url for r in rows] == [image["url"].partition("?")[0], document["url"].partition("?")[0]]
    assert all(r.source_url is not None and "?" not in r.source_url for r in rows)


def test_an_attachment_over_the_limit_is_refused_before_its_download_and_the_text_still_runs(
    fake: DiscordFake, start: Start, tmp_path: Path
) -> None:
    discord = start(media=MediaConfig(max_bytes=1024))
    fake.wait_ready(TOKEN)
    big = fake.attachment(GENERAL, "big.png", bytes(4096))
    fake.post(GENERAL, ALICE, "too big?", attachments=[big])
    (reply,) = wait_texts(fake, 1)
    assert reply == (
        "I could not read big.png: it is 4 KB, over the 1 KB limit.\n\n"
        "echo: too big?\n[image: big.png]\n[image big.png was not read: it is 4 KB, over the 1 KB limit]"
    )
    assert fake.downloads() == []  # the size in the attachment object was enough
    assert not (tmp_path / "media").exists()
    assert discord.gateway.wait_idle()
    (row,) = discord.attachments(key(GENERAL, "501"))
    assert (row.kind, row.size, row.path, row.error) == ("image", 4096, None, "it is 4 KB, over the 1 KB limit")
    assert row.source_url == big["url"].partition("?")[0]


def test_a_file_larger_than_its_attachment_object_says_is_cut_off_at_the_limit(
    fake: DiscordFake, start: Start, tmp_path: Path
) -> None:
    start(make_config(fake, fetch=FAKE_FILES), media=MediaConfig(max_bytes=1024))
    fake.wait_ready(TOKEN)
    liar = fake.attachment(GENERAL, "small.png", bytes(4096), size=100)
    fake.post(GENERAL, ALICE, "small, surely", attachments=[liar])
    (reply,) = wait_texts(fake, 1)
    assert reply.startswith("I could not read small.png: it is 4 KB, over the 1 KB limit.\n\n")
    assert [d.status for d in fake.downloads()] == [200]  # refused on the answer's Content-Length
    assert not (tmp_path / "media").exists()


def test_a_failed_download_becomes_a_refused_attachment_that_says_why(
    fake: DiscordFake, start: Start, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    discord = start(make_config(fake, fetch=FAKE_FILES))
    fake.wait_ready(TOKEN)
    broken = fake.attachment(GENERAL, "broken.png", PNG)
    fake.fail_download(broken, 503)
    expired = fake.attachment(GENERAL, "old.png", PNG, expires_in_s=-60)
    nowhere = {"id": "7", "filename": "lost.pdf", "size": 10, "content_type": "application/pdf"}
    fake.post(GENERAL, ALICE, "three files", attachments=[broken, expired, nowhere])
    (reply,) = wait_texts(fake, 1)
    problems = [
        "its download failed (HTTP 503)",
        "Discord's CDN no longer serves it (HTTP 404: the link expired or the file was deleted); send it again",
        "Discord gave no download address for it",
    ]
    names = ["broken.png", "old.png", "lost.pdf"]
    assert reply == (
        " ".join(f"I could not read {name}: {problem}." for name, problem in zip(names, problems, strict=True))
        + "\n\necho: three files\n[image: broken.png]\n[image: old.png]\n[file: lost.pdf]\n"
        + "\n".join(
            f"[{kind} {name} was not read: {problem}]"
            for kind, name, problem in zip(["image", "image", "document"], names, problems, strict=True)
        )
    )
    assert [d.status for d in fake.downloads()] == [503, 404]
    assert not (tmp_path / "media").exists()
    assert discord.gateway.wait_idle()
    assert [r.error for r in discord.attachments(key(GENERAL, "501"))] == problems
    assert "hm=" not in caplog.text  # the signature stays out of the logs
    assert f"{CDN_PREFIX}/{GENERAL}/{broken['id']}/broken.png" in caplog.text


@pytest.mark.slow
def test_a_download_slower_than_the_heartbeat_interval_is_not_taken_for_a_zombie_connection(
    make_fake: MakeFake, start: Start, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    quick = make_fake(heartbeat_interval_ms=100)
    discord = start(make_config(quick, fetch=FAKE_FILES))
    quick.wait_ready(TOKEN)
    slow = quick.attachment(GENERAL, "slow.png", PNG, delay_s=0.6)
    quick.post(GENERAL, ALICE, "take your time", attachments=[slow])
    (reply,) = wait_texts(quick, 1)
    assert reply.startswith("echo: take your time\n[image: slow.png]\n[attached image slow.png")
    assert cached(tmp_path, PNG, ".png").read_bytes() == PNG
    assert len(quick.connections()) == 1
    assert quick.resumes(TOKEN) == []
    assert "zombie" not in caplog.text
    assert discord.gateway.wait_idle()


@pytest.fixture
def canary() -> Iterator[Canary]:
    with running_canary() as server:
        yield server


def named(filename: str, url: str) -> dict[str, Any]:
    """An attachment object that names ``url`` (what a forged or hostile event would carry)."""
    return {"id": "1000", "filename": filename, "size": 10, "content_type": "text/plain", "url": url}


def test_attachment_urls_inside_the_network_are_not_fetched_and_the_text_still_runs(
    fake: DiscordFake, start: Start, canary: Canary, caplog: pytest.LogCaptureFixture
) -> None:
    start()
    fake.wait_ready(TOKEN)
    attachments = [
        named("metrics.txt", canary.url("/metrics")),
        named("meta.txt", "http://169.254.169.254/latest/meta-data/"),
        named("admin.txt", canary.url("/admin", host="localhost")),
    ]
    with caplog.at_level(logging.WARNING):
        fake.post(GENERAL, ALICE, f"<@{BOT_ID}> quote these", attachments=attachments)
        (reply,) = wait_texts(fake, 1)
    assert reply.split("\n\n")[0] == (
        f"I could not read metrics.txt: {REFUSED_INSIDE}. I could not read meta.txt: {REFUSED_INSIDE}. "
        "I could not read admin.txt: it is offered from localhost, which is not a Discord file host."
    )
    assert canary.hits == []
    assert caplog.text.count("refused by the fetch policy") == 3


def test_a_cdn_host_that_resolves_or_redirects_into_the_network_is_refused(
    fake: DiscordFake, start: Start, canary: Canary, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosts = use_hosts(monkeypatch)
    cdn, media = "cdn.discordapp.com", "media.discordapp.net"
    hosts[cdn] = hosts[media] = "127.0.0.1"
    start(make_config(fake, fetch=FetchSettings(allow_private=[cdn])))
    fake.wait_ready(TOKEN)
    attachments = [
        named("a.txt", canary.url("/a", host=media)),  # DNS rebinding
        named("b.txt", canary.redirect(canary.url("/b"), host=cdn)),
        named("c.txt", canary.redirect(canary.url("/c", host=media), host=cdn)),
        named("d.txt", canary.url("/d.txt", host=cdn)),  # allowed: it still works
    ]
    fake.post(GENERAL, ALICE, f"<@{BOT_ID}> read", attachments=attachments)
    (reply,) = wait_texts(fake, 1)
    refused = (f"I could not read {name}: {REFUSED_INSIDE}." for name in ("a.txt", "b.txt", "c.txt"))
    assert reply.split("\n\n")[0] == " ".join(refused)
    assert CANARY_BODY.decode().strip() in reply
    assert canary.secret_hits() == ["/d.txt"]
    assert len(canary.redirect_hits()) == 2


@pytest.mark.parametrize(
    ("fields", "mime_type"),
    [
        ({"filename": "a.png", "content_type": "image/png"}, "image/png"),
        ({"filename": "a.txt", "content_type": "text/plain; charset=utf-8"}, "text/plain"),
        ({"filename": "voice-message.ogg", "content_type": "audio/ogg"}, "audio/ogg"),
        ({"filename": "report.pdf"}, "application/pdf"),
        ({"filename": "no-suffix"}, None),
    ],
)
def test_an_attachments_type_is_discords_content_type_else_guessed_from_its_name(
    fields: dict[str, Any], mime_type: str | None
) -> None:
    assert mime_type_of(msgspec.convert(fields, MessageAttachment)) == mime_type


@pytest.mark.parametrize(
    ("url", "kept"),
    [
        (
            "https://cdn.discordapp.com/attachments/1/2/plot.png?ex=66&is=65&hm=abc&",
            "https://cdn.discordapp.com/attachments/1/2/plot.png",
        ),
        ("http://127.0.0.1:8080/attachments/1/2/a%20b.png#frag", "http://127.0.0.1:8080/attachments/1/2/a%20b.png"),
        ("ftp://cdn.discordapp.com/x.png", None),
        ("x", None),
        ("http://[", None),
        ("", None),
        (None, None),
    ],
)
def test_the_source_url_keeps_an_http_address_without_its_signature(url: str | None, kept: str | None) -> None:
    assert source_url_of(url) == kept


# -- the websocket: heartbeats, resume and reconnects ------------------------------------------------------------


@pytest.mark.slow
def test_identify_sends_the_token_and_intents_and_heartbeats_carry_the_last_sequence(
    make_fake: MakeFake, start: Start
) -> None:
    quick = make_fake(heartbeat_interval_ms=400)
    start(make_config(quick), rng=HalfRandom())
    quick.wait_ready(TOKEN)
    (identify,) = quick.identifies(TOKEN)
    assert identify["token"] == TOKEN
    assert identify["intents"] == INTENTS == (1 << 0) | (1 << 9) | (1 << 12) | (1 << 15)
    assert set(identify["properties"]) == {"os", "browser", "device"}
    quick.post(GENERAL, ALICE, "hi")
    wait_texts(quick, 1)
    beats = quick.wait_for(lambda: quick.heartbeats(TOKEN)[2:] and quick.heartbeats(TOKEN))
    assert [quick.connections()[0][:2]] == [("/gateway", {"v": "10", "encoding": "json"})]
    gaps = [b[1] - a[1] for a, b in itertools.pairwise(beats)]
    assert min(gaps) >= 0.35
    last = quick.heartbeats(TOKEN)[-1][0]
    assert isinstance(last, int)
    assert last >= 3  # READY, GUILD_CREATE, the message (and our echo)
    count = len(quick.heartbeats(TOKEN))
    quick.request_heartbeat(TOKEN)  # op 1 from the server: answered at once, not at the next interval
    began = time.monotonic()
    quick.wait_for(lambda: len(quick.heartbeats(TOKEN)) > count)
    assert time.monotonic() - began < 0.3


def test_a_dropped_connection_is_resumed_and_messages_sent_meanwhile_arrive_once(
    fake: DiscordFake, start: Start
) -> None:
    discord = start()
    fake.wait_ready(TOKEN)
    fake.post(GENERAL, ALICE, "before")
    wait_texts(fake, 1)
    assert discord.gateway.wait_idle()
    session = fake.session_id(TOKEN)
    fake.drop(TOKEN)  # no close frame: the adapter only sees the socket end
    fake.post(GENERAL, ALICE, "during one")
    fake.post(THREAD, BOB, "during two")
    texts = wait_texts(fake, 3)
    assert discord.gateway.wait_idle()
    assert sorted(texts) == ["echo: before", "echo: during one", "echo: during two"]
    (resume,) = fake.resumes(TOKEN)
    stored = discord.stored_session()
    assert stored is not None
    assert (resume["session_id"], resume["token"]) == (session, TOKEN)
    assert resume["seq"] >= 3  # at least READY, GUILD_CREATE and the first message were processed
    assert len(fake.identifies(TOKEN)) == 1  # resumed, not a new session
    assert [path for path, _, _ in fake.connections()] == ["/gateway", "/resume-gateway"]
    assert stored.session_id == session
    assert stored.resume_gateway_url == fake.resume_url
    assert len(discord.inbox()) == 3
    assert discord.adapter.status() == {"main": "connected"}


def test_events_replayed_again_on_resume_are_deduplicated_by_message_id(
    make_fake: MakeFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="platforms.discord")
    overlapping = make_fake(resume_overlap=6)  # replays events the adapter already processed
    discord = start(make_config(overlapping))
    overlapping.wait_ready(TOKEN)
    overlapping.post(GENERAL, ALICE, "one")
    overlapping.post(GENERAL, BOB, "two")
    wait_texts(overlapping, 2)
    assert discord.gateway.wait_idle()
    overlapping.drop(TOKEN)
    overlapping.post(GENERAL, ALICE, "three")
    wait_texts(overlapping, 3)
    overlapping.wait_ready(TOKEN, 2)
    assert discord.gateway.wait_idle()
    assert sorted(overlapping.texts(TOKEN)) == ["echo: one", "echo: three", "echo: two"]
    assert len(discord.inbox()) == 3
    assert "was already stored (a replayed event)" in caplog.text


def test_op7_reconnect_and_a_resumable_op9_resume_the_session(fake: DiscordFake, start: Start) -> None:
    discord = start()
    fake.wait_ready(TOKEN)
    session = fake.session_id(TOKEN)
    fake.reconnect(TOKEN)
    fake.wait_ready(TOKEN, 2)
    fake.post(GENERAL, ALICE, "after op 7")
    wait_texts(fake, 1)
    fake.invalidate(TOKEN, resumable=True)
    fake.wait_ready(TOKEN, 3)
    fake.post(GENERAL, ALICE, "after op 9")
    assert sorted(wait_texts(fake, 2)) == ["echo: after op 7", "echo: after op 9"]
    assert [r["session_id"] for r in fake.resumes(TOKEN)] == [session, session]
    assert len(fake.identifies(TOKEN)) == 1
    assert [code for _, _, code in fake.connections()[:2]] == [4000, 4000]  # closed resumably, never with 1000
    assert discord.gateway.wait_idle()


def test_an_invalidated_session_starts_anew_after_a_wait(
    fake: DiscordFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="platforms.discord")
    discord = start()
    fake.wait_ready(TOKEN)
    old = fake.session_id(TOKEN)
    fake.invalidate(TOKEN, resumable=False)
    fake.post(GENERAL, ALICE, "into the void")  # Discord drops events for a dead session
    fake.wait_ready(TOKEN, 2)
    assert fake.lost == [(TOKEN, "MESSAGE_CREATE")]
    assert len(fake.identifies(TOKEN)) == 2
    assert fake.resumes(TOKEN) == []
    assert fake.session_id(TOKEN) != old
    fake.post(GENERAL, ALICE, "new session")
    assert wait_texts(fake, 1) == ["echo: new session"]
    assert discord.gateway.wait_idle()
    stored = discord.stored_session()
    assert stored is not None
    assert stored.session_id == fake.session_id(TOKEN)
    assert "Discord invalidated the session (op 9); identifying in 0." in caplog.text


def test_a_session_discord_forgot_is_refused_on_resume_and_a_new_one_starts(fake: DiscordFake, start: Start) -> None:
    start()
    fake.wait_ready(TOKEN)
    fake.close(TOKEN, 4009, "Session timed out.")
    fake.wait_ready(TOKEN, 2)
    assert fake.resumes(TOKEN) == []  # 4009: a new session, not a resume
    assert len(fake.identifies(TOKEN)) == 2
    fake.close(TOKEN, 4000, "Unknown error.")
    fake.wait_ready(TOKEN, 3)
    assert len(fake.resumes(TOKEN)) == 1


def test_a_zombie_connection_without_heartbeat_acks_is_closed_and_resumed(
    make_fake: MakeFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    quick = make_fake(heartbeat_interval_ms=150)
    discord = start(make_config(quick))
    quick.wait_ready(TOKEN)
    quick.stop_acking(TOKEN)
    quick.wait_ready(TOKEN, 2)
    quick.post(GENERAL, ALICE, "still here")
    assert wait_texts(quick, 1) == ["echo: still here"]
    assert len(quick.resumes(TOKEN)) == 1
    assert quick.connections()[0][2] == 4000
    assert discord.gateway.wait_idle()
    assert "no heartbeat ACK within 0." in caplog.text
    assert "s, so the connection is a zombie; reconnecting" in caplog.text


def test_a_restart_resumes_the_stored_session_and_misses_nothing(fake: DiscordFake, start: Start) -> None:
    discord = start()
    fake.wait_ready(TOKEN)
    fake.post(GENERAL, ALICE, "first run")
    wait_texts(fake, 1)
    assert discord.gateway.wait_idle()
    session = fake.session_id(TOKEN)
    discord.stop()
    fake.wait_for(lambda: fake.connections()[-1][2] is not None)
    assert fake.connections()[-1][2] == 4000  # the session outlives the process
    fake.post(GENERAL, BOB, "while it was down")
    discord = start()
    fake.wait_ready(TOKEN, 2)
    assert wait_texts(fake, 2) == ["echo: first run", "echo: while it was down"]
    assert discord.gateway.wait_idle()
    assert [r["session_id"] for r in fake.resumes(TOKEN)] == [session]
    assert len(fake.identifies(TOKEN)) == 1


class FailingFirstMessage:
    """An inbox whose first commit of a message fails, as if the disk were full for a moment."""

    def __init__(self, inbox: Inbox) -> None:
        self._inbox = inbox
        self.failed = 0

    def accept_many(self, batch: list[InboundMessage], **options: Any) -> Any:
        if batch and not self.failed:
            self.failed += 1
            raise StoreError("disk full (simulated)")
        return self._inbox.accept_many(batch, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inbox, name)


def test_a_message_that_could_not_be_stored_is_replayed_by_a_resume(
    fake: DiscordFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    discord = start(gateway_for=lambda inbox: cast(Inbox, FailingFirstMessage(inbox)))
    fake.wait_ready(TOKEN)
    message_id = fake.post(GENERAL, ALICE, "survive")
    assert wait_texts(fake, 1) == ["echo: survive"]
    assert discord.gateway.wait_idle()
    assert len(fake.resumes(TOKEN)) == 1
    assert discord.inbox() == [message_id]
    assert f"discord bot 'main': could not store message {message_id}" in caplog.text


@pytest.mark.slow
def test_a_kill_between_accept_and_reply_loses_nothing_and_replies_once(tmp_path: Path, fake: DiscordFake) -> None:
    db = tmp_path / "state.db"
    config = make_config(fake)
    worker = AdapterWorker.start(db, "discord", config, agent="hold")
    try:
        fake.wait_ready(TOKEN)
        first = fake.post(GENERAL, ALICE, "survive")
        assert wait_for_inbox(db, 1) == [(first, "pending")]
        session = fake.session_id(TOKEN)
    finally:
        worker.kill()
    fake.wait_for(lambda: fake.connections()[-1][2] is not None)
    second = fake.post(GENERAL, BOB, "sent while it was dead")
    assert fake.sent(TOKEN) == []
    worker = AdapterWorker.start(db, "discord", config, agent="echo")
    try:
        fake.wait_ready(TOKEN, 2)
        texts = wait_texts(fake, 2)
        fake.post(GENERAL, ALICE, "and after")
        texts = wait_texts(fake, 3)
    finally:
        worker.stop()
    assert sorted(texts[:2]) == ["echo: sent while it was dead", "echo: survive"]
    assert texts[2] == "echo: and after"
    assert [r["session_id"] for r in fake.resumes(TOKEN)] == [session]  # the stored session, resumed
    assert len(fake.identifies(TOKEN)) == 1
    assert {first, second} <= {row[0] for row in wait_for_inbox(db, 3)}


def test_a_gateway_that_refuses_reconnects_is_a_connection_problem_naming_the_bot_until_it_resumes(
    fake: DiscordFake, start: Start
) -> None:
    discord = start()
    assert isinstance(discord.adapter, ConnectionReporter)
    fake.wait_ready(TOKEN)
    assert discord.adapter.connection_problem() is None
    fake.refusing = True
    fake.drop(TOKEN)
    problem = wait_problem(discord.adapter, "503")
    assert problem.startswith("bot 'main': reconnecting (the connection failed (503")
    fake.refusing = False
    poll_until(lambda: discord.adapter.connection_problem() is None, what="the resumed session to clear the problem")
    assert len(fake.resumes(TOKEN)) == 1


# -- handshake failures ------------------------------------------------------------------------------------------


def test_a_refused_token_stops_the_bot_with_the_fix_in_the_log_and_stores_nothing(
    fake: DiscordFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    stranger = "MzAzMDMwMzAzMDMwMzAz.GkLmNo.unknown_token_abcdefghijklmnopqrstuv"
    direct = make_config(fake, {"main": DiscordBot(token=stranger)}, gateway_url=fake.gateway_url)
    discord = start(direct)
    fake.wait_for(lambda: discord.adapter.status()["main"].startswith("stopped"))
    assert discord.adapter.connection_problem() == (
        "bot 'main': stopped: Discord closed the connection (4004 'Authentication failed.'): Discord refused the "
        "token; copy the bot token again from the Developer Portal (Bot page)"
    )
    assert [code for _, _, code in fake.connections()] == [4004]  # no reconnect loop
    assert fake.calls("GET /gateway/bot") == []  # the configured gateway_url is used as it is
    assert "Discord refused the token; copy the bot token again from the Developer Portal" in caplog.text
    assert stranger not in caplog.text
    discord.stop()
    via_rest = start(make_config(fake, {"main": DiscordBot(token=stranger)}))
    fake.wait_for(lambda: via_rest.adapter.status()["main"].startswith("stopped"))
    assert fake.calls("GET /gateway/bot")[0].status == 401
    assert len(fake.connections()) == 1
    assert via_rest.inbox() == []
    assert via_rest.stored_session() is None


def test_an_exhausted_session_start_limit_is_waited_out(
    fake: DiscordFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    fake.session_starts_left = 0  # reset_after is 0 on the fake, so the wait is short
    start()
    fake.wait_ready(TOKEN)
    assert "no session starts left today; waiting 0 s" in caplog.text
    assert [c.token for c in fake.calls("GET /gateway/bot")] == [TOKEN]


def test_a_disallowed_message_content_intent_says_how_to_enable_it(
    make_fake: MakeFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    strict = make_fake(message_content=False)
    refused = start(make_config(strict))
    strict.wait_for(lambda: refused.adapter.status()["main"].startswith("stopped"))
    assert [code for _, _, code in strict.connections()] == [4014]
    assert "enable 'Message Content Intent' on the Bot page" in caplog.text
    refused.stop()
    allowed = start(make_config(strict, message_content_intent=False))
    strict.wait_ready(TOKEN)
    assert strict.identifies(TOKEN)[-1]["intents"] == INTENTS & ~(1 << 15)
    strict.post(GENERAL, ALICE, f"<@{BOT_ID}> mentions still carry text")
    assert wait_texts(strict, 1, TOKEN) == ["echo: mentions still carry text"]
    assert "without the Message Content intent" in allowed.adapter.describe()[0]


# -- replies -----------------------------------------------------------------------------------------------------


def long_text() -> str:
    paragraph = "Discord allows two thousand characters per message, so this one is split. " * 9
    return "\n\n".join(f"{n}. {paragraph}" for n in range(6))  # about 4,100 characters


def test_a_long_reply_is_split_at_2000_characters_and_only_the_first_part_quotes(
    fake: DiscordFake, start: Start
) -> None:
    start()
    fake.wait_ready(TOKEN)
    message_id = fake.post(GENERAL, ALICE, long_text())
    wait_texts(fake, 3)
    parts = fake.sent(TOKEN)
    assert len(parts) == 3
    assert all(len(p.body["content"]) <= 2000 for p in parts)
    assert " ".join(p.body["content"] for p in parts).split() == f"echo: {long_text()}".split()
    assert all(p.body["content"].rstrip().endswith(".") for p in parts)
    assert parts[0].body["message_reference"]["message_id"] == message_id
    assert all("message_reference" not in p.body for p in parts[1:])
    assert len({p.body["nonce"] for p in parts}) == 3


@pytest.mark.slow
def test_a_busy_channel_waits_for_its_bucket_instead_of_hitting_429(make_fake: MakeFake, start: Start) -> None:
    strict = make_fake(bucket_limit=2, bucket_window_s=0.6)
    start(make_config(strict))
    strict.wait_ready(TOKEN)
    strict.post(GENERAL, ALICE, long_text())
    route = f"POST /channels/{GENERAL}/messages"
    calls = strict.wait_for(lambda: strict.calls(route)[2:] and strict.calls(route))
    assert [c.status for c in calls] == [200, 200, 200]
    assert calls[2].at - calls[1].at >= 0.4  # held until the bucket reset, not refused


def test_buckets_are_per_route_bucket_and_channel_and_a_global_429_holds_every_route() -> None:
    clock = FakeClock(0.0)
    buckets = Buckets(clock)
    headers = {"x-ratelimit-bucket": MESSAGES_BUCKET, "x-ratelimit-remaining": "0", "x-ratelimit-reset-after": "2.5"}
    buckets.update(MESSAGES_ROUTE, "10", headers)
    assert buckets.reserve(MESSAGES_ROUTE, "10") == pytest.approx(2.5)
    assert buckets.reserve(MESSAGES_ROUTE, "11") == 0  # another channel has its own bucket
    clock.advance(2.5)
    assert buckets.reserve(MESSAGES_ROUTE, "10") == 0
    buckets.update(MESSAGES_ROUTE, "10", headers | {"x-ratelimit-remaining": "1"})
    assert buckets.reserve(MESSAGES_ROUTE, "10") == 0
    assert buckets.reserve(MESSAGES_ROUTE, "10") == pytest.approx(2.5)  # the one left was taken
    buckets.hold("GET /channels/{channel_id}", "12", 4.0, everywhere=True)
    assert buckets.reserve(MESSAGES_ROUTE, "11") == pytest.approx(4.0)


def test_a_429_is_retried_after_retry_after_and_a_split_reply_resumes_after_the_parts_sent(
    fake: DiscordFake, start: Start
) -> None:
    clock = FakeClock()
    discord = start(clock=clock)
    limited = {"message": "You are being rate limited.", "retry_after": 7.25, "global": False}
    fake.fail(MESSAGES, 429, limited, after=1, headers={"Retry-After": "8", "X-RateLimit-Scope": "shared"})
    fake.wait_ready(TOKEN)
    fake.post(GENERAL, ALICE, long_text())
    fake.wait_for(lambda: len(fake.calls(f"POST /channels/{GENERAL}")) >= 2)
    assert discord.gateway.wait_idle()
    with discord.gateway.read() as store:
        (row,) = store.outbox.unsent()
    assert row.next_attempt_at == pytest.approx(clock.now + 7.25)  # the JSON retry_after, not the header's 8
    clock.advance(7.0)
    discord.gateway.tick()
    assert discord.gateway.wait_idle()
    assert len(fake.calls("POST /channels/" + GENERAL)) == 2
    clock.advance(0.25)
    discord.gateway.tick()
    wait_texts(fake, 3)
    assert discord.gateway.wait_idle()
    assert [c.status for c in fake.calls("POST /channels/" + GENERAL)] == [200, 429, 200, 200]
    assert " ".join(fake.texts(TOKEN)).split() == f"echo: {long_text()}".split()  # part 1 once


def test_server_errors_are_retried_with_backoff_and_the_reply_arrives_once(fake: DiscordFake, start: Start) -> None:
    discord = start()
    fake.fail(MESSAGES, 502, "<html>502 Bad Gateway</html>")
    fake.fail(MESSAGES, 500, {"message": "500: Internal Server Error", "code": 0})
    fake.wait_ready(TOKEN)
    fake.post(GENERAL, ALICE, "hello")
    assert wait_texts(fake, 1) == ["echo: hello"]
    assert discord.gateway.wait_idle()
    assert [c.status for c in fake.calls("POST /channels/")] == [502, 500, 200]
    with discord.gateway.read() as store:
        assert store.outbox.unsent() == []


def test_a_lost_answer_is_retried_with_the_same_nonce_and_posts_once(fake: DiscordFake, start: Start) -> None:
    discord = start()
    fake.fail(MESSAGES, 200, lose_answer=True)
    fake.wait_ready(TOKEN)
    fake.post(GENERAL, ALICE, "exactly once")
    fake.wait_for(lambda: len(fake.calls("POST /channels/")) >= 2)
    assert discord.gateway.wait_idle()
    first, second = fake.calls("POST /channels/")
    assert first.body["nonce"] == second.body["nonce"]
    assert first.body["enforce_nonce"] is True
    assert fake.texts(TOKEN) == ["echo: exactly once"]
    with discord.gateway.read() as store:
        assert store.outbox.unsent() == []


def test_send_failures_become_send_errors_that_say_what_happened(fake: DiscordFake) -> None:
    (sender,) = DiscordAdapter(make_config(fake), environ={}).senders()
    reply = OutboundMessage(platform="discord", account_id="main", chat_id=GENERAL, text="hi", answers=("1",))
    cases: list[tuple[int, dict[str, Any], str, bool]] = [
        (403, {"message": "Missing Permissions", "code": 50013}, "lacks permission to send here", True),
        (404, {"message": "Unknown Channel", "code": 10003}, "the channel no longer exists", True),
        (400, {"message": "Cannot send messages to this user", "code": 50007}, "does not accept direct", True),
        (401, {"message": "401: Unauthorized", "code": 0}, "refused the bot token", False),
        (503, {"message": "upstream connect error", "code": 0}, "retried with backoff", False),
    ]
    for status, body, said, permanent in cases:
        fake.fail(MESSAGES, status, body)
        with pytest.raises(SendError, match=said) as failed:
            sender.send(reply)
        assert failed.value.permanent is permanent
        assert TOKEN not in str(failed.value)
    fake.fail(MESSAGES, 200, "<html>posted, but not JSON</html>")
    assert sender.send(reply) is None  # a 2xx means it was posted: sending again would duplicate it
    fake.fail(MESSAGES, 429, {"message": "You are being rate limited.", "retry_after": 3, "global": True})
    with pytest.raises(SendError, match=r"rate limited for 3\.00 s") as limited:
        sender.send(reply)
    assert limited.value.retry_after_s == 3
    other = msgspec.structs.replace(reply, chat_id=f"{GENERAL}0")
    with pytest.raises(SendError, match="held back"):  # a global limit holds every channel
        sender.send(other)
    gone = DiscordAdapter(make_config(fake, api_base_url="http://127.0.0.1:9/api/v10"), environ={}).senders()[0]
    with pytest.raises(SendError, match="cannot be reached") as unreachable:
        gone.send(reply)
    assert TOKEN not in str(unreachable.value)
    with pytest.raises(SendError, match="no bot named 'nobody'") as unknown:
        sender.send(msgspec.structs.replace(reply, account_id="nobody"))
    assert unknown.value.permanent


# -- handoff threads ---------------------------------------------------------------------------------------------


def test_a_handoff_opens_a_thread_and_the_conversation_continues_in_it(fake: DiscordFake, start: Start) -> None:
    cli = FakePlatform("cli")
    discord = start(extra_senders=(cli,))
    cli.attach(discord.gateway)
    fake.wait_ready(TOKEN)
    cli.push("/title billing bug", chat_id="terminal")
    cli.pop()
    cli.push("the invoice total is wrong", chat_id="terminal")
    cli.pop()
    fake.post(GENERAL, ALICE, "/sethome")
    assert wait_texts(fake, 1) == ["This chat is now the home channel for discord."]
    assert discord.gateway.wait_idle()  # the reply arrives before the turn is over: a handoff then is refused
    cli.push("/handoff discord", chat_id="terminal")
    assert cli.pop().text.startswith("Handed off to discord (chat ")
    (opened,) = fake.calls(f"POST /channels/{GENERAL}/threads")
    assert opened.body == {"name": "billing bug", "auto_archive_duration": 1440, "type": 11}
    thread = fake.sent(TOKEN)[1].channel_id
    opened_thread = fake.channel(thread)
    assert opened_thread is not None
    assert (opened_thread["parent_id"], opened_thread["type"]) == (GENERAL, 11)
    assert fake.texts(TOKEN)[1].startswith("echo: [handoff]")
    fake.post(thread, BOB, "picking it up")
    assert wait_texts(fake, 3)[2] == "echo: picking it up"
    assert fake.sent(TOKEN)[2].channel_id == thread
    session = discord.gateway.session_for(key(GENERAL, thread))
    assert session is not None
    assert session == discord.gateway.session_for("agent:main:cli:dm:terminal")


def test_threads_open_as_forum_posts_and_not_in_dms(fake: DiscordFake, start: Start) -> None:
    adapter = start().adapter
    fake.wait_ready(TOKEN)
    (sender,) = adapter.senders()
    assert isinstance(sender, ThreadCreator)
    fake.wait_for(lambda: adapter.cache.get(FORUM))  # GUILD_CREATE said it is a forum
    post = sender.create_thread(FORUM, "x" * 150, account_id="main")
    body = fake.calls(f"POST /channels/{FORUM}/threads")[0].body
    assert body["name"] == "x" * 100
    assert body["message"]["content"] == "x" * 100  # a forum post starts with a message
    assert adapter.cache.get(post) is not None
    dm = fake.dm_channel(TOKEN, ALICE)
    with pytest.raises(SendError, match=r"Cannot execute action on this channel type.*guild text or forum"):
        sender.create_thread(dm, "nope", account_id="main")


# -- hostile input -----------------------------------------------------------------------------------------------


def a_message(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "1300000000000000777",
        "channel_id": GENERAL,
        "guild_id": GUILD,
        "author": ALICE,
        "content": "hi",
        "type": 0,
    }
    return base | fields


def test_hostile_frames_are_logged_and_the_connection_keeps_working(
    fake: DiscordFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    discord = start()
    fake.wait_ready(TOKEN)
    raw_frames: list[str | bytes] = [
        "{not json",
        "[]",
        '{"op": "zero"}',
        '{"op": 42, "d": null}',
        '{"op": 0, "t": null, "s": null, "d": 5}',
        b"\xff\xfe\x00 binary and not UTF-8",
        '{"op": 0, "t": "MESSAGE_CREATE", "s": null, "d": {"content": "\\ud800"}}',
    ]
    for frame in raw_frames:
        fake.send_raw(TOKEN, frame)
    malformed = [
        json.dumps(a_message(author={"id": "not-a-snowflake"})),
        json.dumps(a_message(content=5)),
        json.dumps({k: v for k, v in a_message().items() if k != "channel_id"}),
        json.dumps(a_message(channel_id=GENERAL * 30)),
        '{"id": "1", "channel_id": "2", "author": {"id": "3"}, "content": "\\ud800 lone surrogate"}',
        "[" * 3000 + "]" * 3000,
    ]
    for raw in malformed:
        fake.dispatch_raw(TOKEN, "MESSAGE_CREATE", raw)
    fake.dispatch_raw(TOKEN, "GUILD_CREATE", '{"id": "1", "channels": [{"id": 5, "type": "x"}]}')
    fake.dispatch_raw(TOKEN, "READY", '{"session_id": 1}')
    huge = "z" * 30_000  # a valid message, far over the reply limit: answered in parts
    fake.post(GENERAL, BOB, huge)
    fake.post(GENERAL, ALICE, "still fine")
    expected = len("echo: still fine") + len(f"echo: {huge}")
    fake.wait_for(lambda: sum(len(text) for text in fake.texts(TOKEN)) >= expected)
    assert discord.gateway.wait_idle()
    texts = fake.texts(TOKEN)
    assert "echo: still fine" in texts
    assert "".join(t for t in texts if t != "echo: still fine") == f"echo: {huge}"
    assert len(fake.connections()) == 1  # no reconnect was needed
    assert fake.resumes(TOKEN) == []
    assert "ignored a gateway frame: not valid JSON" in caplog.text
    assert "ignored a gateway frame: not a gateway payload: Expected `object`, got `array`" in caplog.text
    assert "ignored a binary gateway frame of 24 bytes" in caplog.text
    assert "skipped event MESSAGE_CREATE (sequence" in caplog.text
    assert "MESSAGE_CREATE is malformed: Expected `str` matching regex" in caplog.text
    assert "at `$.author.id`" in caplog.text
    assert "Object missing required field `channel_id`" in caplog.text
    assert "skipped event GUILD_CREATE" in caplog.text
    assert len(discord.inbox()) == 2


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
_snowflakes = st.from_regex(r"\A[0-9]{1,20}\Z") | _json
_users = st.fixed_dictionaries(
    {"id": _snowflakes},
    optional={"username": st.text() | _json, "bot": st.booleans() | _json, "global_name": st.text() | _json},
)
_messages = st.fixed_dictionaries(
    {"id": _snowflakes, "channel_id": _snowflakes, "author": _users | _json},
    optional={
        "guild_id": _snowflakes,
        "content": st.text(max_size=300) | st.just("y " * 3000) | _json,
        "type": st.sampled_from([0, 19, 7, 18]) | _json,
        "webhook_id": _snowflakes,
        "member": st.fixed_dictionaries({}, optional={"nick": st.text() | _json}) | _json,
        "attachments": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "filename": st.text() | _json,
                    "content_type": st.text() | _json,
                    "size": st.integers() | _json,
                    "url": st.sampled_from(["", "x", "ftp://cdn/x.png", "http://["]),  # nothing to fetch
                },
            ),
            max_size=2,
        )
        | _json,
        "sticker_items": st.lists(st.fixed_dictionaries({"name": st.text() | _json}), max_size=2) | _json,
    },
)
_raw_data = (
    _messages.map(json.dumps)
    | _json.map(json.dumps)
    | st.text(max_size=40)
    | st.binary(max_size=40).map(lambda b: b.decode("utf-8", "replace"))
)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(raw=_raw_data, own=st.none() | st.just(BOT_ID))
def test_any_message_payload_is_an_inbound_message_a_skip_or_an_event_error(raw: str, own: str | None) -> None:
    cache = ChannelCache()
    cache.put([Channel(id=THREAD, type=11, guild_id=GUILD, parent_id=GENERAL)])
    try:
        frame = decode_frame('{"op": 0, "t": "MESSAGE_CREATE", "s": 1, "d": ' + raw + "}")
        message = decode_data(frame, Message)
    except EventError:
        event("EventError")
        return
    channel = cache.get(message.channel_id)
    inbound = inbound_from_message(message, "main", own_user_id=own, channel=channel, received_at=0.0)
    if isinstance(inbound, Skipped):
        event("skipped")
        return
    event("message")
    assert inbound.text.strip()
    assert inbound.message_id == message.id
    assert inbound.source.chat_type == ("dm" if message.guild_id is None else "group")
    assert (inbound.source.thread_id is not None) == (message.guild_id is not None and channel is not None)
    msgspec.msgpack.encode(inbound)  # it can be stored


@pytest.mark.slow
def test_random_dispatches_never_break_the_connection(fake: DiscordFake, start: Start) -> None:
    discord = start()
    fake.wait_ready(TOKEN)

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        kind=st.sampled_from(["MESSAGE_CREATE", "GUILD_CREATE", "THREAD_CREATE", "THREAD_LIST_SYNC", "X_UNKNOWN"]),
        raw=_raw_data,
    )
    def check(kind: str, raw: str) -> None:
        fake.dispatch_raw(TOKEN, kind, raw)

    check()
    fake.post(GENERAL, ALICE, "after the storm")
    fake.wait_for(lambda: "echo: after the storm" in fake.texts(TOKEN), timeout=20)
    assert len(fake.connections()) == 1
    assert discord.adapter.status() == {"main": "connected"}


# -- configuration and banner ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "path", "problem"),
    [
        ({"api_base_url": "ftp://x"}, "platforms.discord.api_base_url", "http(s) URL"),
        ({"gateway_url": "https://gateway.discord.gg"}, "platforms.discord.gateway_url", "ws(s):// URL"),
        ({"max_message_chars": 4000}, "platforms.discord.max_message_chars", "between 100 and 2000"),
        ({"reconnect_min_s": 0}, "platforms.discord.reconnect_min_s", "positive number"),
        ({"reconnect_min_s": 5, "reconnect_max_s": 1}, "platforms.discord.reconnect_max_s", "not be smaller"),
        ({"identify_wait_min_s": 6}, "platforms.discord.identify_wait_max_s", "not be smaller"),
        ({"requests_per_second": 0}, "platforms.discord.requests_per_second", "positive rate"),
        ({"max_frame_bytes": 10}, "platforms.discord.max_frame_bytes", "at least 65536"),
        ({"bots": {"a b": {"token": TOKEN}}}, "platforms.discord.bots.a b", "1 to 64 letters"),
        ({"bots": {"b": {}}}, "platforms.discord.bots.b.token", "is required"),
        ({"bots": {"b": {"token": TOKEN, "token_env": "T"}}}, "platforms.discord.bots.b.token_env", "not both"),
        ({"bots": {"b": {"token": "nope"}}}, "platforms.discord.bots.b.token", "three dot-separated parts"),
        ({"bots": {"b": {"token": f"Bot {TOKEN}"}}}, "platforms.discord.bots.b.token", "without the 'Bot' prefix"),
        ({"bots": {"b": {"token_env": "9X"}}}, "platforms.discord.bots.b.token_env", "environment variable name"),
    ],
)
def test_a_bad_section_is_a_config_error_naming_its_field(section: dict[str, Any], path: str, problem: str) -> None:
    with pytest.raises(ConfigError) as error:
        msgspec.convert(section, DiscordConfig)  # as the daemon loads config.yaml
    assert error.value.path == path
    assert problem in str(error.value)


def test_unknown_fields_are_refused_and_the_section_round_trips_through_json() -> None:
    with pytest.raises(msgspec.ValidationError, match="tokne"):
        msgspec.convert({"bots": {"b": {"tokne": TOKEN}}}, DiscordConfig)
    config = DiscordConfig(bots={"b": DiscordBot(token=TOKEN)}, gateway_url="wss://gateway.discord.gg")
    assert msgspec.json.decode(msgspec.json.encode(config), type=registry.config_type("discord")) == config


def test_tokens_from_the_environment_are_read_when_the_adapter_is_built() -> None:
    config = DiscordConfig(bots={"b": DiscordBot(token_env="DISCORD_TOKEN")})
    adapter = registry.build("discord", config, {"DISCORD_TOKEN": TOKEN})
    assert "token from $DISCORD_TOKEN" in adapter.describe()[0]
    for environ, problem in [({}, "DISCORD_TOKEN is not set"), ({"DISCORD_TOKEN": "x"}, "the value of DISCORD_TOKEN")]:
        with pytest.raises(ConfigError, match=problem) as error:
            DiscordAdapter(config, environ=environ)
        assert error.value.path == "platforms.discord.bots.b.token_env"


def test_the_banner_says_how_each_bot_connects_and_replies(fake: DiscordFake) -> None:
    empty: Adapter = DiscordAdapter(DiscordConfig(), environ={})
    assert empty.describe() == [
        "Discord: no bots; add one under platforms.discord.bots in config.yaml "
        "(token_env: DISCORD_BOT_TOKEN holding the token from the Developer Portal's Bot page)"
    ]
    adapter = DiscordAdapter(make_config(fake), environ={})
    (line,) = adapter.describe()
    assert line == (
        "Discord bot 'main' (token in config.yaml): gateway websocket to the URL from GET /gateway/bot; replies via "
        f"{fake.api_base} in parts of 2000 characters; attachments are downloaded into the media store (a stand-in "
        "like [image: name] stays in the text)"
    )
    assert TOKEN not in line
    assert adapter.capabilities.threads
    assert adapter.capabilities.max_message_chars == 2000
    assert adapter.status() == {"main": "not started"}


# -- /save -------------------------------------------------------------------------------------------------------


def test_save_posts_one_message_with_the_markdown_as_its_file(fake: DiscordFake, start: Start) -> None:
    discord = start()
    fake.wait_ready(TOKEN)
    dm = fake.dm_channel(TOKEN, ALICE)
    fake.post(dm, ALICE, "hello")
    wait_texts(fake, 1)
    fake.post(dm, ALICE, "/save")
    fake.wait_for(lambda: len(fake.sent(TOKEN)) >= 2)
    assert discord.gateway.wait_idle()
    _, saved = fake.sent(TOKEN)
    (upload,) = saved.files
    assert upload.field == "files[0]"
    assert upload.filename.endswith(".md")
    assert upload.content_type == "text/markdown"
    markdown = upload.data.decode("utf-8")
    assert markdown.index("hello") < markdown.index("echo: hello")
    assert saved.body["content"].endswith("the conversation as Markdown (2 messages, 1 part(s)).")
    assert saved.body["attachments"] == [{"id": 0, "filename": upload.filename}]
    assert saved.message["attachments"][0]["filename"] == upload.filename
    assert len(fake.sent(TOKEN)) == 2  # the file instead of the text, not beside it


def test_a_lost_answer_to_the_file_message_is_retried_under_its_nonce_and_posts_once(
    fake: DiscordFake, start: Start
) -> None:
    discord = start()
    fake.wait_ready(TOKEN)
    fake.post(GENERAL, ALICE, "hello")
    wait_texts(fake, 1)
    fake.fail(MESSAGES, 200, lose_answer=True)
    fake.post(GENERAL, ALICE, "/save")
    fake.wait_for(lambda: len(fake.calls("POST /channels/")) >= 3)
    assert discord.gateway.wait_idle()
    _, lost, retried = fake.calls("POST /channels/")
    assert lost.body.payload["nonce"] == retried.body.payload["nonce"]
    assert lost.body.files[0].data == retried.body.files[0].data
    assert [len(sent.files) for sent in fake.sent(TOKEN)] == [0, 1]  # one file message
    with discord.gateway.read() as store:
        assert store.outbox.unsent() == []


def test_save_sends_the_text_when_the_bot_may_not_attach_files(
    fake: DiscordFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    discord = start()
    fake.wait_ready(TOKEN)
    fake.post(GENERAL, ALICE, "hello")
    wait_texts(fake, 1)
    fake.fail(MESSAGES, 403, {"message": "Missing Permissions", "code": 50013})
    with caplog.at_level(logging.WARNING, logger="platforms.support.documents"):
        fake.post(GENERAL, ALICE, "/save")
        texts = wait_texts(fake, 2)
        assert discord.gateway.wait_idle()
    assert texts[1].index("hello") < texts[1].index("echo: hello")  # the Markdown as text
    assert [len(sent.files) for sent in fake.sent(TOKEN)] == [0, 0]
    assert "Missing Permissions" in caplog.text
    assert "the reply's text is sent instead" in caplog.text
