"""The README's two-machine recipe ("Running a cluster") as the test runs it: Ray's head and worker flags with fixed
ports, the ports a firewall opens, PostgreSQL's ``pg_hba.conf`` and roles, the secrets every machine shares (in the
environment) and the replicas' configuration; and what the test looks with: a callback receiver, the listening
sockets, a probe of Ray's token authentication.

Machine A holds PostgreSQL, the Ray head and a replica; machine B a Ray worker node and a replica. The test's
"machines" are network namespaces (``tests/cluster/netns.py``), so the fixed ports never meet another test's.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import sys
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = [
    "API_PORT",
    "OPEN_PORTS",
    "PG_HBA",
    "PG_PORT",
    "RAY_PORT",
    "WEBHOOK_PORT",
    "Postgres",
    "Receiver",
    "Secrets",
    "clean_env",
    "head_command",
    "listeners",
    "outside_recipe",
    "replica_config",
    "token_probe",
    "worker_command",
]

RAY_PORT = 6379  # the head's GCS: every node and every replica connects to it
_NODE_PORTS = {  # every node (head and workers): raylet, object manager, agents, metrics
    "--node-manager-port": 6380,
    "--object-manager-port": 6381,
    "--runtime-env-agent-port": 6382,
    "--dashboard-agent-grpc-port": 6383,
    "--dashboard-agent-listen-port": 6384,
    "--metrics-export-port": 6385,
}
_WORKER_PORTS = (10002, 10999)  # each Ray worker process (a shard host is one) takes one
_AUTOSCALER_METRICS = 44217  # the head's autoscaler metrics (Ray's fixed default): for Prometheus only
API_PORT, WEBHOOK_PORT, PG_PORT = 8642, 8644, 5432
OPEN_PORTS = frozenset(
    {PG_PORT, RAY_PORT, *_NODE_PORTS.values(), *range(_WORKER_PORTS[0], _WORKER_PORTS[1] + 1)}
    | {API_PORT, WEBHOOK_PORT, _AUTOSCALER_METRICS}
)
"""Every port the recipe's processes listen on outside loopback: what the machines' firewall lets in from the
cluster's private network (the API and webhook ports from the load balancer, 44217 from Prometheus alone)."""

PG_HBA = """\
# TYPE  DATABASE  USER      ADDRESS        METHOD
local   all       postgres                 peer
host    hermes    hermes    {network}   scram-sha-256
"""
"""``pg_hba.conf``: the superuser on the local socket only, the ``hermes`` role from the cluster's network with a
password (SCRAM), nothing else."""


def _node_flags(address: str) -> list[str]:
    return [
        f"--node-ip-address={address}",
        *(f"{flag}={port}" for flag, port in _NODE_PORTS.items()),
        f"--min-worker-port={_WORKER_PORTS[0]}",
        f"--max-worker-port={_WORKER_PORTS[1]}",
        "--disable-usage-stats",
        "--include-log-monitor=false",  # the hosts' logs stay in their worker files: nothing polls them for drivers
    ]


def _ray() -> str:
    return str(Path(sys.executable).with_name("ray"))


def head_command(address: str) -> list[str]:
    """``ray start`` of the head on machine A (no dashboard: ``hermesctl cluster status`` is the operator's view)."""
    return [_ray(), "start", "--head", f"--port={RAY_PORT}", "--include-dashboard=false", *_node_flags(address)]


def worker_command(head: str, address: str) -> list[str]:
    """``ray start`` of a worker node joining the head at ``head``."""
    return [_ray(), "start", f"--address={head}:{RAY_PORT}", *_node_flags(address)]


class Postgres:
    """A PostgreSQL server in ``directory`` listening on ``address`` (and a socket in ``directory``), set up as the
    recipe says: ``PG_HBA``, a ``hermes`` role with ``password`` owning the ``hermes`` database. As root it runs as
    the ``postgres`` system user."""

    def __init__(self, bin_dir: Path, directory: Path, address: str, network: str) -> None:
        self._bin, self.directory, self.data = bin_dir, directory, directory / "data"
        self._address, self._network = address, network

    def _run(self, program: str, *args: str, stdin: str | None = None) -> None:
        command = ["runuser", "-u", "postgres", "--", str(self._bin / program), *args]
        done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{program} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")

    def start(self, password: str) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "peer", "-E", "UTF8", "--locale=C", "-N")
        (self.data / "pg_hba.conf").write_text(PG_HBA.format(network=self._network))
        settings = {
            "listen_addresses": f"'{self._address}'",
            "port": str(PG_PORT),
            "unix_socket_directories": f"'{self.directory}'",
            "password_encryption": "scram-sha-256",
            "fsync": "off",  # a throw-away server
            "max_connections": "100",
        }
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.directory / "server.log"), "-w", "start")
        script = (
            f"CREATE ROLE hermes LOGIN PASSWORD '{password}';\n"  # psql reads it from stdin: not in ps
            "CREATE DATABASE hermes OWNER hermes;\n"
        )
        self._run("psql", "-h", str(self.directory), "-p", str(PG_PORT), "-v", "ON_ERROR_STOP=1", "-q", stdin=script)

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")


