"""The two sides ``bench/cluster_cost.py`` measures, started and stopped as an operator would (README): one
``hermesd`` on SQLite, and a cluster of a throw-away PostgreSQL (``tests/postgres.py``), a Ray head (``ray start
--head --block``, no dashboard, no usage stats) and ``hermesd --cluster`` replicas, whose shard hosts Ray runs.

Both serve the echo agent, the OpenAI-compatible API (no cap on requests at once: a slow side queues them rather
than refusing with 429) and one signed webhook route calling back ``callback``, on fixed loopback ports (the bench
runs in a network namespace of its own). Each process's output goes to a log file in ``workdir``, which is also its
working directory; a failure to start names that file. ``code`` is the checkout whose package runs
(``HERMES_BENCH_CODE``), put first on every process's ``PYTHONPATH`` (Ray's workers get it from ``ray start``, and
the replicas' ``sys.path`` as Ray's job); ``trace_dir`` is handed over as ``HERMES_SQL_TRACE`` (``--profile``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from cost_load import Target
from cost_procs import Group, Snapshot, titled, tree
from cost_profile import LOG_LINE_PREFIX

__all__ = ["SECRET", "ClusterSide", "SingleSide"]

SECRET = "whsec_" + "YmVuY2gtc2VjcmV0LWJlbmNoLXNlY3JldC0xMjM0NTY="
_ADMIN_KEY = "hk-admin-bench-0123456789abcdef0123456789"
_RAY_PORT = 6379
_TURN_TIMES = (  # a turn dates its messages as it commits
    "SELECT m.content, i.received_at, m.created_at FROM inbox i "
    "JOIN messages m ON m.platform_message_id = i.platform_message_id AND m.role = 'user'"
)


def _env(code: Path, trace_dir: Path | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "PG", "HERMES_"))}
    env = kept | {
        "PYTHONPATH": os.pathsep.join([str(code), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "HERMES_WEBHOOK_SECRET": SECRET,
        "HERMES_ADMIN_KEY": _ADMIN_KEY,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "disabled",
    }
    if trace_dir is not None:
        env["HERMES_SQL_TRACE"] = str(trace_dir)
    return env | (extra or {})


def _config(api: int, webhook: int, callback: str, cluster: dict[str, Any] | None) -> str:
    route = {"secret_env": "HERMES_WEBHOOK_SECRET", "callback_url": callback}
    config: dict[str, Any] = {
        "daemon": {"log_format": "logfmt"},
        "platforms": {
            "api_server": {"host": "127.0.0.1", "port": api, "max_concurrent_runs": 0},
            "webhook": {"host": "127.0.0.1", "port": webhook, "routes": {"default": route}},
        },
    }
    if cluster is not None:
        config["cluster"] = cluster
    return json.dumps(config)  # JSON is YAML


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return int(response.status) == 200
    except OSError:
        return False


def _wait(probe: Any, timeout: float, what: str, process: subprocess.Popen[bytes] | None, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what}: the process exited with {process.returncode}; see {log}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} within {timeout:.0f} s; see {log}")
        time.sleep(0.2)


def _stop(process: subprocess.Popen[bytes], timeout: float = 30) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _hermesd(home: Path, env: dict[str, str], log: Path, *extra: str) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(  # run from the log's directory: ``-m`` puts the cwd before PYTHONPATH
            [sys.executable, "-m", "hermes_actors.cli.hermesd", "--home", str(home), *extra],
            cwd=log.parent,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )


class SingleSide:
    """One ``hermesd`` on SQLite."""

    name = "sqlite"

    def __init__(self, workdir: Path, code: Path, trace_dir: Path | None, callback: str) -> None:
        self.home = workdir / "home-single"
        self.home.mkdir(mode=0o700)
        # ports of its own: with --together it runs beside the cluster, whose first replica has 8642 and 8644
        (self.home / "config.yaml").write_text(_config(8742, 8744, callback, None))
        self.log = workdir / "hermesd-single.log"
        self.targets = [Target(api="http://127.0.0.1:8742", webhook="http://127.0.0.1:8744")]
        self._env = _env(code, trace_dir)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = _hermesd(self.home, self._env, self.log)
        _wait(lambda: _healthy(self.targets[0].api), 60, "hermesd did not answer /health", self.process, self.log)

    def groups(self, snapshot: Snapshot) -> dict[str, Group]:
        assert self.process is not None
        return {"hermesd": Group(frozenset(tree(snapshot, self.process.pid)), frozenset({self.process.pid}))}

    def _rows(self, sql: str) -> list[tuple[Any, ...]]:
        db = sqlite3.connect(f"file:{self.home / 'state.db'}?mode=ro", uri=True)
        try:
            return list(db.execute(sql).fetchall())
        finally:
            db.close()

    def pending(self) -> tuple[int, int]:
        """(inbox rows still pending, replies not sent yet)."""
        (inbox,) = self._rows("SELECT count(*) FROM inbox WHERE state = 'pending'")
        (outbox,) = self._rows("SELECT count(*) FROM outbox WHERE sent_at IS NULL AND abandoned_at IS NULL")
        return int(inbox[0]), int(outbox[0])

    def turn_times(self) -> list[tuple[str, float, float]]:
        """Each user message's text, when its inbox row committed and when its turn committed (wall clock)."""
        return [(str(text), float(received), float(created)) for text, received, created in self._rows(_TURN_TIMES)]

    def stop(self) -> None:
        if self.process is not None:
            _stop(self.process)


