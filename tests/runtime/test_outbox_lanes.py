"""The outbox's per-chat lanes: a slow chat holds up only itself, every reply is marked sent as its send returns,
an unexpected error in a send costs a retry and not the lane, and nothing asks an outbox actor and waits."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pytest

from hermes_actors.messages import OutboundMessage, encode
from hermes_actors.runtime.lanes import LaneWorkers
from hermes_actors.runtime.outbox_router import OutboxRouter
from hermes_actors.store import Store, StoreInterface
from hermes_actors.store.writer import StoreWriter
from hermes_actors.testing import FakeClock, poll_until
from platforms.base import ReplySender, SendError
from platforms.discord import DiscordAdapter, DiscordBot, DiscordConfig
from tests.platforms.discord_fake import DiscordFake

T = TypeVar("T")
PLATFORM = "lanes"
WAIT_S = 10.0  # any single wait; a healthy outbox answers in milliseconds


class GatedSender:
    """A reply sender that records what it sends; a send to a chat with a gate waits until the gate opens.

    ``started[chat]`` is set when a send to ``chat`` begins; ``gate(chat, after=n)`` lets the first ``n`` sends to
    the chat through and holds the next ones.
    """

    idempotent_sends = False

    def __init__(self) -> None:
        self.platform = PLATFORM
        self.sent: list[OutboundMessage] = []
        self.started: dict[str, threading.Event] = {}
        self._gates: dict[str, tuple[int, threading.Event]] = {}
        self._counts: dict[str, int] = {}
        self._arrived: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._sending: set[str] = set()
        self.overlaps = 0  # sends that began while another send to the same chat was in progress
        self.fail_with: dict[str, list[BaseException]] = {}

    def gate(self, chat: str, *, after: int = 0) -> threading.Event:
        """Hold every send to ``chat`` after the first ``after`` until the returned event is set."""
        opened = threading.Event()
        with self._lock:
            self._gates[chat] = (after, opened)
            self.started[chat] = threading.Event()
        return opened

    def arrived(self, text: str) -> threading.Event:
        """An event set once a reply with ``text`` has been sent."""
        with self._lock:
            return self._arrived.setdefault(text, threading.Event())

    def send(self, message: OutboundMessage) -> str | None:
        chat = message.chat_id or ""
        with self._lock:
            self.overlaps += chat in self._sending
            self._sending.add(chat)
        try:
            return self._send(chat, message)
        finally:
            with self._lock:
                self._sending.discard(chat)

    def _send(self, chat: str, message: OutboundMessage) -> str | None:
        with self._lock:
            seen = self._counts.get(chat, 0)
            self._counts[chat] = seen + 1
            gate = self._gates.get(chat)
            failures = self.fail_with.get(chat)
            failure = failures.pop(0) if failures else None
        if gate is not None and seen >= gate[0]:
            self.started[chat].set()
            assert gate[1].wait(WAIT_S), "a gated send was never released"
        if failure is not None:
            raise failure
        with self._lock:
            self.sent.append(message)
            done = self._arrived.setdefault(message.text, threading.Event())
        done.set()
        return f"{chat}-{seen + 1}"

    def texts(self, chat: str) -> list[str]:
        with self._lock:
            return [m.text for m in self.sent if m.chat_id == chat]


@pytest.fixture
def writer(db_path: Path) -> Iterator[StoreWriter]:
    running = StoreWriter(Store.open(db_path))
    yield running
    running.stop()


@pytest.fixture
def routers() -> Iterator[Callable[..., OutboxRouter]]:
    """Make outbox routers; each is stopped at the end (after the test has released its gates)."""
    made: list[OutboxRouter] = []

    def make(writer: StoreWriter, *senders: ReplySender, **options: Any) -> OutboxRouter:
        router = OutboxRouter(writer, **options)
        for sender in senders:
            router.register(sender)
        made.append(router)
        return router

    yield make
    for router in made:
        router.stop(timeout=WAIT_S)


def queue_reply(
    writer: StoreWriter, chat: str, text: str, *, reply: OutboundMessage | None = None
) -> tuple[int, OutboundMessage]:
    """Commit a reply to ``chat`` as a turn would; return its outbox id and message."""
    reply = reply or OutboundMessage(platform=PLATFORM, chat_id=chat, text=text)

    def add(store: StoreInterface) -> int:
        return store.outbox.add(
            session_id=reply.session_id,
            platform=reply.platform,
            account_id=reply.account_id,
            chat_id=chat,
            thread_id=reply.thread_id,
            payload=encode(reply),
        )

    return writer.call(add), reply


def in_thread(work: Callable[[], T]) -> Future[T]:
    """Run ``work`` on a thread of its own; the future says whether (and how) it returned."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=run, name="test-caller", daemon=True).start()
    return future


def unsent(db_path: Path) -> list[tuple[int, int]]:
    """(outbox id, attempts) of every row not sent nor given up, read from the file."""
    with Store.open(db_path, readonly=True) as store:
        return [(row.id, row.attempts) for row in store.outbox.unsent()]


