"""The WeChat iLink adapter against a real gateway and a loopback fake of the iLink bot API.

The fake (``wechat_fake.py``) checks every request's headers and body shape and serves ``getupdates`` from a log per
bot token, so a client that resends an old cursor sees old messages again; tests assert on what reached it.
Batching windows are shortened (0.2 s, 1.5 s after a long chunk) to keep the file fast.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from hermes_actors.errors import ConfigError
from hermes_actors.media import KINDS, MediaConfig
from hermes_actors.messages import InboundMessage, OutboundMessage, decode_inbound
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.store import Store
from hermes_actors.testing import FakeClock, poll_until
from platforms import registry
from platforms.base import Adapter, ConnectionReporter
from platforms.wechat import PLATFORM, WechatAccount, WechatAdapter, WechatConfig
from platforms.wechat.batching import AccountState, Batcher, decode_state
from platforms.wechat.wire import Malformed, Piece, decode_message
from tests.platforms.crash import AdapterWorker, wait_for_inbox
from tests.platforms.support import StartGateway, inbound_messages
from tests.platforms.wechat_fake import RATE_LIMITED, SESSION_TIMEOUT, FakeIlink, Sent

TOKEN_A = "bot-token-a"
TOKEN_B = "bot-token-b"


@pytest.fixture
def ilink() -> Iterator[FakeIlink]:
    fake = FakeIlink([TOKEN_A, TOKEN_B], hold_s=0.3).start()
    yield fake
    fake.stop()


def fast(url: str, accounts: Mapping[str, str] | None = None, **options: Any) -> WechatConfig:
    """A config with short windows and backoffs; ``accounts`` maps account names to bot tokens. Media comes from
    the fake's CDN at ``url``, so no test reaches WeChat's."""
    accounts = {"bot-a": TOKEN_A} if accounts is None else accounts
    settings: dict[str, Any] = {
        "cdn_base_url": url + "/c2c",
        "batch_window_s": 0.2,
        "long_chunk_chars": 50,
        "long_chunk_wait_s": 1.5,
        "retry_base_s": 0.01,
        "retry_max_s": 0.05,
        "session_expired_backoff_s": 0.3,
        "rate_limit_backoff_s": 0.05,
        "sends_per_second_per_chat": 1000.0,
    }
    settings.update(options)
    return WechatConfig(
        accounts={name: WechatAccount(token=token, base_url=url) for name, token in accounts.items()}, **settings
    )


@dataclass(frozen=True)
class Row:
    """An inbox row: the stored message id, its routing key and text."""

    message_id: str
    routing_key: str
    text: str


@dataclass(frozen=True)
class Wechat:
    adapter: WechatAdapter
    gateway: Gateway
    clock: FakeClock

    def rows(self) -> list[Row]:
        with self.gateway.read() as store:
            found = store.sql.execute("SELECT platform_message_id, routing_key, payload FROM inbox ORDER BY id")
            return [Row(str(mid), str(key), decode_inbound(payload).text) for mid, key, payload in found]

    def texts(self) -> list[str]:
        return [row.text for row in self.rows()]

    def inbound(self) -> list[InboundMessage]:
        return inbound_messages(self.gateway, PLATFORM)

    def session_of(self, routing_key: str) -> str:
        with self.gateway.read() as store:
            session_id = store.get_route(routing_key)
        assert session_id is not None, f"no session for {routing_key}"
        return session_id

    def cursor(self, account: str = "bot-a") -> str | None:
        with self.gateway.read() as store:
            return store.kv.get_cursor(PLATFORM, account)


StartWechat = Callable[..., Wechat]


@pytest.fixture
def start_wechat(start_gateway: StartGateway) -> StartWechat:
    """Start a gateway on ``tmp_path`` with the adapter; ``fake_gateway_clock`` makes the gateway's clock the
    adapter's FakeClock, ``fake_batch_clock`` makes the batching windows run on it (they close on ``advance``)."""

    def start(
        config: WechatConfig,
        *,
        fake_gateway_clock: bool = False,
        fake_batch_clock: bool = False,
        media: MediaConfig | None = None,
    ) -> Wechat:
        clock = FakeClock(start=time.time())
        monotonic = clock.monotonic if fake_batch_clock else time.monotonic
        adapter = WechatAdapter(config, environ={}, clock=clock, monotonic=monotonic)
        gateway = start_gateway(
            adapter,
            clock=clock if fake_gateway_clock else time.time,
            tick_interval_s=5.0 if fake_gateway_clock else 0.1,
            media=media,
        )
        return Wechat(adapter=adapter, gateway=gateway, clock=clock)

    return start


def replies(ilink: FakeIlink, count: int) -> list[Sent]:
    return [ilink.take_sent() for _ in range(count)]


# -- direct chats, groups and accounts ---------------------------------------------------------------------------


def test_a_direct_message_is_one_turn_answered_with_the_peers_context_token(
    ilink: FakeIlink, start_wechat: StartWechat
) -> None:
    wechat = start_wechat(fast(ilink.url))
    message = ilink.message("wxid_alice", "hello", context_token="ctx-alice-1")
    ilink.push(TOKEN_A, message)
    (reply,) = replies(ilink, 1)
    assert reply.token == TOKEN_A
    assert reply.headers["authorizationtype"] == "ilink_bot_token"
    assert reply.msg["to_user_id"] == "wxid_alice"
    assert reply.msg["context_token"] == "ctx-alice-1"
    assert (reply.msg["message_type"], reply.msg["message_state"]) == (2, 2)
    assert reply.text == "echo: hello"
    assert reply.body["base_info"] == {"channel_version": "hermes-actors"}
    assert wechat.rows() == [Row(str(message["message_id"]), "agent:main:wechat~bot-a:dm:wxid_alice", "hello")]
    polls = ilink.wait_polls(2)
    assert polls[0].body["get_updates_buf"] == ""  # the first poll of a new account
    assert polls[1].body["get_updates_buf"] != ""  # then the cursor the server handed out
    assert ilink.protocol_errors == []


