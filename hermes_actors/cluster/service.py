"""What ``hermesd --cluster`` runs: the push adapters committing into PostgreSQL, the outbox dispatcher of their
platforms, and the shard hosts kept created on Ray.

It migrates the PostgreSQL store first (so hosts never race to do it), starts the enabled push adapters
(:data:`PUSH_PLATFORMS`) on a :class:`~hermes_actors.cluster.inbox.ClusterInbox`, dispatches their replies, and
calls :func:`~hermes_actors.cluster.ray_host.ensure_hosts` at start and every ``check_s`` until stopped: a host
Ray gave up on, or one an operator killed, is created again (Ray restarts a crashed host by itself,
``max_restarts=-1``). Several replicas may run it: creation is ``get_if_exists``, inbox rows are unique per
message, and dispatchers claim rows with ``SKIP LOCKED``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

import msgspec

from hermes_actors.agents.base import Agent
from hermes_actors.cluster.api_replies import ApiReplies
from hermes_actors.cluster.dispatch import OutboxDispatcher
from hermes_actors.cluster.host_runtime import HostSettings
from hermes_actors.cluster.inbox import ClusterInbox
from hermes_actors.cluster.ingress import ClusterIngress
from hermes_actors.cluster.settings import ClusterSettings, require_cluster
from hermes_actors.media import MediaStore
from hermes_actors.ports import Adapter
from hermes_actors.routing import KeyPolicy
from hermes_actors.runtime.platform_board import PlatformBoard
from hermes_actors.waiters import ReplyWaiters

__all__ = ["PUSH_PLATFORMS", "REQUEST_PLATFORMS", "host_settings", "serve_cluster"]

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


PUSH_PLATFORMS = frozenset({"webhook"})
"""The entry points ``hermesd --cluster`` runs (push adapters whose inbox needs no more than a commit)."""

REQUEST_PLATFORMS = frozenset({"api_server"})
"""The entry points whose clients wait for their replies (the API): every replica runs them, and each reply goes to
the replica whose request waits for it (:class:`~hermes_actors.cluster.api_replies.ApiReplies`), not to a
dispatcher."""


def serve_cluster(
    cluster: ClusterSettings,
    stop: threading.Event,
    *,
    platforms: Mapping[str, msgspec.Struct],
    media_dir: Path,
    key_policy: KeyPolicy | None = None,
    admin_key: str | None = None,
    agent_factory: Callable[[], Agent] | None = None,
    check_s: float = 10.0,
    connected: Callable[[], object] = lambda: None,
) -> None:
    """Until ``stop`` is set: keep every shard host created on Ray at ``cluster.ray_address``, run the enabled push
    adapters of ``platforms`` committing into the PostgreSQL inbox, and dispatch the replies of their platforms.
    ``connected`` runs once Ray is connected (``ray.init`` installs signal handlers of its own: a caller installs
    its SIGTERM handler again there)."""
    import ray

    from hermes_actors.cluster.ray_host import HolderPoker, ensure_hosts
    from hermes_actors.store.pg import PostgresStore
    from platforms import registry

    hosts = host_settings(cluster)
    store = PostgresStore.open(hosts[0].postgres_dsn)  # migrates once, before any host opens it
    adapters: list[Adapter] = []
    ray.init(address=cluster.ray_address, namespace=cluster.namespace, include_dashboard=False)
    connected()
    try:
        ingress = ClusterIngress(
            store, shards=cluster.shards, key_policy=key_policy, poke=HolderPoker(store, namespace=cluster.namespace)
        )
        board = PlatformBoard()
        inbox = ClusterInbox(
            ingress,
            MediaStore(media_dir),
            key_policy=key_policy,
            board=board,
        )
        replies: list[ApiReplies] = []
        for name, config in platforms.items():
            if not registry.enabled(config):
                board.disabled(name)
                continue
            if name not in PUSH_PLATFORMS | REQUEST_PLATFORMS:
                _log.warning("platform %s is not run in cluster mode yet (only %s)", name, ", ".join(PUSH_PLATFORMS))
                continue
            adapter = registry.build(name, config, os.environ)
            if name in REQUEST_PLATFORMS:
                for waiters in adapter.senders():
                    assert isinstance(waiters, ReplyWaiters), f"{name} answers its own requests"
                    replies.append(ApiReplies(hosts[0].postgres_dsn, store, waiters, inbox.watch))
            adapter.start(inbox)
            board.started(name, adapter)
            adapters.append(adapter)
        for waiting in replies:
            waiting.start()
        senders = {
            sender.platform: sender
            for adapter in adapters
            for sender in adapter.senders()
            if sender.platform not in REQUEST_PLATFORMS
        }
        dispatcher = OutboxDispatcher(store, senders, name=f"{socket.gethostname()}:{os.getpid()}")
        dispatcher.start()
        try:
            while True:
                handles = ensure_hosts(hosts, agent_factory=agent_factory, namespace=cluster.namespace)
                _log.info("shard hosts running: %s", ", ".join(sorted(handles)))
                if stop.wait(check_s):
                    return
        finally:
            for adapter in adapters:
                adapter.stop()
            for waiting in replies:
                waiting.close()
            dispatcher.stop()
            inbox.close()
    finally:
        ray.shutdown()
        store.close()
