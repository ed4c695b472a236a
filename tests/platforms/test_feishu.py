"""The Feishu/Lark platform against a real gateway, a real loopback server and a fake Open Platform.

The fake (``feishu_fake``) encrypts, signs and builds events as Feishu documents them, independently of the
adapter's own code, so a mistake on one side cannot hide in the other. App ``main`` has an encrypt key (events
arrive sealed and signed); app ``plain`` has none (the verification token is the only check).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from hermes_actors.errors import ConfigError
from hermes_actors.media import MediaConfig
from hermes_actors.messages import OutboundMessage
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.testing import FakeClock
from platforms.base import SendError, ThreadCreator
from platforms.feishu import LARK_BASE_URL, FeishuAdapter, FeishuApp, FeishuConfig
from tests.platforms.crash import AdapterWorker, inbox_rows, wait_for_inbox
from tests.platforms.feishu_fake import Failure, FakeFeishu, deliver, seal, sign, url_verification
from tests.platforms.support import StartGateway, inbound_messages

MAIN_ID = "cli_a1b2c3d4e5f60001"
PLAIN_ID = "cli_a1b2c3d4e5f60002"
ENCRYPT_KEY = "kJ4mQ8vX2pL6tN0r"
REPO = Path(__file__).resolve().parents[2]
_DELETE = object()  # a mutation that removes a field


@pytest.fixture
def fake() -> Iterator[FakeFeishu]:
    fake = FakeFeishu()
    fake.add_app(MAIN_ID, app_secret="main-secret", verification_token="main-token", encrypt_key=ENCRYPT_KEY)
    fake.add_app(PLAIN_ID, app_secret="plain-secret", verification_token="plain-token")
    fake.start()
    yield fake
    fake.stop()


def apps_for(fake: FakeFeishu) -> dict[str, FeishuApp]:
    main, plain = fake.apps[MAIN_ID], fake.apps[PLAIN_ID]
    return {
        "main": FeishuApp(
            app_id=MAIN_ID,
            app_secret=main.app_secret,
            verification_token=main.verification_token,
            encrypt_key=main.encrypt_key,
            base_url=fake.base_url,
        ),
        "plain": FeishuApp(
            app_id=PLAIN_ID,
            app_secret=plain.app_secret,
            verification_token=plain.verification_token,
            base_url=fake.base_url + "/",
        ),
    }


@dataclasses.dataclass(frozen=True)
class Feishu:
    adapter: FeishuAdapter
    gateway: Gateway
    fake: FakeFeishu
    clock: FakeClock

    def url(self, app: str = "main") -> str:
        return f"{self.adapter.url}/feishu/events/{app}"

    def event(self, text: str | None = "hello", app: str = "main", **fields: Any) -> dict[str, Any]:
        return self.fake.message_event(MAIN_ID if app == "main" else PLAIN_ID, text, **fields)

    def push(self, payload: Any, app: str = "main", **options: Any) -> tuple[int, dict[str, Any]]:
        """Deliver ``payload`` the way Feishu delivers ``app``'s events (sealed and signed for ``main``)."""
        options.setdefault("encrypt_key", ENCRYPT_KEY if app == "main" else None)
        return deliver(self.url(app), payload, **options)

    def say(self, text: str | None = "hello", app: str = "main", **fields: Any) -> str:
        """Deliver a message event; return its routing key."""
        status, answer = self.push(self.event(text, app, **fields), app)
        assert (status, answer.get("accepted")) == (200, True), answer
        return str(answer["routing_key"])

    def session_of(self, routing_key: str) -> str:
        session_id = self.gateway.session_for(routing_key)
        assert session_id is not None, f"no session for {routing_key}"
        return session_id

    def transcript(self, routing_key: str) -> list[tuple[str, str | None]]:
        with self.gateway.read() as store:
            return [(m.role, m.content) for m in store.load_transcript(self.session_of(routing_key))]


StartFeishu = Callable[..., Feishu]


@pytest.fixture
def start_feishu(fake: FakeFeishu, start_gateway: StartGateway) -> StartFeishu:
    """Start a gateway on ``tmp_path`` with the adapter on port 0; everything is stopped at the end."""

    def start(*, media: MediaConfig | None = None, **options: Any) -> Feishu:
        clock = FakeClock()
        options.setdefault("apps", apps_for(fake))
        adapter = FeishuAdapter(FeishuConfig(port=0, **options), environ={}, clock=clock)
        gateway = start_gateway(adapter, clock=clock, media=media)
        return Feishu(adapter=adapter, gateway=gateway, fake=fake, clock=clock)

    return start


def stored(feishu: Feishu) -> tuple[int, int]:
    """(pending inbox rows, sessions) in the store."""
    with feishu.gateway.read() as store:
        return len(store.inbox.pending()), len(store.list_sessions())


# -- URL verification ---------------------------------------------------------------------------------------------


def test_the_url_verification_challenge_is_answered_within_a_second_sealed_or_plain(
    start_feishu: StartFeishu,
) -> None:
    feishu = start_feishu()
    cases = [
        ("main", "main-token", {"signed": False}),  # Feishu does not sign the challenge
        ("main", "main-token", {}),
        ("plain", "plain-token", {}),
    ]
    # Untimed first: the first request also pays one-time costs on both sides (imports, the AES backend, the
    # server's first connection) that Feishu's 1 s limit on each challenge is not about.
    assert feishu.push(url_verification("main-token", "warm-up"), "main")[0] == 200
    for app, token, options in cases:
        started = time.monotonic()
        status, answer = feishu.push(url_verification(token, f"challenge-{app}"), app, **options)
        assert time.monotonic() - started < 1.0
        assert (status, answer) == (200, {"challenge": f"challenge-{app}"})
    status, answer = feishu.push(url_verification("stolen-token"), "plain")
    assert (status, answer) == (401, {"error": "the verification token does not match app 'plain''s"})
    status, answer = feishu.push(url_verification("main-token"), "main", encrypt_key="another-key", signed=False)
    assert (status, answer) == (401, {"error": "the body cannot be decrypted with the encrypt key of app 'main'"})
    assert stored(feishu) == (0, 0)


# -- chats, groups, threads and tenants ----------------------------------------------------------------------------


