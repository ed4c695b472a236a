"""A shard host's numbers as it publishes them with each heartbeat (``shard_hosts.stats``), for the replicas'
``/metrics`` and ``hermesctl cluster status``: the turns run in the hosts, which serve no HTTP of their own.

:class:`HostStats` is what one incarnation of a host counted since it started (Prometheus counters: a restart starts
them again at zero, which ``rate()`` handles), with what it holds now: its shards, the rows it has handed to its
supervisor and that are still pending, the oldest of them with how long ago they were handed over (a row handed
over long ago and still pending is stuck *in* the host; one never handed over is stuck *before* it).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from hermes_actors.runtime.metrics import Metrics

__all__ = ["HANDED_SHOWN", "HandedRow", "HostStats", "decode_stats", "encode_stats", "oldest_handed", "turn_outcomes"]

HANDED_SHOWN = 20
"""How many of the oldest rows handed over a heartbeat names (the count covers them all)."""


class HandedRow(msgspec.Struct, frozen=True, array_like=True):
    """A row handed to the host's supervisor and still pending: its inbox id and shard, and seconds since."""

    inbox_id: int
    shard: int
    age_s: float


class HostStats(msgspec.Struct, frozen=True, kw_only=True):
    """One incarnation's numbers (see the module docstring)."""

    pid: int
    shards: int = 0  # held now
    turns: dict[str, int] = {}  # finished turns by outcome: ok, failed, cancelled, unsaved, lease_lost, stale, error
    fence_refusals: int = 0  # commits the shard fence refused (a term run out locally, or lost)
    shards_taken: int = 0  # terms taken (at start, after a restart, a takeover)
    shards_lost: int = 0  # terms that ended without a release (a renewal too late)
    unknown_commits: int = 0  # commits whose connection broke on the way, resolved against the server
    handed_over: int = 0  # rows handed to the supervisor and still pending
    oldest_handed: list[HandedRow] = []  # the oldest of them, at most HANDED_SHOWN
    store_errors: int = 0  # failed reads and writes of the host's own loops (pull, heartbeat, listener)


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(HostStats)


def encode_stats(stats: HostStats) -> bytes:
    """``stats`` as the heartbeat stores them."""
    return _encoder.encode(stats)


def decode_stats(blob: bytes | None) -> HostStats | None:
    """The stats a heartbeat stored, or ``None`` (none sent, or from another version: left out, never an error)."""
    if blob is None:
        return None
    try:
        return _decoder.decode(blob)
    except msgspec.DecodeError:
        return None


def turn_outcomes(metrics: Metrics) -> dict[str, int]:
    """The runtime's finished turns by outcome (every platform summed)."""
    outcomes: dict[str, int] = {}
    for family in metrics.turns.collect():
        for sample in family.samples:
            if sample.name.endswith("_total"):
                label = sample.labels["outcome"]
                outcomes[label] = outcomes.get(label, 0) + int(sample.value)
    return outcomes


def oldest_handed(handed: Mapping[int, tuple[int, float]], now: float) -> list[HandedRow]:
    """The oldest :data:`HANDED_SHOWN` of ``handed`` (inbox id -> (shard, monotonic time handed over))."""
    oldest = sorted(handed.items(), key=lambda item: item[1][1])[:HANDED_SHOWN]
    return [HandedRow(inbox_id, shard, round(max(0.0, now - at), 1)) for inbox_id, (shard, at) in oldest]
