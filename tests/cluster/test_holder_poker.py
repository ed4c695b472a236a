"""The ingress's second wake-up (:class:`HolderPoker`): a Ray call to a shard's holder, at most one per holder in each
gap (the row's ``NOTIFY`` is the first wake-up)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hermes_actors.cluster.host import ray_host
from hermes_actors.cluster.host.ray_host import HolderPoker
from hermes_actors.store.pg import PostgresStore


class _Handle:
    """A host's Ray handle as the poker uses it: ``handle.poke.remote()``, counted."""

    def __init__(self) -> None:
        self.pokes = 0
        self.poke = self

    def remote(self) -> None:
        self.pokes += 1


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as store:
        yield store


def test_each_holder_is_poked_at_most_once_a_gap_and_a_shard_without_holder_not_at_all(
    pg: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    handles = {"h0": _Handle(), "h1": _Handle()}

    def handle_of(name: str, namespace: str) -> Any:
        return handles[name]

    monkeypatch.setattr(ray_host, "host_handle", handle_of)
    pg.shards.ensure(8)
    pg.shards.acquire("h0", [0, 1], 30.0)
    pg.shards.acquire("h1", [2], 30.0)
    poker = HolderPoker(pg, gap_s=3600.0)
    for shard in (0, 1, 0, 2, 2, 5):  # shard 5 has no holder
        poker(shard)
    assert (handles["h0"].pokes, handles["h1"].pokes) == (1, 1)
    every = HolderPoker(pg, gap_s=0.0)
    for shard in (0, 1, 2):
        every(shard)
    assert (handles["h0"].pokes, handles["h1"].pokes) == (3, 2)