def test_a_direct_message_gets_its_own_session_and_the_reply_goes_to_the_chat(start_feishu: StartFeishu) -> None:
    feishu = start_feishu()
    status, answer = feishu.push(feishu.event("hello", chat_id="oc_dm1", event_id="ev-1", message_id="om_in1"))
    key = "agent:main:feishu.tenant-a~main:dm:oc_dm1"
    assert (status, answer) == (200, {"accepted": True, "duplicate": False, "routing_key": key})
    (sent,) = feishu.fake.wait_sent(1)
    assert (sent.app_id, sent.chat_id, sent.text, sent.reply_to, sent.in_thread) == (
        MAIN_ID,
        "oc_dm1",
        "echo: hello",
        None,
        False,
    )
    assert feishu.gateway.wait_idle()
    assert feishu.transcript(key) == [("user", "hello"), ("assistant", "echo: hello")]
    with feishu.gateway.read() as store:
        (session,) = store.list_sessions()
        (inbox,) = store.sql.execute("SELECT platform_message_id FROM inbox")
        (sent_id,) = store.sql.execute("SELECT platform_message_id FROM outbox")
    assert (session.scope_id, session.account_id, session.chat_type) == ("tenant-a", "main", "dm")
    assert session.user_id == "on_alice"  # the union_id: stable across the tenant's apps
    assert inbox == ("ev-1",)  # deduplicated on the event id
    assert sent_id == (sent.message_id,)
    (call,) = feishu.fake.calls
    assert call.path == "/open-apis/im/v1/messages"
    assert call.query == {"receive_id_type": "chat_id"}
    assert call.authorization is not None
    assert call.authorization.startswith("Bearer t-")
    assert feishu.fake.token_requests == [MAIN_ID]


def test_group_members_each_get_a_session_and_mentions_read_as_names(start_feishu: StartFeishu) -> None:
    feishu = start_feishu()
    mention = [("@_user_1", "Hermes")]
    alice = feishu.say("@_user_1 hi", chat_type="group", chat_id="oc_g", mentions=mention)
    bob = feishu.say("@_user_1 hey", chat_type="group", chat_id="oc_g", union_id="on_bob", open_id="ou_bob")
    nameless = feishu.say("hi all @_all", chat_type="group", chat_id="oc_g", union_id="", open_id="ou_carol")
    assert [alice, bob, nameless] == [
        "agent:main:feishu.tenant-a~main:group:oc_g:on_alice",
        "agent:main:feishu.tenant-a~main:group:oc_g:on_bob",
        "agent:main:feishu.tenant-a~main:group:oc_g:ou_carol",  # no union_id: the open_id stands in
    ]
    assert feishu.gateway.wait_idle()
    assert len({feishu.session_of(key) for key in (alice, bob, nameless)}) == 3
    assert feishu.transcript(alice)[0] == ("user", "@Hermes hi")
    assert feishu.transcript(bob)[0] == ("user", "@_user_1 hey")  # no mentions list: the placeholder stays
    assert feishu.transcript(nameless)[0] == ("user", "hi all @all")
    assert sorted(m.text for m in feishu.fake.wait_sent(3)) == [
        "echo: @Hermes hi",
        "echo: @_user_1 hey",
        "echo: hi all @all",
    ]
    assert {m.chat_id for m in feishu.fake.sent} == {"oc_g"}


def test_a_thread_is_one_shared_session_and_replies_go_into_the_thread(start_feishu: StartFeishu) -> None:
    feishu = start_feishu()
    thread = {"chat_type": "group", "chat_id": "oc_g", "thread_id": "omt_1"}
    keys = [
        feishu.say("first post", message_id="om_root", **thread),  # a topic's first post is its own root
        feishu.say("reply", root_id="om_root", **thread),
        feishu.say("me too", root_id="om_root", union_id="on_bob", **thread),
    ]
    assert set(keys) == {"agent:main:feishu.tenant-a~main:group:oc_g:om_root"}
    sent = feishu.fake.wait_sent(3)
    assert feishu.gateway.wait_idle()
    assert [role for role, _ in feishu.transcript(keys[0])] == ["user", "assistant"] * 3
    assert {(m.reply_to, m.in_thread, m.thread_id, m.chat_id) for m in sent} == {("om_root", True, "omt_1", "oc_g")}
    assert {call.path for call in feishu.fake.calls} == {"/open-apis/im/v1/messages/om_root/reply"}


def test_two_tenants_and_two_apps_with_the_same_chat_id_never_share_a_session(start_feishu: StartFeishu) -> None:
    feishu = start_feishu()
    same = {"chat_type": "group", "chat_id": "oc_same", "union_id": "on_same"}
    keys = [
        feishu.say("a", **same),
        feishu.say("b", tenant_key="tenant-b", **same),
        feishu.say("c", app="plain", **same),
        feishu.say("d", chat_type="p2p", chat_id="oc_same"),
    ]
    assert keys == [
        "agent:main:feishu.tenant-a~main:group:oc_same:on_same",
        "agent:main:feishu.tenant-b~main:group:oc_same:on_same",
        "agent:main:feishu.tenant-a~plain:group:oc_same:on_same",
        "agent:main:feishu.tenant-a~main:dm:oc_same",
    ]
    assert feishu.gateway.wait_idle()
    assert len({feishu.session_of(key) for key in keys}) == 4
    replies = {(m.app_id, m.text) for m in feishu.fake.wait_sent(4)}
    assert replies == {(MAIN_ID, "echo: a"), (MAIN_ID, "echo: b"), (PLAIN_ID, "echo: c"), (MAIN_ID, "echo: d")}
    assert sorted(feishu.fake.token_requests) == [MAIN_ID, PLAIN_ID]  # each app's token, fetched once


