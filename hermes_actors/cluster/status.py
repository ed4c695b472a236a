"""What ``hermesctl cluster status`` shows, read from the shard map and the inbox in PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from hermes_actors.store.pg.roles import RoleLease
from hermes_actors.store.pg.shard_queue import ShardLag
from hermes_actors.store.pg.store import PostgresStore

__all__ = ["ClusterStatus", "HostRow", "cluster_status", "status_text"]


class HostRow(msgspec.Struct, frozen=True, kw_only=True):
    """One shard host: seconds since its last heartbeat, and how many shards it holds (unexpired terms)."""

    name: str
    seen_s_ago: float
    shards: int


class ClusterStatus(msgspec.Struct, frozen=True, kw_only=True):
    """The hosts, the shards no one holds, the pending rows per shard, the oldest pending message's age, and the
    replicas' roles (a leased adapter's, a platform's dispatch)."""

    hosts: list[HostRow]
    shards: int
    unheld: list[int]
    lag: list[ShardLag]
    oldest_pending_s: float | None
    roles: list[RoleLease] = msgspec.field(default_factory=list)


def cluster_status(store: PostgresStore, *, clock: Callable[[], float] = time.time) -> ClusterStatus:
    """A snapshot of the cluster from its store."""
    leases = store.shards.leases()
    held: dict[str, int] = {}
    for lease in leases:
        if lease.holder is not None and lease.remaining_s > 0:
            held[lease.holder] = held.get(lease.holder, 0) + 1
    hosts = [HostRow(name=name, seen_s_ago=age, shards=held.get(name, 0)) for name, age in store.shards.hosts().items()]
    lag = store.shard_queue.lag()
    oldest = min((row.oldest_received_at for row in lag), default=None)
    return ClusterStatus(
        hosts=hosts,
        shards=len(leases),
        unheld=[lease.shard for lease in leases if lease.holder is None or lease.remaining_s <= 0],
        lag=lag,
        oldest_pending_s=None if oldest is None else max(0.0, clock() - oldest),
        roles=store.roles.leases(),
    )


def status_text(status: ClusterStatus) -> str:
    """``status`` as ``hermesctl cluster status`` prints it."""
    lines = [f"shards: {status.shards}, not held: {len(status.unheld)}"]
    if status.unheld:
        lines.append(
            "  not held: " + " ".join(str(s) for s in status.unheld[:32]) + (" ..." if len(status.unheld) > 32 else "")
        )
    lines.append("hosts:" if status.hosts else "hosts: none has started")
    lines += [f"  {h.name}: {h.shards} shards, last heartbeat {h.seen_s_ago:.1f} s ago" for h in status.hosts]
    pending = sum(row.pending for row in status.lag)
    if status.oldest_pending_s is None:
        lines.append("inbox: nothing pending")
    else:
        lines.append(f"inbox: {pending} pending, the oldest {status.oldest_pending_s:.1f} s old")
        lines += [f"  shard {row.shard}: {row.pending} pending" for row in status.lag]
    if status.roles:
        lines.append("roles:")
        lines += [
            f"  {r.role}: {r.holder} (epoch {r.epoch}, {r.remaining_s:.1f} s left)"
            if r.holder is not None and r.remaining_s > 0
            else f"  {r.role}: free"
            for r in status.roles
        ]
    return "\n".join(lines)