@pytest.mark.slow
def test_the_cursor_is_stored_with_the_turns_and_a_restart_polls_from_it(
    ilink: FakeIlink, start_wechat: StartWechat
) -> None:
    wechat = start_wechat(fast(ilink.url))
    ilink.push(TOKEN_A, ilink.message("wxid_alice", "first"))
    replies(ilink, 1)
    assert wechat.gateway.wait_idle()
    stored = decode_state(wechat.cursor(), "bot-a")
    assert stored.buf != ""
    assert stored.pending == ()
    wechat.adapter.stop()
    before = len(ilink.polls)
    again = WechatAdapter(fast(ilink.url), environ={}, clock=wechat.clock)
    wechat.gateway.replace_sender(again.senders()[0])
    again.start(GatewayInbox(wechat.gateway))
    try:
        assert ilink.wait_polls(before + 1)[before].body["get_updates_buf"] == stored.buf
        ilink.push(TOKEN_A, ilink.message("wxid_alice", "second"))
        assert ilink.take_sent().text == "echo: second"
    finally:
        again.stop()
    assert wechat.texts() == ["first", "second"]  # nothing was delivered twice


@pytest.mark.slow
def test_groups_are_keyed_per_sender_and_replies_go_to_the_group_with_its_latest_token(
    ilink: FakeIlink, start_wechat: StartWechat
) -> None:
    wechat = start_wechat(fast(ilink.url))
    ilink.push(TOKEN_A, ilink.message("wxid_alice", "from alice", group_id="grp1@chatroom", context_token="g-1"))
    first = ilink.take_sent()
    ilink.push(TOKEN_A, ilink.message("wxid_bob", "from bob", group_id="grp1@chatroom", context_token="g-2"))
    second = ilink.take_sent()
    ilink.push(TOKEN_A, ilink.message("wxid_alice", "in private", context_token="d-1"))
    third = ilink.take_sent()
    keys = [row.routing_key for row in wechat.rows()]
    assert keys == [
        "agent:main:wechat~bot-a:group:grp1@chatroom:wxid_alice",
        "agent:main:wechat~bot-a:group:grp1@chatroom:wxid_bob",
        "agent:main:wechat~bot-a:dm:wxid_alice",
    ]
    assert wechat.gateway.wait_idle()
    assert len({wechat.session_of(key) for key in keys}) == 3  # per-user isolation in the group
    assert [(s.msg["to_user_id"], s.msg["context_token"], s.text) for s in (first, second, third)] == [
        ("grp1@chatroom", "g-1", "echo: from alice"),
        ("grp1@chatroom", "g-2", "echo: from bob"),
        ("wxid_alice", "d-1", "echo: in private"),
    ]


def test_two_bot_accounts_with_the_same_peer_never_share_a_session(ilink: FakeIlink, start_wechat: StartWechat) -> None:
    wechat = start_wechat(fast(ilink.url, {"bot-a": TOKEN_A, "bot-b": TOKEN_B}))
    ilink.push(TOKEN_A, ilink.message("wxid_alice", "to a", context_token="ctx-a"))
    ilink.push(TOKEN_B, ilink.message("wxid_alice", "to b", context_token="ctx-b"))
    sent = sorted(replies(ilink, 2), key=lambda s: s.token)
    assert [(s.token, s.msg["context_token"], s.text) for s in sent] == [
        (TOKEN_A, "ctx-a", "echo: to a"),
        (TOKEN_B, "ctx-b", "echo: to b"),
    ]
    keys = sorted(row.routing_key for row in wechat.rows())
    assert keys == ["agent:main:wechat~bot-a:dm:wxid_alice", "agent:main:wechat~bot-b:dm:wxid_alice"]
    assert wechat.gateway.wait_idle()
    assert wechat.session_of(keys[0]) != wechat.session_of(keys[1])
    assert decode_state(wechat.cursor("bot-a"), "bot-a").buf != decode_state(wechat.cursor("bot-b"), "bot-b").buf


# -- batching ----------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_messages_close_together_become_one_turn(ilink: FakeIlink, start_wechat: StartWechat) -> None:
    wechat = start_wechat(fast(ilink.url, batch_window_s=0.5))
    first = ilink.message("wxid_alice", "part one")
    ilink.push(TOKEN_A, first)
    ilink.push(TOKEN_A, ilink.message("wxid_alice", "part two", context_token="ctx-latest"))
    (reply,) = replies(ilink, 1)
    assert reply.text == "echo: part one\npart two"
    assert reply.msg["context_token"] == "ctx-latest"
    assert wechat.rows() == [
        Row(str(first["message_id"]), "agent:main:wechat~bot-a:dm:wxid_alice", "part one\npart two")
    ]


def test_a_backlog_splits_where_the_sender_paused_and_waits_longer_after_a_long_chunk(
    ilink: FakeIlink, start_wechat: StartWechat
) -> None:
    wechat = start_wechat(fast(ilink.url))
    chunk = "x" * 60  # at least long_chunk_chars: the client may still be sending the rest of a paste
    ilink.push(
        TOKEN_A,
        ilink.message("wxid_alice", "morning", created_ms=1_000_000),
        ilink.message("wxid_alice", "are you there", created_ms=1_005_000),  # 5 s later: a new turn
        ilink.message("wxid_alice", chunk, created_ms=1_010_000),
        ilink.message("wxid_alice", "end of paste", created_ms=1_011_000),  # 1 s after a long chunk: same turn
        ilink.message("wxid_bob", "hi", created_ms=1_011_000),  # another sender: their own turn
    )
    replies(ilink, 4)
    assert wechat.gateway.wait_idle()
    assert sorted(wechat.texts()) == sorted(["morning", "are you there", f"{chunk}\nend of paste", "hi"])


