"""The two-machine deployment, run as ``python -m tests.cluster.two_machines_driver A B WORKDIR`` inside network
namespace ``A`` (machine A) while ``B`` is machine B (``tests/cluster/netns.py``); prints one JSON line of what it
saw. ``tests/cluster/test_two_machines.py`` checks it and kills whatever is left in both namespaces.

As the README's recipe says: PostgreSQL on A (``pg_hba.conf`` and a password role), the Ray head on A and a worker
node on B with fixed ports and token authentication, one ``hermesd --cluster`` replica on each machine with the same
configuration and shared secrets from the environment, and the shard hosts spread over both nodes. Then: a chat
completion and webhooks into replica B; every process of machine B killed with -9 while replica A takes more
webhooks; every message answered; the hosts stopped with ``hermesctl cluster stop-hosts``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_actors.store.pg import PostgresStore
from tests.cluster.checks import counts, order_violations
from tests.cluster.deployment import (
    API_PORT,
    WEBHOOK_PORT,
    Postgres,
    Receiver,
    Secrets,
    clean_env,
    head_command,
    listeners,
    outside_recipe,
    replica_config,
    token_probe,
    worker_command,
)
from tests.cluster.netns import ADDRESSES, kill_namespace, namespace_pids
from tests.platforms.test_webhook import signature
from tests.postgres import find_bin_dir

A_IP, B_IP = ADDRESSES
HOSTS = ("host-0", "host-1")
SHARDS = 16
RECEIVER_PORT = 9000
RECEIVER = frozenset({RECEIVER_PORT})  # it stands for the application a webhook route calls back
CALLBACK = f"http://{A_IP}:{RECEIVER_PORT}/replies"


def _wait(probe: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := probe()):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)
    return found


def _http(url: str, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")
    except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
        return 0, str(exc)


def _webhook(address: str, secret: str, webhook_id: str, chat: str, text: str) -> int:
    body = json.dumps({"text": text, "chat_id": chat}).encode()
    stamp = str(int(time.time()))
    headers = {
        "content-type": "application/json",
        "webhook-id": webhook_id,
        "webhook-timestamp": stamp,
        "webhook-signature": signature(secret, webhook_id, stamp, body),
    }
    request = urllib.request.Request(f"http://{address}:{WEBHOOK_PORT}/webhooks/default", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


class Run:
    """One run of the deployment; ``events`` keep the time of each step for a failure's message."""

    def __init__(self, namespaces: tuple[str, str], workdir: Path) -> None:
        self.a, self.b = namespaces
        self.workdir = workdir
        self.secrets = Secrets()
        self.events: list[str] = []
        self._started = time.monotonic()
        self.replicas: dict[str, subprocess.Popen[bytes]] = {}

    def note(self, what: str) -> None:
        self.events.append(f"{time.monotonic() - self._started:5.1f}s {what}")

    def ray_start(self, command: list[str], machine: str, temp: str) -> None:
        prefix = [] if machine == self.a else ["ip", "netns", "exec", machine]
        env = clean_env(
            self.secrets.ray_env() | {"RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "1000"}
        )
        done = subprocess.run(
            [*prefix, *command, "--num-cpus=1", f"--temp-dir={self.workdir / temp}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command[:3])} failed: {done.stderr[-3000:]}")

    def start_replica(self, name: str, machine: str, address: str) -> None:
        home = self.workdir / f"home-{name}"
        home.mkdir(mode=0o700)
        (home / "config.yaml").write_text(json.dumps(replica_config(A_IP, address, HOSTS, SHARDS, CALLBACK)))
        prefix = [] if machine == self.a else ["ip", "netns", "exec", machine]
        hermesd = str(Path(sys.executable).with_name("hermesd"))
        out = (self.workdir / f"replica-{name}.log").open("wb")
        self.replicas[name] = subprocess.Popen(
            [*prefix, hermesd, "--home", str(home), "--cluster"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=clean_env(self.secrets.replica_env()),
        )

    def replica_log(self, name: str) -> str:
        return (self.workdir / f"replica-{name}.log").read_text(errors="replace")

    def hermesctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        hermesctl = str(Path(sys.executable).with_name("hermesctl"))
        return subprocess.run(
            [hermesctl, *args, "--home", str(self.workdir / "home-a")],
            env=clean_env(self.secrets.replica_env()),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


def _machine_of(pid: int) -> str:
    done = subprocess.run(["ip", "netns", "identify", str(pid)], capture_output=True, text=True, check=False)
    return done.stdout.strip() or "?"


def _shard_hosts(namespace: str) -> list[int]:
    """The shard hosts' Ray worker processes in a machine (Ray titles them ``ray::ShardHost...``)."""
    found = []
    for pid in namespace_pids(namespace):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if title.startswith(b"ray::ShardHost"):
            found.append(pid)
    return found


def _leaks(needle: str, roots: list[Path]) -> list[str]:
    """The files under ``roots`` that hold ``needle``."""
    found = []
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                try:
                    if needle.encode() in path.read_bytes():
                        found.append(str(path))
                except OSError:
                    continue
    return found


def scenario(run: Run) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    s = run.secrets
    bin_dir = find_bin_dir()
    if bin_dir is None:
        raise SystemExit("PostgreSQL's server binaries are not installed")
    pg_dir = run.workdir / "pg"
    pg_dir.mkdir()
    account = __import__("pwd").getpwnam("postgres")
    os.chown(pg_dir, account.pw_uid, account.pw_gid)
    postgres = Postgres(bin_dir, pg_dir, A_IP, f"{A_IP.rsplit('.', 1)[0]}.0/24")
    postgres.start(s.pg_password)
    run.note("PostgreSQL listens on A")
    receiver = Receiver(A_IP, RECEIVER_PORT).start()
    run.ray_start(head_command(A_IP), run.a, "ray-a")
    run.note("Ray head up on A")
    run.ray_start(worker_command(A_IP, B_IP), run.b, "ray-b")
    run.note("Ray worker node up on B")
    seen["token"] = {
        "none": token_probe(A_IP, "disabled", ""),
        "wrong": token_probe(A_IP, "token", "0" * 64),
        "right": token_probe(A_IP, "token", s.ray_token),
    }
    superuser = subprocess.run(  # pg_hba.conf: the superuser from the network is refused
        ["ip", "netns", "exec", run.b, str(bin_dir / "psql"), f"host={A_IP} user=postgres dbname=hermes", "-c", "1"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env=clean_env({"PGPASSWORD": s.pg_password, "PGCONNECT_TIMEOUT": "5"}),
    )
    seen["superuser_from_b"] = superuser.stderr.strip()
    os.environ.update(s.ray_env())  # this process joins the Ray cluster too, to see where the hosts run
    import ray

    ray.init(
        address=f"{A_IP}:6379",
        _node_ip_address=A_IP,
        namespace="hermes",
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    listed: Callable[[], list[dict[str, Any]]] = ray.nodes  # untyped in Ray
    _wait(lambda: len([node for node in listed() if node["Alive"]]) == 2, 60, "both Ray nodes")
    run.start_replica("a", run.a, A_IP)
    _wait(lambda: _http(f"http://{A_IP}:{API_PORT}/health")[0] == 200, 120, "replica A's API")
    run.start_replica("b", run.b, B_IP)
    _wait(lambda: _http(f"http://{B_IP}:{API_PORT}/health")[0] == 200, 120, "replica B's API")
    run.note("both replicas answer /health")
    pg = PostgresStore.open(f"postgresql://hermes@{A_IP}:5432/hermes", pool_size=2, migrate_schema=False)
    held_sql = (
        "SELECT holder, count(*) FROM shard_leases WHERE holder IS NOT NULL AND expires_at > clock_timestamp() "
        "GROUP BY holder"
    )

    def holders() -> dict[str, int]:
        return {str(holder): int(count) for holder, count in pg.database.execute(held_sql)}

    _wait(lambda: set(holders()) == set(HOSTS) and sum(holders().values()) == SHARDS, 90, "both hosts holding shards")
    seen["placement"] = _machines_of_hosts(ray)
    seen["holders_before"] = holders()
    run.note(f"hosts placed: {seen['placement']}")

    completion = _http(
        f"http://{B_IP}:{API_PORT}/v1/chat/completions",
        {"model": "hermes-agent", "messages": [{"role": "user", "content": "hello from machine b"}]},
        {"Authorization": f"Bearer {s.api_key}"},
    )
    seen["completion_b"] = completion
    admin = {"Authorization": f"Bearer {s.admin_key}"}
    seen["admin"] = {ip: _http(f"http://{ip}:{API_PORT}/api/sessions", headers=admin)[0] for ip in (A_IP, B_IP)}
    seen["listeners"] = {"a": listeners(None), "b": listeners(run.b)}
    seen["outside_recipe"] = outside_recipe(seen["listeners"]["a"], also=RECEIVER) + outside_recipe(
        seen["listeners"]["b"]
    )
    running = run.hermesctl("status")
    seen["status_running"] = [running.returncode, running.stdout.splitlines()[:1], run.replicas["a"].pid]
    status = run.hermesctl("cluster", "status", "--json")
    seen["fingerprints"] = sorted({r["fingerprint"] for r in json.loads(status.stdout or "{}").get("replicas", [])})
    seen["replicas_seen"] = len(json.loads(status.stdout or "{}").get("replicas", []))
    run.note("replica B answered; listeners and fingerprints read")

    expected: dict[str, str] = {}
    refused: dict[str, int] = {}
    for n in range(24):  # into replica B, then machine B dies: a turn may be half done, a reply unsent
        code = _webhook(B_IP, s.webhook_secret, f"b-{n}", f"chat-{n}", f"before {n}")
        if code == 202:
            expected[f"b-{n}"] = f"echo: before {n}"
        else:
            refused[f"b-{n}"] = code
    shard_holders = {
        int(shard): holder for shard, holder in pg.database.execute("SELECT shard, holder FROM shard_leases")
    }
    seen["killed_b"] = len(kill_namespace(run.b))
    run.note(f"machine B killed ({seen['killed_b']} processes)")
    for n in range(24):  # the same conversations through replica A: their shards were partly B's
        code = _webhook(A_IP, s.webhook_secret, f"a-{n}", f"chat-{n}", f"after {n}")
        if code == 202:
            expected[f"a-{n}"] = f"echo: after {n}"
        else:
            refused[f"a-{n}"] = code
    seen["accepted"], seen["refused"] = len(expected), refused
    answered = receiver.wait_for(expected, timeout=120)
    run.note(f"{len(answered)} of {len(expected)} accepted webhooks answered")
    seen["unanswered"] = sorted(set(expected) - set(answered))
    seen["wrong_answers"] = {key: text for key, text in answered.items() if text != expected[key]}
    seen["pending"] = int(pg.database.value("SELECT count(*) FROM inbox WHERE state = 'pending'"))
    b_host = next(name for name, machine in seen["placement"].items() if machine == run.b)
    after_kill = pg.database.execute("SELECT shard FROM inbox WHERE platform_message_id LIKE %s", ("a-%",))
    seen["after_kill_on_b_shards"] = len([shard for (shard,) in after_kill if shard_holders[int(shard)] == b_host])
    seen["counts"], seen["order"] = counts(pg), order_violations(pg)
    _wait(lambda: sum(holders().values()) == SHARDS, 60, "every shard held again")
    seen["holders_after"] = holders()
    _wait(lambda: _machines_of_hosts(ray) == dict.fromkeys(HOSTS, run.a), 90, "both hosts running on machine A")
    run.note("both hosts run on machine A")

    replica_a = run.replicas["a"]
    replica_a.send_signal(signal.SIGTERM)
    seen["replica_a_exit"] = replica_a.wait(timeout=60)
    stopped = run.hermesctl("status")
    seen["status_stopped"] = [stopped.returncode, stopped.stdout.splitlines()[:1]]
    seen["hosts_without_replicas"] = [name for name in HOSTS if _actor_exists(ray, name)]  # detached: still there
    stop = run.hermesctl("cluster", "stop-hosts")
    seen["stop_hosts"] = [stop.returncode, stop.stdout, stop.stderr[-2000:]]
    seen["hosts_left"] = [name for name in HOSTS if _actor_exists(ray, name)]
    seen["host_workers_left"] = _wait(lambda: [True] if not _shard_hosts(run.a) else [], 30, "host workers to exit")
    run.note("replica A stopped and the hosts with it")
    ray.shutdown()
    pg.close()
    postgres.stop()
    receiver.stop()
    seen["password_in"] = _leaks(s.pg_password, [run.workdir / "ray-a", run.workdir / "ray-b"])
    seen["password_in"] += [name for name in ("a", "b") if s.pg_password in run.replica_log(name)]
    seen["replica_b_log"] = run.replica_log("b")[-1500:]
    return seen


def _machines_of_hosts(ray: Any) -> dict[str, str]:
    """Where each host runs now (``?``: not running)."""
    found = {}
    for name in HOSTS:
        try:
            found[name] = _machine_of(int(ray.get(ray.get_actor(name, namespace="hermes").pid.remote(), timeout=5)))
        except Exception:
            found[name] = "?"
    return found


def _actor_exists(ray: Any, name: str) -> bool:
    try:
        ray.get_actor(name, namespace="hermes")
    except ValueError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("workdir", type=Path)
    args = parser.parse_args()
    run = Run((args.a, args.b), args.workdir)
    try:
        seen = scenario(run)
    except BaseException as exc:
        logs = {name: run.replica_log(name)[-3000:] for name in run.replicas}
        print(json.dumps({"failed": repr(exc), "events": run.events, "logs": logs}), flush=True)
        raise
    print(json.dumps(seen | {"events": run.events}), flush=True)


if __name__ == "__main__":
    main()