class ClusterSide:
    """PostgreSQL, a Ray head and ``replicas`` ``hermesd --cluster`` with ``hosts`` shard hosts."""

    name = "cluster"

    def __init__(
        self,
        workdir: Path,
        code: Path,
        trace_dir: Path | None,
        callback: str,
        *,
        replicas: int,
        hosts: int,
        shards: int,
        statements: bool,
    ) -> None:
        self.workdir = workdir
        self.code = code
        self.trace_dir = trace_dir
        self.callback = callback
        self.replica_count = replicas
        self.host_names = tuple(f"host-{i}" for i in range(hosts))
        self.shards = shards
        self.statements = statements  # pg_stat_statements loaded (--profile)
        self.targets = [
            Target(api=f"http://127.0.0.1:{8642 + 10 * i}", webhook=f"http://127.0.0.1:{8644 + 10 * i}")
            for i in range(replicas)
        ]
        self.postgres: Any = None
        self.ray: subprocess.Popen[bytes] | None = None
        self.replicas: list[subprocess.Popen[bytes]] = []
        self.dsn = ""

    def start(self) -> None:
        from tests.postgres import Cluster, find_bin_dir

        bin_dir = find_bin_dir()
        if bin_dir is None:
            raise RuntimeError("PostgreSQL's server binaries are not installed: apt-get install postgresql")
        self.postgres = Cluster(bin_dir)
        if self.statements:
            self._load_statements(bin_dir)
        self.postgres.admin("CREATE DATABASE hermes")
        self.dsn = self.postgres.dsn("hermes")
        if self.statements:
            self.sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        self._start_ray()
        cluster = {
            "postgres_dsn": self.dsn,
            "ray_address": f"127.0.0.1:{_RAY_PORT}",
            "node_ip_address": "127.0.0.1",
            "shards": self.shards,
            "hosts": list(self.host_names),
        }
        for i, target in enumerate(self.targets):  # one after the other: the first migrates the schema
            home = self.workdir / f"home-replica-{i}"
            home.mkdir(mode=0o700)
            api, webhook = (int(url.rsplit(":", 1)[1]) for url in (target.api, target.webhook))
            (home / "config.yaml").write_text(_config(api, webhook, self.callback, cluster))
            log = self.workdir / f"replica-{i}.log"
            env = _env(self.code, self.trace_dir, {"PGAPPNAME": f"hermes-replica-{i}"})
            process = _hermesd(home, env, log, "--cluster")
            self.replicas.append(process)
            _wait(functools.partial(_healthy, target.api), 120, f"replica {i} did not answer /health", process, log)
        self._settle()

    def _load_statements(self, bin_dir: Path) -> None:
        """Restart PostgreSQL with ``pg_stat_statements`` loaded (it must be preloaded at server start) and every
        statement logged with its time and client (:data:`cost_profile.LOG_LINE_PREFIX`), its plans counted."""
        self.postgres.admin("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
        self.postgres.admin("ALTER SYSTEM SET log_statement = 'all'")
        self.postgres.admin(f"ALTER SYSTEM SET log_line_prefix = '{LOG_LINE_PREFIX}'")
        command = [str(bin_dir / "pg_ctl"), "-D", str(self.postgres.data), "-w", "-m", "fast", "restart"]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        log = self.postgres.directory / "server.log"
        done = subprocess.run([*command, "-l", str(log)], capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"pg_ctl restart failed: {done.stderr.strip() or done.stdout.strip()}")
        self.postgres.admin("ALTER SYSTEM SET pg_stat_statements.track_planning = on")  # known once it is loaded
        self.postgres.admin("SELECT pg_reload_conf()")

    def _start_ray(self) -> None:
        log = self.workdir / "ray-head.log"
        command = [
            str(Path(sys.executable).with_name("ray")),
            "start",
            "--head",
            "--block",
            f"--port={_RAY_PORT}",
            "--include-dashboard=false",
            "--include-log-monitor=false",
            "--node-ip-address=127.0.0.1",
            "--disable-usage-stats",
            f"--temp-dir={self.workdir / 'ray'}",
        ]
        with log.open("ab") as out:
            self.ray = subprocess.Popen(
                command,
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=_env(self.code, self.trace_dir, {"PGAPPNAME": "hermes-host"}),  # its workers: the hosts
                start_new_session=True,  # its own process group: whatever it leaves is killed with it
            )

        def listening() -> bool:
            try:
                socket.create_connection(("127.0.0.1", _RAY_PORT), timeout=1).close()
            except OSError:
                return False
            return True

        _wait(listening, 60, "the Ray head did not listen", self.ray, log)

    def _settle(self) -> None:
        """Wait until every shard is held by its home host, so that no shard moves while the load runs."""
        from hermes_actors.store.pg.shards import home_shards

        home = {s: n for n in self.host_names for s in home_shards(n, self.host_names, self.shards)}

        def settled() -> bool:
            rows = self.sql(
                "SELECT shard, holder FROM shard_leases WHERE holder IS NOT NULL AND expires_at > clock_timestamp()"
            )
            return {int(shard): str(holder) for shard, holder in rows} == home

        _wait(settled, 120, "the shards did not settle with their home hosts", None, self.workdir / "replica-0.log")

    def sql(self, statement: str) -> list[tuple[Any, ...]]:
        """Run one statement on the cluster's database (outside the measured windows)."""
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as connection:
            cursor = connection.execute(statement.encode())
            return list(cursor.fetchall()) if cursor.description is not None else []

    def applications(self) -> dict[str, str]:
        """Each process group's ``application_name`` (``PGAPPNAME``), to its group's name."""
        return {"hermes-host": "hosts"} | {f"hermes-replica-{i}": "replicas" for i in range(self.replica_count)}

    @property
    def server_log(self) -> Path:
        return Path(self.postgres.directory) / "server.log"

    def postmaster(self) -> int:
        return int((self.postgres.data / "postmaster.pid").read_text().split()[0])

    def groups(self, snapshot: Snapshot) -> dict[str, Group]:
        assert self.ray is not None
        postmaster = self.postmaster()
        replicas = set().union(*(tree(snapshot, p.pid) for p in self.replicas))
        ray = tree(snapshot, self.ray.pid)
        hosts = set().union(set(), *(tree(snapshot, pid) for pid in titled(ray, b"ray::ShardHost")))
        return {
            "postgres": Group(frozenset(tree(snapshot, postmaster)), frozenset({postmaster})),
            "hosts": Group(frozenset(hosts)),
            "replicas": Group(frozenset(replicas), frozenset(p.pid for p in self.replicas)),
            "ray": Group(frozenset(ray - hosts), frozenset(ray - hosts)),
        }

    def pending(self) -> tuple[int, int]:
        """(inbox rows still pending, replies not sent yet)."""
        inbox = self.sql("SELECT count(*) FROM inbox WHERE state = 'pending'")[0][0]
        outbox = self.sql("SELECT count(*) FROM outbox WHERE sent_at IS NULL AND abandoned_at IS NULL")[0][0]
        return int(inbox), int(outbox)

    def _rows(self, sql: str) -> list[tuple[Any, ...]]:
        return self.sql(sql)

    def turn_times(self) -> list[tuple[str, float, float]]:
        """Each user message's text, when its inbox row committed and when its turn committed (wall clock)."""
        return [(str(text), float(received), float(created)) for text, received, created in self._rows(_TURN_TIMES)]

    def stop(self) -> None:
        """Replicas, then the Ray head (and the hosts with it), then PostgreSQL; each even when one before failed."""
        try:
            for process in self.replicas:
                _stop(process)
        finally:
            try:
                if self.ray is not None:
                    _stop(self.ray, 60)
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(self.ray.pid, signal.SIGKILL)  # the group it led: anything it left behind
            finally:
                if self.postgres is not None:
                    self.postgres.stop()
