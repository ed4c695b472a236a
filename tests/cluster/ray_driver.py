"""The Ray side of the cluster tests, run as ``python -m tests.cluster.ray_driver SCENARIO DSN [...]`` inside a
network namespace of its own (``tests/cluster/raylab.py``): Ray 2.60's gRPC servers listen on every address of the
namespace, and in that namespace the only one is the loopback interface.

It starts a local Ray head (127.0.0.1, no dashboard, usage statistics off), creates the shard hosts, drives the
load and the faults, waits for the inbox to drain, prints one JSON line of what it saw, and shuts Ray down.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ["RAY_AUTH_MODE"] = "disabled"  # nothing outside this network namespace can reach it; no token in $HOME

import ray

from hermes_actors.cluster.host.ray_host import NAMESPACE, ensure_hosts
from hermes_actors.cluster.host.settings import HostSettings
from hermes_actors.cluster.replica.ingress import ClusterIngress
from hermes_actors.store.pg import PostgresStore
from hermes_actors.testing import FakePlatform, SeeingAgent

HOSTS = ("h0", "h1", "h2")


def _start_ray(directory: str) -> None:
    ray.init(
        address="local",
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        num_cpus=2,
        namespace=NAMESPACE,
        log_to_driver=False,
        _temp_dir=directory,
    )


def _pending(pg: PostgresStore) -> int:
    return int(pg.database.value("SELECT count(*) FROM inbox WHERE state = 'pending'"))


def _wait(probe: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


class Load:
    """``rate`` messages a second over ``chats`` conversations for ``seconds``, through the ingress (bounded)."""

    def __init__(self, ingress: ClusterIngress, *, rate: float, seconds: float, chats: int) -> None:
        self._ingress = ingress
        self._rate, self._seconds, self._chats = rate, seconds, chats
        self.sent = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self._thread.join(self._seconds + 30)

    def _run(self) -> None:
        platform = FakePlatform("fake")
        started = time.monotonic()
        total = int(self._rate * self._seconds)
        for n in range(total):
            due = started + n / self._rate
            time.sleep(max(0.0, due - time.monotonic()))
            chat = n % self._chats
            message = platform.message(f"k{chat}-{n}", chat_id=f"chat-{chat}", user_id=f"u{chat}", message_id=f"m{n}")
            self._ingress.accept(message)
            self.sent += 1


def _settings(dsn: str, name: str, *, fencing: bool, ttl: float, grace: float) -> HostSettings:
    return HostSettings(
        name=name,
        postgres_dsn=dsn,
        hosts=HOSTS,
        shards=64,
        lease_ttl_s=ttl,
        grace_s=grace,
        pull_interval_s=1.0,
        pending_soft_limit=64,
        pending_hard_limit=64,
        fencing=fencing,
    )


def _listeners() -> list[str]:
    done = subprocess.run(["ss", "-ltnp"], capture_output=True, text=True, check=False)
    return [line for line in done.stdout.splitlines()[1:] if line.strip()]


def fault(args: argparse.Namespace) -> dict[str, Any]:
    """Three hosts under load; kill -9, SIGSTOP past the term and grace, stalled renewals."""
    ttl, grace = 3.0, 1.5
    factory = functools.partial(SeeingAgent, 0.05, 0.4, stamped=True)
    handles = ensure_hosts(
        [_settings(args.dsn, name, fencing=args.fencing, ttl=ttl, grace=grace) for name in HOSTS],
        agent_factory=factory,
    )
    pids = {name: ray.get(handle.pid.remote(), timeout=60) for name, handle in handles.items()}
    with PostgresStore.open(args.dsn, migrate_schema=False) as pg:
        _wait(lambda: all(ray.get(h.status.remote()).shards for h in handles.values()), 30, "every host holding shards")
        listeners = _listeners()
        ingress = ClusterIngress(pg, shards=64)
        load = Load(ingress, rate=args.rate, seconds=args.seconds, chats=args.chats)
        started = time.monotonic()
        load.start()
        events: list[str] = []

        def at(offset: float) -> None:
            time.sleep(max(0.0, started + offset - time.monotonic()))

        at(args.seconds * 0.15)
        os.kill(pids["h0"], signal.SIGKILL)
        events.append(f"{time.monotonic() - started:.1f}s kill -9 h0 (pid {pids['h0']})")
        at(args.seconds * 0.35)
        os.kill(pids["h1"], signal.SIGSTOP)
        events.append(f"{time.monotonic() - started:.1f}s SIGSTOP h1")
        time.sleep(ttl + grace + 2.0)
        os.kill(pids["h1"], signal.SIGCONT)
        events.append(f"{time.monotonic() - started:.1f}s SIGCONT h1")
        at(args.seconds * 0.65)
        ray.get(handles["h2"].stall_renewals.remote(True), timeout=30)
        events.append(f"{time.monotonic() - started:.1f}s h2 stops renewing")
        time.sleep(ttl + grace + 2.0)
        ray.get(handles["h2"].stall_renewals.remote(False), timeout=30)
        events.append(f"{time.monotonic() - started:.1f}s h2 renews again")
        load.join()
        events.append(f"{time.monotonic() - started:.1f}s load done: {load.sent} messages")
        _wait(lambda: _pending(pg) == 0, 60, "the inbox to drain")
        events.append(f"{time.monotonic() - started:.1f}s inbox drained")
        statuses = {name: ray.get(h.status.remote(), timeout=30) for name, h in handles.items()}
    return {
        "sent": load.sent,
        "events": events,
        "listeners": listeners,
        "restarted_pid": statuses["h0"].pid != pids["h0"],
        "outcomes": {name: status.outcomes for name, status in statuses.items()},
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _ray_cli(*args: str) -> None:
    ray_bin = str(Path(sys.executable).with_name("ray"))
    subprocess.run([ray_bin, *args], check=True, capture_output=True, timeout=120)


def daemon(args: argparse.Namespace) -> dict[str, Any]:
    """``hermesd --cluster`` against a Ray head started with ``ray start``: a signed webhook in, its reply at the
    callback; a Telegram update polled by the leased adapter, its reply sent by the replica's dispatcher;
    ``hermesctl cluster status`` naming the hosts and roles, SIGTERM."""
    from tests.platforms.telegram_fake import TelegramFake, message, private_chat, user
    from tests.platforms.test_telegram import TOKEN
    from tests.platforms.test_webhook import CALLBACK_SECRET, SECRET, Receiver, post, signature

    ray_port, webhook_port, api_port = _free_port(), _free_port(), _free_port()
    home = Path(tempfile.mkdtemp(prefix="hermes-home-"))
    receiver = Receiver()
    receiver.host.start()
    telegram = TelegramFake().start()
    telegram.add_bot(TOKEN)
    bot = {"token": TOKEN}
    poll = {"poll_timeout_s": 1, "poll_retry_s": 0.05, "poll_retry_max_s": 0.2}
    route = {"secret": SECRET, "callback_url": receiver.url, "callback_secret": CALLBACK_SECRET}
    config = {
        "cluster": {
            "postgres_dsn": args.dsn,
            "ray_address": f"127.0.0.1:{ray_port}",
            "node_ip_address": "127.0.0.1",
            "shards": 16,
            "hosts": ["a", "b"],
            "lease_ttl_s": 3,
            "grace_s": 1,
        },
        "platforms": {
            "webhook": {"port": webhook_port, "routes": {"default": route}},
            "api_server": {"port": api_port},
            "telegram": {"base_url": telegram.base_url, "bots": {"main": bot}, **poll},
        },
    }
    (home / "config.yaml").write_text(json.dumps(config))  # JSON is YAML
    bin_dir = Path(sys.executable).parent
    ray_dir = tempfile.mkdtemp(prefix="hermes-ray-")
    _ray_cli(
        "start",
        "--head",
        f"--port={ray_port}",
        "--node-ip-address=127.0.0.1",
        "--include-dashboard=false",
        "--include-log-monitor=false",
        "--disable-usage-stats",
        "--num-cpus=2",
        f"--temp-dir={ray_dir}",
    )
    daemon = subprocess.Popen(
        [str(bin_dir / "hermesd"), "--home", str(home), "--cluster"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        url = f"http://127.0.0.1:{webhook_port}/webhooks/default"

        def listening() -> bool:
            with socket.socket() as probe:
                return probe.connect_ex(("127.0.0.1", webhook_port)) == 0

        _wait(listening, 60, "the webhook listener")
        body = json.dumps({"text": "hello", "chat_id": "c1"}).encode()
        stamp = str(int(time.time()))
        headers = {
            "content-type": "application/json",
            "webhook-id": "msg_daemon",
            "webhook-timestamp": stamp,
            "webhook-signature": signature(SECRET, "msg_daemon", stamp, body),
        }
        status, answer = post(url, body, headers)
        callback = None
        for _ in range(6):  # the hosts start and take their shards first
            try:
                callback = receiver.take()  # waits up to 10 s
                break
            except queue.Empty:
                continue
        api = _api_calls(f"http://127.0.0.1:{api_port}")
        alice = user(5001, "Alice")
        telegram.push(TOKEN, message(private_chat(alice), alice, "hi from telegram"))
        try:
            sent = telegram.wait_for(lambda: [m["text"] for m in telegram.sent(TOKEN)], timeout=60)
        except Exception:
            sent = []
        deadline = time.monotonic() + 30
        while True:  # a host gives a shard back to its home host a tick before that one takes it: wait it out
            shown = subprocess.run(
                [str(bin_dir / "hermesctl"), "cluster", "status", "--home", str(home)],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            # A shard between its hand-back and its home host's next tick is not held, which is no trouble (the
            # exit code stays 0 until cluster.health.unheld_after_s): wait for every shard held, not for exit 0.
            settled = shown.returncode == 0 and shown.stdout.startswith("shards: 16, not held: 0\n")
            if settled or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        listed = subprocess.run(
            [str(bin_dir / "hermesctl"), "sessions", "list", "--json", "--home", str(home), "--dsn", args.dsn],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        listeners = _listeners()
        host_logs = _host_lines(sorted(Path(ray_dir).glob("session_*/logs/worker-*.err")))
        replica_cpus = [
            line for line in Path(f"/proc/{daemon.pid}/status").read_text().splitlines() if "Cpus_allowed_list" in line
        ]
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            _, err = daemon.communicate(timeout=60)
        finally:
            _ray_cli("stop", "--force")
            receiver.host.stop()
            telegram.stop()
    return {
        "status": status,
        "answer": answer,
        "callback": None if callback is None else callback.json(),
        "api": api,
        "sessions": listed.stdout,
        "sessions_err": listed.stderr,
        "telegram": sent,
        "ctl": shown.stdout,
        "ctl_code": shown.returncode,
        "exit": daemon.returncode,
        "stderr": err.decode()[-2000:],
        "stderr_not_logfmt": [line for line in err.decode().splitlines() if not line.startswith("time=")][:50],
        "host_logs": host_logs,
        "replica_cpus": replica_cpus[0].split(":", 1)[1].strip(),
        "listeners": listeners,
    }


def _host_lines(paths: list[Path], each: int = 20) -> list[str]:
    """The first ``each`` lines every host wrote (a busy host's lines must not crowd out another's)."""
    kept: dict[str, int] = {}
    lines = []
    for path in paths:
        for line in path.read_text(errors="replace").splitlines():
            if " host=" not in line:
                continue
            host = line.rsplit(" host=", 1)[1]
            if kept.get(host, 0) < each:
                kept[host] = kept.get(host, 0) + 1
                lines.append(line)
    return lines


def _api_calls(base: str) -> dict[str, Any]:
    """Through the replica's API: readiness, a completion and a streamed completion (each turn runs in a host)."""

    def call(path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, str], bytes]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()

    ready = call("/health/ready")
    plain = call("/v1/chat/completions", {"model": "hermes-agent", "messages": [{"role": "user", "content": "hi"}]})
    streamed = call(
        "/v1/chat/completions",
        {"model": "hermes-agent", "messages": [{"role": "user", "content": "stream me"}], "stream": True},
    )
    deltas = []
    for line in streamed[2].decode().splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:]).get("choices", []):
                if choice.get("delta", {}).get("content"):
                    deltas.append(choice["delta"]["content"])
    return {
        "ready": [ready[0], json.loads(ready[2])],
        "plain": [plain[0], json.loads(plain[2]), plain[1].get("X-Hermes-Session-Id")],
        "stream": [streamed[0], deltas],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=["fault", "daemon"])
    parser.add_argument("dsn")
    parser.add_argument("--fencing", type=int, default=1)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--chats", type=int, default=60)
    args = parser.parse_args()
    args.fencing = bool(args.fencing)
    if args.scenario == "daemon":
        print(json.dumps(daemon(args)), flush=True)
        sys.exit(0)
    directory = tempfile.mkdtemp(prefix="hermes-ray-")
    _start_ray(directory)
    try:
        result = fault(args)
    finally:
        ray.shutdown()
    print(json.dumps(result), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