def test_attachments_become_stand_ins_and_posts_become_text(start_feishu: StartFeishu) -> None:
    feishu = start_feishu()
    for message_id, key, kind, mime in (
        ("om_0", "img_v2_1", "image", "image/png"),
        ("om_1", "file_1", "file", "application/pdf"),
        ("om_2", "file_2", "file", "video/mp4"),
        ("om_4", "img_1", "image", "image/jpeg"),
    ):
        feishu.fake.add_resource(message_id, key, f"bytes of {key}".encode(), type=kind, content_type=mime)
    post = {
        "title": "Plan",
        "content": [
            [{"tag": "text", "text": "ask "}, {"tag": "at", "user_id": "@_user_1", "user_name": "Hermes"}],
            [{"tag": "a", "text": "the doc", "href": "https://x"}, {"tag": "img", "image_key": "img_1"}],
        ],
    }
    cases = [
        ("image", json.dumps({"image_key": "img_v2_1"}), "[image]"),
        ("file", json.dumps({"file_key": "file_1", "file_name": "a.pdf"}), "[file]"),
        ("media", json.dumps({"file_key": "file_2"}), "[video]"),
        ("hongbao", "{}", "[hongbao]"),
        ("post", json.dumps(post), "Plan\nask @Hermes\nthe doc[image]"),
        ("post", json.dumps({"zh_cn": {"title": "", "content": [[{"tag": "text", "text": "你好"}]]}}), "你好"),
    ]
    for number, (kind, content, _) in enumerate(cases):
        feishu.say(None, chat_id=f"oc_{number}", message_type=kind, content=content, message_id=f"om_{number}")
    assert feishu.gateway.wait_idle()
    attached = {
        0: "[attached image (image/png, 17 bytes), saved at ",
        1: "[attached document a.pdf (application/pdf, 15 bytes), saved at ",
        2: "[attached video (video/mp4, 15 bytes), saved at ",
        4: "[attached image (image/jpeg, 14 bytes), saved at ",
    }
    for number, (_, _, text) in enumerate(cases):
        ((role, stored), _) = feishu.transcript(f"agent:main:feishu.tenant-a~main:dm:oc_{number}")
        assert stored is not None
        if number in attached:
            assert (role, stored.partition("\n[attached")[0]) == ("user", text)
            assert f"\n{attached[number]}{feishu.gateway.media.directory}/" in f"\n{stored}"
        else:
            assert (role, stored) == ("user", text)
    assert [(d.message_id, d.key, d.type, d.status) for d in feishu.fake.downloads] == [
        ("om_0", "img_v2_1", "image", 200),
        ("om_1", "file_1", "file", 200),
        ("om_2", "file_2", "file", 200),
        ("om_4", "img_1", "image", 200),
    ]


def test_an_image_is_downloaded_with_the_tenant_token_before_the_event_is_acknowledged(
    start_feishu: StartFeishu, tmp_path: Path
) -> None:
    feishu = start_feishu()
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(100))
    feishu.fake.add_resource("om_img", "img_v3_abc", png, type="image", content_type="image/png")
    content = json.dumps({"image_key": "img_v3_abc"})
    key = feishu.say(None, message_type="image", content=content, message_id="om_img", chat_id="oc_img")
    digest = hashlib.sha256(png).hexdigest()
    cached = tmp_path / "media" / digest[:2] / f"{digest}.png"
    assert cached.read_bytes() == png
    (message,) = inbound_messages(feishu.gateway, "feishu")
    (attachment,) = message.attachments  # in the row the 200 acknowledged
    assert (attachment.kind, attachment.mime_type, attachment.size, attachment.sha256, attachment.source_url) == (
        "image",
        "image/png",
        len(png),
        digest,
        None,
    )
    (sent,) = feishu.fake.wait_sent(1)
    assert sent.text == f"echo: [image]\n[attached image (image/png, {len(png)} bytes), saved at {cached}]"
    (download,) = feishu.fake.downloads
    (send,) = feishu.fake.calls
    assert download.authorization == send.authorization  # one cached tenant token for both
    assert feishu.fake.token_requests == [MAIN_ID]
    with feishu.gateway.read() as store:
        (row,) = store.attachments.for_session(feishu.session_of(key))
    assert (row.sha256, row.error) == (digest, None)


def test_a_refused_token_is_replaced_once_and_the_file_still_arrives(start_feishu: StartFeishu) -> None:
    feishu = start_feishu()
    feishu.say("warm the token cache", chat_id="oc_t")
    feishu.fake.wait_sent(1)
    feishu.fake.revoke_tokens()
    feishu.fake.add_resource("om_f", "file_9", b"hello, file", type="file", content_type="text/plain")
    content = json.dumps({"file_key": "file_9", "file_name": "hello.txt"})
    feishu.say(None, message_type="file", content=content, message_id="om_f", chat_id="oc_f")
    assert [d.status for d in feishu.fake.downloads] == [400, 200]
    assert feishu.fake.token_requests == [MAIN_ID, MAIN_ID]
    (_, sent) = feishu.fake.wait_sent(2)
    assert sent.text.startswith("echo: [file]\n[attached document hello.txt (text/plain, 11 bytes), saved at ")
    assert sent.text.endswith("Its text:\nhello, file")


def test_files_over_the_limit_are_refused_from_their_size_and_the_text_still_runs(
    start_feishu: StartFeishu, tmp_path: Path
) -> None:
    feishu = start_feishu(media=MediaConfig(max_bytes=1024, allowed_kinds=("image", "document", "video")))
    feishu.fake.add_resource("om_big", "img_big", bytes(4096), type="image", content_type="image/png")
    feishu.fake.add_resource("om_chunked", "file_c", bytes(4096), type="file", content_type="video/mp4", chunked=True)
    post = {"content": [[{"tag": "text", "text": "see"}, {"tag": "img", "image_key": "img_big"}]]}
    feishu.say(None, message_type="post", content=json.dumps(post), message_id="om_big", chat_id="oc_1")
    media_message = json.dumps({"file_key": "file_c", "file_name": "clip.mp4", "image_key": "img_thumb"})
    feishu.say(None, message_type="media", content=media_message, message_id="om_chunked", chat_id="oc_2")
    voice = json.dumps({"file_key": "file_voice", "duration": 2000})
    feishu.say(None, message_type="audio", content=voice, message_id="om_voice", chat_id="oc_3")
    replies = {m.chat_id: m.text for m in feishu.fake.wait_sent(3)}
    # The size Feishu announced (Content-Length) is refused before the body is read ...
    assert replies["oc_1"] == (
        "I could not read the image: it is 4 KB, over the 1 KB limit.\n\n"
        "echo: see[image]\n[image was not read: it is 4 KB, over the 1 KB limit]"
    )
    # ... one sent without a length is cut off once it passes the limit ...
    assert replies["oc_2"] == (
        "I could not read clip.mp4: it is over the 1 KB limit.\n\n"
        "echo: [video]\n[video clip.mp4 was not read: it is over the 1 KB limit]"
    )
    # ... and a kind that is not accepted is not even asked for.
    assert replies["oc_3"].startswith("I could not read the audio: audio files are not accepted here")
    assert [d.key for d in feishu.fake.downloads] == ["img_big", "file_c"]
    assert not (tmp_path / "media").exists()


