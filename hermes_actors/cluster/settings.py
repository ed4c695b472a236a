"""The ``cluster:`` section of ``config.yaml``: where the PostgreSQL store and the Ray cluster are, the shard count,
the shard hosts' names and the lease timing. Only ``hermesd --cluster`` and ``hermesctl cluster`` read it; this
module imports neither psycopg nor Ray."""

from __future__ import annotations

import re
import urllib.parse
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from hermes_actors.constraints import PositiveSeconds, Rule, check_section
from hermes_actors.errors import ConfigError

__all__ = ["ClusterHealth", "ClusterSettings", "Placement", "require_cluster"]

_HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_Shards = Annotated[int, Rule(Meta(ge=1, le=65536), "{value} is out of range; use 1..65536 (the default is 256)")]
_Hosts = Annotated[
    tuple[str, ...],
    Rule(
        Meta(min_length=1),
        "must name at least one shard host",
        example="a list of the shard hosts' names, not a count: hosts: [host-0, host-1, host-2]",
    ),
]
_LeaseTtl = Annotated[float, Rule(Meta(ge=1), "must be at least 1 second (a host renews every third of it)")]
_KEYWORD_PASSWORD = re.compile(r"(?:^|\s)password\s*=")

Placement = Literal["spread", "pack"]
"""Where Ray places the shard hosts: ``spread`` over the Ray cluster's nodes (Ray's ``SPREAD`` scheduling strategy),
or ``pack`` (Ray's default strategy, which keeps hosts that ask for no CPU on the node that creates them)."""


def _carries_password(dsn: str) -> bool:
    """Whether ``dsn`` (a URI or ``key=value`` words) holds a password: in the URI's user part or its query, or as
    a ``password=`` word."""
    if dsn.startswith(("postgresql://", "postgres://")):
        parts = urllib.parse.urlsplit(dsn)
        return parts.password is not None or "password" in urllib.parse.parse_qs(parts.query)
    return _KEYWORD_PASSWORD.search(dsn) is not None


class ClusterHealth(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``cluster.health``: when the cluster is in trouble (``/health/cluster`` answers 503, ``hermesctl cluster
    status`` exits 1): a message pending longer than ``stuck_after_s``, a shard no host has held for
    ``unheld_after_s``, a host silent (no heartbeat) for ``host_silent_after_s``."""

    stuck_after_s: PositiveSeconds = 120.0
    unheld_after_s: PositiveSeconds = 30.0
    host_silent_after_s: PositiveSeconds = 30.0

    def __post_init__(self) -> None:
        check_section(self, "cluster.health")


class ClusterSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``postgres_dsn``: the store of every replica and host; ``ray_address``: the Ray cluster (``auto``: the one
    this machine belongs to); ``shards``: the fixed number of virtual shards (never change it on a running
    cluster: every session would move); ``hosts``: the shard hosts' names; ``placement``: where Ray puts them
    (:data:`Placement`); ``lease_ttl_s``: a shard term; ``grace_s``: how long a free shard waits for its home host
    before another host takes it; ``health``: what counts as trouble (:class:`ClusterHealth`).

    ``postgres_dsn`` holds no password: every shard host is created with it through Ray, which keeps a host's
    arguments in clear; the password comes from each machine's environment (``PGPASSWORD`` or a passfile, read by
    libpq in hermesd and in the Ray workers that ``ray start`` spawns)."""

    postgres_dsn: str | None = None
    ray_address: str = "auto"
    node_ip_address: str | None = None
    namespace: str = "hermes"
    shards: _Shards = 256
    hosts: _Hosts = ("host-0", "host-1", "host-2")
    placement: Placement = "spread"
    lease_ttl_s: _LeaseTtl = 10.0
    grace_s: float = 5.0
    pull_interval_s: PositiveSeconds = 2.0
    health: ClusterHealth = msgspec.field(default_factory=ClusterHealth)

    def __post_init__(self) -> None:
        check_section(self, "cluster")
        for name in self.hosts:
            if not _HOST_NAME.match(name):
                raise ConfigError(
                    "cluster.hosts", f"{name!r} is not a host name; use letters, digits, '.', '_' and '-'"
                )
        if len(set(self.hosts)) != len(self.hosts):
            raise ConfigError("cluster.hosts", "names a host twice; each name is one Ray actor")
        if self.postgres_dsn is not None and _carries_password(self.postgres_dsn):
            raise ConfigError(
                "cluster.postgres_dsn",
                "holds a password, which Ray would keep in clear with every shard host's arguments; remove it and "
                "give it to hermesd and to 'ray start' on every machine as PGPASSWORD (or in a ~/.pgpass file)",
            )
        if not 0.0 <= self.grace_s <= 10 * self.lease_ttl_s:
            raise ConfigError("cluster.grace_s", "must be between 0 and ten times cluster.lease_ttl_s")


def require_cluster(settings: ClusterSettings) -> str:
    """The PostgreSQL DSN of a cluster-mode command; :class:`ConfigError` when it is not configured."""
    if not settings.postgres_dsn:
        raise ConfigError(
            "cluster.postgres_dsn",
            "is required in cluster mode; set it to the PostgreSQL store, e.g. postgresql://hermes@db.internal/hermes",
        )
    return settings.postgres_dsn
