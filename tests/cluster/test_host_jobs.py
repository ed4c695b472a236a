"""Shard hosts firing jobs by scanning (cluster/host/jobs.py), on PostgreSQL without Ray: a host fires only the jobs
of the shards it holds, each run's row goes to the shard of its session, and two hosts that both believe they hold a
shard (one's term ran out unseen) fire its due time once between them."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from hermes_actors.cluster.host.jobs import ShardJobs
from hermes_actors.cluster.job_runs import ShardRuns
from hermes_actors.job_port import JobSpec
from hermes_actors.lifecycle.schedule import JobsConfig
from hermes_actors.routing import KeyPolicy, SessionSource, build_session_key
from hermes_actors.runtime.events import Events
from hermes_actors.runtime.job_book import NoHooks, StoreJobs
from hermes_actors.runtime.store_access import DirectAccess
from hermes_actors.store.pg import PostgresStore
from hermes_actors.store.pg.shards import ShardFence, shard_for_key, shard_of
from hermes_actors.testing import FakeClock

SHARDS = 4


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as store:
        yield store


def _fence(name: str, shards: set[int]) -> ShardFence:
    fence = ShardFence(name, SHARDS)
    fence.grant(dict.fromkeys(shards, 1), 600.0, asked_at=time.monotonic())
    return fence


def _book(pg: PostgresStore, clock: FakeClock) -> StoreJobs:
    return StoreJobs(
        DirectAccess(pg), hooks=NoHooks(), queue=ShardRuns(pg, SHARDS), policy=KeyPolicy(), events=Events(), clock=clock
    )


def _hosts(pg: PostgresStore, fence: ShardFence, clock: FakeClock) -> ShardJobs:
    return ShardJobs(pg, fence, policy=KeyPolicy(), events=Events(), config=JobsConfig(), clock=clock)


def test_a_host_fires_the_due_jobs_of_its_shards_into_their_sessions_shards(pg: PostgresStore) -> None:
    clock = FakeClock()
    book = _book(pg, clock)
    jobs = [book.add(JobSpec(prompt=f"p{n}", in_="10s", chat=f"fake:c{n}")) for n in range(12)]
    mine = {shard_of(jobs[0].id, SHARDS)}
    host = _hosts(pg, _fence("a", mine), clock)
    assert host.scan() == 0  # nothing due yet
    clock.advance(10)
    fired = host.scan()
    assert fired == sum(shard_of(job.id, SHARDS) in mine for job in jobs)
    for job in jobs:
        row = pg.jobs.get(job.id)
        assert row is not None
        assert row.runs == (1 if shard_of(job.id, SHARDS) in mine else 0)
    ran = [row for row in (pg.jobs.get(j.id) for j in jobs) if row is not None and row.runs]
    for row in ran:
        shard = pg.database.value("SELECT shard FROM inbox WHERE id = %s", (row.last_inbox_id,))
        key = build_session_key(SessionSource(platform="fake", chat_id=row.chat.chat_id), KeyPolicy())
        assert shard == shard_for_key(None, key, SHARDS)  # the shard its session will be in


def test_two_hosts_that_both_think_they_hold_a_shard_fire_its_due_time_once(pg: PostgresStore) -> None:
    clock = FakeClock()
    book = _book(pg, clock)
    jobs = [book.add(JobSpec(prompt=f"p{n}", every="1m", chat=f"fake:c{n}")) for n in range(8)]
    clock.advance(60)
    everything = set(range(SHARDS))
    stores = [PostgresStore.open(pg.database.dsn, migrate_schema=False) for _ in range(2)]
    hosts = [_hosts(store, _fence(name, everything), clock) for store, name in zip(stores, "ab", strict=True)]
    start = threading.Barrier(2)
    counts: list[int] = []

    def scan(host: ShardJobs) -> None:
        start.wait(10)
        counts.append(host.scan())

    threads = [threading.Thread(target=scan, args=(host,)) for host in hosts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for store in stores:
        store.close()
    assert sum(counts) == len(jobs)
    for job in jobs:
        row = pg.jobs.get(job.id)
        assert row is not None
        assert (row.runs, row.next_due_at) == (1, clock() + 60)
        rows = pg.database.value("SELECT count(*) FROM inbox WHERE platform_message_id LIKE %s", (f"job-{job.id}-%",))
        assert rows == 1