def test_the_rest_of_a_long_paste_arriving_later_still_joins_it(ilink: FakeIlink, start_wechat: StartWechat) -> None:
    wechat = start_wechat(fast(ilink.url), fake_batch_clock=True)

    def waiting(text: str) -> bool:
        return any(p.text == text for b in decode_state(wechat.cursor(), "bot-a").pending for p in b.pieces)

    ilink.push(TOKEN_A, ilink.message("wxid_alice", "y" * 60, created_ms=None))
    poll_until(lambda: waiting("y" * 60), what="the long chunk waiting in its batch")
    wechat.clock.advance(0.5)  # the user's client is slow: longer than the 0.2 s window, shorter than the 1.5 s one
    ilink.push(TOKEN_A, ilink.message("wxid_alice", "tail"))
    poll_until(lambda: waiting("tail"), what="the tail joining the long chunk's batch")
    wechat.clock.advance(1.5)  # the long chunk's window closes
    assert ilink.take_sent().text == "echo: " + "y" * 60 + "\ntail"
    ilink.push(TOKEN_A, ilink.message("wxid_alice", "short"))
    poll_until(lambda: waiting("short"), what="the short message waiting in its batch")
    wechat.clock.advance(0.5)  # after a short message the 0.2 s window has closed
    assert ilink.take_sent().text == "echo: short"
    ilink.push(TOKEN_A, ilink.message("wxid_alice", "later"))
    poll_until(lambda: waiting("later"), what="the later message waiting in its batch")
    wechat.clock.advance(0.5)
    assert ilink.take_sent().text == "echo: later"
    assert wechat.texts() == ["y" * 60 + "\ntail", "short", "later"]


def test_a_command_is_never_merged_with_the_text_around_it(ilink: FakeIlink, start_wechat: StartWechat) -> None:
    wechat = start_wechat(fast(ilink.url))
    ilink.push(
        TOKEN_A,
        ilink.message("wxid_alice", "hello"),
        ilink.message("wxid_alice", "/title Groceries"),
        ilink.message("wxid_alice", "milk"),
    )
    replies(ilink, 3)
    assert wechat.texts() == ["hello", "/title Groceries", "milk"]


def test_a_batch_waiting_at_stop_is_stored_and_released_after_the_restart(
    ilink: FakeIlink, start_wechat: StartWechat
) -> None:
    wechat = start_wechat(fast(ilink.url, batch_window_s=30.0, long_chunk_wait_s=30.0))
    ilink.push(TOKEN_A, ilink.message("wxid_alice", "wait for me"))
    poll_until(lambda: decode_state(wechat.cursor(), "bot-a").pending, 10, what="a pending batch in the stored state")
    wechat.adapter.stop()
    assert wechat.rows() == []
    again = WechatAdapter(fast(ilink.url), environ={}, clock=wechat.clock)
    wechat.gateway.replace_sender(again.senders()[0])
    again.start(GatewayInbox(wechat.gateway))
    try:
        assert ilink.take_sent().text == "echo: wait for me"
    finally:
        again.stop()
    assert decode_state(wechat.cursor(), "bot-a").pending == ()


def piece(text: str, user: str = "wxid_alice", *, created_ms: int | None = None) -> Piece:
    return Piece(message_id=text, chat_type="dm", chat_id=user, user_id=user, text=text, created_ms=created_ms)


def test_a_batch_whose_release_failed_goes_first_and_holds_back_its_senders_later_batches() -> None:
    now = [100.0]
    batcher = Batcher(window_s=1.0, long_chars=50, long_wait_s=4.0, monotonic=lambda: now[0])
    batcher.add(piece("a"))
    batcher.add(piece("b"))
    batcher.add(piece("x", "wxid_bob"))
    assert batcher.next_deadline() == 101.0
    now[0] = 101.0
    due = batcher.take_due()
    assert [[p.text for p in batch] for batch in due] == [["a", "b"], ["x"]]
    batcher.put_back(due[:1], retry_at=103.0)  # storing it failed
    batcher.add(piece("c"))  # a retried batch takes no more: a new one starts
    now[0] = 102.5
    assert batcher.take_due() == []  # "c" is due, but not before the batch ahead of it
    assert batcher.next_deadline() == 103.0
    now[0] = 103.0
    assert [[p.text for p in batch] for batch in batcher.take_due()] == [["a", "b"], ["c"]]
    assert batcher.next_deadline() is None


# -- dedupe ------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_resent_message_id_and_resent_text_are_dropped_within_the_window_even_across_a_restart(
    ilink: FakeIlink, start_wechat: StartWechat
) -> None:
    wechat = start_wechat(fast(ilink.url, dedupe_window_s=60.0))
    original = ilink.message("wxid_alice", "ok")
    ilink.push(TOKEN_A, original)
    assert ilink.take_sent().text == "echo: ok"
    ilink.push(
        TOKEN_A,
        original,  # the same message id again
        ilink.message("wxid_alice", "ok"),  # the same text under a new id
        ilink.message("wxid_bob", "ok"),  # the same text from someone else is news
    )
    assert ilink.take_sent().text == "echo: ok"
    ilink.push(TOKEN_A, ilink.message("wxid_alice", "marker"))
    assert ilink.take_sent().text == "echo: marker"
    wechat.adapter.stop()
    again = WechatAdapter(fast(ilink.url, dedupe_window_s=60.0), environ={}, clock=wechat.clock)
    wechat.gateway.replace_sender(again.senders()[0])
    again.start(GatewayInbox(wechat.gateway))
    try:
        ilink.push(TOKEN_A, ilink.message("wxid_alice", "ok"))  # the window was stored
        ilink.push(TOKEN_A, ilink.message("wxid_alice", "marker 2"))
        assert ilink.take_sent().text == "echo: marker 2"
        wechat.clock.advance(61)  # the window has passed: the same words are a new message
        ilink.push(TOKEN_A, ilink.message("wxid_alice", "ok"))
        assert ilink.take_sent().text == "echo: ok"
    finally:
        again.stop()
    senders = [row.routing_key.rsplit(":", 1)[1] for row in wechat.rows()]
    assert list(zip(wechat.texts(), senders, strict=True)) == [
        ("ok", "wxid_alice"),
        ("ok", "wxid_bob"),
        ("marker", "wxid_alice"),
        ("marker 2", "wxid_alice"),
        ("ok", "wxid_alice"),
    ]