def test_files_feishu_will_not_hand_over_become_refused_attachments_that_say_why(
    start_feishu: StartFeishu, tmp_path: Path
) -> None:
    feishu = start_feishu()
    feishu.fake.add_resource("om_ok", "img_ok", b"fine", type="image")
    feishu.fake.fail_next_download(Failure(status=500, code=0, msg="boom"))
    content = json.dumps({"image_key": "img_ok"})
    feishu.say("first", message_type="image", content=content, message_id="om_ok", chat_id="oc_1")
    unknown = json.dumps({"file_key": "file_missing", "file_name": "notes.txt"})
    feishu.say(None, message_type="file", content=unknown, message_id="om_missing", chat_id="oc_2")
    feishu.fake.fail_next_download(Failure(status=429, code=99991400, msg="request trigger frequency limit"))
    feishu.say(None, message_type="image", content=content, message_id="om_ok", chat_id="oc_3", event_id="ev-3")
    replies = {m.chat_id: m.text for m in feishu.fake.wait_sent(3)}
    assert replies["oc_1"].startswith("I could not read the image: Feishu would not hand it over (code 0: boom).")
    assert replies["oc_2"].startswith(
        "I could not read notes.txt: Feishu would not hand it over (code 234001: Invalid request param.)."
    )
    assert replies["oc_3"].startswith(
        "I could not read the image: Feishu asked to slow down; send it again in a minute."
    )
    assert replies["oc_1"].endswith("echo: [image]\n[image was not read: Feishu would not hand it over (code 0: boom)]")
    assert [d.status for d in feishu.fake.downloads] == [500, 400, 429]
    assert not (tmp_path / "media").exists()


def test_events_without_a_user_message_are_acknowledged_and_ignored(start_feishu: StartFeishu) -> None:
    feishu = start_feishu()
    other = feishu.event()
    other["header"]["event_type"] = "im.chat.member.bot.added_v1"
    other["event"] = {"chat_id": "oc_x", "operator_id": {"open_id": "ou_1"}}
    cases = [
        (other, "event type 'im.chat.member.bot.added_v1' is not handled"),
        (feishu.event(sender_type="app", message_id="om_bot"), "message om_bot comes from a 'app', not a user"),
        (feishu.event(chat_type="secret", message_id="om_s"), "message om_s is in a chat of unknown type 'secret'"),
        (feishu.event("   ", message_id="om_blank"), "message om_blank has no text"),
    ]
    for payload, reason in cases:
        assert feishu.push(payload) == (200, {"ignored": reason})
    assert stored(feishu) == (0, 0)


# -- refused requests ---------------------------------------------------------------------------------------------


def test_bad_signatures_tokens_and_keys_are_refused_with_401_and_nothing_is_stored(
    start_feishu: StartFeishu, caplog: pytest.LogCaptureFixture
) -> None:
    feishu = start_feishu()
    signature = {"X-Lark-Signature": "0" * 64}
    cases: list[tuple[Any, str, dict[str, Any], str]] = [
        (feishu.event(), "main", {"headers": signature}, "X-Lark-Signature does not match"),
        (feishu.event(), "main", {"signing_key": "guessed-key"}, "X-Lark-Signature does not match"),
        (feishu.event(), "main", {"encrypt_key": "guessed-key"}, "X-Lark-Signature does not match"),
        (feishu.event(), "main", {"encrypt_key": "guessed-key", "signed": False}, "cannot be decrypted"),
        (feishu.event(), "main", {"signed": False}, "unsigned event"),
        (feishu.event(), "main", {"headers": {"X-Lark-Request-Nonce": ""}}, "X-Lark-Signature does not match"),
        (feishu.event(), "main", {"signed": False, "headers": {"X-Lark-Signature": "ab"}}, "go together"),
        (feishu.event(), "main", {"encrypt_key": None}, "its events arrive encrypted; refused a plain one"),
        (feishu.event(token="stolen"), "main", {}, "the verification token does not match app 'main''s"),
        (feishu.event(app="plain", token="stolen"), "plain", {}, "the verification token does not match"),
        (feishu.event(app="plain", token=""), "plain", {}, "the verification token does not match"),
    ]
    for payload, app, options, reason in cases:
        status, answer = feishu.push(payload, app, **options)
        assert status == 401, (options, answer)
        assert reason in answer["error"]
    assert "feishu app 'main': refused a request (401 X-Lark-Signature does not match" in caplog.text
    assert stored(feishu) == (0, 0)
    assert feishu.fake.sent == []


def deliver_signed_at(url: str, payload: dict[str, Any], timestamp: float) -> tuple[int, dict[str, Any]]:
    """Deliver ``payload`` to app ``main``'s ``url`` sealed and correctly signed, as if sent at ``timestamp``."""
    body = seal(json.dumps(payload).encode(), ENCRYPT_KEY)
    when = str(int(timestamp))
    headers = {
        "X-Lark-Request-Timestamp": when,
        "X-Lark-Request-Nonce": "n0nce",
        "X-Lark-Signature": sign(when, "n0nce", ENCRYPT_KEY, body),
    }
    return deliver(url, body, headers=headers)


def signed_at(feishu: Feishu, timestamp: int, text: str) -> tuple[int, dict[str, Any]]:
    """Deliver a message event to app ``main`` as if sent at ``timestamp``."""
    return deliver_signed_at(feishu.url(), feishu.event(text, chat_id="oc_replay"), timestamp)


def test_a_signed_request_older_or_newer_than_five_minutes_is_refused_as_a_replay(
    start_feishu: StartFeishu, caplog: pytest.LogCaptureFixture
) -> None:
    feishu = start_feishu()
    now = int(feishu.clock.now)
    for timestamp, when in (
        (now - 301, "301 s old"),
        (now + 301, "301 s in the future"),
        (now - 86_400, "86400 s old"),
    ):
        status, answer = signed_at(feishu, timestamp, "replayed")
        assert (status, answer) == (
            401,
            {"error": f"X-Lark-Request-Timestamp is {when}, outside the 300 s window"},
        )
    for odd in ("1764460800.5", "-1", "soon"):
        status, answer = deliver(
            feishu.url(),
            feishu.event("odd clock"),
            encrypt_key=ENCRYPT_KEY,
            headers={"X-Lark-Request-Timestamp": odd},
        )
        assert (status, answer) == (
            401,
            {"error": "X-Lark-Request-Timestamp must be an integer number of Unix seconds"},
        )
    assert "refused a request (401 X-Lark-Request-Timestamp is 301 s old" in caplog.text
    assert stored(feishu) == (0, 0)
    for timestamp in (now - 300, now + 300, now):
        status, answer = signed_at(feishu, timestamp, f"fresh at {timestamp - now}")
        assert (status, answer.get("accepted")) == (200, True), answer
    assert feishu.gateway.wait_idle()
    assert sorted(m.text for m in feishu.fake.sent) == ["echo: fresh at -300", "echo: fresh at 0", "echo: fresh at 300"]


