"""A replica's health, cluster view and metrics (issue 37, item 2): with PostgreSQL down ``/health`` and
``/health/ready`` answer 503 naming it within two seconds and ``/metrics`` says ``hermes_store_up 0``; the cluster
view (``/health/cluster``, ``/health/detailed``'s ``cluster``) fails on a stuck message while readiness stays up;
the shard hosts' numbers reach ``/metrics`` through their heartbeats."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from hermes_actors.cluster.host.runtime import HostRuntime
from hermes_actors.cluster.host.settings import HostSettings
from hermes_actors.cluster.replica.inbox import ClusterInbox
from hermes_actors.cluster.replica.ingress import ClusterIngress
from hermes_actors.cluster.settings import ClusterHealth
from hermes_actors.media import MediaStore
from hermes_actors.store.pg import PostgresStore
from hermes_actors.testing import FakePlatform, poll_until
from platforms.api_server import ApiServer, ApiServerConfig
from tests.postgres import Cluster, find_bin_dir

pytestmark = pytest.mark.slow  # a shard host and an HTTP server on PostgreSQL for a few seconds

SHARDS = 4


def _get(url: str) -> tuple[int, bytes, float]:
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, response.read(), time.monotonic() - started
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), time.monotonic() - started


class Replica:
    """An API server over a :class:`ClusterInbox` (no Ray: the replica's entry point alone)."""

    def __init__(self, pg: PostgresStore, tmp: Path, health: ClusterHealth, hosts: tuple[str, ...]) -> None:
        self.ingress = ClusterIngress(pg, shards=SHARDS)
        self.inbox = ClusterInbox(self.ingress, MediaStore(tmp / "media"), health=health, hosts=hosts)
        self.server = ApiServer(ApiServerConfig(port=0))
        self.server.start(self.inbox)

    def get(self, path: str) -> tuple[int, bytes, float]:
        return _get(self.server.url + path)

    def stop(self) -> None:
        self.server.stop()
        self.inbox.close()


def test_the_cluster_view_fails_on_a_stuck_message_and_metrics_carry_the_hosts_numbers(
    postgres_dsn: str, tmp_path: Path
) -> None:
    settings = HostSettings(name="h0", postgres_dsn=postgres_dsn, hosts=("h0",), shards=SHARDS, lease_ttl_s=1.5)
    host = HostRuntime(settings)
    host.start()
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as pg:
        replica = Replica(pg, tmp_path, ClusterHealth(stuck_after_s=2.0), ("h0",))
        try:
            poll_until(lambda: len(host.fence.held()) == SHARDS, what="the host holding every shard")
            replica.ingress.accept(FakePlatform("fake").message("hello", message_id="m1"))
            host.poke()
            poll_until(lambda: host.stats().turns.get("ok") == 1, what="the turn answered")
            poll_until(
                lambda: b'hermes_cluster_host_turns_total{host="h0",outcome="ok"} 1.0' in replica.get("/metrics")[1],
                what="the host's turn reaching the replica's metrics with its heartbeat",
            )
            status, body, _ = replica.get("/metrics")
            assert status == 200
            assert b"hermes_store_up 1.0" in body
            assert b'hermes_cluster_host_up{host="h0"} 1.0' in body
            assert b'hermes_cluster_host_shards{host="h0"} 4.0' in body
            assert b'hermes_cluster_shards{state="unheld"} 0.0' in body
            status, body, _ = replica.get("/health/cluster")
            assert status == 200, body
            view = json.loads(body)
            assert view["status"] == "ok"
            assert [h["name"] for h in view["cluster"]["hosts"]] == ["h0"]
            assert view["cluster"]["hosts"][0]["stats"]["turns"] == {"ok": 1}

            host.stop()  # the host goes away, and a message arrives for it: it stays pending
            replica.ingress.accept(FakePlatform("fake").message("anyone?", message_id="m2"))
            time.sleep(2.5)  # past stuck_after_s: the cluster view's threshold
            status, body, _ = replica.get("/health/cluster")
            assert status == 503
            trouble = json.loads(body)["trouble"]
            assert trouble[0].startswith("1 messages pending for over 2 s")
            assert replica.get("/health/ready")[0] == 200  # this replica can still take requests
            status, body, _ = replica.get("/health/detailed")
            assert status == 200
            assert json.loads(body)["cluster"]["trouble"] == trouble
            assert b"hermes_cluster_messages_stuck 1.0" in replica.get("/metrics")[1]
        finally:
            replica.stop()
            host.stop()


def _pg_ctl(cluster: Cluster, *args: str) -> None:
    """``pg_ctl`` on ``cluster`` (``restart`` starts a stopped server with the options it first started with)."""
    bin_dir = find_bin_dir()
    assert bin_dir is not None
    command = [str(bin_dir / "pg_ctl"), "-D", str(cluster.data), "-w", "-l", str(cluster.directory / "server.log")]
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    subprocess.run([*command, *args], check=True, capture_output=True, timeout=60)


def test_with_postgresql_down_health_and_ready_answer_503_naming_it_within_two_seconds(
    own_postgres: Cluster, tmp_path: Path
) -> None:
    with PostgresStore.open(own_postgres.dsn("hermes"), migrate_schema=False) as pg:
        replica = Replica(pg, tmp_path, ClusterHealth(), ())
        try:
            assert replica.get("/health")[0] == 200
            _pg_ctl(own_postgres, "-m", "fast", "stop")
            time.sleep(1.1)  # the last verdict (kept a second) is over
            for path in ("/health", "/health/ready"):
                status, body, took = replica.get(path)
                assert status == 503, (path, body)
                assert took < 2.0, (path, took)
                answer = json.loads(body)
                reason = answer["reason"] if path == "/health" else answer["reasons"][0]
                assert reason.startswith("host=") or "PostgreSQL" in reason, reason
            status, body, took = replica.get("/health/cluster")
            assert (status, took < 2.0) == (503, True)
            assert json.loads(body)["trouble"][0].startswith("the cluster's store cannot be read: ")
            status, body, took = replica.get("/metrics")
            assert status == 200
            assert took < 2.0
            assert b"hermes_store_up 0.0" in body
            _pg_ctl(own_postgres, "restart")
            poll_until(lambda: replica.get("/health")[0] == 200, timeout=30, what="health back with PostgreSQL")
            assert b"hermes_store_up 1.0" in replica.get("/metrics")[1]
        finally:
            replica.stop()