def test_images_voice_and_files_arrive_as_stand_ins_and_bot_messages_are_ignored(
    ilink: FakeIlink, start_wechat: StartWechat
) -> None:
    wechat = start_wechat(fast(ilink.url))
    bot_echo = ilink.message("bot@im.bot", "our own reply")
    bot_echo["message_type"] = 2
    ilink.push(
        TOKEN_A,
        ilink.message("wxid_alice", items=[{"type": 2, "image_item": {"url": "x"}}]),
        bot_echo,
        ilink.message("wxid_bob", items=[{"type": 3, "voice_item": {"text": "call me"}}]),
        ilink.message("wxid_carol", items=[{"type": 4, "file_item": {"file_name": "report.pdf"}}]),
        ilink.message("wxid_dan", items=[{"type": 1, "text_item": {"text": "look"}}, {"type": 5}, {"type": 99}]),
    )
    replies(ilink, 4)
    assert sorted(wechat.texts()) == [
        "[file: report.pdf]",
        "[image]",
        "[voice] call me",
        "look\n[video]\n[unsupported message]",
    ]


# -- media ------------------------------------------------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))


def cached(tmp_path: Path, data: bytes, suffix: str) -> Path:
    digest = hashlib.sha256(data).hexdigest()
    return tmp_path / "media" / digest[:2] / f"{digest}{suffix}"


def test_images_files_and_voice_are_downloaded_from_the_cdn_decrypted_and_kept_through_batching(
    ilink: FakeIlink, start_wechat: StartWechat, tmp_path: Path
) -> None:
    wechat = start_wechat(fast(ilink.url, cdn_base_url=ilink.cdn_url), media=MediaConfig(max_bytes=1024))
    pdf = b"%PDF-1.7 the quarterly report"
    silk = b"#!SILK_V3" + bytes(40)
    image = ilink.media_item(2, PNG, mid_size=len(PNG) + 8)
    report = ilink.media_item(4, pdf, key_form="raw", file_name="report.pdf", len=str(len(pdf)))
    voice = ilink.media_item(3, silk, text="call me")
    # Alice's image and question come together: one turn, which carries the image.
    ilink.push(
        TOKEN_A,
        ilink.message("wxid_alice", items=[image]),
        ilink.message("wxid_alice", "what is this?"),
        ilink.message("wxid_bob", items=[report]),
        ilink.message("wxid_carol", items=[voice]),
    )
    texts = {sent.msg["to_user_id"]: sent.text for sent in replies(ilink, 3)}
    assert texts["wxid_alice"] == (
        "echo: [image]\nwhat is this?\n[attached image (image/png, 72 bytes), saved at "
        f"{cached(tmp_path, PNG, '.png')}]"
    )
    assert texts["wxid_bob"] == (
        "echo: [file: report.pdf]\n[attached document report.pdf (application/pdf, 29 bytes), saved at "
        f"{cached(tmp_path, pdf, '.pdf')}]"
    )
    assert texts["wxid_carol"] == (
        f"echo: [voice] call me\n[attached audio (audio/silk, 49 bytes), saved at {cached(tmp_path, silk, '')}]"
    )
    assert wechat.gateway.wait_idle()
    by_sender = {m.source.user_id: m.attachments for m in wechat.inbound()}
    assert [(a.kind, a.sha256, a.error) for a in by_sender["wxid_alice"]] == [
        ("image", hashlib.sha256(PNG).hexdigest(), None)
    ]
    assert cached(tmp_path, pdf, ".pdf").read_bytes() == pdf
    assert cached(tmp_path, silk, "").read_bytes() == silk
    assert len(ilink.downloads) == 3
    # Nothing that opens a file is kept: not in the stored state, not in the records.
    stored = json.dumps([msgspec.to_builtins(m) for m in wechat.inbound()]) + (wechat.cursor() or "")
    for item in (image, report, voice):
        media = next(value for key, value in item.items() if key.endswith("_item"))["media"]
        assert media["encrypt_query_param"] not in stored
        assert media["aes_key"] not in stored


@pytest.mark.slow
def test_a_file_over_the_limit_is_refused_before_it_is_downloaded_and_the_text_still_runs(
    ilink: FakeIlink, start_wechat: StartWechat, tmp_path: Path
) -> None:
    start_wechat(fast(ilink.url, cdn_base_url=ilink.cdn_url), media=MediaConfig(max_bytes=1024))
    big = ilink.media_item(4, bytes(4096), file_name="big.pdf", len="4096")
    ilink.push(TOKEN_A, ilink.message("wxid_alice", items=[{"type": 1, "text_item": {"text": "too big?"}}, big]))
    (reply,) = replies(ilink, 1)
    assert reply.text == (
        "I could not read big.pdf: it is 4 KB, over the 1 KB limit.\n\n"
        "echo: too big?\n[file: big.pdf]\n[document big.pdf was not read: it is 4 KB, over the 1 KB limit]"
    )
    assert ilink.downloads == []  # WeChat said how large it is: nothing was fetched
    # An image WeChat gives no size for is refused on the CDN's Content-Length, before its body is read.
    ilink.push(TOKEN_A, ilink.message("wxid_bob", items=[ilink.media_item(2, bytes(2048))]))
    (second,) = replies(ilink, 1)
    assert second.text.startswith("I could not read the image: it is 2 KB, over the 1 KB limit.\n\necho: [image]")
    assert len(ilink.downloads) == 1
    assert not (tmp_path / "media").exists()