def test_malformed_unknown_and_oversized_requests_get_400_404_and_413(start_feishu: StartFeishu) -> None:
    feishu = start_feishu(max_body_bytes=4096)

    def plain(**fields: Any) -> dict[str, Any]:
        return feishu.event(app="plain", **fields)

    def changed(path: str, value: Any) -> dict[str, Any]:
        payload = plain()
        *parents, last = path.split(".")
        target = payload
        for part in parents:
            target = target[part]
        if value is _DELETE:
            del target[last]
        else:
            target[last] = value
        return payload

    bad: list[tuple[Any, str]] = [
        (b"{not json", "the body is not valid JSON"),
        (b'{"schema": "2.0", "header": {"event_id": "\xff"}}', "the body is not valid JSON (Invalid UTF-8"),
        (b"[1, 2]", "the body is not in Feishu's event format (Expected `object`, got `array`)"),
        ({"encrypt": "c2VhbGVk"}, "the body is encrypted but app 'plain' has no encrypt key"),
        (changed("schema", "1.0"), "only event schema 2.0 is handled"),
        (changed("header.app_id", MAIN_ID), f"the event is for app '{MAIN_ID}', but this URL is app 'plain'"),
        (changed("header.event_id", 7), "Expected `str`, got `int` - at `$.header.event_id`"),
        (changed("header.event_id", ""), "Expected `str` of length >= 1 - at `$.header.event_id`"),
        (changed("header.event_id", _DELETE), "Object missing required field `event_id` - at `$.header`"),
        (changed("event.message.chat_id", _DELETE), "Object missing required field `chat_id` - at `$.event.message`"),
        (changed("event.message.chat_id", "x" * 300), "length <= 256 - at `$.event.message.chat_id`"),
        (changed("event.sender", "ou_1"), "Expected `object`, got `str` - at `$.event.sender`"),
        (changed("event.message.mentions", [{"key": 1}]), "at `$.event.message.mentions[0].key`"),
        (changed("event.message.content", "not json"), "$.event.message.content is not a text message's JSON"),
        (changed("event.message.content", '{"text": 5}'), "$.event.message.content is not a text message's JSON"),
        (plain(message_type="post", content="[]"), "$.event.message.content is not a post message's JSON"),
    ]
    v1 = {"uuid": "u1", "token": "plain-token", "ts": "1", "type": "event_callback", "event": {"type": "message"}}
    bad.append((v1, "only event schema 2.0 is handled"))
    for payload, reason in bad:
        status, answer = feishu.push(payload, "plain")
        assert status == 400, (payload, answer)
        assert reason in answer["error"], answer
    assert feishu.push(plain(), "nope") == (404, {"error": "no feishu app 'nope'; add it under platforms.feishu.apps"})
    status, answer = feishu.push(plain(text="x" * 5000), "plain")
    assert (status, answer) == (413, {"error": "the body is larger than 4096 bytes (platforms.feishu.max_body_bytes)"})
    assert stored(feishu) == (0, 0)
    assert feishu.say("still here", app="plain") == "agent:main:feishu.tenant-a~plain:dm:oc_chat"


def test_a_message_that_cannot_be_stored_gets_503_so_feishu_delivers_it_again(start_feishu: StartFeishu) -> None:
    feishu = start_feishu()
    feishu.gateway.stop()
    status, answer = feishu.push(feishu.event())
    assert (status, answer) == (503, {"error": "the message could not be stored; deliver it again later"})


# -- retries and redeliveries -------------------------------------------------------------------------------------


def test_a_retried_event_runs_one_turn_even_after_a_restart(start_feishu: StartFeishu) -> None:
    feishu = start_feishu()
    payload = feishu.event("once", event_id="ev-retried")
    answers = [feishu.push(payload)[1] for _ in range(3)]
    assert [answer["duplicate"] for answer in answers] == [False, True, True]
    feishu.fake.wait_sent(1)
    assert feishu.gateway.wait_idle()
    key = answers[0]["routing_key"]
    assert feishu.transcript(key) == [("user", "once"), ("assistant", "echo: once")]
    feishu.adapter.stop()
    feishu.gateway.stop()
    again = start_feishu()  # the same database: Feishu retries for hours, across restarts
    status, answer = again.push(payload)
    assert (status, answer["duplicate"]) == (200, True)
    assert again.gateway.wait_idle()
    assert [m.text for m in again.fake.sent] == ["echo: once"]
    assert again.transcript(key) == [("user", "once"), ("assistant", "echo: once")]


def test_a_rate_limited_reply_is_retried_when_x_ogw_ratelimit_reset_says(start_feishu: StartFeishu) -> None:
    feishu = start_feishu()
    limit = Failure(429, 99991400, "request trigger frequency limit", {"x-ogw-ratelimit-reset": "7"})
    feishu.fake.fail_next(limit)
    feishu.say("hello")
    feishu.fake.wait_calls(1)
    assert feishu.gateway.wait_idle()
    with feishu.gateway.read() as store:
        (row,) = store.outbox.unsent()
    assert row.next_attempt_at == pytest.approx(feishu.clock.now + 7)  # not the 0.05 s backoff
    feishu.clock.advance(6.5)
    feishu.gateway.tick()
    assert feishu.gateway.wait_idle()
    assert len(feishu.fake.calls) == 1
    feishu.clock.advance(0.5)
    feishu.gateway.tick()
    (sent,) = feishu.fake.wait_sent(1)
    assert sent.text == "echo: hello"
    first, second = feishu.fake.calls
    assert first.json()["uuid"] == second.json()["uuid"] == sent.uuid  # the same reply part both times