def test_a_chat_with_twenty_queued_replies_stuck_in_a_send_does_not_hold_up_another_chats_reply(
    writer: StoreWriter, routers: Callable[..., OutboxRouter]
) -> None:
    sender = GatedSender()
    release = sender.gate("channel")  # the channel's first send hangs, as behind a slow or paced platform
    router = routers(writer, sender)
    for n in range(20):
        router.deliver(*queue_reply(writer, "channel", f"backlog {n}"))
    assert sender.started["channel"].wait(WAIT_S)
    started = time.monotonic()
    router.deliver(*queue_reply(writer, "dm", "for the DM"))
    assert sender.arrived("for the DM").wait(WAIT_S), "the DM's reply waited behind the channel's backlog"
    assert time.monotonic() - started < 5.0
    assert sender.texts("channel") == []  # the channel's send is still in progress, and nothing overtook it
    release.set()
    assert sender.arrived("backlog 19").wait(WAIT_S)
    assert sender.texts("channel") == [f"backlog {n}" for n in range(20)]  # in committed order
    assert sender.overlaps == 0  # one send at a time per chat


def test_replies_sent_before_a_crash_are_not_sent_again_after_the_restart(
    db_path: Path, routers: Callable[..., OutboxRouter]
) -> None:
    writer = StoreWriter(Store.open(db_path))
    sender = GatedSender()
    release = sender.gate("chat", after=3)  # three replies go out, the fourth send hangs: the process dies there
    router = routers(writer, sender)
    ids = []
    for n in range(6):
        outbox_id, reply = queue_reply(writer, "chat", f"reply {n}")
        ids.append(outbox_id)
        router.deliver(outbox_id, reply)
    assert sender.started["chat"].wait(WAIT_S)
    writer.call(lambda store: None)  # what the lane submitted before the hanging send is committed now
    # The crash: the store keeps what was committed; the hanging send never returns in this process.
    assert unsent(db_path) == [(ids[3], 1), (ids[4], 0), (ids[5], 0)]
    router.stop(timeout=0.1)
    writer.stop()
    release.set()  # the send returns into a process that is gone: its delivery is never recorded
    assert sender.arrived("reply 3").wait(WAIT_S)

    restarted = StoreWriter(Store.open(db_path))
    try:
        again = GatedSender()
        second = routers(restarted, again)
        rows = restarted.call(lambda store: store.outbox.unsent())
        assert [row.id for row in rows] == ids[3:]
        assert second.redeliver(rows) == 3
        assert again.arrived("reply 5").wait(WAIT_S)
        assert [(m.text, m.possible_duplicate) for m in again.sent] == [
            ("reply 3", True),  # its outcome is unknown: sent again, flagged
            ("reply 4", False),
            ("reply 5", False),
        ]
    finally:
        restarted.stop()


def test_a_sender_raising_an_unexpected_error_costs_a_retry_not_the_lane(
    db_path: Path, writer: StoreWriter, routers: Callable[..., OutboxRouter]
) -> None:
    clock = FakeClock()
    sender = GatedSender()
    sender.fail_with["chat"] = [RuntimeError("a bug in the adapter")]
    router = routers(writer, sender, clock=clock, retry_base_s=5.0)
    first = queue_reply(writer, "chat", "first")
    router.deliver(*first)
    second = queue_reply(writer, "chat", "second")
    router.deliver(*second)
    router.deliver(*queue_reply(writer, "other", "elsewhere"))
    assert sender.arrived("elsewhere").wait(WAIT_S)  # the actor lives on and serves the other chat
    poll_until(lambda: router.in_flight() == 0, WAIT_S)  # the failed chat waits for its retry
    writer.call(lambda store: None)
    with Store.open(db_path, readonly=True) as store:
        rows = store.outbox.unsent()
    assert [(row.id, row.attempts) for row in rows] == [(first[0], 1), (second[0], 0)]
    assert rows[0].next_attempt_at == clock.now + 5.0
    assert sender.texts("chat") == []
    clock.advance(5.0)
    router.retry_due()
    assert sender.arrived("second").wait(WAIT_S)
    assert sender.texts("chat") == ["first", "second"]
    assert [m.possible_duplicate for m in sender.sent if m.chat_id == "chat"] == [True, False]


def test_a_send_error_of_unknown_outcome_is_retried_flagged_and_a_permanent_one_is_given_up(
    db_path: Path, writer: StoreWriter, routers: Callable[..., OutboxRouter]
) -> None:
    clock = FakeClock()
    sender = GatedSender()
    sender.fail_with["lost"] = [SendError("timed out after the request left", outcome_unknown=True)]
    sender.fail_with["gone"] = [SendError("the chat is gone", permanent=True)]
    reports: list[tuple[str, str | None]] = []
    router = routers(writer, sender, clock=clock, on_result=lambda m, error: reports.append((m.text, error)))
    router.deliver(*queue_reply(writer, "lost", "maybe twice"))
    router.deliver(*queue_reply(writer, "gone", "never"))
    router.deliver(*queue_reply(writer, "gone", "after the refusal"))
    assert sender.arrived("after the refusal").wait(WAIT_S)
    clock.advance(1.0)
    router.retry_due()
    assert sender.arrived("maybe twice").wait(WAIT_S)
    assert [(m.text, m.possible_duplicate) for m in sender.sent if m.chat_id == "lost"] == [("maybe twice", True)]
    assert ("never", "the chat is gone") in reports
    writer.call(lambda store: None)
    assert unsent(db_path) == []


