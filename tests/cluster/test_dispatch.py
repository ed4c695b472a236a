"""Outbox dispatchers sharing the PostgreSQL outbox: every reply sent once, each chat's in commit order."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from hermes_actors.cluster.replica.api_replies import ApiReplies
from hermes_actors.cluster.replica.dispatch import OutboxDispatcher
from hermes_actors.messages import OutboundMessage, encode
from hermes_actors.ports import SendError
from hermes_actors.runtime.turn_watch import TurnWatch
from hermes_actors.store.pg import PostgresStore
from hermes_actors.store.pg.turn_relay import OUTBOX_CHANNEL
from hermes_actors.testing import FakePlatform, poll_until
from hermes_actors.waiters import ReplyWaiters
from platforms.support.ratelimit import Rate, RateLimiter


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as store:
        yield store


def _queue(pg: PostgresStore, chat: str, text: str) -> int:
    message = OutboundMessage(platform="fake", chat_id=chat, text=text)
    return pg.outbox.add(
        session_id=None, platform="fake", account_id="", chat_id=chat, thread_id=None, payload=encode(message)
    )


def test_only_the_head_of_each_chat_is_claimed_and_a_claim_keeps_others_off(pg: PostgresStore) -> None:
    first, second, other = _queue(pg, "a", "1"), _queue(pg, "a", "2"), _queue(pg, "b", "x")
    claimed = pg.outbox_claims.claim("d1")
    assert [row.id for row in claimed.rows] == [first, other]
    assert claimed.followed == {first}  # "2" waits behind "1"; "x" is alone in its chat
    assert pg.outbox_claims.claim("d2").rows == []  # heads claimed; "2" waits behind "1"
    pg.outbox.mark_sent(first, None)
    assert pg.outbox_claims.unclaim("d1", [first]) == 1
    assert [row.id for row in pg.outbox_claims.claim("d2").rows] == [second]


def test_rows_recorded_sent_keep_each_its_platform_id_and_end_only_the_named_dispatcher_s_claims(
    pg: PostgresStore,
) -> None:
    ids = [_queue(pg, f"c{n}", str(n)) for n in range(4)]
    assert len(pg.outbox_claims.claim("d1").rows) == 4
    pg.outbox_claims.sent("d1", [(ids[0], "p0")])
    pg.outbox_claims.sent(None, [(ids[2], "p2"), (ids[1], None)])  # the API's replies: no dispatcher's claim
    rows = pg.database.execute(
        "SELECT id, sent_at IS NOT NULL, platform_message_id, claimed_by FROM outbox ORDER BY id"
    )
    assert rows == [
        (ids[0], True, "p0", None),
        (ids[1], True, None, "d1"),
        (ids[2], True, "p2", "d1"),
        (ids[3], False, None, "d1"),
    ]


def test_two_dispatchers_send_every_reply_once_and_each_chat_in_order(pg: PostgresStore) -> None:
    for n in range(60):
        _queue(pg, f"c{n % 5}", str(n))
    platform = FakePlatform("fake")
    platform.fail_next(3)
    dispatchers = [OutboxDispatcher(pg, {"fake": platform}, name=f"d{i}", retry_base_s=0.0) for i in range(2)]
    with ThreadPoolExecutor(2) as pool:
        for _ in range(60):  # bounded: 60 rows, 5 a round, 3 failures retried at once
            list(pool.map(lambda d: d.dispatch_once(5), dispatchers))
            if not pg.outbox.backlog():
                break
    assert pg.outbox.backlog() == 0
    sent = [m.text for m in platform.sent]
    assert sorted(sent, key=int) == [str(n) for n in range(60)]
    for chat in range(5):
        texts = [m.text for m in platform.sent if m.chat_id == f"c{chat}"]
        assert texts == sorted(texts, key=int)


def test_a_permanent_failure_abandons_the_row_and_frees_the_chat(pg: PostgresStore) -> None:
    class Refusing:
        platform = "fake"
        idempotent_sends = False

        def send(self, message: OutboundMessage) -> str | None:
            raise SendError("the chat is gone", permanent=True)

    _queue(pg, "a", "1")
    assert OutboxDispatcher(pg, {"fake": Refusing()}, name="d").dispatch_once() == 1  # one row handled
    assert pg.outbox.backlog() == 0
    assert pg.database.value("SELECT last_error FROM outbox") == "the chat is gone"


class PacedSender:
    """A sender that paces itself as the platforms' senders do (platforms.support.ratelimit): ``per_chat`` and
    ``overall`` token buckets it sleeps in before each send. It records (chat, text, time sent)."""

    idempotent_sends = False

    def __init__(self, *, per_chat: Rate | None = None, overall: Rate | None = None) -> None:
        self.platform = "fake"
        self.limiter = RateLimiter(per_key=per_chat, overall=overall)
        self._lock = threading.Lock()
        self.sent: list[tuple[str, str, float]] = []

    def send(self, message: OutboundMessage) -> str | None:
        self.limiter.acquire(message.chat_id or "")
        with self._lock:
            self.sent.append((message.chat_id or "", message.text, time.monotonic()))
            return str(len(self.sent))


def test_only_the_holder_of_send_fake_sends_and_the_other_takes_over_once_it_is_released(pg: PostgresStore) -> None:
    for n in range(8):
        _queue(pg, f"c{n}", str(n))
    first, second = FakePlatform("fake"), FakePlatform("fake")
    holder = OutboxDispatcher(pg, {"fake": first}, name="a", retry_base_s=0.0)
    other = OutboxDispatcher(pg, {"fake": second}, name="b", retry_base_s=0.0, role_ttl_s=0.3)  # tries every 0.1 s
    for _ in range(8):  # alternating rounds of two rows: without the role each would send half
        holder.dispatch_once(2)
        other.dispatch_once(2)
    assert pg.outbox.backlog() == 0
    assert sorted(m.text for m in first.sent) == [str(n) for n in range(8)]
    assert second.sent == []
    assert holder.held() == {"send:fake"}
    assert other.held() == set()
    holder.stop()  # releases send:fake
    _queue(pg, "c0", "after")
    poll_until(lambda: other.dispatch_once(), timeout=5, interval=0.05, what="the other dispatcher sending")
    assert [m.text for m in second.sent] == ["after"]
    other.stop()


def test_a_dispatcher_whose_role_was_taken_in_the_database_counts_no_attempt_and_sends_nothing(
    pg: PostgresStore,
) -> None:
    platform = FakePlatform("fake")
    dispatcher = OutboxDispatcher(pg, {"fake": platform}, name="a", retry_base_s=0.0)
    assert dispatcher.dispatch_once() == 0  # takes send:fake (nothing to send yet)
    assert dispatcher.held() == {"send:fake"}  # and keeps it by its local deadline below
    pg.database.execute("UPDATE role_leases SET holder = 'b', epoch = epoch + 1 WHERE role = 'send:fake'")
    row = _queue(pg, "c", "taken")
    dispatcher.dispatch_once()
    assert platform.sent == []
    (found,) = pg.outbox.unsent("fake")
    assert (found.id, found.attempts) == (row, 0)
    assert pg.outbox_claims.claim("b").rows != []  # the refused claim was given back at once
    dispatcher.stop()


def test_a_chat_whose_sender_sleeps_in_its_rate_limit_holds_up_no_other_chat(pg: PostgresStore) -> None:
    _queue(pg, "slow", "s1")
    _queue(pg, "slow", "s2")
    for n in range(5):
        _queue(pg, f"f{n}", f"f{n}")
    sender = PacedSender(per_chat=Rate(per_second=1 / 1.5, burst=1))
    sender.limiter.acquire("slow")  # the chat just had a reply: its next waits 1.5 s in the bucket
    started = time.monotonic()
    dispatcher = OutboxDispatcher(pg, {"fake": sender}, name="d")
    dispatcher.start(interval_s=0.02)
    try:
        poll_until(lambda: pg.outbox.backlog() == 0, timeout=10, what="every reply sent")
    finally:
        dispatcher.stop()
    texts = [text for _, text, _ in sender.sent]
    assert [t for t in texts if t.startswith("s")] == ["s1", "s2"]  # the chat's order
    sent_at = {text: at for _, text, at in sender.sent}
    assert all(sent_at[f"f{n}"] < sent_at["s1"] for n in range(5)), texts
    assert max(sent_at[f"f{n}"] for n in range(5)) - started < 1.0


def test_a_platform_s_rate_limit_holds_across_two_dispatchers(pg: PostgresStore) -> None:
    for n in range(20):
        _queue(pg, f"c{n % 4}", str(n))
    per_second = 10.0
    senders = [PacedSender(overall=Rate(per_second=per_second, burst=1)) for _ in range(2)]
    dispatchers = [OutboxDispatcher(pg, {"fake": s}, name=f"d{i}") for i, s in enumerate(senders)]
    for dispatcher in dispatchers:
        dispatcher.start(interval_s=0.02)
    try:
        poll_until(lambda: pg.outbox.backlog() == 0, timeout=15, what="every reply sent")
    finally:
        for dispatcher in dispatchers:
            dispatcher.stop()
    times = sorted(at for sender in senders for _, _, at in sender.sent)
    assert len(times) == 20
    busiest = max(sum(1 for t in times if start <= t < start + 1.0) for start in times)
    assert busiest <= per_second + 2, f"{busiest} sends within one second across the cluster"
    assert sorted(len(sender.sent) for sender in senders) == [0, 20]
    for chat in range(4):
        texts = [text for sender in senders for c, text, _ in sender.sent if c == f"c{chat}"]
        assert texts == sorted(texts, key=int)


def test_a_reply_whose_attempt_had_an_unknown_outcome_is_resent_flagged_and_a_known_failure_is_not(
    pg: PostgresStore,
) -> None:
    platform = FakePlatform("fake")
    dispatcher = OutboxDispatcher(pg, {"fake": platform}, name="d", retry_base_s=0.0)
    refused = _queue(pg, "b", "refused")
    platform.fail_next(1)  # refused for sure: nothing left
    assert dispatcher.dispatch_once() == dispatcher.dispatch_once() == 1
    crashed = _queue(pg, "a", "cut by a crash")
    pg.outbox.begin_attempt(crashed)  # counted, then the process died: whether it left is unknown
    platform.fail_next(1)  # a known failure later does not make the first attempt's outcome known
    assert dispatcher.dispatch_once() == dispatcher.dispatch_once() == 1
    assert pg.outbox.backlog() == 0
    assert [(m.text, m.outbox_id, m.possible_duplicate) for m in platform.sent] == [
        ("refused", refused, False),
        ("cut by a crash", crashed, True),
    ]
    assert pg.database.value("SELECT attempts FROM outbox WHERE id = %s", (crashed,)) == 3


def test_api_server_rows_are_left_to_the_api_server(pg: PostgresStore) -> None:
    message = OutboundMessage(platform="api_server", chat_id="r1", text="answer")
    pg.outbox.add(
        session_id=None, platform="api_server", account_id="", chat_id="r1", thread_id=None, payload=encode(message)
    )
    platform = FakePlatform("api_server")
    dispatcher = OutboxDispatcher(pg, {"api_server": platform}, name="d")
    assert dispatcher.dispatch_once() == 0
    assert platform.sent == []
    assert pg.outbox.backlog() == 1


def test_a_started_dispatcher_sends_a_reply_as_soon_as_it_is_queued_not_at_its_next_poll(pg: PostgresStore) -> None:
    platform = FakePlatform("fake")
    dispatcher = OutboxDispatcher(pg, {"fake": platform}, name="a")
    rounds: list[int] = []  # what each of the thread's rounds claimed
    dispatch_once = dispatcher.dispatch_once

    def counted(limit: int = 100, *, wait: bool = True) -> int:
        claimed = dispatch_once(limit, wait=wait)
        rounds.append(claimed)
        return claimed

    dispatcher.dispatch_once = counted  # type: ignore[method-assign]
    dispatcher.start(interval_s=60.0)  # a poll would come only after the test's deadline
    try:
        poll_until(lambda: dispatcher.held() == {"send:fake"}, timeout=5, interval=0.05, what="send:fake taken")
        # The first round has claimed nothing (the thread now waits 60 s), and the listener is listening.
        poll_until(lambda: rounds == [0], timeout=5, interval=0.01, what="the first round")
        poll_until(lambda: _listening(pg), timeout=5, interval=0.01, what="LISTEN hermes_outbox")
        queued = time.monotonic()
        _queue(pg, "c", "now")
        poll_until(lambda: platform.sent, timeout=5, interval=0.01, what="the reply sent")
        assert time.monotonic() - queued < 5
        assert [m.text for m in platform.sent] == ["now"]
        poll_until(lambda: len(rounds) >= 2, timeout=5, interval=0.01, what="the woken round's end")
        assert rounds[:2] == [0, 1]  # sent by the round its notification woke, not by a poll
        assert dispatcher.wait_idle()
        time.sleep(0.3)
        assert rounds == [0, 1]  # one claim for the reply: none after it (nothing else could be due)
    finally:
        dispatcher.stop()


def test_a_dispatcher_hears_of_replies_through_the_replicas_api_listener_and_of_its_reconnects(
    pg: PostgresStore,
) -> None:
    """Where the API server runs, the replica listens once: the dispatcher is told of queued replies by
    ``ApiReplies`` (PostgreSQL wakes one listening backend of the replica per notice), and after that listener
    connected again, of replies whose notices nobody heard."""
    platform = FakePlatform("fake")
    dispatcher = OutboxDispatcher(pg, {"fake": platform}, name="a")
    replies = ApiReplies(
        pg.database.dsn, pg, ReplyWaiters("api_server"), TurnWatch(), poll_s=0.2, on_outbox=dispatcher.notified
    )
    dispatcher.start(interval_s=60.0, listen=False)  # a poll would come only after the test's deadline
    replies.start()
    try:
        poll_until(lambda: dispatcher.held() == {"send:fake"}, timeout=5, interval=0.05, what="send:fake taken")
        poll_until(lambda: _listeners(pg) == 1, timeout=5, interval=0.01, what="the replica's one listener")
        _queue(pg, "c", "told")
        poll_until(lambda: platform.sent, timeout=5, interval=0.01, what="the reply sent")
        assert [m.text for m in platform.sent] == ["told"]
        assert _listeners(pg) == 1  # the dispatcher opened no connection of its own

        (listener,) = pg.database.execute(
            "SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN %%' AND pid <> pg_backend_pid()"
        )
        pg.database.execute("SELECT pg_terminate_backend(%s)", (listener[0],))
        _queue(pg, "c", "unheard")  # notified while nobody of this replica listens
        poll_until(lambda: len(platform.sent) == 2, timeout=10, interval=0.01, what="the unheard reply sent")
        assert [m.text for m in platform.sent] == ["told", "unheard"]
        assert _listeners(pg) == 1
    finally:
        replies.close()
        dispatcher.stop()


def _listeners(pg: PostgresStore) -> int:
    return int(
        pg.database.value(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %%' AND pid <> pg_backend_pid()"
        )
    )


class GatedSender(FakePlatform):
    """A fake platform whose sends wait for ``gate`` (set: they go through) and record when they began."""

    def __init__(self) -> None:
        super().__init__("fake")
        self.gate = threading.Event()
        self.sending = threading.Event()

    def send(self, message: OutboundMessage) -> str | None:
        self.sending.set()
        assert self.gate.wait(10)
        return super().send(message)


def test_a_chat_s_next_reply_is_sent_once_its_head_is_without_waiting_for_a_poll(pg: PostgresStore) -> None:
    """The reply behind a head (queued before the claim, or while the head was being sent) is claimed as soon as
    the head's send ends, although no claim runs after a send with nothing behind it."""
    platform = GatedSender()
    dispatcher = OutboxDispatcher(pg, {"fake": platform}, name="a")
    platform.gate.set()
    dispatcher.start(interval_s=60.0)  # a poll would come only after the test's deadline
    try:
        poll_until(lambda: dispatcher.held() == {"send:fake"}, timeout=5, interval=0.05, what="send:fake taken")
        poll_until(lambda: _listening(pg), timeout=5, interval=0.01, what="LISTEN hermes_outbox")
        with pg.transaction():  # two replies of one chat in one commit: one notification, the head claimed
            _queue(pg, "c", "1")
            _queue(pg, "c", "2")
        poll_until(lambda: len(platform.sent) == 2, timeout=5, interval=0.01, what="both replies sent")
        platform.gate.clear()
        platform.sending.clear()
        _queue(pg, "c", "3")
        assert platform.sending.wait(5)  # "3" is being sent: the next reply of its chat is queued meanwhile
        _queue(pg, "c", "4")
        time.sleep(0.2)  # its notification arrives while the chat is busy: the claim it wakes finds no head
        platform.gate.set()
        poll_until(lambda: len(platform.sent) == 4, timeout=5, interval=0.01, what="the reply queued meanwhile")
        assert [m.text for m in platform.sent] == ["1", "2", "3", "4"]
    finally:
        platform.gate.set()
        dispatcher.stop()


def _listening(pg: PostgresStore) -> bool:
    """Whether a connection's last statement was the dispatcher's LISTEN (it runs none after it)."""
    found = pg.database.value(
        "SELECT count(*) FROM pg_stat_activity WHERE query = %s AND pid <> pg_backend_pid()",
        (f"LISTEN {OUTBOX_CHANNEL}",),
    )
    return bool(found)
