"""The Matrix platform against a real gateway and a local fake homeserver (tests/platforms/matrix_fake.py).

Users post into rooms on the fake; the adapter's real ``/sync`` long polls fetch them; replies are read back from
the events the fake made for the bot's ``PUT .../send/m.room.message/{txnId}`` calls.
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
from hermes_actors.media import KINDS, MediaConfig
from hermes_actors.messages import InboundMessage, OutboundMessage
from hermes_actors.ports import Inbox
from hermes_actors.routing import SessionSource, build_session_key, parse_session_key
from hermes_actors.testing import FakeClock, FakePlatform, poll_until
from platforms import registry
from platforms.base import Adapter, ConnectionReporter, SendError, ThreadCreator
from platforms.matrix import (
    EventError,
    MatrixAccount,
    MatrixAdapter,
    MatrixConfig,
    SyncError,
    decode_event,
    decode_sync,
    inbound_message,
    incoming_of,
    repair_json,
    transaction_id,
    wire_length,
)
from platforms.matrix.state import AccountState, decode_state
from platforms.matrix.wire import MAX_DEPTH
from tests.platforms.crash import AdapterWorker, wait_for_inbox
from tests.platforms.matrix_fake import MatrixFake
from tests.platforms.support import RunningAdapter, StartGateway, inbound_messages

TOKEN = "syt_Ym90_hermes_bot_0001"
OTHER_TOKEN = "syt_Ym90_second_bot_0002"
BOT = "@bot:example.org"
OTHER_BOT = "@second:example.org"
ALICE = "@alice:example.org"
BOB = "@bob:example.org"
CAROL = "@carol:example.org"
DM = "!dm:example.org"
GROUP = "!group:example.org"


# -- harness -----------------------------------------------------------------------------------------------------


@pytest.fixture
def hs() -> Iterator[MatrixFake]:
    with MatrixFake() as server:
        server.add_user(TOKEN, BOT, "Hermes")
        for user, name in ((ALICE, "Alice"), (BOB, "Bob"), (CAROL, "Carol")):
            server.add_user(f"token-{name}", user, name)
        yield server


def make_config(hs: MatrixFake, accounts: Mapping[str, MatrixAccount] | None = None, **options: Any) -> MatrixConfig:
    """Fast settings against ``hs``: quick retries, pacing that never gets in the way unless a test sets it."""
    settings: dict[str, Any] = {
        "accounts": dict(accounts) if accounts is not None else {"main": account(hs)},
        "poll_timeout_s": 5,
        "poll_retry_s": 0.05,
        "poll_retry_max_s": 0.2,
        "request_timeout_s": 5.0,
        "room_messages_per_second": 1000.0,
        "room_burst": 10,
    }
    return MatrixConfig(**(settings | options))


def account(hs: MatrixFake, token: str = TOKEN, **options: Any) -> MatrixAccount:
    return MatrixAccount(homeserver=hs.base_url, access_token=token, **options)


@dataclass(frozen=True)
class Running(RunningAdapter[MatrixAdapter]):
    def user_texts(self, key: str) -> list[str | None]:
        return [text for role, text in self.transcript(key) if role == "user"]

    def state(self, name: str = "main") -> AccountState:
        with self.gateway.read() as store:
            return decode_state(store.kv.get_cursor("matrix", name), name)

    def inbound(self) -> list[InboundMessage]:
        """The messages of the inbox rows, as the adapter accepted them."""
        return inbound_messages(self.gateway, "matrix")

    def inbox(self) -> list[tuple[str, ...]]:
        """(account, event id, routing key) of every inbox row."""
        return self.inbox_rows("account_id", "platform_message_id", "routing_key")


Start = Callable[..., Running]


@pytest.fixture
def start(hs: MatrixFake, start_gateway: StartGateway) -> Start:
    """Start a gateway on ``tmp_path / "state.db"`` and the adapter, and wait until each account long-polls."""

    def run(
        config: MatrixConfig | None = None,
        *,
        clock: Callable[[], float] = time.time,
        gateway_for: Callable[[Inbox], Inbox] | None = None,
        extra_senders: tuple[FakePlatform, ...] = (),
        ready: bool = True,
        media: MediaConfig | None = None,
    ) -> Running:
        config = config or make_config(hs)
        adapter = MatrixAdapter(config, environ={}, clock=clock, monotonic=clock)
        gateway = start_gateway(
            adapter,
            senders=extra_senders,
            clock=clock,
            tick_interval_s=0.1,
            media=media,
            inbox_for=gateway_for,
        )
        if ready:
            for settings in config.accounts.values():
                token = settings.access_token or ""
                hs.wait_for(lambda token=token: hs.polling(token))  # type: ignore[misc]
        return Running(adapter, gateway)

    return run


def wait_sent(hs: MatrixFake, count: int, sender: str = BOT) -> list[dict[str, Any]]:
    """Wait until ``sender`` sent ``count`` messages; return all it sent."""
    hs.wait_for(lambda: len(hs.sent(sender)) >= count)
    return hs.sent(sender)


GROUP_KEY = "agent:main:matrix~main:group:!group%3Aexample.org"


# -- rooms, threads and accounts ---------------------------------------------------------------------------------


def test_a_direct_message_is_answered_in_its_room_and_the_since_token_is_stored_with_it(
    hs: MatrixFake, start: Start
) -> None:
    hs.create_room(DM, ALICE, BOT)
    matrix = start()
    event_id = hs.post(DM, ALICE, "hello")
    (reply,) = wait_sent(hs, 1)
    assert reply == {
        "room_id": DM,
        "event_id": reply["event_id"],
        "msgtype": "m.text",
        "body": "echo: hello",
        "m.mentions": {},  # a DM reply quotes nothing and pings no one
    }
    dm_key = "agent:main:matrix~main:dm:!dm%3Aexample.org"
    assert matrix.transcript(dm_key) == [("user", "hello"), ("assistant", "echo: hello")]
    assert matrix.inbox() == [("main", event_id, dm_key)]
    hs.wait_for(lambda: matrix.state().rooms[DM].last == reply["event_id"])  # the bot's own reply was seen
    state = matrix.state()
    assert state.since is not None
    assert state.since.startswith("s")
    assert state.rooms[DM].members == 2
    with matrix.gateway.read() as store:
        (session,) = store.list_sessions()
    assert (session.source, session.chat_id, session.chat_type, session.user_id, session.user_name) == (
        "matrix",
        DM,
        "dm",
        ALICE,
        "Alice",
    )


def test_group_members_have_their_own_sessions_and_a_thread_is_one_shared_conversation(
    hs: MatrixFake, start: Start
) -> None:
    hs.create_room(GROUP, ALICE, BOB, BOT, name="Team")
    matrix = start()
    root = hs.post(GROUP, ALICE, "alice in the room")
    bob_main = hs.post(GROUP, BOB, "bob in the room")
    wait_sent(hs, 2)
    alice_thread = hs.post(GROUP, ALICE, "alice in the thread", thread=root)
    hs.post(GROUP, BOB, "bob in the thread", thread=root)
    replies = {content["body"]: content for content in wait_sent(hs, 4)}
    assert matrix.gateway.wait_idle()
    assert replies["echo: bob in the room"]["m.relates_to"] == {"m.in_reply_to": {"event_id": bob_main}}
    assert replies["echo: bob in the room"]["m.mentions"] == {"user_ids": [BOB]}
    in_thread = replies["echo: alice in the thread"]["m.relates_to"]
    assert in_thread == {
        "rel_type": "m.thread",
        "event_id": root,
        "is_falling_back": False,
        "m.in_reply_to": {"event_id": alice_thread},
    }
    assert replies["echo: bob in the thread"]["m.relates_to"]["event_id"] == root
    root_part = root.replace(":", "%3A")
    alice, bob = f"{GROUP_KEY}:@alice%3Aexample.org", f"{GROUP_KEY}:@bob%3Aexample.org"
    thread = f"{GROUP_KEY}:{root_part}"
    assert matrix.user_texts(alice) == ["alice in the room"]
    assert matrix.user_texts(bob) == ["bob in the room"]
    assert matrix.user_texts(thread) == ["alice in the thread", "bob in the thread"]
    assert len({matrix.session_of(k) for k in (alice, bob, thread)}) == 3
    with matrix.gateway.read() as store:
        assert {s.chat_name for s in store.list_sessions()} == {"Team"}


def test_direct_rooms_are_told_by_m_direct_by_an_is_direct_invite_or_by_two_members(
    hs: MatrixFake, start: Start
) -> None:
    marked, plain, pair, invited = "!marked:example.org", "!plain:example.org", "!pair:x.org", "!invited:y.org"
    hs.create_room(marked, ALICE, BOB, BOT)
    hs.create_room(plain, ALICE, BOB, BOT)
    hs.create_room(pair, ALICE, BOT)
    hs.create_room(invited, CAROL, BOB)
    hs.set_direct(BOT, {ALICE: [marked]})
    matrix = start()
    hs.invite(invited, BOT, sender=CAROL, is_direct=True)
    hs.wait_for(lambda: hs.members(invited).get(BOT) == "join")
    for room in (marked, plain, pair, invited):
        hs.post(room, BOB if room == invited else ALICE, f"in {room}")
    wait_sent(hs, 4)
    hs.join(pair, CAROL)  # a third member: the pair is a group from now on
    hs.post(pair, ALICE, "now three of us")
    wait_sent(hs, 5)
    assert matrix.gateway.wait_idle()
    keys = [routing_key for _, _, routing_key in matrix.inbox()]
    assert keys == [
        "agent:main:matrix~main:dm:!marked%3Aexample.org",
        "agent:main:matrix~main:group:!plain%3Aexample.org:@alice%3Aexample.org",
        "agent:main:matrix~main:dm:!pair%3Ax.org",
        "agent:main:matrix~main:dm:!invited%3Ay.org",
        "agent:main:matrix~main:group:!pair%3Ax.org:@alice%3Aexample.org",
    ]
    state = matrix.state()
    assert state.direct == frozenset({marked})
    assert state.rooms[invited].invited_direct
    assert state.rooms[pair].members == 3
    assert hs.calls("joined_members") == []  # the summaries told the counts


def test_a_room_the_summary_says_nothing_about_is_counted_once_with_joined_members(
    hs: MatrixFake, start: Start
) -> None:
    hs.create_room(DM, ALICE, BOT)
    hs.send_summaries = False
    matrix = start()
    hs.post(DM, ALICE, "one")
    wait_sent(hs, 1)
    hs.post(DM, ALICE, "two")
    wait_sent(hs, 2)
    assert [call.path for call in hs.calls("joined_members")] == ["/rooms/%21dm%3Aexample.org/joined_members"]
    assert {k for _, _, k in matrix.inbox()} == {"agent:main:matrix~main:dm:!dm%3Aexample.org"}


def test_two_accounts_in_one_room_never_share_a_session(hs: MatrixFake, start: Start) -> None:
    hs.add_user(OTHER_TOKEN, OTHER_BOT, "Second")
    hs.create_room(GROUP, ALICE, BOT, OTHER_BOT)
    hs.create_room(DM, ALICE, BOT)
    hs.create_room("!dm2:example.org", ALICE, OTHER_BOT)
    matrix = start(make_config(hs, {"first": account(hs), "second": account(hs, OTHER_TOKEN)}))
    shared = hs.post(GROUP, ALICE, "for both bots")
    hs.post(DM, ALICE, "dm to the first")
    hs.post("!dm2:example.org", ALICE, "dm to the second")
    wait_sent(hs, 2, BOT)
    wait_sent(hs, 2, OTHER_BOT)
    assert matrix.gateway.wait_idle()
    assert sorted(hs.texts(BOT)) == ["echo: dm to the first", "echo: for both bots"]
    assert sorted(hs.texts(OTHER_BOT)) == ["echo: dm to the second", "echo: for both bots"]
    rows = matrix.inbox()
    assert sorted((a, k) for a, m, k in rows if m == shared) == [  # one inbox row per account
        ("first", "agent:main:matrix~first:group:!group%3Aexample.org:@alice%3Aexample.org"),
        ("second", "agent:main:matrix~second:group:!group%3Aexample.org:@alice%3Aexample.org"),
    ]
    sessions = {matrix.session_of(k) for _, _, k in rows}
    assert None not in sessions
    assert len(sessions) == 4
    assert matrix.state("first").since is not None
    assert matrix.state("second").since is not None


def test_notices_emotes_media_replies_and_stickers_start_turns_and_edits_and_encryption_do_not(
    hs: MatrixFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    hs.create_room(DM, ALICE, BOT)
    start()
    first = hs.post(DM, ALICE, "first")
    wait_sent(hs, 1)
    hs.post(DM, ALICE, "a notice", msgtype="m.notice")
    hs.post(DM, ALICE, "waves", msgtype="m.emote")
    hs.post(DM, ALICE, "look at this", msgtype="m.image", filename="cat.png", url="mxc://example.org/cat")
    hs.post(DM, ALICE, "report.pdf", msgtype="m.file", url="mxc://example.org/r")
    hs.post(DM, ALICE, "Big Ben", msgtype="m.location", geo_uri="geo:51.5,-0.12")
    hs.post(DM, ALICE, "😺", event_type="m.sticker", url="mxc://example.org/s")
    hs.post(
        DM,
        ALICE,
        f"> <{BOT}> echo: first\n\nthat was quick",
        relates_to={"m.in_reply_to": {"event_id": first}},
    )
    hs.post(DM, ALICE, "* first (edited)", relates_to={"rel_type": "m.replace", "event_id": first})
    hs.post(DM, ALICE, "verify me", msgtype="m.key.verification.request")
    hs.post(DM, ALICE, "", event_type="m.room.encrypted", algorithm="m.megolm.v1.aes-sha2", ciphertext="AAAA")
    hs.post(DM, ALICE, "", event_type="m.room.encrypted", algorithm="m.megolm.v1.aes-sha2", ciphertext="BBBB")
    hs.post(DM, ALICE, "last")
    hs.wait_for(lambda: any("last" in text for text in hs.texts(BOT)))
    received = "\n".join(hs.texts(BOT))
    for expected in (
        "a notice",
        "* waves",
        "[image: cat.png] look at this",
        "[file: report.pdf]",
        "[location] Big Ben",
        "[sticker: 😺]",
        "that was quick",
    ):
        assert expected in received
    assert "> <@bot" not in received  # the quoted fallback of the rich reply is cut off
    assert "edited" not in received
    assert "verify me" not in received
    assert caplog.text.count("is end-to-end encrypted and this adapter cannot read encrypted messages") == 1


DM_KEY = "agent:main:matrix~main:dm:!dm%3Aexample.org"


def test_an_image_and_a_file_arrive_as_attachments_fetched_with_the_token_from_the_authenticated_media_api(
    hs: MatrixFake, start: Start, tmp_path: Path
) -> None:
    hs.create_room(DM, ALICE, BOT)
    matrix = start(media=MediaConfig(max_bytes=1024))
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(100))
    image = hs.upload(png, "image/png", server="elsewhere.example:8448")  # remote media: the homeserver fetches it
    info = {"mimetype": "image/png", "size": len(png), "w": 10, "h": 10}
    hs.post(DM, ALICE, "what is this?", msgtype="m.image", filename="cat.png", url=image, info=info)
    (first,) = wait_sent(hs, 1)
    notes = hs.upload(b"line one\nline two\n", "text/plain")
    hs.post(DM, ALICE, "notes.txt", msgtype="m.file", url=notes)  # no info: the type follows the name
    second = wait_sent(hs, 2)[1]
    assert matrix.gateway.wait_idle()
    digest = hashlib.sha256(png).hexdigest()
    cached = tmp_path / "media" / digest[:2] / f"{digest}.png"
    assert cached.read_bytes() == png
    assert first["body"] == (
        f"echo: [image: cat.png] what is this?\n[attached image cat.png (image/png, 108 bytes), saved at {cached}]"
    )
    notes_digest = hashlib.sha256(b"line one\nline two\n").hexdigest()
    assert second["body"] == (
        "echo: [file: notes.txt]\n[attached document notes.txt (text/plain, 18 bytes), saved at "
        f"{tmp_path / 'media' / notes_digest[:2] / notes_digest}.txt]\nIts text:\nline one\nline two\n"
    )
    # Downloaded once each from the authenticated endpoint, with the bot's token in the Authorization header.
    downloads = hs.calls("download")
    assert [(c.token, c.path, c.status) for c in downloads] == [
        (TOKEN, "/v1-media/download/elsewhere.example%3A8448/media1", 200),
        (TOKEN, "/v1-media/download/example.org/media2", 200),
    ]
    session = matrix.session_of(DM_KEY)
    assert session is not None
    with matrix.gateway.read() as store:
        rows = store.attachments.for_session(session)
    assert [(r.kind, r.mime_type, r.size, r.sha256, r.name, r.source_url, r.error) for r in rows] == [
        ("image", "image/png", 108, digest, "cat.png", image, None),
        ("document", "text/plain", 18, notes_digest, "notes.txt", notes, None),
    ]


def test_a_file_over_the_limit_is_refused_before_it_is_downloaded_and_the_text_still_runs(
    hs: MatrixFake, start: Start, tmp_path: Path
) -> None:
    hs.create_room(DM, ALICE, BOT)
    start(media=MediaConfig(max_bytes=1024))
    big = hs.upload(bytes(4096), "image/png")
    info = {"mimetype": "image/png", "size": 4096}
    hs.post(DM, ALICE, "too big?", msgtype="m.image", filename="big.png", url=big, info=info)
    (reply,) = wait_sent(hs, 1)
    assert reply["body"] == (
        "I could not read big.png: it is 4 KB, over the 1 KB limit.\n\n"
        "echo: [image: big.png] too big?\n[image big.png was not read: it is 4 KB, over the 1 KB limit]"
    )
    assert hs.calls("download") == []  # info.size said so: nothing was fetched
    # Without info.size, the answer's Content-Length refuses it before its body is read.
    hs.post(DM, ALICE, "video.mp4", msgtype="m.video", url=hs.upload(bytes(2048), "video/mp4"))
    second = wait_sent(hs, 2)[1]
    assert second["body"].startswith("I could not read video.mp4: it is 2 KB, over the 1 KB limit.\n\n")
    assert second["body"].endswith("[video video.mp4 was not read: it is 2 KB, over the 1 KB limit]")
    assert len(hs.calls("download")) == 1
    assert not (tmp_path / "media").exists()


def test_a_failed_or_encrypted_download_becomes_a_refused_attachment_that_names_the_reason(
    hs: MatrixFake, start: Start, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hs.create_room(DM, ALICE, BOT)
    matrix = start()
    hs.fail("download", 502, "M_TOO_LARGE", "Remote media too large", after=1)  # the second download
    hs.post(DM, ALICE, "gone.png", msgtype="m.image", url="mxc://example.org/gone")
    hs.post(DM, ALICE, "huge.bin", msgtype="m.file", url=hs.upload(b"x"))
    hs.post(DM, ALICE, "cut.ogg", msgtype="m.audio", url=hs.upload(b"ogg data", "audio/ogg", cut=True))
    encrypted = {"url": "mxc://example.org/e", "key": {"k": "x"}, "iv": "y", "hashes": {}, "v": "v2"}
    hs.post(DM, ALICE, "secret.pdf", msgtype="m.file", file=encrypted)
    hs.post(DM, ALICE, "bad.png", msgtype="m.image", url="https://example.org/not-mxc.png")
    hs.wait_for(lambda: len(matrix.inbox()) == 5)
    assert matrix.gateway.wait_idle()
    expected = [
        ("gone.png", "image", "the homeserver does not have it (M_NOT_FOUND)"),
        ("huge.bin", "document", "the homeserver would not fetch it: it is too large there (M_TOO_LARGE)"),
        ("cut.ogg", "audio", "its download broke off"),
        ("secret.pdf", "document", "it was sent end-to-end encrypted, and this adapter cannot decrypt files"),
        ("bad.png", "image", "'https://example.org/not-mxc.png' is not an mxc:// URI"),
    ]
    stored = [message.attachments for message in matrix.inbound()]
    assert [[(a.name, a.kind, a.error) for a in attachments] for attachments in stored] == [[e] for e in expected]
    assert all(a.path is None for attachments in stored for a in attachments)
    # The texts ran, and the replies (a turn may answer several of them) say what could not be read.
    assert (
        "[image: gone.png]\n[image gone.png was not read: the homeserver does not have it (M_NOT_FOUND)]"
        in "\n".join(str(text) for text in matrix.user_texts(DM_KEY))
    )
    replies = "\n".join(hs.texts(BOT))
    for name, _, problem in expected:
        assert f"I could not read {name}: {problem}." in replies
    assert [c.status for c in hs.calls("download")] == [404, 502, 200]
    assert not (tmp_path / "media").exists()
    assert TOKEN not in caplog.text


def test_a_redelivered_event_starts_one_turn(hs: MatrixFake, start: Start, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="platforms.matrix")
    hs.create_room(DM, ALICE, BOT)
    matrix = start()
    event_id = hs.post(DM, ALICE, "only once")
    (reply,) = wait_sent(hs, 1)
    hs.wait_for(lambda: matrix.state().rooms[DM].last == reply["event_id"])
    hs.repeat(event_id)
    hs.post(DM, ALICE, "next")
    wait_sent(hs, 2)
    assert matrix.gateway.wait_idle()
    assert hs.texts(BOT) == ["echo: only once", "echo: next"]
    assert f"event {event_id} was stored before; no new turn" in caplog.text


class FailingCommit:
    """An inbox whose first ``accept_many`` with messages fails, as if the process died before the commit."""

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


def test_a_sync_that_was_not_committed_is_asked_again_and_processed_once(
    hs: MatrixFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    hs.create_room(DM, ALICE, BOT)
    matrix = start(gateway_for=lambda inbox: cast(Inbox, FailingCommit(inbox)))
    before = len(hs.calls("sync"))
    event_id = hs.post(DM, ALICE, "survive")
    wait_sent(hs, 1)
    assert matrix.gateway.wait_idle()
    # calls are recorded when answered: the poll that was waiting, then the one after the failed commit
    since = [call.query.get("since") for call in hs.calls("sync")[before : before + 2]]
    assert since[0] is not None
    assert since[0] == since[1]  # nothing was committed: the same position was asked again
    assert hs.texts(BOT) == ["echo: survive"]
    assert [m for _, m, _ in matrix.inbox()] == [event_id]
    assert "matrix account 'main': the sync failed; syncing again" in caplog.text


def test_a_restart_resumes_from_the_stored_since_and_backfills_a_gap(hs: MatrixFake, start: Start) -> None:
    hs.create_room(DM, ALICE, BOT)
    config = make_config(hs, timeline_limit=3)
    matrix = start(config)
    hs.post(DM, ALICE, "before the restart")
    (reply,) = wait_sent(hs, 1)
    hs.wait_for(lambda: matrix.state().rooms[DM].last == reply["event_id"])  # nothing more is coming
    stored = matrix.state().since
    matrix.stop()
    missed = [hs.post(DM, ALICE, f"missed {n}") for n in range(7)]
    syncs_before = len(hs.calls("sync"))
    matrix = start(config)
    hs.wait_for(lambda: "echo: missed 0" in "\n".join(hs.texts(BOT)))
    assert matrix.gateway.wait_idle()
    assert hs.calls("sync")[syncs_before].query["since"] == stored  # no new snapshot: the stored position
    assert hs.calls("messages")  # the gap was closed by paging back
    dm_key = "agent:main:matrix~main:dm:!dm%3Aexample.org"
    assert matrix.user_texts(dm_key) == ["before the restart", *(f"missed {n}" for n in range(7))]
    assert [m for _, m, _ in matrix.inbox()][1:] == missed


@pytest.mark.parametrize(
    ("options", "failure", "reason", "answered"),
    [
        ({"backfill_limit": 2}, None, "more than backfill_limit (2) events are missing", 5),
        ({}, ("messages", 403, "M_FORBIDDEN"), "the homeserver refused them: ", 3),
        ({"backfill_limit": 0}, None, "backfill_limit is 0, so gaps are only reported", 3),
    ],
)
def test_a_gap_that_cannot_be_closed_is_reported_and_the_newest_messages_are_answered(
    hs: MatrixFake,
    start: Start,
    caplog: pytest.LogCaptureFixture,
    options: dict[str, Any],
    failure: tuple[str, int, str] | None,
    reason: str,
    answered: int,
) -> None:
    hs.create_room(DM, ALICE, BOT)
    config = make_config(hs, timeline_limit=3, **options)
    matrix = start(config)
    matrix.stop()
    for n in range(8):
        hs.post(DM, ALICE, f"missed {n}")
    if failure is not None:
        hs.fail(*failure)
    matrix = start(config)
    hs.wait_for(lambda: hs.texts(BOT))
    assert matrix.gateway.wait_idle()
    dm_key = "agent:main:matrix~main:dm:!dm%3Aexample.org"
    assert matrix.user_texts(dm_key) == [f"missed {n}" for n in range(8 - answered, 8)]
    assert f"matrix account 'main': room {DM}: gap in the timeline: the events after $" in caplog.text
    assert reason in caplog.text
    assert f"the {answered - 3} newest missed events are answered, older ones are not" in caplog.text


@pytest.mark.slow
def test_a_kill_between_accept_and_reply_loses_nothing_and_replies_once(tmp_path: Path, hs: MatrixFake) -> None:
    db = tmp_path / "state.db"
    hs.create_room(DM, ALICE, BOT)
    config = make_config(hs)
    worker = AdapterWorker.start(db, "matrix", config, agent="hold")
    try:
        hs.wait_for(lambda: hs.polling(TOKEN))
        event_id = hs.post(DM, ALICE, "survive")
        assert wait_for_inbox(db, 1) == [(event_id, "pending")]
    finally:
        worker.kill()
    assert hs.sent(BOT) == []
    syncs_before = len(hs.calls("sync"))
    worker = AdapterWorker.start(db, "matrix", config, agent="echo")
    try:
        wait_sent(hs, 1)
        hs.wait_for(lambda: hs.polling(TOKEN))
        hs.post(DM, ALICE, "and after")
        wait_sent(hs, 2)
    finally:
        worker.stop()
    assert "since" in hs.calls("sync")[syncs_before].query  # the stored position, not a new snapshot
    assert hs.texts(BOT) == ["echo: survive", "echo: and after"]


def test_an_invite_is_joined_and_messages_from_before_the_join_are_not_answered(
    hs: MatrixFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="platforms.matrix")
    room = "!new:example.org"
    hs.create_room(room, CAROL)
    matrix = start()
    hs.post(room, CAROL, "said before the bot came")
    hs.invite(room, BOT, sender=CAROL, is_direct=True)
    hs.wait_for(lambda: hs.members(room).get(BOT) == "join")
    hs.post(room, CAROL, "hello bot")
    assert [c["body"] for c in wait_sent(hs, 1)] == ["echo: hello bot"]
    assert matrix.gateway.wait_idle()
    assert [k for _, _, k in matrix.inbox()] == ["agent:main:matrix~main:dm:!new%3Aexample.org"]
    assert f"joined a direct chat {room} (invited by {CAROL})" in caplog.text
    assert f"1 messages in {room} are from before the bot joined; they are not answered" in caplog.text
    assert [call.path for call in hs.calls("join")] == ["/join/%21new%3Aexample.org"]


def test_with_auto_join_off_an_invite_is_logged_and_left_alone(
    hs: MatrixFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="platforms.matrix")
    hs.create_room(GROUP, CAROL)
    start(make_config(hs, {"main": account(hs, auto_join=False)}))
    hs.invite(GROUP, BOT, sender=CAROL)
    hs.wait_for(lambda: "auto_join is off" in caplog.text)
    assert hs.members(GROUP)[BOT] == "invite"
    assert hs.calls("join") == []
    assert "set platforms.matrix.accounts.main.auto_join: true" in caplog.text


def test_an_invite_that_cannot_be_joined_is_logged_and_the_account_goes_on(
    hs: MatrixFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    hs.create_room(GROUP, CAROL)
    hs.create_room(DM, ALICE, BOT)
    start()
    hs.fail("join", 403, "M_FORBIDDEN", "You are banned from this room")
    hs.invite(GROUP, BOT, sender=CAROL)
    hs.wait_for(lambda: hs.calls("join"))
    hs.post(DM, ALICE, "still here")
    assert [c["body"] for c in wait_sent(hs, 1)] == ["echo: still here"]
    assert f"could not join a room {GROUP}" in caplog.text
    assert "M_FORBIDDEN: You are banned from this room" in caplog.text


# -- the account's token and failing syncs -----------------------------------------------------------------------


def test_a_refused_token_is_logged_with_the_fix_and_syncing_resumes_once_it_is_valid(
    hs: MatrixFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    hs.create_room(DM, ALICE, OTHER_BOT)
    matrix = start(make_config(hs, {"main": account(hs, OTHER_TOKEN)}), ready=False)
    hs.wait_for(lambda: "does not accept the access token (M_UNKNOWN_TOKEN)" in caplog.text)
    assert "put the new token in platforms.matrix.accounts.main.access_token" in caplog.text
    assert OTHER_TOKEN not in caplog.text
    assert hs.calls("whoami")[0].status == 401
    assert hs.calls("sync") == []
    assert matrix.inbox() == []
    hs.add_user(OTHER_TOKEN, OTHER_BOT)
    hs.wait_for(lambda: hs.polling(OTHER_TOKEN))
    hs.post(DM, ALICE, "now")
    assert [c["body"] for c in wait_sent(hs, 1, OTHER_BOT)] == ["echo: now"]


def test_a_token_revoked_while_polling_is_reported(
    hs: MatrixFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    hs.create_room(DM, ALICE, BOT)
    start()
    hs.revoke(TOKEN)
    hs.post(DM, ALICE, "nobody hears this")
    hs.wait_for(lambda: "does not accept the access token (M_UNKNOWN_TOKEN)" in caplog.text)
    assert hs.sent(BOT) == []


def test_a_failing_sync_is_a_connection_problem_naming_the_account_until_a_sync_is_answered(
    hs: MatrixFake, start: Start
) -> None:
    hs.create_room(DM, ALICE, BOT)
    matrix = start()
    assert isinstance(matrix.adapter, ConnectionReporter)
    assert matrix.adapter.connection_problem() is None
    hs.fail("sync", 502, raw_body=b"<html>502 Bad Gateway</html>", times=1000)
    hs.post(DM, ALICE, "one")  # ends the poll in progress; the next ones fail
    problem = poll_until(matrix.adapter.connection_problem, what="the failed sync to be reported")
    assert problem.startswith("account 'main': reconnecting (GET /sync: HTTP 502: <html>502 Bad Gateway</html>")
    hs.post(DM, ALICE, "two")  # answers the first sync after the heal at once
    hs.heal()
    poll_until(lambda: matrix.adapter.connection_problem() is None, what="the answered sync to clear the problem")
    assert [c["body"] for c in wait_sent(hs, 2)] == ["echo: one", "echo: two"]


def test_a_revoked_token_is_a_connection_problem_naming_the_setting_to_fix(hs: MatrixFake, start: Start) -> None:
    hs.create_room(DM, ALICE, BOT)
    matrix = start()
    hs.revoke(TOKEN)
    hs.post(DM, ALICE, "nobody hears this yet")
    problem = poll_until(matrix.adapter.connection_problem, what="the revoked token to be reported")
    assert problem == (
        f"account 'main': reconnecting ({hs.base_url} does not accept the access token (M_UNKNOWN_TOKEN); put a "
        "new token in platforms.matrix.accounts.main.access_token (or the variable named by access_token_env))"
    )
    assert TOKEN not in problem
    hs.add_user(TOKEN, BOT)
    poll_until(lambda: matrix.adapter.connection_problem() is None, what="the valid token to clear the problem")
    assert [c["body"] for c in wait_sent(hs, 1)] == ["echo: nobody hears this yet"]


@pytest.mark.slow
def test_sync_failures_are_retried_and_a_rate_limit_waits_retry_after_ms(
    hs: MatrixFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    hs.create_room(DM, ALICE, BOT)
    start()
    hs.fail("sync", 502, raw_body=b"<html>502 Bad Gateway</html>")
    hs.fail("sync", 429, "M_LIMIT_EXCEEDED", "Too Many Requests", retry_after_ms=800)
    hs.post(DM, ALICE, "through")  # ends the poll in progress; the next two fail
    hs.wait_for(lambda: 429 in [c.status for c in hs.calls("sync")])
    hs.post(DM, ALICE, "and again")
    hs.wait_for(lambda: any("again" in text for text in hs.texts(BOT)))
    calls = hs.calls("sync")
    statuses = [c.status for c in calls]
    limited = statuses.index(429)
    assert statuses[limited - 1 : limited + 2] == [502, 429, 200]
    assert calls[limited + 1].began - calls[limited].at >= 0.75  # retry_after_ms, not the 0.05 s backoff
    assert "the sync failed (matrix account 'main': GET /sync: HTTP 502: <html>502 Bad Gateway</html>" in caplog.text
    assert "the homeserver asked to wait 0.8 s" in caplog.text


def test_stop_ends_a_long_poll_at_once(hs: MatrixFake, start: Start) -> None:
    matrix = start(make_config(hs, poll_timeout_s=60))
    began = time.monotonic()
    matrix.adapter.stop()
    assert time.monotonic() - began < 2


# -- replies -----------------------------------------------------------------------------------------------------


def test_a_send_whose_answer_was_lost_is_retried_under_the_same_transaction_id_and_appears_once(
    hs: MatrixFake, start: Start
) -> None:
    hs.create_room(DM, ALICE, BOT)
    matrix = start()
    hs.fail("send", 0, drop=True)  # the event is made, the answer never arrives
    hs.post(DM, ALICE, "exactly once")
    hs.wait_for(lambda: len([c for c in hs.calls("send") if c.status == 200]) == 1)
    assert matrix.gateway.wait_idle()
    attempts = hs.calls("send")
    assert [c.status for c in attempts] == [0, 200]
    assert attempts[0].path == attempts[1].path  # the same txnId
    assert attempts[0].path.startswith("/rooms/%21dm%3Aexample.org/send/m.room.message/hermes-")
    assert hs.texts(BOT) == ["echo: exactly once"]
    with matrix.gateway.read() as store:
        assert store.outbox.unsent() == []


def test_a_429_is_retried_when_retry_after_ms_says(hs: MatrixFake, start: Start) -> None:
    clock = FakeClock()
    hs.create_room(DM, ALICE, BOT)
    matrix = start(clock=clock)
    hs.fail("send", 429, "M_LIMIT_EXCEEDED", "Too Many Requests", retry_after_ms=7000)
    hs.post(DM, ALICE, "patience")
    hs.wait_for(lambda: hs.calls("send"))
    assert matrix.gateway.wait_idle()
    with matrix.gateway.read() as store:
        (row,) = store.outbox.unsent()
    assert row.next_attempt_at == pytest.approx(clock.now + 7)
    clock.advance(6.5)
    matrix.gateway.tick()
    assert matrix.gateway.wait_idle()
    assert len(hs.calls("send")) == 1
    clock.advance(0.5)
    matrix.gateway.tick()
    assert [c["body"] for c in wait_sent(hs, 1)] == ["echo: patience"]
    assert [c.status for c in hs.calls("send")] == [429, 200]


def test_server_errors_are_retried_with_backoff_and_the_reply_arrives_once(hs: MatrixFake, start: Start) -> None:
    clock = FakeClock()
    hs.create_room(DM, ALICE, BOT)
    matrix = start(clock=clock)
    hs.fail("send", 502, raw_body=b"<html>502 Bad Gateway</html>")
    hs.fail("send", 500, "M_UNKNOWN", "Internal server error")
    hs.post(DM, ALICE, "hello")
    for failures in (1, 2):
        hs.wait_for(lambda failures=failures: len(hs.calls("send")) >= failures)  # type: ignore[misc]
        assert matrix.gateway.wait_idle()
        clock.advance(0.05 * failures)
        matrix.gateway.tick()
    assert [c["body"] for c in wait_sent(hs, 1)] == ["echo: hello"]
    assert matrix.gateway.wait_idle()
    with matrix.gateway.read() as store:
        assert store.outbox.unsent() == []


def long_text() -> str:
    paragraph = 'Matrix counts bytes of JSON, so 🦊 takes four and a quote " takes two. ' * 6
    return "\n\n".join(f"{n}. {paragraph}" for n in range(8))


def test_a_long_reply_is_split_under_max_message_bytes_with_a_transaction_id_per_part(
    hs: MatrixFake, start: Start
) -> None:
    hs.create_room(DM, ALICE, BOT)
    start(make_config(hs, max_message_bytes=1024))
    text = long_text()
    hs.post(DM, ALICE, text)
    hs.wait_for(lambda: len(hs.sent(BOT)) >= 4 and "7." in hs.sent(BOT)[-1]["body"])
    parts = [c["body"] for c in hs.sent(BOT)]
    assert all(wire_length(part) <= 1024 for part in parts)
    assert " ".join(parts).split() == f"echo: {text}".split()
    assert all(part.rstrip().endswith(".") for part in parts)  # cut at paragraph ends, not inside words
    paths = [c.path for c in hs.calls("send")]
    assert len(set(paths)) == len(parts)
    assert [path.rsplit("-", 1)[1] for path in paths] == [str(n) for n in range(len(parts))]


@pytest.mark.slow
def test_replies_are_paced_per_room(hs: MatrixFake, start: Start) -> None:
    hs.create_room(DM, ALICE, BOT)
    start(make_config(hs, max_message_bytes=1024, room_messages_per_second=5.0, room_burst=1))
    hs.post(DM, ALICE, long_text())
    hs.wait_for(lambda: len(hs.calls("send")) >= 3)
    calls = hs.calls("send")
    gaps = [later.at - earlier.at for earlier, later in itertools.pairwise(calls)]
    assert min(gaps) >= 0.15  # 5 a second, with room for timer slack


def test_send_failures_become_send_errors_that_say_what_happened(hs: MatrixFake) -> None:
    hs.create_room(DM, ALICE, BOT)
    adapter = MatrixAdapter(make_config(hs), environ={})
    (sender,) = adapter.senders()
    reply = OutboundMessage(platform="matrix", account_id="main", chat_id=DM, text="hi", reply_to="$x:example.org")
    hs.fail("send", 403, "M_FORBIDDEN", "User not in room")
    with pytest.raises(SendError, match="the bot is not in the room or may not post there") as refused:
        sender.send(reply)
    assert (refused.value.retry_after_s, refused.value.outcome_unknown, refused.value.permanent) == (None, False, True)
    hs.fail("send", 401, "M_UNKNOWN_TOKEN", "Invalid access token passed.")
    with pytest.raises(SendError, match=r"platforms\.matrix\.accounts\.main\.access_token") as token:
        sender.send(reply)
    assert not token.value.permanent
    assert TOKEN not in str(token.value)
    hs.fail("send", 429, "M_LIMIT_EXCEEDED", "Too Many Requests", retry_after_ms=3000)
    with pytest.raises(SendError, match="asked to slow down") as limited:
        sender.send(reply)
    assert limited.value.retry_after_s == 3
    with pytest.raises(SendError, match="held back"):  # the room stays quiet until then
        sender.send(reply)
    gone = MatrixAdapter(
        make_config(hs, accounts={"main": MatrixAccount(homeserver="http://127.0.0.1:9", access_token=TOKEN)}),
        environ={},
    ).senders()[0]
    with pytest.raises(SendError, match="cannot be reached") as unreachable:
        gone.send(reply)
    assert not unreachable.value.outcome_unknown
    with pytest.raises(SendError, match="no account 'nobody' is configured") as unknown:
        sender.send(msgspec.structs.replace(reply, account_id="nobody"))
    assert unknown.value.permanent
    assert sender.send(msgspec.structs.replace(reply, text="  ")) is None


def test_transaction_ids_are_stable_per_reply_and_part_and_differ_between_replies() -> None:
    reply = OutboundMessage(platform="matrix", account_id="main", chat_id=DM, text="hi", reply_to="$a", session_id="s")
    assert transaction_id(reply, 0) == transaction_id(msgspec.structs.replace(reply, possible_duplicate=True), 0)
    others = [
        transaction_id(reply, 1),
        transaction_id(msgspec.structs.replace(reply, reply_to="$b"), 0),
        transaction_id(msgspec.structs.replace(reply, text="ho"), 0),
        transaction_id(msgspec.structs.replace(reply, account_id="second"), 0),
        transaction_id(msgspec.structs.replace(reply, thread_id="$t"), 0),
    ]
    assert len({transaction_id(reply, 0), *others}) == 6
    assert all(len(txn) < 64 and txn.isascii() for txn in others)


# -- handoff threads ---------------------------------------------------------------------------------------------


def test_a_handoff_opens_a_thread_and_the_conversation_continues_in_it(hs: MatrixFake, start: Start) -> None:
    hs.create_room(GROUP, ALICE, BOB, BOT, name="Desk")
    cli = FakePlatform("cli")
    matrix = start(extra_senders=(cli,))
    cli.attach(matrix.gateway)
    cli.push("/title billing bug", chat_id="terminal")
    cli.pop()
    cli.push("the invoice total is wrong", chat_id="terminal")
    cli.pop()
    hs.post(GROUP, ALICE, "/sethome")
    assert wait_sent(hs, 1)[0]["body"] == "This chat is now the home channel for matrix."
    assert matrix.gateway.wait_idle()  # the reply arrives before the turn is over: a handoff then is refused
    cli.push("/handoff matrix", chat_id="terminal")
    assert cli.pop().text.startswith("Handed off to matrix (chat ")
    root, first = wait_sent(hs, 3)[1:]
    assert root["body"] == "billing bug"
    assert first["body"].startswith("echo: [handoff]")
    assert first["m.relates_to"]["rel_type"] == "m.thread"
    assert first["m.relates_to"]["event_id"] == root["event_id"]
    hs.post(GROUP, BOB, "picking it up", thread=root["event_id"])
    picked = wait_sent(hs, 4)[3]
    assert picked["body"] == "echo: picking it up"
    assert picked["m.relates_to"]["event_id"] == root["event_id"]
    thread_key = f"{GROUP_KEY}:{root['event_id'].replace(':', '%3A')}"
    session = matrix.gateway.session_for(thread_key)
    assert session is not None
    assert session == matrix.gateway.session_for("agent:main:cli:dm:terminal")


def test_a_thread_root_is_a_message_whose_event_id_is_the_thread(hs: MatrixFake) -> None:
    hs.create_room(GROUP, ALICE, BOT)
    (sender,) = MatrixAdapter(make_config(hs), environ={}).senders()
    assert isinstance(sender, ThreadCreator)
    root = sender.create_thread(GROUP, "  ", account_id="main")
    assert hs.sent(BOT) == [
        {"room_id": GROUP, "event_id": root, "msgtype": "m.text", "body": "Handoff", "m.mentions": {}}
    ]
    with pytest.raises(SendError, match="the bot is not in the room") as refused:
        sender.create_thread("!elsewhere:example.org", "x")
    assert refused.value.permanent


# -- ids with ':' in keys ----------------------------------------------------------------------------------------


def test_matrix_ids_with_colons_make_keys_that_parse_back_to_exactly_those_ids() -> None:
    source = SessionSource(
        platform="matrix",
        account_id="main",
        chat_type="group",
        chat_id="!room:matrix.example.org:8448",
        user_id="@alice:example.org",
    )
    group = build_session_key(source)
    assert group == "agent:main:matrix~main:group:!room%3Amatrix.example.org%3A8448:@alice%3Aexample.org"
    parsed = parse_session_key(group)
    assert (parsed.platform, parsed.account_id, parsed.scope_id) == ("matrix", "main", None)
    assert parsed.ids == ("!room:matrix.example.org:8448", "@alice:example.org")
    thread = build_session_key(msgspec.structs.replace(source, thread_id="$root:example.org"))
    assert parse_session_key(thread).ids == ("!room:matrix.example.org:8448", "$root:example.org")
    # Without the encoding these two would both read "...:!a:b:@c:d"; with it they stay apart.
    one = msgspec.structs.replace(source, chat_id="!a:b", user_id="@c:d")
    two = msgspec.structs.replace(source, chat_id="!a", user_id="b:@c:d")
    assert build_session_key(one) != build_session_key(two)


_id_text = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=20)
_server = st.builds(lambda host, port: host + (f":{port}" if port else ""), _id_text, st.none() | st.integers(1, 65535))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    room=st.builds(lambda local, server: f"!{local}:{server}", _id_text, _server),
    user=st.builds(lambda local, server: f"@{local}:{server}", _id_text, _server),
    thread=st.none() | st.builds(lambda local, server: f"${local}:{server}", _id_text, _server),
    chat_type=st.sampled_from(["dm", "group"]),
    account_id=_id_text,
)
def test_any_matrix_ids_give_keys_that_parse_back(
    room: str, user: str, thread: str | None, chat_type: str, account_id: str
) -> None:
    source = SessionSource(
        platform="matrix", account_id=account_id, chat_type=chat_type, chat_id=room, thread_id=thread, user_id=user
    )
    parsed = parse_session_key(build_session_key(source))
    assert parsed.account_id == account_id
    assert parsed.chat_type == chat_type
    expected = (room, thread) if chat_type == "dm" else (room, thread) if thread else (room, user)
    assert parsed.ids == tuple(part for part in expected if part)


# -- hostile input -----------------------------------------------------------------------------------------------


def raw_event(event_id: str = "$h1:x", sender: Any = ALICE, content: Any = None, **fields: Any) -> bytes:
    body = {"event_id": event_id, "type": "m.room.message", "sender": sender, "origin_server_ts": 1, **fields}
    body["content"] = {"msgtype": "m.text", "body": "hostile"} if content is None else content
    return json.dumps(body).encode()


def test_hostile_events_are_logged_and_stepped_over(
    hs: MatrixFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    hs.create_room(DM, ALICE, BOT)
    start()
    bad: list[tuple[bytes, str]] = [
        (b'{"type": "m.room.message"}', "missing required field `event_id`"),
        (b"5", "Expected `object`, got `int`"),
        (raw_event(sender=5), "Expected `str`, got `int` - at `$.sender`"),
        (raw_event(content={"msgtype": "m.text", "body": ["x"]}), "got `array` - at `$.body`"),
        (raw_event(content={"body": "x", "m.relates_to": "thread"}), "got `str` - at `$.m.relates_to`"),
        (raw_event(event_id="not-an-id"), "the event_id 'not-an-id' is not an event id"),
        (raw_event(sender="alice"), "the sender 'alice' is not a user id"),
        (raw_event(content={"body": "x", "m.relates_to": {"rel_type": "m.thread"}}), "names no root event"),
        (raw_event().replace(b'"hostile"', b'"\xff\xfe"'), "Invalid UTF-8"),
    ]
    for raw, _ in bad:
        hs.push_raw(DM, raw)
    hs.push_raw(DM, raw_event("$big:x", content={"msgtype": "m.text", "body": "big " * 15_000}))
    hs.post(DM, ALICE, "still fine")
    hs.wait_for(lambda: any("still fine" in text for text in hs.texts(BOT)))
    for _, reason in bad:
        assert reason in caplog.text, reason
    assert f"matrix account 'main': skipped an event in {DM}: " in caplog.text
    received = "\n".join(hs.texts(BOT))
    assert received.count("big") == 15_000  # a huge message is answered in parts
    assert "hostile" not in received


def test_values_nested_too_deep_and_unpaired_surrogates_are_repaired_and_the_messages_answered(
    hs: MatrixFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    hs.create_room(DM, ALICE, BOT)
    start()
    deep = raw_event("$deep:x", content={"msgtype": "m.text", "body": "deep but fine"})
    hs.push_raw(DM, deep.replace(b'"body"', b'"junk": ' + b"[" * 3000 + b"]" * 3000 + b', "body"'))
    hs.push_raw(DM, raw_event("$lone:x").replace(b'"hostile"', b'"half \\ud83d a smile"'))
    hs.post(DM, ALICE, "still fine")
    hs.wait_for(lambda: any("still fine" in text for text in hs.texts(BOT)))
    assert "the /sync answer held invalid UTF-8, unpaired surrogates or values nested too deep" in caplog.text
    received = "\n".join(hs.texts(BOT))
    assert "deep but fine" in received
    assert "half \ufffd a smile" in received


@pytest.mark.slow
@pytest.mark.parametrize(
    ("body", "logged"),
    [
        (b"\xff\xfe not json", "the /sync answer is not valid JSON"),
        (b"[" * 5000, "the /sync answer is malformed: Expected `object`, got `array`"),
        (b'{"next_batch": "s1", "x": ' + b"[" * 5000, "the /sync answer is not valid JSON"),
        (b'{"rooms": {}}', "Object missing required field `next_batch`"),
        (b'{"next_batch": 5}', "Expected `str`, got `int` - at `$.next_batch`"),
        (b"<html>gateway timeout</html>", "the /sync answer is not valid JSON"),
    ],
)
def test_a_broken_sync_answer_is_logged_and_the_account_recovers(
    hs: MatrixFake, start: Start, caplog: pytest.LogCaptureFixture, body: bytes, logged: str
) -> None:
    hs.create_room(DM, ALICE, BOT)
    start()
    hs.fail("sync", 200, raw_body=body)
    hs.post(DM, ALICE, "first")  # ends the poll in progress; the next one gets the broken answer
    hs.wait_for(lambda: logged in caplog.text)
    hs.post(DM, ALICE, "second")
    hs.wait_for(lambda: "echo: second" in hs.texts(BOT) or "echo: first\nsecond" in hs.texts(BOT))
    assert "syncing again in" in caplog.text


def test_rooms_of_the_wrong_shape_are_stepped_over(
    hs: MatrixFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    hs.create_room(DM, ALICE, BOT)
    matrix = start()
    position = hs.position()
    broken = {
        "next_batch": position,
        "rooms": {"join": {"!x:y": {"timeline": 5}, "no-bang": {}}, "invite": {"!i:y": []}},
        "account_data": {"events": [{"type": "m.direct", "content": {"@a:b": "!not-a-list"}}]},
    }
    hs.fail("sync", 200, raw_body=json.dumps(broken).encode())
    hs.fail("sync", 200, raw_body=json.dumps({"next_batch": position, "rooms": 5}).encode())
    hs.post(DM, ALICE, "first")
    hs.wait_for(lambda: "skipped every room of a /sync answer" in caplog.text)
    hs.post(DM, ALICE, "second")
    hs.wait_for(lambda: any("second" in text for text in hs.texts(BOT)))
    assert "skipped a room of a /sync answer: room !x:y is malformed" in caplog.text
    assert "'no-bang' is not a room id" in caplog.text
    assert "skipped an invite: the invite to !i:y is malformed" in caplog.text
    assert "ignored account data: m.direct is malformed" in caplog.text
    assert matrix.gateway.wait_idle()


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
_relation = st.fixed_dictionaries(
    {},
    optional={
        "rel_type": st.sampled_from(["m.thread", "m.replace", "m.annotation"]) | _json,
        "event_id": st.sampled_from(["$root:x", "$r", "bad"]) | _json,
        "m.in_reply_to": st.fixed_dictionaries({}, optional={"event_id": st.text() | _json}) | _json,
    },
)
_content = st.fixed_dictionaries(
    {},
    optional={
        "msgtype": st.sampled_from(
            ["m.text", "m.notice", "m.emote", "m.image", "m.file", "m.audio", "m.video", "m.location", "x"]
        )
        | _json,
        "body": st.text(max_size=300) | _json,
        "filename": st.text(max_size=20) | _json,
        "url": st.sampled_from(["mxc://example.org/abc", "mxc://bad", ""]) | _json,
        "info": st.fixed_dictionaries({}, optional={"size": st.integers() | _json, "mimetype": _json}) | _json,
        "file": _json,
        "m.relates_to": _relation | _json,
    },
)
_event = st.fixed_dictionaries(
    {},
    optional={
        "event_id": st.sampled_from(["$e:x", "$e", "e", ""]) | _json,
        "type": st.sampled_from(["m.room.message", "m.sticker", "m.room.encrypted", "m.room.member"]) | _json,
        "sender": st.sampled_from([ALICE, "@a:b", "alice", "@:"]) | _json,
        "content": _content | _json,
        "origin_server_ts": st.integers() | _json,
    },
)
_bodies = (
    st.binary(max_size=64) | _event.map(lambda e: json.dumps(e).encode()) | _json.map(lambda v: json.dumps(v).encode())
)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(body=_bodies)
def test_any_event_decodes_to_a_message_none_or_an_event_error(body: bytes) -> None:
    try:
        incoming = incoming_of(decode_event(body))
    except EventError:
        event("EventError")
        return
    event("ignored" if incoming is None else "message")
    if incoming is not None:
        assert incoming.text.strip()
        assert incoming.event_id.startswith("$")
        if incoming.file is not None:  # a file to fetch, or the reason it cannot be
            assert incoming.file.kind in KINDS
            assert incoming.file.size is None or incoming.file.size >= 0
            assert (incoming.file.url is None) != (incoming.file.problem is None)
        inbound = inbound_message(incoming, account_id="main", room_id=DM, direct=False, received_at=0.0)
        assert build_session_key(inbound.source).startswith("agent:main:matrix~main:group:!dm%3Aexample.org:")
        msgspec.msgpack.encode(inbound)  # it can be stored


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(body=st.binary(max_size=200) | _json.map(lambda v: json.dumps({"next_batch": "s1", "rooms": v}).encode()))
def test_any_sync_body_decodes_or_is_a_sync_error(body: bytes) -> None:
    try:
        answer, _ = decode_sync(body)
    except SyncError:
        event("SyncError")
        return
    assert isinstance(answer.next_batch, str)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(value=_json, ascii_only=st.booleans())
def test_repair_keeps_valid_json_as_it_is(value: Any, ascii_only: bool) -> None:
    body = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert json.loads(repair_json(body)) == value


@settings(max_examples=200, deadline=None)
@given(depth=st.integers(1, 3000), garbage=st.binary(max_size=20), keys=st.booleans())
def test_repair_turns_any_depth_into_json_the_decoders_can_read(depth: int, garbage: bytes, keys: bool) -> None:
    opener, closer = (b'{"k":', b"}") if keys else (b"[", b"]")
    body = (
        b'{"next_batch": "s1", "x": '
        + opener * depth
        + json.dumps(garbage.decode("latin-1")).encode()
        + closer * depth
        + b"}"
    )
    answer, repaired = decode_sync(body)
    assert answer.next_batch == "s1"
    assert not repaired or depth >= MAX_DEPTH  # only what the strict decoder cannot read is repaired


@pytest.mark.slow
def test_random_events_in_a_live_room_never_stop_the_account(hs: MatrixFake, start: Start) -> None:
    hs.create_room(DM, ALICE, BOT)
    start()

    # Any JSON value as an event (a homeserver sends JSON, so bytes that are no JSON at all are not tried here:
    # they would make every answer from that position unreadable, which test_a_broken_sync_answer covers).
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(body=_event.map(lambda e: json.dumps(e).encode()) | _json.map(lambda v: json.dumps(v).encode()))
    def check(body: bytes) -> None:
        hs.push_raw(DM, body)

    check()
    hs.post(DM, ALICE, "after the storm")
    hs.wait_for(lambda: any("after the storm" in text for text in hs.texts(BOT)))


# -- configuration and banner ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "path", "problem"),
    [
        ({"poll_timeout_s": 0}, "platforms.matrix.poll_timeout_s", "1..120 seconds"),
        ({"poll_retry_s": 5, "poll_retry_max_s": 1}, "platforms.matrix.poll_retry_max_s", "not be smaller"),
        ({"request_timeout_s": 0}, "platforms.matrix.request_timeout_s", "positive number"),
        ({"timeline_limit": 0}, "platforms.matrix.timeline_limit", "1..1000"),
        ({"backfill_limit": -1}, "platforms.matrix.backfill_limit", "0..100000"),
        ({"max_message_bytes": 70000}, "platforms.matrix.max_message_bytes", "64 KiB"),
        ({"room_burst": 0}, "platforms.matrix.room_burst", "at least 1"),
        (
            {"accounts": {"a b": {"homeserver": "https://h", "access_token": "t"}}},
            "platforms.matrix.accounts.a b",
            "1 to 64",
        ),
        ({"accounts": {"m": {"access_token": "t"}}}, "platforms.matrix.accounts.m.homeserver", "is required"),
        (
            {"accounts": {"m": {"homeserver": "matrix.org", "access_token": "t"}}},
            "platforms.matrix.accounts.m.homeserver",
            "http(s) URL",
        ),
        (
            {"accounts": {"m": {"homeserver": "https://h:99999", "access_token": "t"}}},
            "platforms.matrix.accounts.m.homeserver",
            "http(s) URL",
        ),
        ({"accounts": {"m": {"homeserver": "https://h"}}}, "platforms.matrix.accounts.m.access_token", "is required"),
        (
            {"accounts": {"m": {"homeserver": "https://h", "access_token": "t", "access_token_env": "T"}}},
            "platforms.matrix.accounts.m.access_token_env",
            "not both",
        ),
        (
            {"accounts": {"m": {"homeserver": "https://h", "access_token": "a b"}}},
            "platforms.matrix.accounts.m.access_token",
            "printable ASCII",
        ),
        (
            {"accounts": {"m": {"homeserver": "https://h", "access_token_env": "9X"}}},
            "platforms.matrix.accounts.m.access_token_env",
            "variable name",
        ),
    ],
)
def test_a_bad_section_is_a_config_error_naming_its_field(section: dict[str, Any], path: str, problem: str) -> None:
    with pytest.raises(ConfigError) as error:
        msgspec.convert(section, MatrixConfig)  # as the daemon loads config.yaml
    assert error.value.path == path
    assert problem in str(error.value)


def test_unknown_fields_are_refused_and_the_section_round_trips_through_json() -> None:
    with pytest.raises(msgspec.ValidationError, match="acces_token"):
        msgspec.convert({"accounts": {"m": {"homeserver": "https://h", "acces_token": "t"}}}, MatrixConfig)
    config = MatrixConfig(accounts={"m": MatrixAccount(homeserver="https://h", access_token="t")}, room_burst=2)
    assert msgspec.json.decode(msgspec.json.encode(config), type=registry.config_type("matrix")) == config


def test_access_tokens_from_the_environment_are_read_when_the_adapter_is_built() -> None:
    config = MatrixConfig(
        accounts={"m": MatrixAccount(homeserver="https://matrix.example.org", access_token_env="MX_TOKEN")}
    )
    adapter = registry.build("matrix", config, {"MX_TOKEN": TOKEN})
    assert "token from $MX_TOKEN" in adapter.describe()[0]
    for environ, problem in [({}, "MX_TOKEN is not set"), ({"MX_TOKEN": "a b"}, "the value of MX_TOKEN")]:
        with pytest.raises(ConfigError, match=problem) as error:
            MatrixAdapter(config, environ=environ)
        assert error.value.path == "platforms.matrix.accounts.m.access_token_env"


def test_the_banner_says_how_each_account_receives_and_replies(hs: MatrixFake) -> None:
    empty: Adapter = MatrixAdapter(MatrixConfig(), environ={})
    assert empty.describe() == [
        "Matrix: no accounts; add one under platforms.matrix.accounts in config.yaml "
        "(homeserver: https://matrix.example.org, access_token_env: MATRIX_ACCESS_TOKEN)"
    ]
    adapter = MatrixAdapter(
        make_config(hs, {"main": account(hs), "quiet": account(hs, OTHER_TOKEN, auto_join=False)}), environ={}
    )
    main, quiet = adapter.describe()
    assert main == (
        f"Matrix account 'main' (token in config.yaml): /sync long poll on {hs.base_url}; joins invites; replies "
        "with transaction ids in parts of 32000 bytes; images, files, audio and video are downloaded into the media "
        "store (authenticated media API); end-to-end encrypted rooms and files are not read"
    )
    assert "does not join invites" in quiet
    assert TOKEN not in main + quiet
    assert adapter.capabilities.threads
    assert adapter.capabilities.max_message_chars == 32000 // 6
    assert adapter.senders()[0].idempotent_sends


# -- /save -------------------------------------------------------------------------------------------------------


def test_save_uploads_the_markdown_and_posts_one_m_file_event(hs: MatrixFake, start: Start) -> None:
    hs.create_room(DM, ALICE, BOT)
    matrix = start()
    hs.post(DM, ALICE, "hello")
    wait_sent(hs, 1)
    hs.post(DM, ALICE, "/save")
    _, saved = wait_sent(hs, 2)
    assert matrix.gateway.wait_idle()
    ((filename, content_type, data, uri),) = hs.uploads
    assert filename is not None
    assert filename.endswith(".md")
    assert content_type.startswith("text/markdown")
    markdown = data.decode("utf-8")
    assert markdown.index("hello") < markdown.index("echo: hello")
    assert saved["msgtype"] == "m.file"
    assert (saved["url"], saved["filename"]) == (uri, filename)
    assert saved["info"] == {"mimetype": content_type, "size": len(data)}
    assert saved["body"].endswith("the conversation as Markdown (2 messages, 1 part(s)).")
    assert len(hs.sent(BOT)) == 2  # the file instead of the text, not beside it


def test_a_lost_answer_to_the_m_file_event_is_retried_under_its_transaction_id_and_shows_once(
    hs: MatrixFake, start: Start
) -> None:
    hs.create_room(DM, ALICE, BOT)
    matrix = start()
    hs.post(DM, ALICE, "hello")
    wait_sent(hs, 1)
    hs.fail("send", 200, drop=True, times=2)  # two attempts lose their answer (the client never re-sends by itself)
    hs.post(DM, ALICE, "/save")
    hs.wait_for(lambda: len(hs.calls("send")) >= 4)
    assert matrix.gateway.wait_idle()
    _, *file_sends = hs.calls("send")
    assert [call.status for call in file_sends] == [0, 0, 200]
    assert len({call.path for call in file_sends}) == 1  # one transaction id on every attempt
    assert [event["msgtype"] for event in hs.sent(BOT)] == ["m.text", "m.file"]
    assert len(hs.uploads) == 3  # each of the outbox's attempts uploaded the file again; the room shows it once


def test_save_sends_the_text_when_the_homeserver_refuses_the_upload(
    hs: MatrixFake, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    hs.create_room(DM, ALICE, BOT)
    matrix = start()
    hs.post(DM, ALICE, "hello")
    wait_sent(hs, 1)
    hs.fail("upload", 413, "M_TOO_LARGE", "Cannot upload files larger than 10 MB")
    with caplog.at_level(logging.WARNING, logger="platforms.support.documents"):
        hs.post(DM, ALICE, "/save")
        _, text = wait_sent(hs, 2)
        assert matrix.gateway.wait_idle()
    assert text["msgtype"] == "m.text"
    assert text["body"].index("hello") < text["body"].index("echo: hello")
    assert hs.uploads == []
    assert "M_TOO_LARGE" in caplog.text
    assert "the reply's text is sent instead" in caplog.text
