"""Shard hosts denying overdue requests for approval by scanning (cluster/host/approvals.py), on PostgreSQL without
Ray: a request past its deadline gets one denial, queued in the shard its session's key leads to; two hosts that
both believe they hold the shard deny it once between them; a host the database no longer knows as the holder
denies nothing; a request answered in time, or not yet due, is left alone."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from hermes_actors.cluster.host.approvals import ShardApprovals
from hermes_actors.lifecycle.approvals import TIMEOUT_PREFIX
from hermes_actors.messages import decode_inbound
from hermes_actors.routing import KeyPolicy, SessionSource, build_session_key
from hermes_actors.runtime.approval_requests import TIMER_PREFIX, timer_name
from hermes_actors.store import EndReason
from hermes_actors.store.approvals import ApprovalState
from hermes_actors.store.pg import PostgresStore
from hermes_actors.store.pg.shards import ShardFence, shard_for_key, shard_of
from hermes_actors.testing import FakeClock

SHARDS = 4
CALLS = '[{"id": "c1", "type": "function", "function": {"name": "deploy", "arguments": "{}"}}]'


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as store:
        yield store


def _fence(name: str, terms: dict[int, int], *, enabled: bool = True) -> ShardFence:
    fence = ShardFence(name, SHARDS, enabled=enabled)
    fence.grant(terms, 600.0, asked_at=time.monotonic())
    return fence


def _ask(pg: PostgresStore, clock: FakeClock, chat: str, *, wait_s: float = 30.0) -> int:
    """A live session of chat ``chat`` with a request pending, its deadline ``wait_s`` from now; the request's id."""
    source = SessionSource(platform="fake", chat_id=chat, user_id="u")
    key = build_session_key(source, KeyPolicy())
    session = pg.create_session(source, routing_key=key)
    pg.set_route(key, session.id)
    with pg.transaction():
        approval_id = pg.approvals.add(
            session.id, message_id=f"m-{chat}", source=source, calls=CALLS, expires_at=clock() + wait_s
        )
        pg.timers.set(timer_name(approval_id), clock() + wait_s)
    return approval_id


def _denials(pg: PostgresStore, approval_id: int) -> list[tuple[int, int, str]]:
    """The inbox rows denying ``approval_id``: shard, routing key's session shard and the message's text."""
    rows = pg.database.execute(
        "SELECT shard, routing_key, payload FROM inbox WHERE platform_message_id = %s",
        (f"{TIMEOUT_PREFIX}{approval_id}",),
    )
    return [
        (int(shard), shard_for_key(pg.get_route(str(key)), str(key), SHARDS), decode_inbound(bytes(payload)).text)
        for shard, key, payload in rows
    ]


def test_a_host_denies_the_overdue_requests_of_its_shards_once_each(pg: PostgresStore) -> None:
    clock = FakeClock()
    asked = [_ask(pg, clock, f"c{n}") for n in range(12)]
    sessions = {approval_id: pg.approvals.get(approval_id) for approval_id in asked}
    mine = {min(shard_of(row.session_id, SHARDS) for row in sessions.values() if row is not None)}
    host = ShardApprovals(pg, _fence("a", dict.fromkeys(mine, 1), enabled=False), policy=KeyPolicy(), clock=clock)
    assert host.scan() == 0  # nothing overdue yet
    clock.advance(31)
    ours = [i for i, row in sessions.items() if row is not None and shard_of(row.session_id, SHARDS) in mine]
    assert host.scan() == len(ours) > 0
    for approval_id in asked:
        denials = _denials(pg, approval_id)
        if approval_id in ours:
            ((shard, expected, text),) = denials
            assert shard == expected  # the shard of the session its key leads to
            assert text.startswith(f"/deny {approval_id} nobody answered within ")
            assert pg.timers.cancel(timer_name(approval_id)) is False  # the claim took the timer
        else:
            assert denials == []
    assert host.scan() == 0  # nothing left to find
    assert [row.id for row in pg.approvals.overdue(clock(), timer_prefix=TIMER_PREFIX)] == [
        i for i in asked if i not in ours
    ]


def test_two_hosts_that_both_think_they_hold_a_shard_deny_each_request_once(pg: PostgresStore) -> None:
    clock = FakeClock()
    asked = [_ask(pg, clock, f"c{n}") for n in range(10)]
    clock.advance(31)
    everything = dict.fromkeys(range(SHARDS), 1)
    stores = [PostgresStore.open(pg.database.dsn, migrate_schema=False) for _ in range(2)]
    # Fencing off: only the claim (the timer's deletion) stands between the two.
    hosts = [
        ShardApprovals(store, _fence(name, everything, enabled=False), policy=KeyPolicy(), clock=clock)
        for store, name in zip(stores, "ab", strict=True)
    ]
    start = threading.Barrier(2)
    counts: list[int] = []

    def scan(host: ShardApprovals) -> None:
        start.wait(10)
        counts.append(host.scan())

    threads = [threading.Thread(target=scan, args=(host,)) for host in hosts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for store in stores:
        store.close()
    assert len(counts) == 2
    assert sum(counts) == len(asked)
    for approval_id in asked:
        assert len(_denials(pg, approval_id)) == 1


def test_a_host_the_database_no_longer_knows_as_the_holder_denies_nothing(pg: PostgresStore) -> None:
    clock = FakeClock()
    approval_id = _ask(pg, clock, "c")
    clock.advance(31)
    pg.shards.ensure(SHARDS)
    terms = pg.shards.acquire("a", range(SHARDS), 600.0)
    stale = ShardApprovals(pg, _fence("b", terms), policy=KeyPolicy(), clock=clock)  # b's term ran out unseen
    assert stale.scan() == 0
    assert _denials(pg, approval_id) == []
    holder = ShardApprovals(pg, _fence("a", terms), policy=KeyPolicy(), clock=clock)
    assert holder.scan() == 1
    assert len(_denials(pg, approval_id)) == 1


def test_a_request_answered_in_time_or_of_an_ended_session_gets_no_denial(pg: PostgresStore) -> None:
    clock = FakeClock()
    answered = _ask(pg, clock, "answered")
    ended = _ask(pg, clock, "ended")
    with pg.transaction():
        assert pg.approvals.decide(answered, approved=True, by="fake:u")
    ended_row = pg.approvals.get(ended)
    assert ended_row is not None
    pg.end_session(ended_row.session_id, EndReason.USER_EXIT)
    clock.advance(31)
    host = ShardApprovals(
        pg, _fence("a", dict.fromkeys(range(SHARDS), 1), enabled=False), policy=KeyPolicy(), clock=clock
    )
    assert host.scan() == 0
    assert _denials(pg, answered) == _denials(pg, ended) == []
    row = pg.approvals.get(answered)
    assert row is not None
    assert row.state is ApprovalState.APPROVED
    closed = pg.approvals.get(ended)
    assert closed is not None
    assert (closed.state, closed.decided_by, closed.resumed_at is not None) == (ApprovalState.DENIED, "timeout", True)
    assert host.scan() == 0