@pytest.mark.slow
def test_in_flight_and_stop_answer_at_once_while_a_send_hangs(
    writer: StoreWriter, routers: Callable[..., OutboxRouter]
) -> None:
    sender = GatedSender()
    release = sender.gate("chat")
    router = routers(writer, sender)
    router.deliver(*queue_reply(writer, "chat", "slow"))
    router.deliver(*queue_reply(writer, "chat", "behind it"))
    assert sender.started["chat"].wait(WAIT_S)
    counted = in_thread(router.in_flight)
    assert counted.result(timeout=2.0) == 2  # the reply being sent and the one behind it
    started = time.monotonic()
    stopped = in_thread(lambda: router.stop(timeout=0.5))
    stopped.result(timeout=5.0)  # gives up on the hanging send after its timeout instead of waiting for it
    assert time.monotonic() - started < 5.0
    release.set()
    assert sender.arrived("slow").wait(WAIT_S)
    assert sender.texts("chat") == ["slow"]  # stopped: the reply behind it stays queued in the store


def test_a_replaced_sender_takes_over_the_replies_the_old_one_still_held_in_order(
    db_path: Path, writer: StoreWriter, routers: Callable[..., OutboxRouter]
) -> None:
    clock = FakeClock()
    old = GatedSender()
    old.fail_with["chat"] = [SendError("503 from the platform")]
    router = routers(writer, old, clock=clock)
    for n in range(3):
        router.deliver(*queue_reply(writer, "chat", f"held {n}"))
    poll_until(lambda: router.in_flight() == 0, WAIT_S)  # waiting for its retry
    new = GatedSender()
    router.replace(new)  # as SIGHUP reloads an adapter
    router.deliver(*queue_reply(writer, "chat", "after the reload"))
    clock.advance(1.0)
    router.retry_due()
    assert new.arrived("after the reload").wait(WAIT_S)
    assert new.texts("chat") == ["held 0", "held 1", "held 2", "after the reload"]
    assert old.sent == []
    writer.call(lambda store: None)
    assert unsent(db_path) == []


DISCORD_TOKEN = "MTAxMDEwMTAxMDEwMTAx.GaBcDe.first_bot_token_abcdefghijklmnopqrstu"


def test_a_discord_reply_sent_again_after_a_crash_carries_the_same_nonce_and_is_posted_once(
    db_path: Path, routers: Callable[..., OutboxRouter]
) -> None:
    with DiscordFake() as fake:
        fake.add_bot(DISCORD_TOKEN, "900")
        fake.add_guild("1001", "Guild", bots=[DISCORD_TOKEN])
        fake.add_channel("2001", "1001", "general")
        config = DiscordConfig(api_base_url=fake.api_base, bots={"main": DiscordBot(token=DISCORD_TOKEN)})

        def new_sender() -> ReplySender:  # a new process: nothing remembered in memory
            (sender,) = DiscordAdapter(config, environ={}).senders()
            return sender

        reply = OutboundMessage(platform="discord", account_id="main", chat_id="2001", text="once")
        writer = StoreWriter(Store.open(db_path))
        outbox_id, _ = queue_reply(writer, "2001", "once", reply=reply)
        # The process that crashed: the attempt was counted and the send went out; the crash beat its mark.
        writer.call(lambda store: store.outbox.begin_attempt(outbox_id))
        new_sender().send(msgspec.structs.replace(reply, outbox_id=outbox_id))
        writer.stop()

        restarted = StoreWriter(Store.open(db_path))
        try:
            router = routers(restarted, new_sender())
            assert router.redeliver(restarted.call(lambda store: store.outbox.unsent())) == 1
            poll_until(lambda: unsent(db_path) == [], WAIT_S)
        finally:
            restarted.stop()
        first, second = fake.calls("POST /channels/2001/messages")
        assert first.body["nonce"] == second.body["nonce"]  # derived from the outbox id: the same in both processes
        assert second.body["enforce_nonce"] is True
        assert fake.texts(DISCORD_TOKEN) == ["once"]  # Discord answered the repeat with the message it had


def test_lane_workers_start_threads_only_when_all_are_busy_and_never_more_than_their_size() -> None:
    workers = LaneWorkers("test-lane-workers", 2)
    release = threading.Event()
    started = [threading.Event() for _ in range(3)]

    def job(n: int) -> None:
        started[n].set()
        assert release.wait(WAIT_S)

    try:
        for n in range(3):
            workers.run(partial(job, n))
        assert started[0].wait(WAIT_S)
        assert started[1].wait(WAIT_S)
        running = [t for t in threading.enumerate() if t.name.startswith("test-lane-workers-")]
        assert len(running) == 2  # the third job waits for a free worker
        release.set()
        assert started[2].wait(WAIT_S)
    finally:
        release.set()
        workers.close()