def test_a_failed_download_or_decryption_becomes_a_refused_attachment_that_says_why(
    ilink: FakeIlink, start_wechat: StartWechat, tmp_path: Path
) -> None:
    wechat = start_wechat(fast(ilink.url, cdn_base_url=ilink.cdn_url))
    param, _ = ilink.upload(b"some bytes")
    items = [
        ilink.media_item(4, param="enc-unknown", key=bytes(16), file_name="gone.txt"),
        ilink.media_item(5, b"video bytes" * 10, cut=True),
        ilink.media_item(4, param=param, key=bytes(range(16)), key_form="raw", file_name="wrong-key.bin"),
        ilink.media_item(4, key=bytes(16), file_name="no-file.txt"),
        ilink.media_item(3, param=param),
        {"type": 2, "image_item": {"url": "x"}},
    ]
    ilink.push(TOKEN_A, *(ilink.message(f"wxid_{index}", items=[item]) for index, item in enumerate(items)))
    replies(ilink, len(items))
    assert wechat.gateway.wait_idle()
    found = {m.source.user_id: m.attachments for m in wechat.inbound()}
    assert [[(a.kind, a.name, a.error) for a in found[f"wxid_{index}"]] for index in range(len(items))] == [
        [("document", "gone.txt", "its download failed (HTTP 404)")],
        [("video", None, "its download broke off")],
        [("document", "wrong-key.bin", "it could not be decrypted with the key WeChat sent")],
        [("document", "no-file.txt", "WeChat named no file to download for it")],
        [("audio", None, "WeChat sent no key to decrypt it")],
        [("image", None, "WeChat named no file to download for it")],
    ]
    assert sorted(ilink.downloads) == sorted(
        ["enc-unknown", items[1]["video_item"]["media"]["encrypt_query_param"], param]
    )
    assert not (tmp_path / "media").exists()


def test_without_cryptography_a_file_is_refused_naming_the_extra_to_install(
    ilink: FakeIlink, start_wechat: StartWechat, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives.ciphers", None)  # import fails as if missing
    start_wechat(fast(ilink.url, cdn_base_url=ilink.cdn_url))
    ilink.push(TOKEN_A, ilink.message("wxid_alice", items=[ilink.media_item(2, PNG)]))
    (reply,) = replies(ilink, 1)
    assert reply.text.startswith(
        "I could not read the image: decrypting WeChat files needs the 'cryptography' package "
        "(pip install 'hermes-actors[feishu]').\n\necho: [image]"
    )
    assert ilink.downloads == []  # not fetched when it cannot be decrypted
    assert "pip install 'hermes-actors[feishu]'" in caplog.text


# -- errors from iLink -------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_an_expired_session_is_logged_with_the_fix_backed_off_and_polling_goes_on(
    ilink: FakeIlink, start_wechat: StartWechat, caplog: pytest.LogCaptureFixture
) -> None:
    ilink.answer_poll(TOKEN_A, SESSION_TIMEOUT)
    wechat = start_wechat(fast(ilink.url))
    polls = ilink.wait_polls(2)
    assert polls[1].at - polls[0].at >= 0.25  # session_expired_backoff_s is 0.3
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert "session has expired" in line
    assert "scan the QR code" in line
    assert "platforms.wechat.accounts.bot-a" in line
    ilink.push(TOKEN_A, ilink.message("wxid_alice", "back again"))
    assert ilink.take_sent().text == "echo: back again"
    assert wechat.texts() == ["back again"]


def test_a_wrong_token_stores_nothing_and_the_other_account_keeps_working(
    ilink: FakeIlink, start_wechat: StartWechat, caplog: pytest.LogCaptureFixture
) -> None:
    wechat = start_wechat(fast(ilink.url, {"good": TOKEN_A, "stale": "not-a-valid-token"}))
    ilink.push("not-a-valid-token", ilink.message("wxid_mallory", "let me in"))
    ilink.push(TOKEN_A, ilink.message("wxid_alice", "hello"))
    assert ilink.take_sent().text == "echo: hello"
    assert wechat.texts() == ["hello"]
    assert any("'stale'" in r.getMessage() and "expired" in r.getMessage() for r in caplog.records)
    assert wechat.adapter.connection_problem() == (
        "account 'stale': reconnecting (the iLink session has expired (errcode -14); log the bot in again (scan the "
        "QR code) and put the new bot token in platforms.wechat.accounts.stale (token or token_env))"
    )


@pytest.mark.slow
def test_a_failing_poll_is_a_connection_problem_naming_the_account_until_a_poll_is_answered(
    ilink: FakeIlink, start_wechat: StartWechat
) -> None:
    wechat = start_wechat(fast(ilink.url))
    assert isinstance(wechat.adapter, ConnectionReporter)
    ilink.push(TOKEN_A, ilink.message("wxid_alice", "one"))
    assert ilink.take_sent().text == "echo: one"
    assert wechat.adapter.connection_problem() is None
    for _ in range(1000):
        ilink.answer_poll(TOKEN_A, b"busy", status=503)
    problem = poll_until(wechat.adapter.connection_problem, what="the failed poll to be reported")
    assert problem == "account 'bot-a': reconnecting (getupdates answered HTTP 503 ('busy'))"
    ilink.push(TOKEN_A, ilink.message("wxid_alice", "two"))  # answers the first poll after the heal at once
    ilink.heal()
    poll_until(lambda: wechat.adapter.connection_problem() is None, what="an answered poll to clear the problem")
    assert ilink.take_sent().text == "echo: two"