class Receiver:
    """An HTTP server on ``address:port`` recording each POSTed JSON body (the webhook route's callbacks)."""

    def __init__(self, address: str, port: int) -> None:
        self.bodies: list[dict[str, Any]] = []
        self._changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                with receiver._changed:
                    receiver.bodies.append(json.loads(body))
                    receiver._changed.notify_all()
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((address, port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> Receiver:
        self._thread.start()
        return self

    def wait_for(self, replies: Mapping[str, str], timeout: float) -> dict[str, str]:
        """Wait until a callback answered each webhook id of ``replies``; the texts answered, by id."""
        with self._changed:
            self._changed.wait_for(lambda: set(replies) <= self._answered().keys(), timeout=timeout)
            return {key: text for key, text in self._answered().items() if key in replies}

    def _answered(self) -> dict[str, str]:
        return {str(body.get("in_reply_to")): str(body.get("text")) for body in self.bodies}

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class Secrets:
    """What every machine shares, each in its environment variable (never in a config file or a DSN)."""

    def __init__(self) -> None:
        self.ray_token = secrets.token_hex(32)
        self.pg_password = secrets.token_urlsafe(24)
        self.admin_key = "hk-admin-" + secrets.token_urlsafe(24)
        self.api_key = "sk-" + secrets.token_urlsafe(24)
        self.webhook_secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()

    def ray_env(self) -> dict[str, str]:
        """For ``ray start`` on every machine: the token, and PostgreSQL's password for the Ray workers (the shard
        hosts) it spawns."""
        return {
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": self.ray_token,
            "PGPASSWORD": self.pg_password,
            "RAY_USAGE_STATS_ENABLED": "0",
        }

    def replica_env(self) -> dict[str, str]:
        """For ``hermesd --cluster`` and ``hermesctl`` on every machine: Ray's and PostgreSQL's, and the secrets the
        replicas share (the operator's admin key, the API's key, the webhook route's secret)."""
        return self.ray_env() | {
            "HERMES_ADMIN_KEY": self.admin_key,
            "HERMES_API_KEY": self.api_key,
            "HERMES_WEBHOOK_SECRET": self.webhook_secret,
        }


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment without Ray's, libpq's and hermes' variables, with ``extra``."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "PG", "HERMES_"))}
    return kept | extra


def replica_config(head: str, address: str, hosts: tuple[str, ...], shards: int, callback: str) -> dict[str, Any]:
    """A replica's config.yaml (``head``: machine A's address, ``address``: the replica's own): the same on every
    machine but for ``node_ip_address``; its secrets come from the environment (:class:`Secrets`)."""
    route = {"secret_env": "HERMES_WEBHOOK_SECRET", "callback_url": callback}
    return {
        "daemon": {"log_format": "logfmt"},
        "cluster": {
            "postgres_dsn": f"postgresql://hermes@{head}:{PG_PORT}/hermes",
            "ray_address": f"{head}:{RAY_PORT}",
            "node_ip_address": address,
            "shards": shards,
            "hosts": list(hosts),
            "placement": "spread",
            "lease_ttl_s": 3,
            "grace_s": 1,
        },
        "platforms": {
            "api_server": {"host": "0.0.0.0", "port": API_PORT},
            "webhook": {"host": "0.0.0.0", "port": WEBHOOK_PORT, "routes": {"default": route}},
        },
    }


def listeners(namespace: str | None) -> list[str]:
    """Every listening TCP socket of a machine: ``address:port process``."""
    command = ["ss", "-ltnpH"] if namespace is None else ["ip", "netns", "exec", namespace, "ss", "-ltnpH"]
    lines = subprocess.run(command, capture_output=True, text=True, check=True).stdout.splitlines()
    return [f"{line.split()[3]} {line.split()[-1]}" for line in lines if line.strip()]


def outside_recipe(listeners: list[str], *, also: frozenset[int] = frozenset()) -> list[str]:
    """Listeners on a non-loopback address whose port neither the recipe opens nor ``also`` has."""
    strange = []
    for listener in listeners:
        address, _, port = listener.split()[0].rpartition(":")
        loopback = address.strip("[]") in ("127.0.0.1", "::1", "::ffff:127.0.0.1")
        if not loopback and int(port) not in OPEN_PORTS | also:
            strange.append(listener)
    return strange


_PROBE = """
from ray._raylet import GcsClient
try:
    GcsClient(address="{address}").internal_kv_get(b"hermes-probe", None, timeout=10)
except Exception as exc:
    print(type(exc).__name__)
else:
    print("OK")
"""


def token_probe(head: str, mode: str, token: str) -> str:
    """A call to the GCS of the head at ``head`` from a process with ``RAY_AUTH_MODE=mode`` and ``token``: ``OK``
    or the error's class name."""
    env = clean_env({"RAY_AUTH_MODE": mode, "RAY_AUTH_TOKEN": token, "RAY_gcs_rpc_server_reconnect_timeout_s": "5"})
    done = subprocess.run(
        [sys.executable, "-c", _PROBE.format(address=f"{head}:{RAY_PORT}")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else f"exit {done.returncode}"
