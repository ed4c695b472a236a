"""The cluster as an operator sees it, read from PostgreSQL: ``hermesctl cluster status`` (text or ``--json``) and a
replica's ``/health/cluster``.

:func:`cluster_status` reads the shard map, the hosts' and replicas' heartbeats (with each host's incarnation and
the numbers it publishes: :mod:`~hermes_actors.cluster.host_stats`), the inbox's lag and its oldest pending rows,
and the roles; it names the trouble it finds against ``cluster.health``
(:class:`~hermes_actors.cluster.settings.ClusterHealth`): messages pending too long (each of the oldest with where
it is: its shard's holder, and whether that host has handed it to a session or not), shards no host holds, hosts
that stopped beating. :func:`status_text` prints it in a bounded number of lines whatever the load.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import msgspec

from hermes_actors.cluster.host_stats import HANDED_SHOWN, HostStats, decode_stats
from hermes_actors.cluster.settings import ClusterHealth
from hermes_actors.store.pg.roles import RoleLease
from hermes_actors.store.pg.shard_queue import ShardLag
from hermes_actors.store.pg.store import PostgresStore

__all__ = ["ClusterStatus", "HostView", "ReplicaView", "StuckRow", "cluster_status", "status_text"]

SHOWN = 10
"""How many shards, stuck rows and roles the text lists (``--json`` has them all, stuck rows up to 100)."""
_STUCK_READ = 100


class HostView(msgspec.Struct, frozen=True, kw_only=True):
    """One shard host: its last heartbeat (``None``: configured, never started), the incarnation beating under its
    name and for how long, how many incarnations the name has had, the shards it holds, the numbers it published."""

    name: str
    seen_s_ago: float | None
    incarnation: str = ""
    up_s: float | None = None
    incarnations: int = 0
    shards: int = 0
    stats: HostStats | None = None


class ReplicaView(msgspec.Struct, frozen=True, kw_only=True):
    """One ``hermesd --cluster`` replica: its last heartbeat, for how long it runs, its config's fingerprint."""

    name: str
    seen_s_ago: float
    up_s: float
    fingerprint: str


class StuckRow(msgspec.Struct, frozen=True, kw_only=True):
    """A message pending longer than ``cluster.health.stuck_after_s``, and where it is: its shard's holder (``None``:
    no host holds it) and whether that host handed it to a session (``handed``: ``yes``, ``no``, or ``unknown``
    when the host published too many to list), and how long ago."""

    inbox_id: int
    shard: int | None
    platform: str
    age_s: float
    holder: str | None
    handed: str
    handed_s_ago: float | None = None