@pytest.mark.slow
def test_rate_limits_http_errors_and_refused_tokens_back_off_and_polling_goes_on(
    ilink: FakeIlink, start_wechat: StartWechat, caplog: pytest.LogCaptureFixture
) -> None:
    ilink.answer_poll(TOKEN_A, RATE_LIMITED)
    ilink.answer_poll(TOKEN_A, b"busy", status=503)
    ilink.answer_poll(TOKEN_A, b"no", status=401)
    ilink.answer_poll(TOKEN_A, {"ret": -1, "errmsg": "system error"})
    wechat = start_wechat(fast(ilink.url))
    ilink.wait_polls(5)
    ilink.push(TOKEN_A, ilink.message("wxid_alice", "still there?"))
    assert ilink.take_sent().text == "echo: still there?"
    assert wechat.texts() == ["still there?"]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "rate limited" in logged
    assert "HTTP 503" in logged
    assert "refused the bot token (HTTP 401)" in logged
    assert "errmsg='system error'" in logged


# -- sending -----------------------------------------------------------------------------------------------------


def reply_rows(wechat: Wechat) -> list[tuple[int, float]]:
    with wechat.gateway.read() as store:
        return [(row.attempts, row.next_attempt_at) for row in store.outbox.unsent()]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("answer", "status", "headers", "retry_after"),
    [
        (RATE_LIMITED, 200, {}, 7.0),  # rate_limit_backoff_s
        ({"error": "slow down"}, 429, {"Retry-After": "9"}, 9.0),
        ({"error": "oops"}, 502, {}, 0.05),  # the outbox's own backoff
        (SESSION_TIMEOUT, 200, {}, 11.0),  # session_expired_backoff_s
    ],
)
def test_a_refused_reply_is_retried_when_the_answer_says_and_sent_once(
    ilink: FakeIlink,
    start_wechat: StartWechat,
    answer: dict[str, Any],
    status: int,
    headers: dict[str, str],
    retry_after: float,
) -> None:
    config = fast(ilink.url, rate_limit_backoff_s=7.0, session_expired_backoff_s=11.0)
    wechat = start_wechat(config, fake_gateway_clock=True)
    ilink.answer_send(answer, status=status, headers=headers)
    ilink.push(TOKEN_A, ilink.message("wxid_alice", "hello"))
    first = ilink.take_sent()
    assert wechat.gateway.wait_idle()
    ((attempts, due),) = reply_rows(wechat)
    assert attempts == 1
    assert due == pytest.approx(wechat.clock.now + retry_after)
    wechat.clock.advance(retry_after * 0.9)
    wechat.gateway.tick()
    assert wechat.gateway.wait_idle()
    assert ilink.sent.empty()
    wechat.clock.advance(retry_after * 0.1)
    wechat.gateway.tick()
    second = ilink.take_sent()
    assert second.body == first.body  # the same client_id: the same reply, not a new one
    assert wechat.gateway.wait_idle()
    assert reply_rows(wechat) == []
    assert ilink.sent.empty()


def test_a_long_reply_is_split_at_the_limit_and_a_retry_resumes_at_the_failed_part(
    ilink: FakeIlink, start_wechat: StartWechat
) -> None:
    ilink.max_text_chars = 100
    wechat = start_wechat(fast(ilink.url, max_message_chars=100, long_chunk_chars=1000), fake_gateway_clock=True)
    words = " ".join(f"word{i:03d}" for i in range(30))  # 239 characters
    ilink.answer_send({"ret": 0})
    ilink.answer_send({"error": "oops"}, status=500)
    ilink.push(TOKEN_A, ilink.message("wxid_alice", words, context_token="ctx-long"))
    first, failed = replies(ilink, 2)
    assert wechat.gateway.wait_idle()
    wechat.clock.advance(0.05)
    wechat.gateway.tick()
    parts = [first, *replies(ilink, 2)]
    assert failed.body == parts[1].body
    assert all(len(p.text) <= 100 and p.msg["context_token"] == "ctx-long" for p in parts)
    assert " ".join(p.text for p in parts) == "echo: " + words
    assert len({p.msg["client_id"] for p in parts}) == 3
    assert wechat.gateway.wait_idle()
    assert ilink.sent.empty()
    assert ilink.protocol_errors == []


def test_a_reply_after_a_restart_still_has_the_context_token(ilink: FakeIlink, start_wechat: StartWechat) -> None:
    wechat = start_wechat(fast(ilink.url))
    ilink.push(TOKEN_A, ilink.message("wxid_alice", "remember me", context_token="ctx-kept"))
    ilink.take_sent()
    wechat.adapter.stop()
    again = WechatAdapter(fast(ilink.url), environ={}, clock=wechat.clock)
    (sender,) = again.senders()
    again.start(GatewayInbox(wechat.gateway))
    try:
        reply = OutboundMessage(platform=PLATFORM, account_id="bot-a", chat_id="wxid_alice", text="later news")
        assert sender.send(reply) is not None
    finally:
        again.stop()
    sent = ilink.take_sent()
    assert (sent.msg["context_token"], sent.text) == ("ctx-kept", "later news")


# -- hostile answers ---------------------------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
_field = st.sampled_from(
    ["message_id", "from_user_id", "group_id", "message_type", "create_time_ms", "context_token", "item_list"]
)
_media = st.fixed_dictionaries(
    {},
    optional={
        "media": _json | st.fixed_dictionaries({}, optional={"encrypt_query_param": _json, "aes_key": _json}),
        "file_name": _json,
        "len": _json | st.sampled_from(["12", "-1", "9" * 30]),
        "aeskey": _json | st.just("00" * 16),
        "text": _json,
    },
)
_item = st.fixed_dictionaries(
    {},
    optional={
        "type": _json | st.integers(0, 6),
        "text_item": _json | st.fixed_dictionaries({"text": _json}),
        "image_item": _json | _media,
        "voice_item": _json | _media,
        "file_item": _json | _media,
        "video_item": _json | _media,
    },
)
_message = st.dictionaries(_field, _json | st.lists(_item, max_size=3), max_size=7) | _json
_answers = st.one_of(
    st.binary(max_size=40),
    st.just(b'{"ret":0,"msgs":[{"from_user_id":"\xff\xfe","item_list":[]}]}'),  # invalid UTF-8 inside
    _json.map(lambda value: json.dumps(value).encode()),
    st.fixed_dictionaries({"ret": _json, "errcode": _json, "msgs": _json}).map(lambda v: json.dumps(v).encode()),
    st.lists(_message, max_size=3).map(lambda msgs: json.dumps({"ret": 0, "msgs": msgs}).encode()),
    st.integers(1, 3).map(
        lambda n: json.dumps(
            {
                "ret": 0,
                "msgs": [
                    {"from_user_id": "wxid_huge", "item_list": [{"type": 1, "text_item": {"text": "z" * 70_000 * n}}]}
                ],
            }
        ).encode()
    ),
)


