"""The README's two-machine recipe ("Running a cluster") as the test runs it: Ray's head and worker flags with fixed
ports, the ports a firewall opens, PostgreSQL's ``pg_hba.conf`` and roles, and a callback receiver.

Machine A holds PostgreSQL, the Ray head and a replica; machine B a Ray worker node and a replica. The test's
"machines" are network namespaces (``tests/cluster/netns.py``), so the fixed ports never meet another test's.
"""

from __future__ import annotations

import json
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
    "head_command",
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
