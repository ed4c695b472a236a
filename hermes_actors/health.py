"""The runtime's health and numbers as entry points publish them (``/health/ready``, ``/health/detailed``,
``/metrics``, ``hermesctl status``): each entry point's state, the store's disk, the agent, readiness, vitals and
the Prometheus exposition. :mod:`hermes_actors.ports` re-exports every name for adapter authors.
"""

from __future__ import annotations

import enum
from typing import Protocol, runtime_checkable

import msgspec

from hermes_actors.messages import ToolServerHealth

__all__ = [
    "AgentInfo",
    "ClusterView",
    "ConnectionReporter",
    "DiskSpace",
    "Exposition",
    "Latency",
    "PlatformHealth",
    "PlatformStatus",
    "Readiness",
    "Vitals",
]


class PlatformStatus(enum.StrEnum):
    """Where an entry point stands."""

    RUNNING = "running"  # started and, as far as it can tell, connected
    DISCONNECTED = "disconnected"  # started, but it says its connection is down now (it keeps trying)
    FAILED = "failed"  # its section could not be built or started (at start or at the last reload)
    DISABLED = "disabled"  # its section says enabled: false


class PlatformHealth(msgspec.Struct, frozen=True, kw_only=True):
    """One entry point: its name, where it stands, banner lines (where it listens, or why it failed) and the last
    error it reported."""

    name: str
    state: PlatformStatus
    detail: list[str] = []
    last_error: str | None = None


@runtime_checkable
class ConnectionReporter(Protocol):
    """An adapter that can tell whether its connection to the platform is up (a websocket, a long poll)."""

    def connection_problem(self) -> str | None:
        """Why the platform cannot be reached now (the last error), or ``None`` while it is connected."""
        ...


class DiskSpace(msgspec.Struct, frozen=True, kw_only=True):
    """The file system holding the store: where, and how many bytes are free of how many."""

    path: str
    free_bytes: int
    total_bytes: int


class AgentInfo(msgspec.Struct, frozen=True, kw_only=True):
    """The agent turns go to: its kind (``echo``, ``openai``, ...) and the model it names, if any; whether it
    answers (``state``: ``ok``, ``degraded`` with ``last_error``, or ``unknown`` before anything was asked of it)
    since ``since`` (epoch seconds), when it was last probed, and whether its state fails readiness
    (``agent.probe.fail_readiness`` and degraded)."""

    kind: str
    model: str | None = None
    tool_servers: list[ToolServerHealth] = []  # its MCP servers (agent.mcp_servers): inform, never fail readiness
    state: str = "unknown"
    last_error: str | None = None
    since: float | None = None
    probed_at: float | None = None
    fails_readiness: bool = False


class ClusterView(msgspec.Struct, frozen=True, kw_only=True):
    """The whole cluster as a cluster replica reads it from its store (``/health/cluster``): what is wrong by the
    configured thresholds (``trouble``; empty: all is well) and the snapshot (hosts, replicas, shards no host holds,
    pending messages and where the stuck ones are, roles) as JSON, the body of ``hermesctl cluster status --json``."""

    trouble: list[str]
    status: msgspec.Raw

    @property
    def ok(self) -> bool:
        """Nothing is wrong."""
        return not self.trouble


class Readiness(msgspec.Struct, frozen=True, kw_only=True):
    """Whether the gateway can do its work: the store takes writes and every configured entry point is up.

    ``store`` is why the store cannot be written (``None``: it can); ``platforms`` lists every configured entry
    point (a disabled one does not count against readiness). ``disk`` and ``agent`` inform and never fail it (a
    full disk shows as an unwritable store), and so does ``cluster`` (a cluster replica's view of the whole
    cluster): trouble elsewhere in the cluster is no reason to stop sending this replica requests. A degraded
    agent fails it only when its operator asked for that (``agent.fails_readiness``).
    """

    store: str | None
    platforms: list[PlatformHealth] = []
    disk: DiskSpace | None = None
    agent: AgentInfo | None = None
    cluster: ClusterView | None = None

    @property
    def ready(self) -> bool:
        """No check failed."""
        return not self.reasons()

    def reasons(self) -> list[str]:
        """One line per failed check, naming it."""
        found = [f"store: {self.store}"] if self.store is not None else []
        for platform in self.platforms:
            if platform.state in (PlatformStatus.FAILED, PlatformStatus.DISCONNECTED):
                found.append(f"{platform.name}: {platform.state} ({platform.last_error or 'no error recorded'})")
        if self.agent is not None and self.agent.fails_readiness:
            found.append(f"agent: {self.agent.state} ({self.agent.last_error or 'no error recorded'})")
        return found


class Latency(msgspec.Struct, frozen=True, kw_only=True):
    """A latency histogram read for a person: how many, the mean, and the median and 95th percentile as estimated
    from its buckets (linear within a bucket, as Prometheus's ``histogram_quantile``)."""

    count: int
    mean_s: float
    p50_s: float
    p95_s: float


class Vitals(msgspec.Struct, frozen=True, kw_only=True):
    """The runtime's numbers since it started, read from the same series ``/metrics`` exposes.

    Ages are in seconds of the runtime's clock; ``outbox_oldest_age_s`` names only platforms with replies pending.
    """

    turns: dict[str, int]  # finished turns by outcome
    turn_latency: Latency | None
    agent_latency: Latency | None
    tokens_in: int
    tokens_out: int
    inbox_pending: int
    inbox_oldest_age_s: float | None
    outbox_pending: dict[str, int]  # by platform
    outbox_oldest_age_s: dict[str, float]
    deliveries_retried: int
    deliveries_given_up: int
    live_actors: int
    activations: int
    passivations: dict[str, int]  # by reason: idle, evicted, ended
    duplicates: int
    resets: dict[str, int]  # by end reason
    commits: int
    commit_latency: Latency | None
    inbox_by_platform: dict[str, int] = msgspec.field(default_factory=dict)  # pending inbound messages
    inbox_oldest_by_platform_s: dict[str, float] = msgspec.field(default_factory=dict)
    messages: dict[str, int] = msgspec.field(default_factory=dict)  # accepted messages by how they ended
    dead_letters: dict[str, int] = msgspec.field(default_factory=dict)  # waiting for a replay: message, delivery


class Exposition(msgspec.Struct, frozen=True, kw_only=True):
    """The runtime's metrics in Prometheus's text format, with the content type to serve them with."""

    content_type: str
    body: bytes