_media_fields = {2: "image_item", 3: "voice_item", 4: "file_item", 5: "video_item"}
_media_item = st.integers(2, 5).flatmap(
    lambda kind: st.fixed_dictionaries(
        {
            "type": st.just(kind),
            _media_fields[kind]: st.fixed_dictionaries(
                {"file_name": st.none() | st.text(max_size=12), "text": st.none() | st.text(max_size=12)},
                optional={
                    "media": _json
                    | st.fixed_dictionaries(
                        {}, optional={"encrypt_query_param": _json | st.just("enc-1"), "aes_key": _json}
                    ),
                    "len": _json | st.sampled_from(["12", "-1", "9" * 30]),
                    "mid_size": _json,
                    "video_size": _json,
                    "aeskey": _json | st.just("00" * 16),
                },
            ),
        }
    )
)
_user_message = st.fixed_dictionaries(
    {
        "from_user_id": st.just("wxid_alice"),
        "message_id": st.integers(1, 2**40),
        "item_list": st.lists(_media_item | _item, min_size=1, max_size=3),
    }
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(message=_message | _user_message)
def test_any_message_decodes_to_a_piece_and_its_files_or_is_malformed(message: Any) -> None:
    try:
        decoded = decode_message(msgspec.Raw(json.dumps(message).encode()))
    except Malformed:
        event("malformed")  # the reason is logged by the adapter
        return
    if decoded is None:
        event("a bot's message")
        return
    piece, refs = decoded
    assert piece.text.strip()
    event("with files" if refs else "message")
    for ref in refs:  # a file to fetch, or the reason it cannot be
        assert ref.kind in KINDS
        assert ref.size is None or ref.size >= 0
        assert (ref.problem is None) == (ref.query is not None and (ref.aes_key or ref.hex_key) is not None)


@pytest.mark.slow
def test_hostile_getupdates_answers_are_logged_and_skipped_and_the_adapter_keeps_working(
    ilink: FakeIlink, start_wechat: StartWechat, caplog: pytest.LogCaptureFixture
) -> None:
    ilink.hold_s = 0.01  # a scripted answer is served once the poll in progress returns
    wechat = start_wechat(fast(ilink.url, batch_window_s=0.0))
    ilink.wait_polls(1)

    def serve(body: bytes) -> bool:
        logged_before = len(caplog.records)
        ilink.answer_poll(TOKEN_A, body)
        served = len(ilink.polls)
        ilink.wait_polls(served + 2)  # it was served, and the adapter has come back for more
        return len(caplog.records) > logged_before

    @settings(max_examples=60, deadline=None)
    @given(body=_answers)
    def check(body: bytes) -> None:
        event("logged" if serve(body) else "taken as it came")

    check()
    # The kinds the asserts below name, whatever the random draw held.
    serve(b"{not json")
    serve(b'{"ret": 0, "msgs": "not a list"}')
    serve(b'{"ret": 0, "msgs": [{"from_user_id": 7, "item_list": "x"}]}')
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("platforms.wechat"))
    assert "is not valid JSON" in logged
    assert "has the wrong shape" in logged
    assert "skipped msgs[" in logged
    assert "unexpectedly" not in logged  # every hostile answer took an expected path
    assert all(len(text) <= 64_100 for text in wechat.texts())  # huge texts are cut, not refused
    ilink.push(TOKEN_A, ilink.message("wxid_alice", "still alive?"))
    while ilink.take_sent().text != "echo: still alive?":
        pass  # replies to whatever valid messages the examples held
    assert "still alive?" in wechat.texts()


# -- lifecycle and configuration ---------------------------------------------------------------------------------


def test_stop_aborts_a_poll_the_server_is_holding(tmp_path: Path) -> None:
    fake = FakeIlink([TOKEN_A], hold_s=30.0).start()
    try:
        adapter = WechatAdapter(fast(fake.url), environ={})
        with Gateway(tmp_path / "state.db", senders=adapter.senders()) as gateway:
            adapter.start(GatewayInbox(gateway))
            fake.wait_polls(1)
            started = time.monotonic()
            adapter.stop(timeout=5)
            assert time.monotonic() - started < 2
    finally:
        fake.stop()


def test_the_adapter_is_built_through_the_registry_and_describes_each_account() -> None:
    section = {
        "accounts": {"a@im.bot": {"token": "t1"}, "b@im.bot": {"token_env": "WX_B", "base_url": "http://127.0.0.1:9"}}
    }
    config = msgspec.convert(section, registry.config_type("wechat"))
    adapter: Adapter = registry.build("wechat", config, {"WX_B": "t2"})
    assert adapter.platform == "wechat"
    assert adapter.capabilities.max_message_chars == 2000
    lines = adapter.describe()
    assert lines[0].startswith(
        "WeChat account 'a@im.bot': long-polling https://ilinkai.weixin.qq.com/ilink/bot/getupdates"
    )
    assert "(token in config.yaml)" in lines[0]
    assert "(token from $WX_B)" in lines[1]
    assert "http://127.0.0.1:9/ilink/bot/getupdates" in lines[1]
    assert lines[0].endswith(
        "images, voice, files and video are downloaded from https://novac2c.cdn.weixin.qq.com/c2c and decrypted "
        "into the media store"
    )
    assert "no accounts" in WechatAdapter(WechatConfig(), environ={}).describe()[0]


