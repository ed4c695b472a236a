"""The shard heartbeat (cluster/keeper.py), tick by tick: home shards at once, others after the grace period, a
shard given back when its home host is live again."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hermes_actors.cluster.host.keeper import ShardKeeper
from hermes_actors.store.pg import PostgresStore
from hermes_actors.store.pg.shards import ShardFence, home_shards

SHARDS = 16
HOSTS = ("h0", "h1")


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as store:
        yield store


def _keeper(pg: PostgresStore, name: str, *, grace_s: float) -> tuple[ShardKeeper, ShardFence]:
    fence = ShardFence(name, SHARDS)
    return ShardKeeper(pg, fence, HOSTS, ttl_s=30.0, grace_s=grace_s), fence


def test_a_host_takes_its_home_shards_at_once_and_the_rest_only_after_the_grace_period(pg: PostgresStore) -> None:
    keeper, fence = _keeper(pg, "h0", grace_s=3600.0)
    home = home_shards("h0", HOSTS, SHARDS)
    pg.shards.ensure(SHARDS)
    pg.database.execute("UPDATE shard_leases SET expires_at = clock_timestamp()")  # free, but only just
    assert keeper.tick() == home
    assert set(fence.held()) == home
    assert keeper.home == home


def test_a_shard_held_away_from_home_is_given_back_a_tick_after_its_home_host_returns(pg: PostgresStore) -> None:
    away, away_fence = _keeper(pg, "h0", grace_s=0.0)
    assert away.tick() == set(range(SHARDS))  # h1 has never run: its shards have waited long enough (never held)
    h1_home = home_shards("h1", HOSTS, SHARDS)
    back, back_fence = _keeper(pg, "h1", grace_s=0.0)
    assert back.tick() == set()  # its home shards are held: it beats, and waits
    away.tick()
    assert away.leaving() == h1_home  # not pulled any more; released at the next tick
    assert set(away_fence.held()) == set(range(SHARDS))
    away.tick()
    assert set(away_fence.held()) == home_shards("h0", HOSTS, SHARDS)
    assert back.tick() == h1_home
    assert back_fence.held() == dict.fromkeys(h1_home, 2)  # a new term: epoch 2


def test_a_host_whose_renewals_stall_loses_its_shards_to_its_peer_after_the_term_and_grace(pg: PostgresStore) -> None:
    stalled, stalled_fence = _keeper(pg, "h0", grace_s=0.0)
    stalled.tick()
    stalled.stall_renewals = True
    assert stalled.tick() == set()
    peer, _ = _keeper(pg, "h1", grace_s=0.0)
    assert peer.tick() == set()  # h0's terms have not run out
    pg.database.execute("UPDATE shard_leases SET expires_at = clock_timestamp() - interval '1 second'")
    assert peer.tick() == set(range(SHARDS))
    stalled.stall_renewals = False
    stalled.tick()
    assert set(stalled_fence.held()) == set()  # its terms ended: it renewed nothing and took nothing held


def test_a_shard_given_back_waits_the_grace_period_for_its_home_host_before_another_host_takes_it(
    pg: PostgresStore,
) -> None:
    away, away_fence = _keeper(pg, "h0", grace_s=3600.0)
    assert away.tick() == set(range(SHARDS))  # never held: taken at once by the only host alive
    back, _ = _keeper(pg, "h1", grace_s=3600.0)
    back.stall_renewals = True  # h1 beats once below, then is slow to tick
    pg.shards.beat("h1")
    away.tick()  # marks h1's home shards leaving
    away.tick()  # releases them
    h1_home = home_shards("h1", HOSTS, SHARDS)
    assert set(away_fence.held()) == home_shards("h0", HOSTS, SHARDS)
    assert away.tick() == set()  # h1 is their home and alive: h0 leaves them to it for the grace period
    back.stall_renewals = False
    assert back.tick() == h1_home