def test_a_server_error_is_retried_with_backoff_and_the_reply_arrives_once(start_feishu: StartFeishu) -> None:
    feishu = start_feishu()
    feishu.fake.fail_next(Failure(500, 1500, "internal error"), Failure(503, 1503, "internal error"))
    feishu.say("hello")
    feishu.fake.wait_calls(1)
    assert feishu.gateway.wait_idle()
    for backoff in (0.05, 0.1):
        with feishu.gateway.read() as store:
            (row,) = store.outbox.unsent()
        assert row.next_attempt_at == pytest.approx(feishu.clock.now + backoff)
        calls = len(feishu.fake.calls)
        feishu.clock.advance(backoff)
        feishu.gateway.tick()
        feishu.fake.wait_calls(calls + 1)
        assert feishu.gateway.wait_idle()
    assert [m.text for m in feishu.fake.wait_sent(1)] == ["echo: hello"]
    assert [call.status for call in feishu.fake.calls] == [500, 503, 200]
    with feishu.gateway.read() as store:
        assert store.outbox.unsent() == []


# -- the sender on its own ----------------------------------------------------------------------------------------


def sender_for(fake: FakeFeishu, clock: FakeClock | None = None, **options: Any) -> FeishuAdapter:
    return FeishuAdapter(FeishuConfig(apps=apps_for(fake), **options), environ={}, clock=clock or FakeClock())


def reply(
    text: str = "hi", *, app: str = "main", chat: str | None = "oc_1", thread: str | None = None
) -> OutboundMessage:
    return OutboundMessage(
        platform="feishu", text=text, account_id=app, chat_id=chat, thread_id=thread, session_id="s1", answers=("e1",)
    )


def test_the_tenant_token_is_cached_refreshed_before_it_expires_and_after_a_refusal(fake: FakeFeishu) -> None:
    clock = FakeClock()
    sender = sender_for(fake, clock).sender
    sender.send(reply("one"))
    sender.send(reply("two"))
    assert fake.token_requests == [MAIN_ID]
    clock.advance(7200 - 301)  # still more than 5 minutes left
    sender.send(reply("three"))
    assert fake.token_requests == [MAIN_ID]
    clock.advance(2)
    sender.send(reply("four"))
    assert fake.token_requests == [MAIN_ID] * 2
    fake.revoke_tokens()
    sender.send(reply("five"))  # refused with 99991663, then sent with a fresh token at once
    assert fake.token_requests == [MAIN_ID] * 3
    assert [m.text for m in fake.sent] == ["one", "two", "three", "four", "five"]
    assert [call.code for call in fake.calls[-2:]] == [99991663, 0]


@pytest.mark.slow
def test_a_long_reply_is_split_under_the_request_limit_in_order(fake: FakeFeishu) -> None:
    sender = sender_for(fake).sender
    words = " ".join(f"word{n}" for n in range(40_000))  # ~350 KB of text
    cjk = "飞书消息。" * 40_000  # 3 bytes a character
    for text in (words, cjk):
        first = sender.send(reply(text))
        assert first is not None
    sent = fake.sent
    assert len(sent) > 4
    assert all(len(call.body) <= 150 * 1024 for call in fake.calls)
    assert sent[0].message_id == "om_sent1"
    assert " ".join(m.text for m in sent if m.text.startswith("word")) == words
    assert "".join(m.text for m in sent if not m.text.startswith("word")) == cjk
    assert len({m.uuid for m in sent}) == len(sent)


@pytest.mark.slow
def test_send_failures_become_send_errors_that_say_what_happened(fake: FakeFeishu) -> None:
    sender = sender_for(fake, http_timeout_s=0.3).sender
    fake.fail_next(Failure(400, 99991400, "request trigger frequency limit", {"x-ogw-ratelimit-reset": "3"}))
    with pytest.raises(SendError, match=r"asked to slow down \(HTTP 400, code 99991400\)") as limited:
        sender.send(reply())
    assert limited.value.retry_after_s == 3
    fake.fail_next(Failure(400, 230020, "rate limited in this chat"))
    with pytest.raises(SendError, match="code 230020") as chat_limited:
        sender.send(reply())
    assert chat_limited.value.retry_after_s == 1.0
    fake.fail_next(Failure(400, 230002, "Bot is not in the chat"))
    with pytest.raises(SendError, match=r"failed with code 230002 \(Bot is not in the chat, HTTP 400\); add the bot"):
        sender.send(reply())
    fake.fail_next(Failure(504, 0, stall_s=1.0))
    with pytest.raises(SendError, match="did not answer after the request was sent") as lost:
        sender.send(reply())
    assert lost.value.outcome_unknown
    fake.revoke_tokens()
    fake.apps[MAIN_ID] = dataclasses.replace(fake.apps[MAIN_ID], app_secret="rotated")
    with pytest.raises(SendError, match=r"check app_id and app_secret of platforms\.feishu\.apps\.main") as refused:
        sender.send(reply())
    assert not refused.value.outcome_unknown
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    apps = {"main": msgspec.structs.replace(apps_for(fake)["main"], base_url=f"http://127.0.0.1:{closed}")}
    with pytest.raises(SendError, match=r"tenant access token.*cannot be reached") as unreachable:
        FeishuAdapter(FeishuConfig(apps=apps), environ={}).sender.send(reply())
    assert not unreachable.value.outcome_unknown
    assert sender.send(reply(app="gone")) is None  # an app no longer configured: the reply stays in the transcript
    assert sender.send(reply(chat=None)) is None


def test_a_thread_for_a_handoff_is_a_root_message_that_replies_go_under(fake: FakeFeishu) -> None:
    sender = sender_for(fake).sender
    assert isinstance(sender, ThreadCreator)
    with pytest.raises(SendError, match="name one of: main, plain"):
        sender.create_thread("oc_g", "Handoff")
    root = sender.create_thread("oc_g", "Handoff from the terminal", account_id="plain")
    sender.send(reply("continuing here", app="plain", chat="oc_g", thread=root))
    opened, continued = fake.sent
    assert (opened.message_id, opened.chat_id, opened.text, opened.app_id) == (
        root,
        "oc_g",
        "Handoff from the terminal",
        PLAIN_ID,
    )
    assert (continued.reply_to, continued.in_thread, continued.chat_id) == (root, True, "oc_g")


# -- fuzzing ------------------------------------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
_paths = st.sampled_from(
    [
        "schema",
        "header",
        "header.event_id",
        "header.event_type",
        "header.token",
        "header.app_id",
        "header.tenant_key",
        "event",
        "event.sender",
        "event.sender.sender_id",
        "event.sender.sender_id.union_id",
        "event.sender.sender_type",
        "event.message",
        "event.message.message_id",
        "event.message.chat_id",
        "event.message.chat_type",
        "event.message.message_type",
        "event.message.content",
        "event.message.mentions",
        "event.message.thread_id",
        "event.message.root_id",
    ]
)
_mutations = st.lists(st.tuples(_paths, st.just(_DELETE) | _json | st.text(max_size=300)), max_size=3)
_tampering = st.sampled_from(["none", "none", "unsigned", "bad-signature", "wrong-key", "unsealed", "plain-app"])