@pytest.mark.parametrize(
    ("section", "path", "problem"),
    [
        ({"accounts": {"a": {}}}, "platforms.wechat.accounts.a.token", "needs its bot token"),
        ({"accounts": {"a": {"token": "t", "token_env": "X"}}}, "platforms.wechat.accounts.a.token_env", "not both"),
        ({"accounts": {"a": {"token": "with space"}}}, "platforms.wechat.accounts.a.token", "printable ASCII"),
        ({"accounts": {"a": {"token_env": "1BAD"}}}, "platforms.wechat.accounts.a.token_env", "variable name"),
        ({"accounts": {"a": {"token": "t", "base_url": "ftp://x"}}}, "platforms.wechat.accounts.a.base_url", "http"),
        ({"accounts": {"a b": {"token": "t"}}}, "platforms.wechat.accounts.a b", "account name"),
        ({"batch_window_s": -1}, "platforms.wechat.batch_window_s", "at least 0"),
        ({"long_chunk_wait_s": 1}, "platforms.wechat.long_chunk_wait_s", "at least batch_window_s"),
        ({"max_message_chars": 3}, "platforms.wechat.max_message_chars", "at least 16"),
        ({"retry_base_s": 0}, "platforms.wechat.retry_base_s", "positive"),
        ({"cdn_base_url": "novac2c.cdn.weixin.qq.com"}, "platforms.wechat.cdn_base_url", "http"),
        ({"download_timeout_s": 0}, "platforms.wechat.download_timeout_s", "positive"),
    ],
)
def test_a_bad_section_is_a_config_error_naming_its_field(section: dict[str, Any], path: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as caught:
        msgspec.convert(section, WechatConfig)
    assert caught.value.path == path


def test_unknown_fields_and_a_missing_token_variable_are_refused() -> None:
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        msgspec.convert({"accounts": {"a": {"token": "t", "tokn": "x"}}}, WechatConfig)
    config = WechatConfig(accounts={"a": WechatAccount(token_env="HERMES_WX")})
    with pytest.raises(ConfigError, match="HERMES_WX is not set") as caught:
        WechatAdapter(config, environ={})
    assert caught.value.path == "platforms.wechat.accounts.a.token_env"


# -- crashes -----------------------------------------------------------------------------------------------------


def stored_state(db: Path) -> AccountState:
    with Store.open(db, readonly=True) as store:
        return decode_state(store.kv.get_cursor(PLATFORM, "bot-a"), "bot-a")


def wait_for_state(db: Path, has_pending: bool, timeout: float = 20.0) -> None:
    def shaped() -> bool:
        if not db.exists():
            return False
        state = stored_state(db)
        return bool(state.pending) == has_pending and bool(state.buf)

    poll_until(shaped, timeout, what="the expected shape of the stored account state")


@pytest.mark.slow
def test_a_kill_between_accept_and_reply_loses_nothing_and_replies_once(tmp_path: Path, ilink: FakeIlink) -> None:
    db = tmp_path / "state.db"
    worker = AdapterWorker.start(db, "wechat", fast(ilink.url), agent="hold")
    try:
        ilink.push(TOKEN_A, ilink.message("wxid_alice", "survive", context_token="ctx-crash"))
        wait_for_inbox(db, 1)
        wait_for_state(db, has_pending=False)
    finally:
        worker.kill()
    assert ilink.sent.empty()
    stored = stored_state(db)
    before = len(ilink.polls)
    worker = AdapterWorker.start(db, "wechat", fast(ilink.url), agent="echo")
    try:
        reply = ilink.take_sent(timeout=20)
        ilink.wait_polls(before + 2)  # polling from the stored cursor brings nothing back
        # A later message of the same chat is the barrier: its reply leaves after any reply queued before it.
        ilink.push(TOKEN_A, ilink.message("wxid_alice", "after", context_token="ctx-after"))
        barrier = ilink.take_sent(timeout=20)
    finally:
        worker.stop()
    assert (reply.text, reply.msg["context_token"]) == ("echo: survive", "ctx-crash")
    assert barrier.text == "echo: after"
    assert ilink.sent.empty()
    assert ilink.polls[before].body["get_updates_buf"] == stored.buf
    assert [state for _, state in wait_for_inbox(db, 2)] == ["done", "done"]
    assert ilink.protocol_errors == []


@pytest.mark.slow
def test_a_kill_while_a_batch_waits_loses_nothing(tmp_path: Path, ilink: FakeIlink) -> None:
    db = tmp_path / "state.db"
    worker = AdapterWorker.start(db, "wechat", fast(ilink.url, batch_window_s=60.0, long_chunk_wait_s=60.0))
    try:
        ilink.push(TOKEN_A, ilink.message("wxid_alice", "still typing"))
        wait_for_state(db, has_pending=True)
    finally:
        worker.kill()
    worker = AdapterWorker.start(db, "wechat", fast(ilink.url), agent="echo")
    try:
        reply = ilink.take_sent(timeout=20)
    finally:
        worker.stop()
    assert reply.text == "echo: still typing"
    assert len(wait_for_inbox(db, 1)) == 1


def test_save_sends_the_markdown_as_text_since_files_go_through_weixins_cdn(
    ilink: FakeIlink, start_wechat: StartWechat
) -> None:
    wechat = start_wechat(fast(ilink.url))
    ilink.push(TOKEN_A, ilink.message("wxid_alice", "hello", context_token="ctx-alice-1"))
    assert replies(ilink, 1)[0].text == "echo: hello"
    ilink.push(TOKEN_A, ilink.message("wxid_alice", "/save", context_token="ctx-alice-2"))
    (saved,) = replies(ilink, 1)
    assert wechat.gateway.wait_idle()
    assert saved.text.startswith("# ")
    assert saved.text.index("hello") < saved.text.index("echo: hello")
    assert saved.msg["context_token"] == "ctx-alice-2"
