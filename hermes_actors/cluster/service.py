"""What ``hermesd --cluster`` runs: it connects to Ray and makes sure every configured shard host exists.

It migrates the PostgreSQL store first (so hosts never race to do it), then calls
:func:`~hermes_actors.cluster.ray_host.ensure_hosts` at start and every ``check_s`` until stopped: a host Ray
gave up on, or one an operator killed, is created again. Ray restarts a crashed host by itself
(``max_restarts=-1``); this loop covers the rest. Several replicas may run it: creation is ``get_if_exists``.
"""

from __future__ import annotations

import logging
import threading

from hermes_actors.cluster.host_runtime import HostSettings
from hermes_actors.cluster.settings import ClusterSettings, require_cluster

__all__ = ["host_settings", "keep_hosts"]

_log = logging.getLogger(__name__)


def host_settings(cluster: ClusterSettings) -> list[HostSettings]:
    """The settings of every shard host of ``cluster``."""
    dsn = require_cluster(cluster)
    return [
        HostSettings(
            name=name,
            postgres_dsn=dsn,
            hosts=cluster.hosts,
            shards=cluster.shards,
            lease_ttl_s=cluster.lease_ttl_s,
            grace_s=cluster.grace_s,
            pull_interval_s=cluster.pull_interval_s,
        )
        for name in cluster.hosts
    ]


def keep_hosts(cluster: ClusterSettings, stop: threading.Event, *, check_s: float = 10.0) -> None:
    """Connect to Ray at ``cluster.ray_address`` and keep every shard host created until ``stop`` is set."""
    import ray

    from hermes_actors.cluster.ray_host import ensure_hosts
    from hermes_actors.store.pg import PostgresStore

    hosts = host_settings(cluster)
    PostgresStore.open(hosts[0].postgres_dsn, pool_size=1).close()  # migrate once, before any host opens it
    ray.init(address=cluster.ray_address, namespace=cluster.namespace, include_dashboard=False)
    try:
        while True:
            handles = ensure_hosts(hosts, namespace=cluster.namespace)
            _log.info("shard hosts running: %s", ", ".join(sorted(handles)))
            if stop.wait(check_s):
                return
    finally:
        ray.shutdown()
