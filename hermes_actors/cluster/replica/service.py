"""What ``hermesd --cluster`` runs: the platforms' entry points committing into PostgreSQL, the outbox dispatcher,
and the shard hosts kept created on Ray.

It migrates the PostgreSQL store first (so hosts never race to do it), runs the replica's entry points
(:class:`~hermes_actors.cluster.replica.entry_points.ClusterReplica`: the push adapters on every replica, each
long-poll or socket adapter on the one replica holding its role lease, the replies of each platform sent by the one
replica holding ``send:<platform>``) on a :class:`~hermes_actors.cluster.replica.inbox.ClusterInbox`, and calls
:func:`~hermes_actors.cluster.host.ray_host.ensure_hosts` at start and every ``check_s`` until stopped: a host Ray
gave up on, or one an operator killed, is created again (Ray restarts a crashed host by itself, ``max_restarts=-1``).
Several replicas may run it: creation is ``get_if_exists``, inbox rows are unique per message, and the role leases
keep each singleton in one replica.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from hermes_actors.agents.base import Agent
from hermes_actors.cluster.host.settings import HostSettings
from hermes_actors.cluster.replica.entry_points import ClusterReplica, replica_name
from hermes_actors.cluster.replica.fingerprint import cluster_config
from hermes_actors.cluster.replica.inbox import ClusterInbox
from hermes_actors.cluster.replica.ingress import ClusterIngress
from hermes_actors.cluster.replica.operator_access import ClusterSessionAdmin, cluster_operator
from hermes_actors.cluster.settings import ClusterSettings, require_cluster
from hermes_actors.config import BusyConfig, EventsConfig, HttpLimits
from hermes_actors.cpu_affinity import placement
from hermes_actors.errors import HermesError
from hermes_actors.lifecycle.schedule import JobsConfig
from hermes_actors.media import MediaStore
from hermes_actors.routing import KeyPolicy
from hermes_actors.runtime.agent_roster import DEFAULT_AGENT, AgentRoster
from hermes_actors.runtime.dead_letters import give_up
from hermes_actors.runtime.events import Events
from hermes_actors.runtime.platform_board import PlatformBoard

__all__ = ["connect_ray", "host_settings", "reach_ray", "serve_cluster"]

_log = logging.getLogger(__name__)


def host_settings(
    cluster: ClusterSettings,
    events: EventsConfig | None = None,
    busy: BusyConfig | None = None,
    jobs: JobsConfig | None = None,
    cpu_affinity: str | tuple[int, ...] = "all",
) -> list[HostSettings]:
    """The settings of every shard host of ``cluster`` (emitting events for ``events``' webhooks, treating a
    message to a busy session by ``busy``, firing the scheduled turns as ``jobs`` says, on the CPUs
    ``cpu_affinity`` says: ``daemon.cpu_affinity``)."""
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
            events=events or EventsConfig(),
            busy=busy or BusyConfig(),
            jobs=jobs or JobsConfig(),
            cpu_affinity=cpu_affinity,
        )
        for name in cluster.hosts
    ]


def _unreachable(address: str, cause: BaseException) -> HermesError:
    detail = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
    return HermesError(
        f"cannot reach the Ray cluster at cluster.ray_address {address!r} ({detail}); start its head with "
        "'ray start --head --port=6379' (this machine joins one with 'ray start --address=HEAD:6379'), or set "
        "cluster.ray_address to the head's host:port"
    )


def reach_ray(address: str, *, timeout_s: float = 5.0) -> None:
    """Fail at once, naming ``cluster.ray_address``, when ``address`` (``host:port``) takes no connection: Ray itself
    would retry for minutes. ``auto`` and other forms are left to Ray (which fails fast for them)."""
    target = _host_port(address)
    if target is None:
        return
    try:
        socket.create_connection(target, timeout=timeout_s).close()
    except OSError as exc:
        raise _unreachable(address, exc) from exc


def _host_port(address: str) -> tuple[str, int] | None:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "/" in host:
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def connect_ray(cluster: ClusterSettings) -> None:
    """Connect this process to the Ray cluster at ``cluster.ray_address`` as a driver in ``cluster.namespace`` (Ray's
    own lines go through this process's logging, in its format); :class:`HermesError` naming the setting and the
    fix when it cannot. With token authentication on, Ray reads ``RAY_AUTH_MODE`` and the token from the
    environment."""
    try:
        import ray
    except ImportError as exc:
        raise HermesError(
            f"cluster mode needs Ray, which is not installed ({exc}); install it with: "
            "pip install 'hermes-actors[cluster]'"
        ) from exc

    reach_ray(cluster.ray_address)
    located: dict[str, Any] = {"_node_ip_address": cluster.node_ip_address} if cluster.node_ip_address else {}
    try:
        ray.init(
            address=cluster.ray_address,
            namespace=cluster.namespace,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            **located,
        )
    except (ConnectionError, RuntimeError, ValueError) as exc:
        if _host_port(cluster.ray_address) is None:
            raise _unreachable(cluster.ray_address, exc) from exc
        raise _refused(cluster.ray_address, exc, ray.__version__) from exc  # its port took reach_ray's connection


def _refused(address: str, cause: BaseException, version: str) -> HermesError:
    detail = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
    return HermesError(
        f"the Ray cluster at cluster.ray_address {address!r} takes connections but this process could not join it "
        f"({detail}); if its nodes run with token authentication (RAY_AUTH_MODE=token), give this process the same "
        f"RAY_AUTH_MODE and RAY_AUTH_TOKEN; every node and replica needs Ray {version}, as here"
    )


def serve_cluster(
    cluster: ClusterSettings,
    stop: threading.Event,
    *,
    platforms: Mapping[str, msgspec.Struct],
    media_dir: Path,
    key_policy: KeyPolicy | None = None,
    admin_key: str | None = None,
    agent_factory: Callable[[], Agent | AgentRoster] | None = None,
    agent_names: Sequence[str] = (DEFAULT_AGENT,),
    check_s: float = 10.0,
    connected: Callable[[], object] = lambda: None,
    http_limits: HttpLimits | None = None,
    host_logging: Callable[[], None] | None = None,
    events: EventsConfig | None = None,
    busy: BusyConfig | None = None,
    jobs: JobsConfig | None = None,
    host_cpu_affinity: str | tuple[int, ...] = "all",
) -> None:
    """Until ``stop`` is set: keep every shard host created on Ray at ``cluster.ray_address`` and run this replica's
    entry points for ``platforms`` (:class:`ClusterReplica`), the shard hosts running ``agent_factory``'s agent or
    roster of named agents (the echo agent without one; ``agent_names`` are the names a request may ask for) and the
    operator's routes opened by ``admin_key``. ``connected`` runs once Ray is connected (``ray.init`` installs
    signal handlers of its own: a caller installs its SIGTERM handler again there). The adapters' own listeners hold
    their clients to ``http_limits`` (``daemon.http_*``). The hosts log as ``host_logging`` sets up (``hermesd``'s
    level and format) into their Ray workers' stderr, which Ray keeps in its session directory and does not forward
    here (it would add its prefixes and colours to this replica's log). ``events`` are the webhooks the hosts emit
    events for; the replica holding ``send:events`` delivers them; ``busy`` is what they do with a message that
    reaches a busy session; ``jobs`` is the scheduled turns' section; ``host_cpu_affinity`` the CPUs each host's
    worker process keeps (``daemon.cpu_affinity``)."""
    import ray

    from hermes_actors.cluster.host.ray_host import ensure_hosts
    from hermes_actors.store.pg import PostgresStore
    from platforms import registry

    hosts = host_settings(cluster, events, busy, jobs, cpu_affinity=host_cpu_affinity)
    reach_ray(cluster.ray_address)
    store = PostgresStore.open(hosts[0].postgres_dsn)  # migrates once, before any host opens it
    try:
        connect_ray(cluster)
    except HermesError:
        store.close()
        raise
    connected()
    if (placed := placement()) is not None:
        _log.info("%s", placed)
    try:
        ingress = ClusterIngress(store, shards=cluster.shards, key_policy=key_policy)
        board = PlatformBoard()
        operator = None
        if admin_key is not None:
            operator = cluster_operator(store, admin_key, ClusterSessionAdmin(store))
        inbox = ClusterInbox(
            ingress,
            MediaStore(media_dir),
            key_policy=key_policy,
            board=board,
            operator=operator,
            health=cluster.health,
            hosts=cluster.hosts,
            agent_names=agent_names,
            jobs=jobs,
            events=events,
        )
        replica = ClusterReplica(
            store,
            inbox,
            platforms,
            build=lambda name, config: registry.build(name, config, os.environ, http_limits=http_limits),
            name=replica_name(socket.gethostname()),
            role_ttl_s=cluster.lease_ttl_s,
            enabled=registry.enabled,
            parts=registry.cluster_parts,
            placement=registry.placement,
            board=board,
            shared_config=cluster_config(cluster, platforms, admin_key=admin_key),
            give_up=functools.partial(give_up, Events(events)),
        )
        sender = registry.event_sender(
            events or EventsConfig(), queued_at=store.deliveries.queued_at, environ=os.environ
        )
        replica.dispatcher.offer(sender.platform, sender)
        try:
            replica.start()
            while True:
                handles = ensure_hosts(
                    hosts,
                    agent_factory=agent_factory,
                    namespace=cluster.namespace,
                    log_setup=host_logging,
                    placement=cluster.placement,
                )
                _log.info("shard hosts running: %s", ", ".join(sorted(handles)))
                if stop.wait(check_s):
                    return
        finally:
            replica.stop()
            inbox.close()
    finally:
        ray.shutdown()
        store.close()
