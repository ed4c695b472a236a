"""What a shard host is given (:class:`HostSettings`, pickled to its Ray worker) and what it tells of itself
(:class:`HostStatus`, its Ray ``status()`` call)."""

from __future__ import annotations

import msgspec

from hermes_actors.config import BusyConfig, EventsConfig
from hermes_actors.lifecycle.policy import ResetConfig
from hermes_actors.lifecycle.schedule import JobsConfig

__all__ = ["HostSettings", "HostStatus"]


class HostSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What a shard host needs: its name among ``hosts``, the database, the shard count and the lease timing."""

    name: str
    postgres_dsn: str
    hosts: tuple[str, ...]
    shards: int = 256
    lease_ttl_s: float = 10.0
    grace_s: float = 5.0
    pull_interval_s: float = 2.0
    look_again_s: float = 0.5  # a second pull this long after new terms begin (HostRuntime._gained)
    max_concurrent_agent_calls: int = 64
    pending_soft_limit: int = 4  # queued messages of a session from which its next turn merges them
    pending_hard_limit: int = 64
    fencing: bool = True  # False only in the fault test: shows what the fence prevents
    reset: ResetConfig = msgspec.field(default_factory=ResetConfig)  # idle and daily resets (session_reset:)
    timer_scan_s: float = 30.0  # how often the held shards are scanned for due resets
    relay_platforms: tuple[str, ...] = ("api_server",)  # whose turns' events are relayed to a waiting replica
    events: EventsConfig = msgspec.field(default_factory=EventsConfig)  # webhooks its commits emit events for
    busy: BusyConfig = msgspec.field(default_factory=BusyConfig)  # what a message to a busy session does (busy:)
    jobs: JobsConfig = msgspec.field(default_factory=JobsConfig)  # scheduled turns (jobs:)
    job_scan_s: float = 5.0  # how often the held shards' due jobs and passed approval deadlines are looked for
    # The CPUs the host's worker process runs on (daemon.cpu_affinity: hermes_actors.cpu_affinity); "all" leaves
    # the process as Ray started it.
    cpu_affinity: str | tuple[int, ...] = "all"


class HostStatus(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of one host: its shards (shard -> epoch), the rows it has handed to its supervisor, its turns
    (committed), every finished turn by outcome (``stale``: refused by the fence or answered elsewhere), and how
    many pulls it made and inbox rows they read."""

    name: str
    pid: int
    shards: dict[int, int]
    dispatched: int
    turns: int
    outcomes: dict[str, int]
    pulls: int = 0
    rows_read: int = 0
    rows_notified: int = 0  # rows handed over as their notification brought them, without a pull
    sums: dict[str, float] = {}  # the runtime's histograms' _count and _sum (turns, agent calls, commits)