class ClusterStatus(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of the cluster; ``trouble`` lists what is wrong by ``cluster.health`` (empty: all is well)."""

    shards: int
    unheld: list[int]
    hosts: list[HostView]
    replicas: list[ReplicaView]
    pending: int
    oldest_pending_s: float | None
    lag: list[ShardLag]
    stuck: list[StuckRow]
    stuck_count: int
    roles: list[RoleLease]
    trouble: list[str]
    unheld_longest_s: float | None = None

    @property
    def ok(self) -> bool:
        """Nothing is wrong."""
        return not self.trouble


def cluster_status(
    store: PostgresStore,
    *,
    health: ClusterHealth | None = None,
    expected_hosts: Sequence[str] = (),
    clock: Callable[[], float] = time.time,
) -> ClusterStatus:
    """A snapshot of the cluster from its store, judged by ``health``; ``expected_hosts`` are the configured hosts
    (one that never beat is trouble)."""
    health = health or ClusterHealth()
    now = clock()
    leases = store.shards.leases()
    held: dict[str, int] = {}
    holders: dict[int, str] = {}
    for lease in leases:
        if lease.holder is not None and lease.remaining_s > 0:
            held[lease.holder] = held.get(lease.holder, 0) + 1
            holders[lease.shard] = lease.holder
    hosts = {
        beat.holder: HostView(
            name=beat.holder,
            seen_s_ago=beat.seen_s_ago,
            incarnation=beat.incarnation,
            up_s=beat.up_s,
            incarnations=beat.incarnations,
            shards=held.get(beat.holder, 0),
            stats=decode_stats(beat.stats),
        )
        for beat in store.shards.host_beats()
    }
    for name in expected_hosts:
        hosts.setdefault(name, HostView(name=name, seen_s_ago=None))
    unheld = [lease for lease in leases if lease.holder is None or lease.remaining_s <= 0]
    lag = store.shard_queue.lag()
    oldest = min((row.oldest_received_at for row in lag), default=None)
    cutoff = now - health.stuck_after_s
    stuck_count = store.shard_queue.pending_before(cutoff) if oldest is not None and oldest < cutoff else 0
    stuck = [
        _where(row.inbox_id, row.shard, row.platform or row.kind, now - row.received_at, holders, hosts)
        for row in (store.shard_queue.oldest(limit=_STUCK_READ) if stuck_count else [])
        if row.received_at < cutoff
    ]
    unheld_longest = max((-lease.remaining_s for lease in unheld), default=None)
    status = ClusterStatus(
        shards=len(leases),
        unheld=[lease.shard for lease in unheld],
        unheld_longest_s=None if unheld_longest is None or unheld_longest == float("inf") else unheld_longest,
        hosts=[hosts[name] for name in sorted(hosts)],
        replicas=[
            ReplicaView(name=r.name, seen_s_ago=r.seen_s_ago, up_s=r.up_s, fingerprint=r.fingerprint)
            for r in store.replicas.beats()
        ],
        pending=sum(row.pending for row in lag),
        oldest_pending_s=None if oldest is None else max(0.0, now - oldest),
        lag=lag,
        stuck=stuck,
        stuck_count=stuck_count,
        roles=store.roles.leases(),
        trouble=[],
    )
    return msgspec.structs.replace(
        status, trouble=_trouble(status, unheld_for=[-lease.remaining_s for lease in unheld], health=health)
    )


def _where(
    inbox_id: int, shard: int | None, platform: str, age_s: float, holders: dict[int, str], hosts: dict[str, HostView]
) -> StuckRow:
    holder = holders.get(shard) if shard is not None else None
    stats = hosts[holder].stats if holder in hosts and holder is not None else None
    handed, ago = "unknown", None
    if stats is not None:
        found = next((row for row in stats.oldest_handed if row.inbox_id == inbox_id), None)
        if found is not None:
            handed, ago = "yes", found.age_s
        elif stats.handed_over <= HANDED_SHOWN:
            handed = "no"
    elif holder is None:
        handed = "no"
    return StuckRow(
        inbox_id=inbox_id, shard=shard, platform=platform, age_s=age_s, holder=holder, handed=handed, handed_s_ago=ago
    )


def _trouble(status: ClusterStatus, *, unheld_for: list[float], health: ClusterHealth) -> list[str]:
    found: list[str] = []
    if status.stuck_count:
        found.append(
            f"{status.stuck_count} messages pending for over {health.stuck_after_s:g} s (the oldest "
            f"{status.oldest_pending_s or 0:.0f} s): cluster.health.stuck_after_s"
        )
    long_unheld = sorted(s for s, free in zip(status.unheld, unheld_for, strict=True) if free >= health.unheld_after_s)
    if long_unheld:
        found.append(
            f"{len(long_unheld)} shards held by no host for over {health.unheld_after_s:g} s "
            f"({_some(long_unheld)}): cluster.health.unheld_after_s"
        )
    live = {
        r.fingerprint: r.name for r in status.replicas if r.seen_s_ago < health.host_silent_after_s and r.fingerprint
    }
    if len(live) > 1:
        found.append(
            "replicas run on different configs ("
            + ", ".join(f"{name}: {fingerprint}" for fingerprint, name in sorted(live.items()))
            + "); their cluster: and platforms: sections must match (each replica's log names the difference)"
        )
    for host in status.hosts:
        if host.seen_s_ago is None:
            found.append(f"host {host.name} has never started (no heartbeat in the store)")
        elif host.seen_s_ago >= health.host_silent_after_s:
            found.append(
                f"host {host.name} silent for {host.seen_s_ago:.0f} s (no heartbeat): "
                "cluster.health.host_silent_after_s"
            )
    return found


def _some(values: Sequence[int]) -> str:
    shown = ", ".join(str(v) for v in values[:SHOWN])
    return shown + (f" and {len(values) - SHOWN} more" if len(values) > SHOWN else "")


def _ago(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.1f} s ago"


def _host_line(host: HostView) -> str:
    line = f"  {host.name}: {host.shards} shards, last heartbeat {_ago(host.seen_s_ago)}"
    if host.incarnation:
        line += f", {host.incarnation} up {host.up_s or 0:.0f} s (incarnation {host.incarnations})"
    stats = host.stats
    if stats is not None:
        turns = " ".join(f"{k} {v}" for k, v in sorted(stats.turns.items())) or "none"
        line += (
            f"; turns: {turns}; handed over {stats.handed_over}; fence refusals {stats.fence_refusals}; "
            f"shards taken {stats.shards_taken}, lost {stats.shards_lost}"
        )
    return line


def status_text(status: ClusterStatus) -> str:
    """``status`` as ``hermesctl cluster status`` prints it: at most :data:`SHOWN` lines per list."""
    lines = [f"shards: {status.shards}, not held: {len(status.unheld)}"]
    if status.unheld:
        lines.append(f"  not held: {_some(status.unheld)}")
    lines.append("hosts:" if status.hosts else "hosts: none has started")
    lines += [_host_line(h) for h in status.hosts]
    lines.append("replicas:" if status.replicas else "replicas: none is running")
    lines += [
        f"  {r.name}: last heartbeat {r.seen_s_ago:.1f} s ago, up {r.up_s:.0f} s, config {r.fingerprint or '?'}"
        for r in status.replicas
    ]
    if status.oldest_pending_s is None:
        lines.append("inbox: nothing pending")
    else:
        lines.append(f"inbox: {status.pending} pending, the oldest {status.oldest_pending_s:.1f} s old")
        by_age = sorted(status.lag, key=lambda row: row.oldest_received_at)[:SHOWN]
        lines += [f"  shard {row.shard}: {row.pending} pending" for row in sorted(by_age, key=lambda r: r.shard)]
        if len(status.lag) > SHOWN:
            lines.append(f"  ... {len(status.lag) - SHOWN} more shards with pending messages (--json lists all)")
    if status.stuck:
        lines.append(f"stuck: {status.stuck_count} messages (the oldest {min(SHOWN, len(status.stuck))}):")
        for row in status.stuck[:SHOWN]:
            where = f"held by {row.holder}" if row.holder else "its shard held by no host"
            handed = {"yes": f"handed to its session {row.handed_s_ago or 0:.0f} s ago", "no": "not handed over"}
            lines.append(
                f"  inbox {row.inbox_id} ({row.platform}, shard {row.shard}, {row.age_s:.0f} s): {where}, "
                f"{handed.get(row.handed, 'handed over or not: unknown')}"
            )
    if status.roles:
        lines.append("roles:")
        lines += [
            f"  {r.role}: {r.holder} (epoch {r.epoch}, {r.remaining_s:.1f} s left)"
            if r.holder is not None and r.remaining_s > 0
            else f"  {r.role}: free"
            for r in status.roles[: SHOWN * 2]
        ]
        if len(status.roles) > SHOWN * 2:
            lines.append(f"  ... {len(status.roles) - SHOWN * 2} more roles (--json lists all)")
    lines.append("trouble:" if status.trouble else "trouble: none")
    lines += [f"  {line}" for line in status.trouble]
    return "\n".join(lines)
