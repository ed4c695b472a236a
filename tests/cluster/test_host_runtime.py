"""Shard hosts in this process (no Ray): the runtime on PostgreSQL, restricted to held shards, and its fence."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from hermes_actors.agents.base import AgentReply, TurnInput
from hermes_actors.agents.echo import EchoAgent
from hermes_actors.cluster.host.runtime import HostRuntime
from hermes_actors.cluster.host.settings import HostSettings
from hermes_actors.cluster.replica.ingress import ClusterIngress
from hermes_actors.lifecycle.policy import ResetConfig, ResetMode
from hermes_actors.messages import decode_outbound, encode
from hermes_actors.routing import KeyPolicy, build_session_key
from hermes_actors.store import EndReason
from hermes_actors.store.pg import PostgresStore
from hermes_actors.store.pg.shard_queue import ShardRow
from hermes_actors.store.pg.shards import home_shards, shard_for_key, shard_of
from hermes_actors.store.sql import tracing
from hermes_actors.testing import FakePlatform, SeeingAgent, poll_until
from tests.cluster.checks import stale_context_commits

SHARDS = 8

pytestmark = pytest.mark.slow  # each runs hosts for a few seconds


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as store:
        yield store


def _settings(dsn: str, name: str, hosts: tuple[str, ...], **fields: float | bool) -> HostSettings:
    base = HostSettings(
        name=name, postgres_dsn=dsn, hosts=hosts, shards=SHARDS, lease_ttl_s=3.0, grace_s=0.5, pending_soft_limit=64
    )
    return HostSettings(**{**{f: getattr(base, f) for f in base.__struct_fields__}, **fields})


def _pending(pg: PostgresStore) -> int:
    return int(pg.database.value("SELECT count(*) FROM inbox WHERE state = 'pending'"))


def _turns_ended(host: HostRuntime) -> int:
    """The turns ``host`` has finished, whatever their outcome (counted just after the turn's commit)."""
    return sum(host.status().outcomes.values())


def _replies(pg: PostgresStore) -> list[tuple[str, str]]:
    rows = pg.database.execute(
        "SELECT s.id, m.content FROM messages m JOIN sessions s ON s.ref = m.session_ref "
        "WHERE m.role = 'assistant' ORDER BY m.id"
    )
    return [(str(s), str(c)) for s, c in rows]


def test_two_hosts_split_the_shards_and_answer_every_message_once_in_order(
    postgres_dsn: str, pg: PostgresStore
) -> None:
    hosts = ("h0", "h1")
    runtimes = [HostRuntime(_settings(postgres_dsn, name, hosts)) for name in hosts]
    try:
        for runtime in runtimes:
            runtime.start()
        poll_until(lambda: all(r.fence.held() for r in runtimes), what="both hosts holding shards")
        assert set(runtimes[0].fence.held()) == home_shards("h0", hosts, SHARDS)
        platform = FakePlatform("fake")
        ingress = ClusterIngress(pg, shards=SHARDS)
        for n in range(5):
            for chat in range(6):
                assert ingress.accept(platform.message(f"c{chat}-{n}", chat_id=f"chat-{chat}", user_id=f"u{chat}"))
        poll_until(lambda: _pending(pg) == 0, timeout=30, what="an empty inbox")
        replies = _replies(pg)
        assert len(replies) == 30
        by_session: dict[str, list[str]] = {}
        for session_id, text in replies:
            by_session.setdefault(session_id, []).append(text.removeprefix("echo: "))
        assert len(by_session) == 6
        for texts in by_session.values():
            prefix = texts[0].split("-")[0]
            assert texts == [f"{prefix}-{n}" for n in range(5)]
        assert all(r.status().turns > 0 for r in runtimes)
        # Each session lives in the shard of its routing key, so its key's later messages reach the same host.
        for session_id in by_session:
            key = pg.routes_to(session_id)[0]
            assert shard_of(session_id, SHARDS) == shard_of(key, SHARDS)
    finally:
        for runtime in runtimes:
            runtime.stop()


class _CountingAgent(EchoAgent):
    """The echo agent, counting its calls per user text."""

    runs_inline = False

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        with self._lock:
            self.calls[turn.user_text] += 1
        return super().run_turn(turn, timeout_s=timeout_s)


def _quiet(host: HostRuntime) -> None:
    """Wait until ``host`` holds its shards and a second passes without a pull (its start and its new terms each
    ask for one)."""
    poll_until(lambda: host.fence.held() and host.status().pulls >= 1, what="the host holding and pulled")
    pulls = -1
    while pulls != host.status().pulls:
        pulls = host.status().pulls
        time.sleep(1.0)


_LOOKUP = "SELECT id FROM inbox WHERE state = 'pending' AND id = ANY"


def test_a_row_handed_over_the_first_time_is_not_looked_up_and_one_handed_again_is_looked_up_and_not_run(
    postgres_dsn: str, pg: PostgresStore
) -> None:
    agent = _CountingAgent()
    host = HostRuntime(_settings(postgres_dsn, "h0", ("h0",), pull_interval_s=600.0), agent=agent)
    host.start()
    try:
        _quiet(host)
        ingress = ClusterIngress(pg, shards=SHARDS)
        platform = FakePlatform("fake")
        texts = [f"m-{n}" for n in range(4)]
        with tracing(host.store.sql) as trace:
            for n, text in enumerate(texts):
                assert ingress.accept(platform.message(text, chat_id=f"c{n % 2}", user_id=f"u{n % 2}"))
            poll_until(lambda: _pending(pg) == 0 and host.status().turns == 4, timeout=20, what="four answers")
        # Each came whole with its notification, added under the term the host still holds: pending, not looked up.
        assert [sql for sql, _ in trace.statements if sql.startswith(_LOOKUP)] == []
        assert agent.calls == dict.fromkeys(texts, 1)

        # The same rows notified again after a pull saw them answered (a notification read late): handed over
        # again, each is looked up first, and no turn runs.
        host.handover.pull()
        found = pg.database.execute("SELECT id, shard FROM inbox ORDER BY id")
        rows: list[ShardRow] = []
        for inbox_id, shard in found:
            row = pg.inbox.get(int(inbox_id))
            assert row is not None
            rows.append((int(shard), row, pg.get_route(row.routing_key)))
        terms = host.fence.held()
        with tracing(host.store.sql) as trace:
            assert host.handover.hand(rows, {row.id: terms[shard] for shard, row, _ in rows}) == 4
            poll_until(lambda: host.status().turns == 8, timeout=20, what="the four handed again")
        assert len([sql for sql, _ in trace.statements if sql.startswith(_LOOKUP)]) >= 1
        assert agent.calls == dict.fromkeys(texts, 1)
        assert len(_replies(pg)) == 4
    finally:
        host.stop()


def test_a_message_its_notification_brings_whole_is_answered_without_a_pull_and_a_larger_one_is_pulled(
    postgres_dsn: str, pg: PostgresStore
) -> None:
    host = HostRuntime(_settings(postgres_dsn, "h0", ("h0",), pull_interval_s=600.0))
    host.start()
    try:
        # Its start and its new terms each ask for a pull: wait until a second without one.
        poll_until(lambda: host.fence.held() and host.status().pulls >= 1, what="the host holding and pulled")
        pulls = -1
        while pulls != host.status().pulls:
            pulls = host.status().pulls
            time.sleep(1.0)
        handed_on: list[str] = []
        hand = host.handover.hand

        def recorded(rows: list[ShardRow], epochs: dict[int, int]) -> int:
            handed_on.append(threading.current_thread().name)
            return hand(rows, epochs)

        host.handover.hand = recorded  # type: ignore[method-assign]
        ingress = ClusterIngress(pg, shards=SHARDS)
        platform = FakePlatform("fake")
        for n in range(6):
            assert ingress.accept(platform.message(f"small-{n}", chat_id=f"c{n % 3}", user_id=f"u{n % 3}"))
        poll_until(lambda: _pending(pg) == 0 and _turns_ended(host) == 6, timeout=20, what="six answers")
        status = host.status()
        assert (status.pulls, status.rows_notified) == (pulls, 6)  # none read back: each came with its NOTIFY
        assert set(handed_on) == {"h0-listen"}  # handed over where they were heard: no hop to the puller
        large = "L" * 9000  # too large for a notification: it carries the shard, and the host pulls
        assert ingress.accept(platform.message(large, chat_id="c0", user_id="u0"))
        poll_until(lambda: _pending(pg) == 0 and _turns_ended(host) == 7, timeout=20, what="the large one answered")
        status = host.status()
        assert status.pulls > pulls
        assert status.rows_notified == 6
        replies = sorted(text for _, text in _replies(pg))
        assert replies == sorted([f"echo: small-{n}" for n in range(6)] + [f"echo: {large}"])
    finally:
        host.stop()


@pytest.mark.parametrize("fencing", [True, False])
def test_a_host_whose_renewals_stall_cannot_commit_and_the_next_holder_sees_the_whole_history(
    postgres_dsn: str, pg: PostgresStore, fencing: bool
) -> None:
    """The stale host (renewals stalled, still working) and the next holder both run "first"; the stale host's
    commit comes first. Fenced, it is refused and the next holder's turns see everything committed. Unfenced, it
    goes through and the next holder's own "first" is dropped as answered.

    "second" is sent only once the next holder's "first" has ended: unfenced, a "second" handed over while that
    turn still runs joins the session it started (not created yet, and never stored once its turn is refused),
    which then starts afresh from no history: the split brain the fence prevents (test_fault.py), not the ordering
    this test is about."""
    stale_agent, taker_agent = SeeingAgent(gated=True), SeeingAgent(gated=True)
    stale = HostRuntime(_settings(postgres_dsn, "h0", ("h0",), fencing=fencing), agent=stale_agent)
    stale.start()
    taker: HostRuntime | None = None
    try:
        ingress = ClusterIngress(pg, shards=SHARDS)
        platform = FakePlatform("fake")
        ingress.accept(platform.message("first", chat_id="c", user_id="u"))
        assert stale_agent.started.wait(10)
        stale.keeper.stall_renewals = True  # it keeps working; its terms run out
        taker = next_holder = HostRuntime(
            _settings(postgres_dsn, "h1", ("h0", "h1"), fencing=fencing), agent=taker_agent
        )
        next_holder.start()
        assert taker_agent.started.wait(20)  # the next holder runs "first" too
        stale_agent.release.set()
        poll_until(lambda: _turns_ended(stale) == 1, timeout=10, what="the stale turn ending")
        taker_agent.release.set()
        poll_until(lambda: _pending(pg) == 0, timeout=10, what="the next holder finishing")
        # Only once its supervisor has heard that its "first" ended (committed or refused) may "second" come
        # (docstring): a Deliver it takes after this finds no turn of that session running.
        supervisor = next_holder.runtime.supervisor
        poll_until(lambda: supervisor.statistics().turns == 1, timeout=10, what="the next holder's first turn ending")
        outcomes = stale.status().outcomes
        stale.stop(release=False)  # only the next holder pulls "second"
        ingress.accept(platform.message("second", chat_id="c", user_id="u"))
        poll_until(lambda: _pending(pg) == 0, timeout=10, what="the next holder answering")
        # A turn is counted just after its commit, which the empty inbox shows: wait for the count as well.
        poll_until(lambda: _turns_ended(next_holder) == 2, timeout=10, what="the next holder's second turn ending")
        replies = [text for _, text in _replies(pg)]
        if fencing:
            assert outcomes == {"stale": 1}  # ShardLostError rolled its commit back
            assert next_holder.status().outcomes == {"ok": 2}
            assert replies == ["saw 0 after -", "saw 1 after first"]
            assert stale_context_commits(pg) == []
        else:
            assert outcomes == {"ok": 1}  # it committed without holding the shard
            # ... and the next holder's own "first" was thrown away as answered elsewhere. (It once also sent
            # "second" to the session its own "first" had started, from its cached route: it checks the stored
            # route now. tests/cluster/test_fault.py shows the stale-context commits of an unfenced cluster.)
            assert next_holder.status().outcomes == {"stale": 1, "ok": 1}
            assert stale_context_commits(pg) == []
    finally:
        stale_agent.release.set()
        taker_agent.release.set()
        if not stale._stopped.is_set():
            stale.stop(release=False)
        if taker is not None:
            taker.stop()


def test_a_due_idle_reset_becomes_an_inbox_row_of_the_session_s_shard_and_ends_it_under_the_fence(
    postgres_dsn: str, pg: PostgresStore
) -> None:
    reset = ResetConfig(mode=ResetMode.IDLE, idle_minutes=1)
    host = HostRuntime(
        HostSettings(name="h0", postgres_dsn=postgres_dsn, hosts=("h0",), shards=SHARDS, reset=reset, timer_scan_s=3600)
    )
    host.start()
    try:
        ClusterIngress(pg, shards=SHARDS).accept(FakePlatform("fake").message("hello", chat_id="c", user_id="u"))
        poll_until(lambda: _pending(pg) == 0, timeout=10, what="the turn")
        (session_id,) = [s for s, _ in _replies(pg)]
        assert host.timers.scan() == 0  # active a moment ago: not due
        pg.database.execute("UPDATE sessions SET last_active_at = last_active_at - 120 WHERE id = %s", (session_id,))
        assert host.timers.scan() == 1
        assert host.timers.scan() == 0  # one row per deadline
        host.poke()
        poll_until(lambda: not pg.get_session(session_id).is_live, timeout=10, what="the reset ending the session")
        host.poke()
        poll_until(lambda: _pending(pg) == 0, timeout=10, what="the reset row settled")
        assert pg.get_session(session_id).end_reason == EndReason.IDLE
        notice = decode_outbound(bytes(pg.database.value("SELECT payload FROM outbox ORDER BY id DESC LIMIT 1")))
        assert notice.text.startswith("This conversation was reset after 1 minutes without messages.")
    finally:
        host.stop()


def test_a_row_committed_just_after_new_terms_without_reaching_the_holder_is_pulled_by_its_second_look(
    postgres_dsn: str, pg: PostgresStore
) -> None:
    """A row added while its shard changed hands notifies the host giving it up (``holder_channel``), and may commit
    after the new holder's first pull read: the second look ``look_again_s`` after the new terms pulls it, long
    before the periodic pull."""
    host = HostRuntime(_settings(postgres_dsn, "h0", ("h0",), pull_interval_s=600.0, look_again_s=4.0))
    host.start()
    try:
        poll_until(lambda: len(host.fence.held()) == SHARDS, timeout=20, what="the host holding every shard")
        taken = time.monotonic()
        message = FakePlatform("fake").message("after the first pull", chat_id="c1", user_id="u1")
        key = build_session_key(message.source, KeyPolicy())
        pg.database.execute(  # the row, notifying nobody (its notification went to the host giving the shard up)
            "INSERT INTO inbox (platform, account_id, platform_message_id, routing_key, payload, received_at, shard) "
            "VALUES (%s, '', %s, %s, %s, 0, %s)",
            (message.source.platform, message.message_id, key, encode(message), shard_for_key(None, key, SHARDS)),
        )
        assert _pending(pg) == 1
        poll_until(lambda: _pending(pg) == 0, timeout=20, what="the row answered")
        assert time.monotonic() - taken < 60  # the second look, not the periodic pull (600 s)
        assert [text for _, text in _replies(pg)] == ["echo: after the first pull"]
    finally:
        host.stop()