def _mutate(payload: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    target: Any = payload
    for part in parents:
        target = target.get(part) if isinstance(target, dict) else None
    if not isinstance(target, dict):
        return
    if value is _DELETE:
        target.pop(last, None)
    else:
        target[last] = value


@pytest.mark.slow
def test_hostile_requests_get_a_clear_4xx_and_the_adapter_keeps_working(
    start_feishu: StartFeishu, caplog: pytest.LogCaptureFixture
) -> None:
    feishu = start_feishu(max_body_bytes=16 * 1024)
    caplog.set_level(logging.WARNING, logger="platforms.feishu")

    @settings(max_examples=150, deadline=None)
    @given(
        body=st.none() | st.binary(max_size=64) | _json.map(lambda p: json.dumps(p).encode()),
        text=st.text(max_size=50)
        | st.builds(lambda unit, n: unit * n, st.text(min_size=1, max_size=4), st.integers(1000, 6000)),
        mutations=_mutations,
        tampering=_tampering,
    )
    def check(body: bytes | None, text: str, mutations: list[tuple[str, Any]], tampering: str) -> None:
        payload: Any = body
        if body is None:
            payload = feishu.event(text, chat_type="group", chat_id="oc_fuzz")
            for path, value in mutations:
                _mutate(payload, path, value)
        choices: dict[str, dict[str, Any]] = {
            "none": {},
            "unsigned": {"signed": False},
            "bad-signature": {"headers": {"X-Lark-Signature": "f" * 64}},
            "wrong-key": {"encrypt_key": "wrong-key"},
            "unsealed": {"encrypt_key": None},
            "plain-app": {},
        }
        options = choices[tampering]
        caplog.clear()
        status, answer = feishu.push(payload, "plain" if tampering == "plain-app" else "main", **options)
        event(f"HTTP {status}")
        assert status in (200, 400, 401, 413)
        if status == 200:
            assert answer.get("accepted") is True or isinstance(answer.get("ignored"), str)
        else:
            assert isinstance(answer["error"], str)
            assert f"refused a request ({status} " in caplog.text
        if tampering in ("unsigned", "bad-signature", "wrong-key", "unsealed"):
            assert status != 200  # never accepted

    check()
    assert feishu.gateway.wait_idle()
    key = feishu.say("still here", chat_id="oc_after")
    assert feishu.gateway.wait_idle()
    assert feishu.transcript(key) == [("user", "still here"), ("assistant", "echo: still here")]
    assert any(m.text == "echo: still here" and m.chat_id == "oc_after" for m in feishu.fake.sent)


# -- configuration ------------------------------------------------------------------------------------------------

_APP = {"app_id": "cli_1", "app_secret": "s", "verification_token": "t"}


@pytest.mark.parametrize(
    ("section", "path", "problem"),
    [
        ({"apps": {"a": {"app_id": "cli_1", "verification_token": "t"}}}, "apps.a.app_secret", "is required; copy it"),
        ({"apps": {"a": {"app_id": "cli_1", "app_secret": "s"}}}, "apps.a.verification_token", "is required"),
        ({"apps": {"a": {**_APP, "app_secret_env": "S"}}}, "apps.a.app_secret_env", "not both"),
        ({"apps": {"a": {**_APP, "encrypt_key": " "}}}, "apps.a.encrypt_key", "is empty"),
        ({"apps": {"a": {**_APP, "encrypt_key_env": "1X"}}}, "apps.a.encrypt_key_env", "environment variable name"),
        ({"apps": {"a": {**_APP, "app_id": " "}}}, "apps.a.app_id", "must not be empty"),
        ({"apps": {"a": {**_APP, "base_url": "ftp://open.feishu.cn"}}}, "apps.a.base_url", LARK_BASE_URL),
        ({"apps": {"a": {**_APP, "base_url": "https://x:99999"}}}, "apps.a.base_url", "http(s) URL"),
        ({"apps": {"bad name": _APP}}, "apps.bad name", "an app name is 1 to 64"),
        ({"apps": {"a": _APP, "b": _APP}}, "apps.b.app_id", "app 'a' has the same app_id"),
        ({"port": 70000}, "port", "is not a TCP port"),
        ({"host": " "}, "host", "must not be empty"),
        ({"chat_messages_per_second": 0}, "chat_messages_per_second", "must be a positive number"),
    ],
)
def test_a_bad_section_is_a_config_error_naming_its_field(section: dict[str, Any], path: str, problem: str) -> None:
    with pytest.raises(ConfigError) as error:
        msgspec.convert(section, FeishuConfig)  # as the daemon loads config.yaml
    assert error.value.path == f"platforms.feishu.{path}"
    assert problem in str(error.value)


def test_unknown_config_fields_are_refused() -> None:
    with pytest.raises(msgspec.ValidationError, match="app_secert"):
        msgspec.convert({"apps": {"a": {**_APP, "app_secert": "s"}}}, FeishuConfig)


def test_secrets_from_the_environment_are_read_when_the_adapter_is_built() -> None:
    app = FeishuApp(app_id="cli_1", app_secret_env="FS_SECRET", verification_token="t", encrypt_key_env="FS_KEY")
    config = FeishuConfig(apps={"a": app})
    adapter = FeishuAdapter(config, environ={"FS_SECRET": "s", "FS_KEY": "k"})
    assert "secrets from $FS_SECRET, $FS_KEY, config.yaml" in adapter.describe()[0]
    with pytest.raises(ConfigError, match="environment variable FS_KEY is not set") as missing:
        FeishuAdapter(config, environ={"FS_SECRET": "s"})
    assert missing.value.path == "platforms.feishu.apps.a.encrypt_key_env"


def test_an_encrypt_key_without_cryptography_is_a_config_error_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives.ciphers", None)  # as if not installed
    sealed = FeishuConfig(apps={"a": FeishuApp(**_APP, encrypt_key="k")})
    with pytest.raises(ConfigError, match=r"install it with: pip install 'hermes-actors\[feishu\]'") as error:
        FeishuAdapter(sealed, environ={})
    assert error.value.path == "platforms.feishu.apps.a.encrypt_key"
    FeishuAdapter(FeishuConfig(apps={"a": FeishuApp(**_APP)}), environ={})  # without a key it is not needed


@pytest.mark.slow
def test_the_module_loads_and_runs_plain_apps_without_cryptography() -> None:
    code = (
        "import sys; sys.modules['cryptography'] = None\n"
        "from platforms import registry\n"
        "import msgspec\n"
        "section = {'apps': {'a': {'app_id': 'c', 'app_secret': 's', 'verification_token': 't'}}}\n"
        "config = msgspec.convert(section, registry.config_type('feishu'))\n"
        "print(registry.build('feishu', config, {}).describe()[0])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Feishu app 'a' (c): events at POST http://127.0.0.1:8646/feishu/events/a")


def test_the_banner_names_each_app_url_and_how_events_are_checked(start_feishu: StartFeishu) -> None:
    (empty,) = FeishuAdapter(FeishuConfig(), environ={}).describe()
    assert empty.startswith("Feishu: http://127.0.0.1:8646 has no apps; add one under platforms.feishu.apps")
    feishu = start_feishu()
    base = feishu.adapter.url
    assert feishu.adapter.describe() == [
        f"Feishu app 'main' ({MAIN_ID}): events at POST {base}/feishu/events/main (encrypted and signed with the "
        f"encrypt key; secrets in config.yaml); replies through {feishu.fake.base_url}; images, files, audio and video "
        "are downloaded as attachments (im:message or im:message:readonly)",
        f"Feishu app 'plain' ({PLAIN_ID}): events at POST {base}/feishu/events/plain (verification token only; set "
        f"encrypt_key for encrypted, signed events; secrets in config.yaml); replies through {feishu.fake.base_url}; "
        "images, files, audio and video are downloaded as attachments (im:message or im:message:readonly)",
    ]


# -- crash between accept and reply -------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_kill_between_accept_and_reply_loses_nothing_and_replies_once(tmp_path: Path, fake: FakeFeishu) -> None:
    db = tmp_path / "state.db"
    config = FeishuConfig(port=0, apps=apps_for(fake))
    payload = fake.message_event(MAIN_ID, "survive", chat_id="oc_crash", event_id="ev-crash")
    worker = AdapterWorker.start(db, "feishu", config, agent="hold")
    try:
        # The worker's clock is the real one: the request is signed now.
        status, _ = deliver_signed_at(worker.url() + "/feishu/events/main", payload, time.time())
        assert status == 200
        assert wait_for_inbox(db, 1) == [("ev-crash", "pending")]
    finally:
        worker.kill()
    assert fake.sent == []
    worker = AdapterWorker.start(db, "feishu", config, agent="echo")
    try:
        (sent,) = fake.wait_sent(1, timeout=20)
        # Feishu retries the event it saw no answer for: it is recognised, and nothing more is sent.
        status, answer = deliver_signed_at(worker.url() + "/feishu/events/main", payload, time.time())
        assert (status, answer["duplicate"]) == (200, True)
    finally:
        worker.stop()
    assert (sent.chat_id, sent.text) == ("oc_crash", "echo: survive")
    assert [m.text for m in fake.sent] == ["echo: survive"]
    assert [state for _, state in inbox_rows(db)] == ["done"]


# -- /save ----------------------------------------------------------------------------------------------------------


def test_save_uploads_the_markdown_and_sends_one_file_message(start_feishu: StartFeishu) -> None:
    feishu = start_feishu()
    feishu.say("hello", chat_id="oc_dm1", event_id="ev-1", message_id="om_in1")
    feishu.fake.wait_sent(1)
    feishu.say("/save", chat_id="oc_dm1", event_id="ev-2", message_id="om_in2")
    _, saved = feishu.fake.wait_sent(2)
    assert feishu.gateway.wait_idle()
    assert (saved.msg_type, saved.chat_id, saved.app_id) == ("file", "oc_dm1", MAIN_ID)
    assert saved.file_key is not None
    assert saved.uuid is not None
    app_id, file_type, name, data = feishu.fake.uploads[saved.file_key]
    assert (app_id, file_type) == (MAIN_ID, "stream")
    assert name.endswith(".md")
    markdown = data.decode("utf-8")
    assert markdown.index("hello") < markdown.index("echo: hello")
    assert len(feishu.fake.sent) == 2  # the file instead of the text, not beside it


def test_save_sends_the_text_when_feishu_refuses_the_upload(
    start_feishu: StartFeishu, caplog: pytest.LogCaptureFixture
) -> None:
    feishu = start_feishu()
    feishu.say("hello", chat_id="oc_dm1", event_id="ev-1", message_id="om_in1")
    feishu.fake.wait_sent(1)
    feishu.fake.fail_next(Failure(400, 99991672, "Access denied: the app lacks im:resource:upload"))
    with caplog.at_level(logging.WARNING, logger="platforms.support.documents"):
        feishu.say("/save", chat_id="oc_dm1", event_id="ev-2", message_id="om_in2")
        _, text = feishu.fake.wait_sent(2)
        assert feishu.gateway.wait_idle()
    assert text.msg_type == "text"
    assert text.text.index("hello") < text.text.index("echo: hello")
    assert feishu.fake.uploads == {}
    assert "im:resource:upload" in caplog.text
    assert "the reply's text is sent instead" in caplog.text


def test_a_body_sealed_with_another_key_whose_padding_happens_to_check_is_still_the_wrong_key() -> None:
    # About one wrong-key body in 256 decrypts to valid PKCS#7 padding and garbage: it is the key, not the format.
    from platforms.feishu import events
    from platforms.feishu.config import resolve_apps
    from platforms.support.http_body import Refused

    keys = FeishuApp(app_id="cli_main", app_secret="s", verification_token="t", encrypt_key="main-key")
    app = resolve_apps(FeishuConfig(apps={"main": keys}), {})["main"]
    assert app.aes_key is not None
    for _ in range(5000):
        sealed = json.loads(seal(b'{"type": "url_verification"}', "another-key"))["encrypt"]
        if events._decrypt(app.aes_key, sealed) is not None:  # the padding checked by chance
            break
    else:
        pytest.fail("no wrong-key body passed the padding check in 5,000 tries")
    with pytest.raises(Refused) as refused:
        events._unseal(app, sealed, signed=False)
    assert refused.value.reason == "the body cannot be decrypted with the encrypt key of app 'main'"
