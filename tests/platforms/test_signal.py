"""The Signal adapter against a real gateway and a loopback fake of signal-cli's HTTP daemon (``signal_fake``).

Envelopes are queued on the fake, which streams them as Server-Sent Events the way signal-cli does (ids,
``event:receive``, keep-alives, ``Last-Event-ID`` replay, receive-on-connection), and replies are read back from
its JSON-RPC ``send``, so both directions are checked on the wire. Reconnect backoffs are shortened to keep the
file fast.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import msgspec
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from hermes_actors.errors import ConfigError
from hermes_actors.media import KINDS, MediaConfig
from hermes_actors.messages import InboundMessage, OutboundMessage, decode_inbound
from hermes_actors.ports import AcceptResult, Inbox, PollCursor
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.testing import FakeClock, poll_until
from platforms import registry
from platforms.base import Adapter, ConnectionReporter, SendError
from platforms.signal import PLATFORM, EventError, SignalAdapter, SignalConfig, decode_event, inbound_from_event
from platforms.signal.envelopes import Skipped, files_of
from platforms.signal.sender import SignalSender
from platforms.signal.sse import Oversized, SseEvent, SseParser
from tests.platforms.crash import AdapterWorker, wait_for_inbox
from tests.platforms.signal_fake import (
    FakeSignalCli,
    Person,
    io_error,
    message,
    not_a_member_error,
    rate_limit_error,
    receipt,
    sync_sent,
    typing,
    unregistered_error,
    untrusted_error,
)
from tests.platforms.support import StartGateway, inbound_messages

ACCOUNT = "+15550001"
OTHER_ACCOUNT = "+15550002"
ALICE = Person(uuid="a1a1a1a1-0000-4000-8000-000000000001", number="+15551110001", name="Alice")
BOB = Person(uuid="b2b2b2b2-0000-4000-8000-000000000002", number=None, name="Bob")  # shares no number
GROUP = "Pmpi+EfPWmsxiomLe9Nx2XF9HOE483p6iKiFj65iMwI="


@pytest.fixture
def daemon() -> Iterator[FakeSignalCli]:
    fake = FakeSignalCli([ACCOUNT, OTHER_ACCOUNT]).start()
    yield fake
    fake.stop()


def fast(url: str, accounts: Sequence[str] = (ACCOUNT,), **options: Any) -> SignalConfig:
    """A config pointed at the fake, with short backoffs and no pacing to speak of."""
    settings: dict[str, Any] = {
        "reconnect_base_s": 0.05,
        "reconnect_max_s": 0.2,
        "connect_timeout_s": 2.0,
        "request_timeout_s": 5.0,
        "messages_per_second": 1000.0,
        "burst": 100,
    }
    settings.update(options)
    return SignalConfig(url=url, accounts=list(accounts), **settings)


@dataclass(frozen=True)
class Row:
    """An inbox row: the stored message id, its routing key and text."""

    message_id: str
    routing_key: str
    text: str


@dataclass(frozen=True)
class Running:
    adapter: SignalAdapter
    gateway: Gateway
    clock: FakeClock

    def inbound(self) -> list[InboundMessage]:
        return inbound_messages(self.gateway, PLATFORM)

    def rows(self) -> list[Row]:
        with self.gateway.read() as store:
            found = store.sql.execute("SELECT platform_message_id, routing_key, payload FROM inbox ORDER BY id")
            return [Row(str(mid), str(key), decode_inbound(payload).text) for mid, key, payload in found]

    def texts(self) -> list[str]:
        return [row.text for row in self.rows()]

    def session_of(self, routing_key: str) -> str:
        with self.gateway.read() as store:
            session_id = store.get_route(routing_key)
        assert session_id is not None, f"no session for {routing_key}"
        return session_id

    def cursor(self, account: str = ACCOUNT) -> str | None:
        with self.gateway.read() as store:
            return store.kv.get_cursor(PLATFORM, account)

    def wait_rows(self, count: int, timeout: float = 10.0) -> list[Row]:
        poll_until(lambda: len(self.rows()) >= count, timeout, what=f"{count} inbox rows")
        return self.rows()


Start = Callable[..., Running]


@pytest.fixture
def start(start_gateway: StartGateway) -> Start:
    """Start a gateway on ``tmp_path`` with the adapter; ``fake_gateway_clock`` gives the gateway a FakeClock."""

    def run(config: SignalConfig, *, fake_gateway_clock: bool = False, media: MediaConfig | None = None) -> Running:
        clock = FakeClock(start=time.time())
        # With a fake gateway clock, pacing runs on it too: a penalty for a rate limit ends when it is advanced.
        adapter = SignalAdapter(
            config, environ={}, clock=clock, monotonic=clock if fake_gateway_clock else time.monotonic
        )
        gateway = start_gateway(
            adapter,
            clock=clock if fake_gateway_clock else time.time,
            tick_interval_s=5.0 if fake_gateway_clock else 0.1,
            media=media,
        )
        return Running(adapter=adapter, gateway=gateway, clock=clock)

    return run


# -- direct chats, groups and accounts ---------------------------------------------------------------------------


def test_a_direct_message_is_one_turn_keyed_by_the_sender_uuid_and_answered_to_it(
    daemon: FakeSignalCli, start: Start
) -> None:
    running = start(fast(daemon.url))
    envelope = message(ALICE, "hello")
    daemon.push(ACCOUNT, envelope)
    reply = daemon.take_sent()
    assert reply.params == {"account": ACCOUNT, "recipient": [ALICE.uuid], "message": "echo: hello"}
    assert reply.headers["content-type"].startswith("application/json")
    assert running.rows() == [
        Row(f"{ALICE.uuid}:{envelope['timestamp']}", f"agent:main:signal~{ACCOUNT}:dm:{ALICE.uuid}", "hello")
    ]
    (inbound,) = running.inbound()
    assert (inbound.source.user_id, inbound.source.user_id_alt) == (ALICE.number, ALICE.uuid)
    assert inbound.source.user_name == "Alice"
    (connection,) = daemon.connections
    assert connection.account == ACCOUNT  # the + arrived escaped, as signal-cli's query parser needs
    assert connection.headers["accept"] == "text/event-stream"
    assert daemon.protocol_errors == []


def test_group_members_have_their_own_sessions_and_group_replies_quote_the_message_they_answer(
    daemon: FakeSignalCli, start: Start
) -> None:
    running = start(fast(daemon.url))
    from_alice = message(ALICE, "from alice", group=GROUP)
    daemon.push(ACCOUNT, from_alice)
    first = daemon.take_sent()
    daemon.push(ACCOUNT, message(BOB, "from bob", group=GROUP))
    second = daemon.take_sent()
    daemon.push(ACCOUNT, message(ALICE, "in private"))
    third = daemon.take_sent()
    keys = [row.routing_key for row in running.rows()]
    assert keys == [
        f"agent:main:signal~{ACCOUNT}:group:{GROUP}:{ALICE.uuid}",
        f"agent:main:signal~{ACCOUNT}:group:{GROUP}:{BOB.uuid}",
        f"agent:main:signal~{ACCOUNT}:dm:{ALICE.uuid}",
    ]
    assert running.gateway.wait_idle()
    assert len({running.session_of(key) for key in keys}) == 3  # per-user isolation in the group
    assert [(s.to, s.text) for s in (first, second, third)] == [
        (f"group:{GROUP}", "echo: from alice"),
        (f"group:{GROUP}", "echo: from bob"),
        (ALICE.uuid, "echo: in private"),
    ]
    assert (first.params["quoteTimestamp"], first.params["quoteAuthor"]) == (from_alice["timestamp"], ALICE.uuid)
    assert "quoteTimestamp" not in third.params
    group_source = running.inbound()[1].source
    assert (group_source.chat_name, group_source.user_id, group_source.user_name) == ("Test group", BOB.uuid, "Bob")


def test_two_accounts_seeing_the_same_person_never_share_a_session(daemon: FakeSignalCli, start: Start) -> None:
    running = start(fast(daemon.url, [ACCOUNT, OTHER_ACCOUNT]))
    daemon.push(ACCOUNT, message(ALICE, "to one"))
    daemon.push(OTHER_ACCOUNT, message(ALICE, "to two"))
    sent = sorted((daemon.take_sent(), daemon.take_sent()), key=lambda s: str(s.account))
    assert [(s.account, s.to, s.text) for s in sent] == [
        (ACCOUNT, ALICE.uuid, "echo: to one"),
        (OTHER_ACCOUNT, ALICE.uuid, "echo: to two"),
    ]
    keys = sorted(row.routing_key for row in running.rows())
    assert keys == [
        f"agent:main:signal~{ACCOUNT}:dm:{ALICE.uuid}",
        f"agent:main:signal~{OTHER_ACCOUNT}:dm:{ALICE.uuid}",
    ]
    assert running.gateway.wait_idle()
    assert running.session_of(keys[0]) != running.session_of(keys[1])
    assert sorted(str(c.account) for c in daemon.connections) == [ACCOUNT, OTHER_ACCOUNT]


def test_receipts_typing_sync_and_own_messages_start_no_turn_and_attachments_become_stand_ins(
    daemon: FakeSignalCli, start: Start
) -> None:
    running = start(fast(daemon.url))
    own = Person(uuid="c3c3c3c3-0000-4000-8000-000000000003", number=ACCOUNT, name="Me")
    daemon.push(
        ACCOUNT,
        receipt(ALICE, 1),
        typing(ALICE),
        sync_sent(own, "sent from my phone", ALICE),
        message(own, "note to self"),
        message(ALICE, None, reaction={"emoji": "👍", "targetSentTimestamp": 1, "isRemove": False}),
        message(ALICE, None, group=GROUP, groupInfo={"groupId": GROUP, "type": "UPDATE", "revision": 4}),
        message(ALICE, None, attachments=[{"contentType": "image/jpeg"}]),
        message(ALICE, "see this", attachments=[{"contentType": "application/pdf", "filename": "report.pdf"}]),
        message(ALICE, "hi \ufffc!", mentions=[{"name": "Bob", "uuid": BOB.uuid, "start": 3, "length": 1}]),
        message(ALICE, None, sticker={"packId": "ab", "stickerId": 1}),
    )
    daemon.push(ACCOUNT, message(ALICE, "marker"))
    running.wait_rows(5)
    assert running.texts() == ["[image]", "see this\n[file: report.pdf]", "hi @Bob!", "[sticker]", "marker"]


def test_attachments_are_fetched_with_get_attachment_into_the_media_store_before_the_message_is_stored(
    daemon: FakeSignalCli, start: Start, tmp_path: Path
) -> None:
    running = start(fast(daemon.url), media=MediaConfig(max_bytes=1024))
    jpeg = b"\xff\xd8\xff\xe0" + bytes(range(96))
    long_text = "a long message, " * 20
    daemon.add_attachment("Xy7_photo.jpg", jpeg)
    daemon.add_attachment("long_1.txt", long_text.encode())
    daemon.add_attachment("report.pdf", b"%PDF-1.7 a report")
    photo = {"id": "Xy7_photo.jpg", "contentType": "image/jpeg", "filename": "photo.jpg", "size": len(jpeg)}
    long_part = {"id": "long_1.txt", "contentType": "text/x-signal-plain", "size": len(long_text)}
    daemon.push(ACCOUNT, message(ALICE, "see this", attachments=[photo]))
    assert daemon.take_sent().text == (
        f"echo: see this\n[image]\n[attached image photo.jpg (image/jpeg, 100 bytes), saved at "
        f"{tmp_path / 'media' / hashlib.sha256(jpeg).hexdigest()[:2] / hashlib.sha256(jpeg).hexdigest()}.jpg]"
    )
    pdf = {"id": "report.pdf", "contentType": "application/pdf", "filename": "report.pdf", "size": 17}
    daemon.push(ACCOUNT, message(BOB, "the start", group=GROUP, attachments=[long_part, pdf]))
    daemon.take_sent()
    assert running.gateway.wait_idle()
    first, second = running.inbound()
    (image,) = first.attachments
    assert (image.kind, image.mime_type, image.size, image.name, image.error) == (
        "image",
        "image/jpeg",
        100,
        "photo.jpg",
        None,
    )
    assert image.sha256 == hashlib.sha256(jpeg).hexdigest()
    assert Path(str(image.path)).read_bytes() == jpeg
    # The rest of a long message is a plain-text attachment: its text becomes its stand-in.
    rest, report = second.attachments
    assert (rest.kind, rest.mime_type, rest.description) == (
        "document",
        "text/x-signal-plain",
        f"Its text:\n{long_text}",
    )
    assert (report.name, report.mime_type, report.size) == ("report.pdf", "application/pdf", 17)
    # Asked for in the chat they came in: the sender of a direct message, the group of a group message.
    assert daemon.attachment_calls == [
        {"account": ACCOUNT, "id": "Xy7_photo.jpg", "recipient": ALICE.uuid},
        {"account": ACCOUNT, "id": "long_1.txt", "groupId": GROUP},
        {"account": ACCOUNT, "id": "report.pdf", "groupId": GROUP},
    ]
    assert daemon.protocol_errors == []


def test_an_attachment_over_the_limit_is_refused_before_it_is_fetched_and_the_text_still_runs(
    daemon: FakeSignalCli, start: Start, tmp_path: Path
) -> None:
    start(fast(daemon.url), media=MediaConfig(max_bytes=1024))
    daemon.add_attachment("big.jpg", bytes(4096))
    big = {"id": "big.jpg", "contentType": "image/jpeg", "filename": "big.jpg", "size": 4096}
    daemon.push(ACCOUNT, message(ALICE, "too big?", attachments=[big]))
    assert daemon.take_sent().text == (
        "I could not read big.jpg: it is 4 KB, over the 1 KB limit.\n\n"
        "echo: too big?\n[image]\n[image big.jpg was not read: it is 4 KB, over the 1 KB limit]"
    )
    assert daemon.attachment_calls == []  # the envelope said so: nothing was fetched
    # Without a size in the envelope it is fetched, and refused from the length of its base64.
    daemon.add_attachment("clip.mp4", bytes(2048))
    daemon.push(
        ACCOUNT, message(ALICE, None, attachments=[{"id": "clip.mp4", "contentType": "video/mp4", "size": None}])
    )
    assert daemon.take_sent().text.startswith("I could not read the video: it is 2 KB, over the 1 KB limit.\n\n")
    assert [call["id"] for call in daemon.attachment_calls] == ["clip.mp4"]
    assert not (tmp_path / "media").exists()


def test_an_attachment_signal_cli_cannot_hand_over_becomes_a_refused_attachment_saying_why(
    daemon: FakeSignalCli, start: Start, tmp_path: Path
) -> None:
    running = start(fast(daemon.url))
    gone = {"id": "gone.png", "contentType": "image/png", "filename": "gone.png"}
    no_id = {"contentType": "audio/aac", "filename": "voice.aac", "id": None}
    daemon.push(ACCOUNT, message(ALICE, "two files", attachments=[gone, no_id]))
    reply = daemon.take_sent().text
    assert reply.startswith(
        "I could not read gone.png: signal-cli does not have it (Could not find attachment with ID: gone.png); it "
        "keeps no files when run with --ignore-attachments, or when it could not download them from Signal. "
        "I could not read voice.aac: signal-cli gave no id to fetch it by.\n\necho: two files\n[image]\n[audio]\n"
    )
    (stored,) = running.inbound()
    assert [(a.kind, a.name, a.path) for a in stored.attachments] == [
        ("image", "gone.png", None),
        ("audio", "voice.aac", None),
    ]
    assert [call["id"] for call in daemon.attachment_calls] == ["gone.png"]
    assert not (tmp_path / "media").exists()


def test_a_redelivered_envelope_runs_one_turn(daemon: FakeSignalCli, start: Start) -> None:
    running = start(fast(daemon.url))
    envelope = message(ALICE, "once")
    daemon.push(ACCOUNT, envelope)
    assert daemon.take_sent().text == "echo: once"
    daemon.push(ACCOUNT, envelope, message(ALICE, "marker"))  # Signal resends an envelope it saw no ack for
    assert daemon.take_sent().text == "echo: marker"
    assert running.texts() == ["once", "marker"]


def test_the_json_rpc_notification_forms_read_like_the_event_stream_form() -> None:
    payload = {"envelope": message(ALICE, "same", timestamp=1764460800999), "account": ACCOUNT}
    plain = inbound_from_event(decode_event(json.dumps(payload)), ACCOUNT)
    notification = {"jsonrpc": "2.0", "method": "receive", "params": payload}
    subscription = {"jsonrpc": "2.0", "method": "receive", "params": {"subscription": 0, "result": payload}}
    for form in (notification, subscription):
        assert inbound_from_event(decode_event(json.dumps(form)), ACCOUNT) == plain
    with pytest.raises(EventError, match="'send' notification is not a receive event"):
        decode_event(json.dumps({"jsonrpc": "2.0", "method": "send", "params": payload}))


def test_a_message_signal_cli_could_not_decrypt_is_reported_with_the_fix() -> None:
    envelope = {key: value for key, value in message(ALICE, "lost").items() if key != "dataMessage"}
    exception = {"message": "Untrusted identity for sender", "type": "UntrustedIdentityException"}
    found = inbound_from_event(
        decode_event(json.dumps({"envelope": envelope, "account": ACCOUNT, "exception": exception})), ACCOUNT
    )
    assert isinstance(found, Skipped)
    assert found.level == logging.WARNING
    assert f"signal-cli -a {ACCOUNT} trust --trust-all-known-keys {ALICE.uuid}" in found.reason


# -- the stream: drops, replays, restarts ------------------------------------------------------------------------


def test_a_dropped_stream_reconnects_with_its_last_event_id_and_what_waited_arrives_once(
    daemon: FakeSignalCli, start: Start
) -> None:
    running = start(fast(daemon.url))
    daemon.push(ACCOUNT, message(ALICE, "before"))
    assert daemon.take_sent().text == "echo: before"
    first_cursor = running.cursor()
    assert first_cursor is not None
    assert first_cursor.endswith("-1")
    daemon.drop()
    daemon.push(ACCOUNT, message(ALICE, "during"))  # nobody listens: it waits on the Signal server
    assert daemon.take_sent().text == "echo: during"
    connections = daemon.wait_connections(2)
    assert connections[1].last_event_id == first_cursor
    assert running.texts() == ["before", "during"]
    assert daemon.waiting(ACCOUNT) == 0


@pytest.mark.slow
def test_a_half_open_stream_is_noticed_by_the_idle_timeout_and_the_replay_fills_the_gap(
    daemon: FakeSignalCli, start: Start
) -> None:
    running = start(fast(daemon.url, idle_timeout_s=0.5))
    daemon.push(ACCOUNT, message(ALICE, "first"))
    assert daemon.take_sent().text == "echo: first"
    seen = running.cursor()
    daemon.stall()  # the socket stays open but nothing gets through, keep-alives included
    daemon.push(ACCOUNT, message(ALICE, "swallowed"))  # written into the dead socket; the daemon keeps it
    assert daemon.take_sent().text == "echo: swallowed"
    assert [c.last_event_id for c in daemon.connections] == [None, seen]
    assert running.texts() == ["first", "swallowed"]


def test_a_replay_the_daemon_cannot_place_sends_everything_kept_and_nothing_runs_twice(
    daemon: FakeSignalCli, start: Start
) -> None:
    running = start(fast(daemon.url))
    daemon.push(ACCOUNT, message(ALICE, "one"), message(BOB, "two"))
    replies = {daemon.take_sent().text, daemon.take_sent().text}
    assert replies == {"echo: one", "echo: two"}
    daemon.restart(keep_buffer=True)  # our Last-Event-ID is unknown to it: it sends all it kept
    daemon.push(ACCOUNT, message(ALICE, "three"))
    assert daemon.take_sent().text == "echo: three"
    assert running.gateway.wait_idle()
    assert sorted(running.texts()) == ["one", "three", "two"]
    assert daemon.sent.empty()


def test_a_restart_reconnects_from_the_stored_event_id(daemon: FakeSignalCli, start: Start) -> None:
    running = start(fast(daemon.url))
    daemon.push(ACCOUNT, message(ALICE, "first"))
    daemon.take_sent()
    stored = running.cursor()
    running.adapter.stop()
    daemon.push(ACCOUNT, message(ALICE, "while we were away"))
    again = SignalAdapter(fast(daemon.url), environ={}, clock=running.clock)
    running.gateway.replace_sender(again.senders()[0])
    again.start(GatewayInbox(running.gateway))
    try:
        assert daemon.take_sent().text == "echo: while we were away"
    finally:
        again.stop()
    assert daemon.connections[-1].last_event_id == stored
    assert running.texts() == ["first", "while we were away"]


def test_a_daemon_without_event_ids_still_works_and_no_cursor_is_stored(start: Start) -> None:
    fake = FakeSignalCli([ACCOUNT], event_ids=False).start()
    try:
        running = start(fast(fake.url))
        fake.push(ACCOUNT, message(ALICE, "old daemon"))
        assert fake.take_sent().text == "echo: old daemon"
        fake.drop()
        fake.push(ACCOUNT, message(ALICE, "after the drop"))
        assert fake.take_sent().text == "echo: after the drop"
        assert [c.last_event_id for c in fake.connections] == [None, None]
        assert running.cursor() is None
    finally:
        fake.stop()


def test_a_refused_stream_is_logged_with_the_fix_and_the_other_account_keeps_working(
    daemon: FakeSignalCli, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    unknown = "+15559999"
    daemon.refuse_streams(1, status=200, body=b"<html>", content_type="text/html")
    running = start(fast(daemon.url, [ACCOUNT, unknown]))
    daemon.push(ACCOUNT, message(ALICE, "still here"))
    assert daemon.take_sent().text == "echo: still here"
    poll_until(lambda: sum(c.account == unknown for c in daemon.connections) >= 3, what="three refused streams")
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("platforms.signal"))
    assert "is not text/event-stream" in logged
    assert f"signal account {unknown}: the event stream was refused (HTTP 400" in logged
    assert "register or link it" in logged
    assert running.texts() == ["still here"]


def test_a_stream_the_daemon_drops_and_refuses_is_a_connection_problem_naming_the_account_until_it_is_back(
    daemon: FakeSignalCli, start: Start
) -> None:
    running = start(fast(daemon.url, [ACCOUNT, OTHER_ACCOUNT]))
    assert isinstance(running.adapter, ConnectionReporter)
    poll_until(lambda: daemon.open_streams() == 2, what="both streams to be open")
    assert running.adapter.connection_problem() is None
    daemon.refuse_streams(1000, status=400, body=b"no such account")
    daemon.drop()

    def both_refused() -> str | None:
        problem = running.adapter.connection_problem()
        return problem if problem is not None and problem.count("(HTTP 400") == 2 else None

    problem = poll_until(both_refused, what="both refused streams to be reported")
    assert problem.startswith(f"account '{ACCOUNT}': reconnecting (the event stream was refused (HTTP 400")
    assert f"; account '{OTHER_ACCOUNT}': reconnecting (" in problem
    assert "register or link it in signal-cli" in problem
    daemon.heal()
    poll_until(lambda: running.adapter.connection_problem() is None, what="the streams back to clear the problem")
    daemon.push(ACCOUNT, message(ALICE, "back"))
    assert daemon.take_sent().text == "echo: back"


def test_an_event_for_another_account_is_refused_and_nothing_is_stored(
    daemon: FakeSignalCli, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    running = start(fast(daemon.url))
    daemon.push(ACCOUNT, message(ALICE, "first"))
    daemon.take_sent()
    forged = json.dumps({"envelope": message(ALICE, "forged"), "account": OTHER_ACCOUNT})
    daemon.push_raw(ACCOUNT, f"event:receive\ndata:{forged}\n\n".encode())
    daemon.push(ACCOUNT, message(ALICE, "marker"))
    assert daemon.take_sent().text == "echo: marker"
    assert running.texts() == ["first", "marker"]
    assert f"an event for account '{OTHER_ACCOUNT}' arrived on the stream of {ACCOUNT}" in caplog.text


def test_a_message_that_cannot_be_stored_holds_the_stream_until_it_is(
    daemon: FakeSignalCli, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = SignalAdapter(fast(daemon.url), environ={})
    with Gateway(tmp_path / "state.db", senders=adapter.senders(), tick_interval_s=0.1) as gateway:
        flaky = FlakyInbox(GatewayInbox(gateway), failures=2)
        adapter.start(cast(Inbox, flaky))
        try:
            daemon.push(ACCOUNT, message(ALICE, "keep trying"), message(ALICE, "next"))
            assert [daemon.take_sent().text, daemon.take_sent().text] == ["echo: keep trying", "echo: next"]
        finally:
            adapter.stop()
    assert flaky.calls == 4
    assert caplog.text.count("could not store message") == 2


class FlakyInbox:
    """An inbox whose first ``failures`` commits fail (the store is busy)."""

    def __init__(self, inbox: Inbox, *, failures: int) -> None:
        self._inbox = inbox
        self._failures = failures
        self.calls = 0

    def poll_cursor(self, platform: str, account_id: str = "") -> str | None:
        return self._inbox.poll_cursor(platform, account_id)

    def accept_many(self, batch: Sequence[InboundMessage], *, cursor: PollCursor | None = None) -> list[AcceptResult]:
        self.calls += 1
        if self.calls <= self._failures:
            raise RuntimeError("database is locked")
        return self._inbox.accept_many(batch, cursor=cursor)


def test_stop_closes_an_idle_stream_at_once(daemon: FakeSignalCli, tmp_path: Path) -> None:
    adapter = SignalAdapter(fast(daemon.url, idle_timeout_s=60.0), environ={})
    with Gateway(tmp_path / "state.db", senders=adapter.senders()) as gateway:
        adapter.start(GatewayInbox(gateway))
        daemon.wait_connections(1)
        started = time.monotonic()
        adapter.stop(timeout=5)
        assert time.monotonic() - started < 2
    poll_until(lambda: daemon.open_streams() == 0, 5, what="every event stream closed")


# -- sending -----------------------------------------------------------------------------------------------------


def reply_rows(running: Running) -> list[tuple[int, float]]:
    with running.gateway.read() as store:
        return [(row.attempts, row.next_attempt_at) for row in store.outbox.unsent()]


@pytest.mark.parametrize(
    ("error", "status", "headers", "retry_after"),
    [
        (rate_limit_error(ALICE.uuid, retry_after=7), 200, {}, 7.0),  # signal-cli's error -5 with Signal's hint
        (rate_limit_error(ALICE.uuid, code=-1), 200, {}, 11.0),  # older versions: no hint, rate_limit_backoff_s
        (io_error(), 200, {}, 0.05),  # the outbox's own backoff
        (None, 503, {}, 0.05),
        (None, 429, {"Retry-After": "9"}, 9.0),
    ],
)
def test_a_failed_reply_is_retried_when_the_answer_says_and_arrives_once(
    daemon: FakeSignalCli,
    start: Start,
    error: dict[str, Any] | None,
    status: int,
    headers: dict[str, str],
    retry_after: float,
) -> None:
    running = start(fast(daemon.url, rate_limit_backoff_s=11.0), fake_gateway_clock=True)
    daemon.answer_send(error, status=status, body=None if status == 200 else b"busy", headers=headers)
    daemon.push(ACCOUNT, message(ALICE, "hello"))
    first = daemon.take_sent()
    assert running.gateway.wait_idle()
    ((attempts, due),) = reply_rows(running)
    assert attempts == 1
    assert due == pytest.approx(running.clock.now + retry_after)
    running.clock.advance(retry_after * 0.9)
    running.gateway.tick()
    assert running.gateway.wait_idle()
    assert daemon.sent.empty()
    running.clock.advance(retry_after * 0.1)
    running.gateway.tick()
    second = daemon.take_sent()
    assert second.params == first.params
    assert running.gateway.wait_idle()
    assert reply_rows(running) == []
    assert daemon.sent.empty()


def test_a_reply_no_retry_can_deliver_is_given_up_with_the_reason_and_the_chat_goes_on(
    daemon: FakeSignalCli, start: Start
) -> None:
    running = start(fast(daemon.url))
    daemon.answer_send(unregistered_error(ALICE.uuid))
    daemon.push(ACCOUNT, message(ALICE, "are you there?"))
    daemon.take_sent()
    daemon.push(ACCOUNT, message(ALICE, "later"))
    assert daemon.take_sent().text == "echo: later"
    assert running.gateway.wait_idle()
    with running.gateway.read() as store:
        rows = store.sql.execute("SELECT abandoned_at IS NOT NULL, last_error FROM outbox ORDER BY id")
    assert rows[0][0] == 1
    assert "is not a registered Signal user" in str(rows[0][1])
    assert rows[1] == (0, None)


def sender_for(daemon: FakeSignalCli, **options: Any) -> SignalSender:
    return SignalAdapter(fast(daemon.url, **options), environ={}).sender


def reply(text: str = "hi", **fields: Any) -> OutboundMessage:
    return OutboundMessage(platform=PLATFORM, text=text, **({"account_id": ACCOUNT, "chat_id": ALICE.uuid} | fields))


def failure(sender: SignalSender, message: OutboundMessage) -> SendError:
    with pytest.raises(SendError) as caught:
        sender.send(message)
    return caught.value


def test_send_errors_say_what_happened_and_which_are_permanent(daemon: FakeSignalCli) -> None:
    sender = sender_for(daemon, rate_limit_backoff_s=42.0)
    daemon.answer_send(untrusted_error(ALICE.uuid))
    untrusted = failure(sender, reply())
    assert untrusted.permanent
    assert "safety number changed" in str(untrusted)
    assert f"signal-cli -a {ACCOUNT} trust" in str(untrusted)
    daemon.answer_send({"code": -1, "message": f"The user {BOB.uuid} is not registered.", "data": None})
    assert failure(sender, reply(chat_id=BOB.uuid)).permanent
    daemon.answer_send(not_a_member_error(GROUP))
    left = failure(sender, reply(chat_id=GROUP))
    assert left.permanent
    assert "group is gone" in str(left)
    unknown = failure(sender, reply(account_id="+15557777"))
    assert unknown.permanent
    assert "platforms.signal.accounts" in str(unknown)
    daemon.answer_send(io_error())
    flaky = failure(sender, reply(chat_id=BOB.uuid))
    assert not flaky.permanent
    assert flaky.retry_after_s is None
    daemon.answer_send(body=b"not json at all")
    garbled = failure(sender, reply(chat_id="+15553334444"))
    assert garbled.outcome_unknown
    assert "possible duplicate" in str(garbled)
    daemon.answer_send(rate_limit_error(ALICE.uuid, code=-1))
    limited = failure(sender, reply(chat_id=GROUP))
    assert not limited.permanent
    assert limited.retry_after_s == 42.0


def test_a_captcha_challenge_is_logged_with_the_command_that_answers_it(
    daemon: FakeSignalCli, caplog: pytest.LogCaptureFixture
) -> None:
    sender = sender_for(daemon)
    daemon.answer_send(rate_limit_error(ALICE.uuid, retry_after=86400, token="challenge-token-1"))
    error = failure(sender, reply())
    assert error.retry_after_s == 3600.0  # capped: the outbox tries again within the hour
    assert f"signal-cli -a {ACCOUNT} submitRateLimitChallenge --challenge challenge-token-1" in caplog.text


def test_an_unknown_account_and_a_non_signal_cli_answer_are_permanent() -> None:
    fake = FakeSignalCli([OTHER_ACCOUNT]).start()
    try:
        sender = SignalAdapter(fast(fake.url), environ={}).sender
        missing = failure(sender, reply())
        assert missing.permanent
        assert f"signal-cli has no account {ACCOUNT}" in str(missing)
        fake.answer_send({"code": -32601, "message": "Method not implemented", "data": None})
        other = SignalAdapter(fast(fake.url, [OTHER_ACCOUNT]), environ={}).sender
        refused = failure(other, reply(account_id=OTHER_ACCOUNT))
        assert refused.permanent
        assert "knows the send method" in str(refused)
    finally:
        fake.stop()


def test_a_long_reply_is_split_at_the_limit_and_a_retry_resumes_at_the_failed_part(daemon: FakeSignalCli) -> None:
    sender = sender_for(daemon, max_message_chars=100)
    words = " ".join(f"word{i:03d}" for i in range(30))  # 239 characters
    daemon.answer_send(result={"timestamp": 1001, "results": []})
    daemon.answer_send(status=500, body=b"oops")
    message = reply(words, chat_id=GROUP, reply_to=f"{ALICE.uuid}:1764460800123")
    failure(sender, message)
    assert sender.send(message) == "1001"  # the id of the first part, sent before the failure
    parts = [daemon.take_sent() for _ in range(4)]
    assert parts[1].params == parts[2].params  # the failed part again, not the first
    texts = [parts[0].text, parts[2].text, parts[3].text]
    assert all(len(text) <= 100 for text in texts)
    assert " ".join(texts) == words
    assert (parts[0].params["quoteTimestamp"], parts[0].params["quoteAuthor"]) == (1764460800123, ALICE.uuid)
    assert all("quoteTimestamp" not in p.params for p in parts[1:])
    assert daemon.sent.empty()
    assert daemon.protocol_errors == []


def test_sends_to_one_chat_are_paced_and_a_long_wait_goes_back_to_the_outbox(daemon: FakeSignalCli) -> None:
    now = [100.0]
    slept: list[float] = []
    config = fast(daemon.url, messages_per_second=0.5, burst=1)
    sender = SignalSender(config.accounts, config, clock=lambda: now[0], sleep=slept.append)
    sender.send(reply("one"))
    now[0] += 1.5  # half a second short of the next token
    sender.send(reply("two"))
    assert slept == [pytest.approx(0.5)]
    held = failure(sender, reply("three"))  # 2.5 s away: the outbox retries it then
    assert held.retry_after_s == pytest.approx(2.5)
    sender.send(reply("elsewhere", chat_id=BOB.uuid))  # another chat is not held back
    assert [daemon.take_sent().text for _ in range(3)] == ["one", "two", "elsewhere"]


# -- hostile input -----------------------------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
_envelope_field = st.sampled_from(
    [
        "source",
        "sourceNumber",
        "sourceUuid",
        "sourceName",
        "timestamp",
        "dataMessage",
        "syncMessage",
        "receiptMessage",
        "typingMessage",
    ]
)
_data_message = st.fixed_dictionaries(
    {},
    optional={
        "message": _json,
        "groupInfo": _json | st.fixed_dictionaries({"groupId": _json, "type": _json}),
        "attachments": _json
        | st.lists(
            st.fixed_dictionaries(
                {"contentType": _json},
                optional={"id": _json | st.just("Ab_12.jpg"), "size": _json, "filename": st.text(max_size=8)},
            ),
            max_size=2,
        ),
        "mentions": _json,
        "reaction": _json,
    },
)
_envelope = st.dictionaries(_envelope_field, _json | _data_message, max_size=6) | st.just(
    {"sourceUuid": ALICE.uuid, "timestamp": 5, "dataMessage": {"message": "x" * 70_000}}
)
_event_data = st.one_of(
    st.binary(max_size=40),
    st.just(b'{"account":"+15550001","envelope":{"sourceUuid":"\xff\xfe","timestamp":1}}'),  # invalid UTF-8
    _json.map(lambda value: json.dumps(value).encode()),
    st.fixed_dictionaries({"account": _json | st.just(ACCOUNT), "envelope": _envelope}).map(
        lambda value: json.dumps(value).encode()
    ),
    st.fixed_dictionaries({"jsonrpc": _json, "method": _json, "params": _json}).map(lambda v: json.dumps(v).encode()),
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(data=_event_data)
def test_any_event_data_decodes_to_a_message_a_skip_or_an_event_error(data: bytes) -> None:
    text = data.decode("utf-8", "replace")  # what the SSE parser hands on
    try:
        decoded = decode_event(text)
        found: InboundMessage | Skipped | EventError = inbound_from_event(decoded, ACCOUNT)
    except EventError as exc:
        found = exc
    if isinstance(found, EventError):
        assert str(found)
        event("event error")
        return
    assert isinstance(found, InboundMessage | Skipped)
    if isinstance(found, InboundMessage):
        assert found.text.strip()
        assert len(found.text) <= 64_100
        sender, _, stamp = found.message_id.rpartition(":")
        assert stamp.isdigit()
        assert sender == found.source.participant_id
        for file in files_of(decoded):  # each attachment is a file to fetch by id, or one without
            assert file.kind in KINDS
            assert file.size is None or file.size >= 0
            event("with attachments")
        event("message")


_attachment = st.fixed_dictionaries(
    {},
    optional={
        "contentType": st.none() | st.sampled_from(["image/png", "text/x-signal-plain", "application/pdf"]) | _json,
        "id": st.none() | st.text(max_size=12) | _json,
        "size": st.integers(-5, 2**40) | _json,
        "filename": st.none() | st.text(max_size=12) | _json,
    },
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(attachments=st.lists(_attachment, min_size=1, max_size=3))
def test_any_attachments_give_one_file_each_to_fetch_or_an_event_error(attachments: list[dict[str, Any]]) -> None:
    envelope = message(ALICE, "with files", attachments=attachments)
    try:
        decoded = decode_event(json.dumps({"account": ACCOUNT, "envelope": envelope}))
        found = inbound_from_event(decoded, ACCOUNT)
    except EventError:
        event("event error")  # a contentType or filename of the wrong type: signal-cli never writes one
        return
    assert isinstance(found, InboundMessage)
    files = files_of(decoded)
    assert len(files) == len(attachments)
    for file in files:
        assert file.kind in KINDS
        assert file.size is None or file.size >= 0
        assert file.id is None or (file.id.strip() and "/" not in file.id)
        event("fetchable" if file.id is not None else "without id")


def frames(events: list[tuple[str | None, str, str]]) -> bytes:
    out = b""
    for event_id, kind, data in events:
        head = f"id: {event_id}\n" if event_id is not None else ""
        body = "".join(f"data: {line}\n" for line in data.split("\n"))
        out += f": keep-alive\n{head}event: {kind}\n{body}\n".encode()
    return out


_sse_events = st.lists(
    st.tuples(
        st.none() | st.text(st.characters(codec="utf-8", exclude_characters="\r\n\x00"), max_size=6),
        st.sampled_from(["receive", "message", "other"]),
        st.text(st.characters(codec="utf-8", exclude_characters="\r"), max_size=20),
    ),
    max_size=5,
)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(events=_sse_events, cuts=st.lists(st.integers(0, 400), max_size=8), crlf=st.booleans())
def test_the_event_stream_parser_gives_the_same_events_however_the_bytes_are_cut(
    events: list[tuple[str | None, str, str]], cuts: list[int], crlf: bool
) -> None:
    stream = frames(events)
    if crlf:
        stream = stream.replace(b"\n", b"\r\n")
    expected: list[SseEvent | Oversized] = []
    last_id: str | None = None
    for event_id, kind, data in events:
        last_id = event_id if event_id is not None else last_id
        expected.append(SseEvent(event=kind, data=data, id=last_id))
    parser = SseParser()
    got: list[SseEvent | Oversized] = []
    position = 0
    for cut in sorted({min(c, len(stream)) for c in cuts}):
        got += parser.feed(stream[position:cut])
        position = cut
    got += parser.feed(stream[position:])
    assert got == expected


def test_an_oversized_event_is_dropped_and_the_stream_goes_on() -> None:
    parser = SseParser(max_event_bytes=4096)
    big = b"event:receive\n" + b"data:" + b"x" * 10_000 + b"\ndata:more\n\n"
    got: list[SseEvent | Oversized] = []
    for index in range(0, len(big), 999):
        got += parser.feed(big[index : index + 999])
    got += parser.feed(b"event:receive\ndata:ok\n\n")
    assert len(got) == 2
    assert isinstance(got[0], Oversized)
    assert got[0].size > 4096
    assert got[1] == SseEvent(event="receive", data="ok")


def test_a_byte_order_mark_is_skipped_at_the_start_even_when_it_arrives_in_pieces() -> None:
    parser = SseParser()
    assert parser.feed(b"\xef\xbb") == []
    assert parser.feed(b"\xbfdata:a\r") == []
    assert parser.feed(b"\n\r\ndata:b\r\r") == [SseEvent(data="a"), SseEvent(data="b")]


_stream_bytes = st.one_of(
    _event_data.map(lambda data: b"event:receive\ndata:" + data.replace(b"\n", b" ").replace(b"\r", b" ") + b"\n\n"),
    st.binary(max_size=60).map(lambda raw: raw + b"\n\n"),
    st.just(b"event:receive\ndata:" + b"y" * 70_000 + b"\n\n"),  # bigger than max_event_bytes
    st.just(b"id:\x00bad\nevent:receive\ndata:{}\n\n"),
)


@pytest.mark.slow
def test_hostile_stream_bytes_are_logged_and_skipped_and_the_adapter_keeps_working(
    daemon: FakeSignalCli, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    running = start(fast(daemon.url, max_event_bytes=65_536))
    daemon.wait_connections(1)
    markers = iter(range(1_000_000))

    def survive(raw: bytes) -> None:
        daemon.push_raw(ACCOUNT, raw)
        marker = f"marker {next(markers)}"
        daemon.push(ACCOUNT, message(ALICE, marker))
        poll_until(
            lambda: marker in running.texts(),
            interval=0.005,
            what=lambda: f"the adapter stopped taking messages after {raw[:80]!r}",
        )

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(raw=_stream_bytes)
    def check(raw: bytes) -> None:
        survive(raw)

    check()
    # The kinds the asserts below name, whatever the random draw held.
    survive(b"event:receive\ndata:{not json\n\n")
    survive(b"event:receive\ndata:" + b"y" * 70_000 + b"\n\n")
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("platforms.signal"))
    assert "skipped event" in logged
    assert "not valid JSON" in logged
    assert "skipped an event of more than 65536 bytes" in logged
    assert "unexpectedly" not in logged  # every hostile event took an expected path
    assert all(len(text) <= 64_100 for text in running.texts())
    assert len(daemon.connections) == 1  # nothing hostile broke the stream


# -- configuration and lifecycle ---------------------------------------------------------------------------------


def test_the_adapter_is_built_through_the_registry_and_describes_each_account() -> None:
    section = {"accounts": [ACCOUNT, "a1a1a1a1-0000-4000-8000-0000000000ff"], "url": "http://127.0.0.1:9"}
    config = msgspec.convert(section, registry.config_type("signal"))
    adapter: Adapter = registry.build("signal", config, {})
    assert adapter.platform == "signal"
    assert adapter.capabilities.max_message_chars == 2000
    assert not adapter.capabilities.threads
    lines = adapter.describe()
    assert lines[0].startswith(
        f"Signal account {ACCOUNT}: events from http://127.0.0.1:9/api/v1/events (SSE, reconnects with backoff"
    )
    assert "--receive-mode=on-connection" in lines[0]
    assert "replies by JSON-RPC send to http://127.0.0.1:9/api/v1/rpc in parts of 2000 characters" in lines[1]
    assert lines[1].endswith("attachments are fetched with JSON-RPC getAttachment into the media store")
    assert "no accounts" in SignalAdapter(SignalConfig(), environ={}).describe()[0]
    assert msgspec.json.decode(msgspec.json.encode(config), type=SignalConfig) == config


@pytest.mark.parametrize(
    ("section", "path", "problem"),
    [
        ({"url": "ftp://x"}, "platforms.signal.url", "daemon --http"),
        ({"url": "http://127.0.0.1:8080/api/v1/rpc"}, "platforms.signal.url", "no path"),
        ({"accounts": ["15550001"]}, "platforms.signal.accounts[0]", "E.164"),
        ({"accounts": [ACCOUNT, ACCOUNT]}, "platforms.signal.accounts[1]", "listed twice"),
        ({"max_message_chars": 3}, "platforms.signal.max_message_chars", "between 16 and 64000"),
        ({"burst": 0}, "platforms.signal.burst", "at least 1"),
        ({"idle_timeout_s": 0}, "platforms.signal.idle_timeout_s", "positive"),
        ({"reconnect_base_s": 5, "reconnect_max_s": 1}, "platforms.signal.reconnect_max_s", "at least"),
        ({"max_event_bytes": 10}, "platforms.signal.max_event_bytes", "at least 4096"),
    ],
)
def test_a_bad_section_is_a_config_error_naming_its_field(section: dict[str, Any], path: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as caught:
        msgspec.convert(section, SignalConfig)
    assert caught.value.path == path


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        msgspec.convert({"acounts": [ACCOUNT]}, SignalConfig)


def test_a_daemon_off_loopback_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[str] = []

    class Streams:  # connects nowhere: the test sends nothing off this machine
        def __init__(self, accounts: Sequence[str], *args: Any, **kwargs: Any) -> None:
            started.extend(accounts)

        def start(self) -> None: ...

        def stop(self, timeout: float = 10.0) -> None: ...

    monkeypatch.setattr("platforms.signal.adapter.EventStreams", Streams)
    adapter = SignalAdapter(fast("http://192.0.2.1:8080"), environ={})
    assert SignalAdapter(fast("http://localhost:8080"), environ={}).config.loopback
    with Gateway(tmp_path / "state.db", senders=adapter.senders()) as gateway:
        adapter.start(GatewayInbox(gateway))
        adapter.stop()
    assert started == [ACCOUNT]
    assert "192.0.2.1:8080 is not a loopback address" in caplog.text
    assert "has no authentication" in caplog.text


# -- crashes -----------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_kill_between_accept_and_reply_loses_nothing_and_replies_once(tmp_path: Path, daemon: FakeSignalCli) -> None:
    db = tmp_path / "state.db"
    envelope = message(ALICE, "survive")
    worker = AdapterWorker.start(db, "signal", fast(daemon.url), agent="hold")
    try:
        daemon.push(ACCOUNT, envelope)
        assert wait_for_inbox(db, 1) == [(f"{ALICE.uuid}:{envelope['timestamp']}", "pending")]
    finally:
        worker.kill()
    assert daemon.sent.empty()
    worker = AdapterWorker.start(db, "signal", fast(daemon.url), agent="echo")
    try:
        reply = daemon.take_sent(timeout=20)
        daemon.push(ACCOUNT, envelope)  # Signal delivers it again after the crash: still one turn
        daemon.push(ACCOUNT, message(ALICE, "marker"))
        marker = daemon.take_sent(timeout=20)
    finally:
        worker.stop()
    assert (reply.to, reply.text) == (ALICE.uuid, "echo: survive")
    assert marker.text == "echo: marker"
    assert daemon.sent.empty()
    assert [state for _, state in wait_for_inbox(db, 2)] == ["done", "done"]
    assert daemon.protocol_errors == []


# -- /save -------------------------------------------------------------------------------------------------------


def test_save_sends_one_message_with_the_markdown_as_a_data_uri_attachment(daemon: FakeSignalCli, start: Start) -> None:
    running = start(fast(daemon.url))
    daemon.push(ACCOUNT, message(ALICE, "hello"))
    assert daemon.take_sent().text == "echo: hello"
    daemon.push(ACCOUNT, message(ALICE, "/save"))
    saved = daemon.take_sent()
    assert running.gateway.wait_idle()
    ((name, mime_type, data),) = saved.files
    assert name is not None
    assert name.endswith(".md")
    assert mime_type == "text/markdown"
    markdown = data.decode("utf-8")
    assert markdown.index("hello") < markdown.index("echo: hello")
    assert saved.to == ALICE.uuid
    assert saved.text.endswith("the conversation as Markdown (2 messages, 1 part(s)).")
    assert daemon.sent.empty()  # the file instead of the text, not beside it
    assert daemon.protocol_errors == []


def test_save_sends_the_text_when_signal_cli_refuses_the_attachment(
    daemon: FakeSignalCli, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    running = start(fast(daemon.url))
    daemon.push(ACCOUNT, message(ALICE, "hello"))
    daemon.take_sent()
    daemon.answer_send({"code": -1, "message": "Invalid attachments: the attachment is too large", "data": None})
    with caplog.at_level(logging.WARNING, logger="platforms.support.documents"):
        daemon.push(ACCOUNT, message(ALICE, "/save"))
        refused, text = daemon.take_sent(), daemon.take_sent()
        assert running.gateway.wait_idle()
    assert len(refused.files) == 1
    assert text.files == []
    assert text.text.index("hello") < text.text.index("echo: hello")
    assert "the attachment is too large" in caplog.text
    assert "the reply's text is sent instead" in caplog.text
