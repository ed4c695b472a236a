"""Replies committed with their first attempt counted ahead (in the turn's own transaction) leave without waiting
for the store, their sent marks share one write, and what is guaranteed after a crash or a stop stays as it was:
an attempt is counted before every send, a reply whose outcome is unknown goes again flagged, one never begun goes
again unflagged."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import apsw
import pytest

from hermes_actors.messages import OutboundMessage
from hermes_actors.runtime.outbox_router import OutboxRouter
from hermes_actors.runtime.sent_marks import SentMarks
from hermes_actors.runtime.services import queue_reply
from hermes_actors.store import Store, StoreInterface
from hermes_actors.store.outbox_queue import Outbox
from hermes_actors.store.writer import StoreWriter
from hermes_actors.testing import FakeClock, poll_until
from platforms.base import SendError
from tests.runtime.conftest import MakeGateway
from tests.runtime.test_outbox_lanes import PLATFORM, WAIT_S, GatedSender, routers, unsent, writer

__all__ = ["routers", "writer"]  # the fixtures of test_outbox_lanes, used here too


def commit_counted(writer: StoreWriter, chat: str, text: str) -> tuple[int, OutboundMessage]:
    """Commit a reply to ``chat`` as a turn does, its first attempt counted ahead; return its id and message."""
    reply = OutboundMessage(platform=PLATFORM, chat_id=chat, text=text)
    return writer.call(lambda store: queue_reply(store, reply, counted=True)), reply


def row_state(db_path: Path, outbox_id: int) -> tuple[int, bool]:
    """(attempts, sent) of row ``outbox_id``, read from the file."""
    with Store.open(db_path, readonly=True) as store:
        row = store._connection.execute("SELECT attempts, sent_at FROM outbox WHERE id = ?", (outbox_id,)).fetchone()
    assert row is not None
    return int(row[0]), row[1] is not None


@contextmanager
def writer_held(writer: StoreWriter) -> Iterator[None]:
    """Keep the writer inside one write for the block: nothing else commits meanwhile."""
    release, started = threading.Event(), threading.Event()

    def hold(store: StoreInterface) -> None:
        started.set()
        assert release.wait(WAIT_S), "the writer was held too long"

    writer.submit(hold)
    assert started.wait(WAIT_S)
    try:
        yield
    finally:
        release.set()


def test_a_reply_counted_in_its_turns_commit_is_sent_while_the_writer_is_busy(
    writer: StoreWriter, routers: Callable[..., OutboxRouter]
) -> None:
    sender = GatedSender()
    router = routers(writer, sender)
    counted = commit_counted(writer, "chat", "at once")
    with writer_held(writer):
        router.deliver(*counted, counted=True)
        assert sender.arrived("at once").wait(WAIT_S), "the send waited for a commit"


def test_the_sent_marks_of_many_replies_are_one_write_and_no_send_waits_for_them(
    db_path: Path, writer: StoreWriter, routers: Callable[..., OutboxRouter]
) -> None:
    sender = GatedSender()
    router = routers(writer, sender)
    replies = [commit_counted(writer, f"chat-{n}", f"reply {n}") for n in range(20)]
    before = writer.statistics().writes
    with writer_held(writer):
        for outbox_id, reply in replies:
            router.deliver(outbox_id, reply, counted=True)
        for n in range(20):
            assert sender.arrived(f"reply {n}").wait(WAIT_S), "a send waited for another reply's mark"
        poll_until(lambda: router.in_flight() == 0, WAIT_S)
    writer.call(lambda store: None)
    # The held write, one write of the 20 marks, the settling call: no write per reply.
    assert writer.statistics().writes - before == 3
    assert [row_state(db_path, outbox_id) for outbox_id, _ in replies] == [(1, True)] * 20


def test_a_retry_of_a_counted_reply_counts_its_own_attempt_first(
    db_path: Path, writer: StoreWriter, routers: Callable[..., OutboxRouter]
) -> None:
    clock = FakeClock()
    sender = GatedSender()
    sender.fail_with["chat"] = [SendError("503 from the platform")]
    router = routers(writer, sender, clock=clock)
    outbox_id, reply = commit_counted(writer, "chat", "second time")
    router.deliver(outbox_id, reply, counted=True)
    poll_until(lambda: router.in_flight() == 0, WAIT_S)  # failed, waiting for its retry
    writer.call(lambda store: None)
    assert row_state(db_path, outbox_id) == (1, False)  # the first attempt, counted by the turn's commit
    clock.advance(1.0)
    router.retry_due()
    assert sender.arrived("second time").wait(WAIT_S)
    poll_until(lambda: row_state(db_path, outbox_id) == (2, True), WAIT_S)
    assert [m.possible_duplicate for m in sender.sent] == [False]  # a refusal: no copy can exist


def test_a_stop_takes_back_the_counts_of_replies_never_begun_and_the_next_start_sends_them_unflagged(
    db_path: Path, routers: Callable[..., OutboxRouter]
) -> None:
    writer = StoreWriter(Store.open(db_path))
    sender = GatedSender()
    release = sender.gate("chat", after=1)  # the first reply goes out, the second hangs: the stop finds it so
    router = routers(writer, sender)
    ids = []
    for n in range(4):
        outbox_id, reply = commit_counted(writer, "chat", f"reply {n}")
        ids.append(outbox_id)
        router.deliver(outbox_id, reply, counted=True)
    assert sender.started["chat"].wait(WAIT_S)
    router.stop(timeout=0.1)
    writer.stop()
    release.set()  # the hanging send returns into a process that is gone: its delivery is never recorded
    assert sender.arrived("reply 1").wait(WAIT_S)
    # Sent; cut mid-send (its outcome unknown); never begun, twice.
    assert [row_state(db_path, i) for i in ids] == [(1, True), (1, False), (0, False), (0, False)]

    restarted = StoreWriter(Store.open(db_path))
    try:
        again = GatedSender()
        second = routers(restarted, again)
        assert second.redeliver(restarted.call(lambda store: store.outbox.unsent())) == 3
        assert again.arrived("reply 3").wait(WAIT_S)
        assert [(m.text, m.possible_duplicate) for m in again.sent] == [
            ("reply 1", True),
            ("reply 2", False),
            ("reply 3", False),
        ]
    finally:
        restarted.stop()


def test_after_a_crash_a_reply_counted_ahead_but_never_begun_goes_again_flagged(
    db_path: Path, routers: Callable[..., OutboxRouter]
) -> None:
    # The crash came between the turn's commit and the send: nothing says whether the send began, so it is flagged.
    writer = StoreWriter(Store.open(db_path))
    commit_counted(writer, "chat", "maybe sent")
    writer.stop()
    restarted = StoreWriter(Store.open(db_path))
    try:
        sender = GatedSender()
        router = routers(restarted, sender)
        assert router.redeliver(restarted.call(lambda store: store.outbox.unsent())) == 1
        assert sender.arrived("maybe sent").wait(WAIT_S)
        assert [(m.text, m.possible_duplicate) for m in sender.sent] == [("maybe sent", True)]
        restarted.call(lambda store: None)
        poll_until(lambda: unsent(db_path) == [], WAIT_S)
    finally:
        restarted.stop()


def test_a_turns_reply_is_committed_with_its_attempt_counted_and_its_send_counts_none(
    make_gateway: MakeGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted: list[int] = []
    begin = Outbox.begin_attempt

    def counting(self: Outbox, outbox_id: int) -> int:
        counted.append(outbox_id)
        return begin(self, outbox_id)

    monkeypatch.setattr(Outbox, "begin_attempt", counting)
    gateway, fake = make_gateway()
    fake.push("hello")
    assert fake.pop().text == "echo: hello"
    assert gateway.wait_idle()
    with gateway.read() as store:
        rows = store.sql.execute("SELECT attempts, sent_at IS NOT NULL FROM outbox")
    assert rows == [(1, 1)]
    assert counted == []  # the turn's commit counted it: no write of its own before the send


def test_sent_marks_the_store_cannot_take_are_logged_and_the_sender_goes_on(
    db_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = StoreWriter(Store.open(db_path))
    outbox_id, _ = commit_counted(writer, "chat", "sent")
    marks = SentMarks(writer, PLATFORM)

    def full(self: Outbox, sent: list[tuple[int, str | None]]) -> None:
        raise apsw.FullError("database or disk is full")

    with monkeypatch.context() as patched:
        patched.setattr(Outbox, "mark_sent_many", full)
        marks.add(outbox_id, "p-1")  # returns at once; the write fails on the writer
        writer.call(lambda store: None)
    assert "could not be marked sent" in caplog.text
    writer.stop()
    marks.add(outbox_id, "p-2")  # after the store closed: logged, never raised into the lane
    assert "were sent after the store closed" in caplog.text
    assert row_state(db_path, outbox_id) == (1, False)  # unsent, its attempt counted: the next start flags it
