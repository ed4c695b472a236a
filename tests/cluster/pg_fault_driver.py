"""The Ray side of the PostgreSQL fault test, run as ``python -m tests.cluster.pg_fault_driver DSN PGDATA PGBIN``
inside a network namespace of its own (``tests/cluster/raylab.py``; PostgreSQL is reached on its Unix socket).

Two shard hosts on a local Ray take a bounded load through the ingress while PostgreSQL is restarted
(``pg_ctl restart -m fast``: every connection is cut, the server is away for a moment), then connections are
killed (``pg_terminate_backend``) seven times in the middle of a write transaction (caught between two of its
statements, after it wrote), and once all of them. A sender whose message was not
accepted (the store was away) sends it again, as a platform does; what was accepted is then waited for. It prints
one JSON line: the messages accepted, the pending rows left after the wait, the events with their times, and the
hosts' turn outcomes.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ["RAY_AUTH_MODE"] = "disabled"  # nothing outside this network namespace can reach it; no token in $HOME

import psycopg
import ray

from hermes_actors.cluster.host.ray_host import ensure_hosts
from hermes_actors.cluster.host.settings import HostSettings
from hermes_actors.cluster.replica.ingress import ClusterIngress
from hermes_actors.store.pg import PostgresStore
from hermes_actors.testing import FakePlatform, SeeingAgent
from tests.cluster.ray_driver import _start_ray, _wait

HOSTS = ("p0", "p1")
SHARDS = 32


class RetriedLoad:
    """``rate`` messages a second over ``chats`` conversations (and a new one for every tenth) for ``seconds``, in
    bursts of ``burst`` (so that turns end together and their commits share a transaction); a message the ingress
    could not commit is sent again (after 0.2 s) until it is, as a platform redelivers an unacknowledged webhook."""

    def __init__(self, ingress: ClusterIngress, *, rate: float, seconds: float, chats: int, burst: int = 10) -> None:
        self._ingress = ingress
        self._rate, self._seconds, self._chats, self._burst = rate, seconds, chats, burst
        self.accepted = 0
        self.refusals = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self._thread.join(self._seconds + 60)

    def _run(self) -> None:
        platform = FakePlatform("fake")
        started = time.monotonic()
        for n in range(int(self._rate * self._seconds)):
            time.sleep(max(0.0, started + (n - n % self._burst) / self._rate - time.monotonic()))
            # Every tenth message opens a conversation of its own: sessions are created all along the faults.
            chat = f"new-{n}" if n % 10 == 9 else str(n % self._chats)
            message = platform.message(f"k{chat}-{n}", chat_id=f"chat-{chat}", user_id=f"u{chat}", message_id=f"m{n}")
            while True:
                try:
                    self._ingress.accept(message)
                    break
                except Exception:
                    self.refusals += 1
                    time.sleep(0.2)
            self.accepted += 1


def _restart(pgdata: str, pgbin: str) -> None:
    """``pg_ctl restart -m fast`` (as the ``postgres`` user when run as root, as tests/postgres.py starts it)."""
    command = [str(Path(pgbin) / "pg_ctl"), "-D", pgdata, "-m", "fast", "-w", "-l", f"{pgdata}/../server.log"]
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    subprocess.run([*command, "restart"], check=True, capture_output=True, timeout=60)


def _terminate(dsn: str) -> int:
    """Kill every other connection to the database (``pg_terminate_backend``); how many were killed."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    return int(row[0]) if row else 0


def _kill_writing(dsn: str, *, within_s: float = 3.0) -> str:
    """Kill one connection caught inside a transaction right after one of its writes was done (its last statement
    released a savepoint: a group commit on its way, with more writes or its ``COMMIT`` to come); what was killed."""
    deadline = time.monotonic() + within_s
    with psycopg.connect(dsn, autocommit=True) as connection:
        while time.monotonic() < deadline:
            row = connection.execute(
                "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND state = 'idle in transaction' AND query LIKE 'RELEASE%%' LIMIT 1"
            ).fetchone()
            if row is not None:
                return f"killed pid {row[0]} inside a write transaction"
            time.sleep(0.002)
    return "found no write transaction to kill"


def _pending(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as connection:
        row = connection.execute("SELECT count(*) FROM inbox WHERE state = 'pending'").fetchone()
    return int(row[0]) if row else -1


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Two hosts under load; a PostgreSQL restart, killed connections; the wait for the rest."""
    factory = functools.partial(SeeingAgent, 0.02, 0.15, stamped=True)
    settings = [
        HostSettings(
            name=name,
            postgres_dsn=args.dsn,
            hosts=HOSTS,
            shards=SHARDS,
            lease_ttl_s=6.0,
            grace_s=2.0,
            pull_interval_s=1.0,
            pending_soft_limit=64,  # above a chat's 25 messages: no rapid-fire merge, one turn a message (checks)
            pending_hard_limit=256,
        )
        for name in HOSTS
    ]
    handles = ensure_hosts(settings, agent_factory=factory)
    events: list[str] = []
    with PostgresStore.open(args.dsn, migrate_schema=False) as pg:
        _wait(lambda: all(ray.get(h.status.remote()).shards for h in handles.values()), 30, "every host holding shards")
        ingress = ClusterIngress(pg, shards=SHARDS)
        load = RetriedLoad(ingress, rate=args.rate, seconds=args.seconds, chats=args.chats)
        started = time.monotonic()
        load.start()

        def at(fraction: float) -> None:
            time.sleep(max(0.0, started + args.seconds * fraction - time.monotonic()))

        def event(text: str) -> None:
            events.append(f"{time.monotonic() - started:.1f}s {text}")

        at(0.2)
        event("pg_ctl restart -m fast")
        _restart(args.pgdata, args.pgbin)
        event("PostgreSQL is back")
        for fraction in (0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65):
            at(fraction)
            event(_kill_writing(args.dsn))
        at(0.75)
        event(f"pg_terminate_backend of all {_terminate(args.dsn)} connections")
        load.join()
        event(f"load done: {load.accepted} accepted, {load.refusals} refusals retried")
        deadline = time.monotonic() + args.drain_s
        while (pending := _pending(args.dsn)) and time.monotonic() < deadline:
            time.sleep(0.25)
        event(f"{pending} rows still pending")
        statuses = {name: ray.get(h.status.remote(), timeout=30) for name, h in handles.items()}
    return {
        "accepted": load.accepted,
        "pending": pending,
        "events": events,
        "outcomes": {name: status.outcomes for name, status in statuses.items()},
        "dispatched": {name: status.dispatched for name, status in statuses.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dsn")
    parser.add_argument("pgdata")
    parser.add_argument("pgbin")
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--chats", type=int, default=40)
    parser.add_argument("--drain-s", type=float, default=30.0)
    args = parser.parse_args()
    _start_ray(tempfile.mkdtemp(prefix="hermes-ray-"))
    try:
        result = run(args)
    finally:
        ray.shutdown()
    print(json.dumps(result), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
