"""Cluster mode on this machine: turns/s with 1, 2 and 4 shard hosts (echo agent and a 50 ms agent), ingest ->
reply latency, failover time after kill -9, and the same workload on the single-machine (SQLite) runtime.

Everything runs on this machine: a throw-away PostgreSQL cluster on a Unix socket (``tests/postgres.py``) and a
local Ray head, in a network namespace of its own (the script re-runs itself under ``unshare -n``: Ray 2.60's
servers listen on every address, and there the only one is loopback). Bounded: ``--messages`` per measurement.
``--only cost`` is the cluster's CPU per message against one machine's under the same paced load, each started as an
operator would (``bench/cluster_cost.py``). ``HERMES_BENCH_CODE=DIR`` measures the package of the checkout at ``DIR``.
Run ``python bench/cluster.py --help``; bench/README.md explains every line.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.environ.get("HERMES_BENCH_CODE") or str(Path(__file__).resolve().parent.parent))

import cluster_cost
from report import figure_line

from hermes_actors.agents.base import Agent, EchoAgent
from hermes_actors.cluster.host.settings import HostSettings
from hermes_actors.cluster.replica.ingress import ClusterIngress
from hermes_actors.store.pg import PostgresStore
from hermes_actors.store.pg.shards import home_shards
from hermes_actors.testing import FakePlatform, SeeingAgent, open_fake_gateway, poll_until
from tests.postgres import Cluster, find_bin_dir

_NETNS = "HERMES_BENCH_NETNS"


def _in_namespace() -> None:
    """Run this script again in a network namespace with only a loopback interface (unless it already is)."""
    if os.environ.get(_NETNS) == "1":
        return
    prefix = ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-rn"]
    command = " ".join(f"'{part}'" for part in [sys.executable, *sys.argv])
    child = subprocess.Popen(
        [*prefix, "sh", "-c", f"ip link set lo up && exec {command}"], env={**os.environ, _NETNS: "1"}
    )
    signal.signal(signal.SIGTERM, lambda signum, frame: child.send_signal(signum))  # it stops what it started
    sys.exit(child.wait())


def _messages(n: int, chats: int) -> list[Any]:
    platform = FakePlatform("fake")
    return [
        platform.message(f"k{i % chats}-{i}", chat_id=f"chat-{i % chats}", user_id=f"u{i % chats}", message_id=f"m{i}")
        for i in range(n)
    ]


def _split(pg: PostgresStore, handed: dict[int, float]) -> dict[str, float]:
    """Each message's wait for its pull (inbox commit -> handed to a supervisor, by the hosts' records) against its
    wait in the runtime (handed -> its turn's commit): percentiles of each, and for the slowest 1% of messages
    the share of their latency spent before the handover. Messages handed more than once count their last."""
    rows = pg.database.execute(
        "SELECT i.id, i.received_at, m.created_at FROM inbox i "
        "JOIN messages m ON m.platform_message_id = i.platform_message_id AND m.role = 'user'"
    )
    parts = [(at - float(received), float(committed) - at) for i, received, committed in rows if (at := handed.get(i))]
    if not parts:
        return {"handover_p50_ms": 0.0, "handover_p99_ms": 0.0, "runtime_p99_ms": 0.0, "tail_before_handover": 0.0}
    pulls = sorted(p for p, _ in parts)
    runs = sorted(r for _, r in parts)
    slowest = sorted(parts, key=sum)[-max(1, len(parts) // 100) :]
    return {
        "handover_p50_ms": _pct(pulls, 0.5),
        "handover_p99_ms": _pct(pulls, 0.99),
        "runtime_p99_ms": _pct(runs, 0.99),
        "tail_before_handover": sum(p for p, _ in slowest) / max(sum(p + r for p, r in slowest), 1e-9),
    }


def _latencies(pg: PostgresStore) -> list[float]:
    """Seconds from each message's inbox commit to its turn's commit (the turn dates its messages as it commits)."""
    rows = pg.database.execute(
        "SELECT m.created_at - i.received_at FROM inbox i "
        "JOIN messages m ON m.platform_message_id = i.platform_message_id AND m.role = 'user'"
    )
    return sorted(float(v) for (v,) in rows)


_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int, *, reaped: bool = False) -> float:
    """CPU seconds (user + system) of process ``pid``, with its reaped children's when ``reaped``; 0 when gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12]) + ((int(fields[13]) + int(fields[14])) if reaped else 0)
    return ticks / _TICK


def _children(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == parent:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _postgres_cpu_s(postgres: Cluster) -> float:
    """CPU seconds of the throw-away cluster: the postmaster, its live backends and those that exited."""
    postmaster = int((postgres.data / "postmaster.pid").read_text().split()[0])
    return _cpu_s(postmaster, reaped=True) + sum(_cpu_s(pid) for pid in _children(postmaster))


def _cpu_snapshot(postgres: Cluster, host_pids: list[int]) -> tuple[float, float, float]:
    """(PostgreSQL, the shard hosts' workers, this driver with the ingress) CPU seconds so far."""
    return _postgres_cpu_s(postgres), sum(_cpu_s(pid) for pid in host_pids), _cpu_s(os.getpid())


def _spy(pids: list[int], path: str, done: threading.Event) -> None:
    """Append a py-spy stack dump of each host worker to ``path`` every half second until ``done`` (a profile of
    where the hosts' threads wait; py-spy must be installed)."""
    with open(path, "a", encoding="utf-8") as out:
        while not done.wait(0.5):
            for pid in pids:
                dump = subprocess.run(
                    ["py-spy", "dump", "--pid", str(pid)], capture_output=True, text=True, check=False
                )
                out.write(f"=== {pid} {time.time():.3f}\n{dump.stdout}{dump.stderr}")


def _epochs(pg: PostgresStore) -> int:
    """The sum of the shards' epochs: each term taken raises one by one."""
    return int(pg.database.value("SELECT coalesce(sum(epoch), 0) FROM shard_leases"))


def _deadlocks(pg: PostgresStore) -> int:
    """Deadlocks PostgreSQL has detected in this database so far (each costs a ``deadlock_timeout`` wait)."""
    pg.database.execute("SELECT pg_stat_clear_snapshot()")
    return int(pg.database.value("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"))


def _pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] * 1000 if values else float("nan")


def measure_cluster(
    postgres: Cluster, hosts: int, agent: Callable[[], Agent], label: str, args: argparse.Namespace
) -> dict[str, float]:
    """One run: every message in through the ingress, until the inbox is empty; its figures by name."""
    import ray

    from hermes_actors.cluster.host.ray_host import ensure_hosts

    name = postgres.create_database()
    dsn = postgres.dsn(name)
    names = tuple(f"{label}-{hosts}-{i}" for i in range(hosts))
    settings = [
        HostSettings(
            name=n,
            postgres_dsn=dsn,
            hosts=names,
            shards=64,
            lease_ttl_s=5.0,
            grace_s=2.0,
            pending_soft_limit=4,
            pull_interval_s=args.pull_interval,
        )
        for n in names
    ]
    handles = ensure_hosts(settings, agent_factory=agent)
    try:
        with PostgresStore.open(dsn, migrate_schema=False) as pg:
            if args.settle:  # every shard with its home host, so that no shard moves while the messages run
                homes = {n: home_shards(n, names, 64) for n in names}
                poll_until(
                    lambda: all(set(ray.get(h.status.remote()).shards) == homes[n] for n, h in handles.items()),
                    timeout=60,
                )
            else:
                poll_until(lambda: all(ray.get(h.status.remote()).shards for h in handles.values()), timeout=60)
            epochs_before = _epochs(pg)
            deadlocks_before = _deadlocks(pg)
            ingress = ClusterIngress(pg, shards=64)
            messages = _messages(args.messages, args.chats)
            host_pids = [ray.get(h.status.remote()).pid for h in handles.values()]
            cpu_before = _cpu_snapshot(postgres, host_pids)
            before = [ray.get(h.status.remote()) for h in handles.values()]
            spied = threading.Event()
            if args.spy:
                threading.Thread(target=_spy, args=(host_pids, args.spy, spied), daemon=True).start()
            started = time.monotonic()
            for message in messages:
                ingress.accept(message)
            ingested = time.monotonic() - started
            poll_until(
                lambda: pg.database.value("SELECT count(*) FROM inbox WHERE state = 'pending'") == 0,
                timeout=300,
                interval=0.05,
            )
            elapsed = time.monotonic() - started
            spied.set()
            cpu = [after - before for after, before in zip(_cpu_snapshot(postgres, host_pids), cpu_before, strict=True)]
            statuses = [ray.get(h.status.remote()) for h in handles.values()]
            sums = {
                k: sum(st.sums.get(k, 0.0) - b.sums.get(k, 0.0) for st, b in zip(statuses, before, strict=True))
                for k in statuses[0].sums
            }
            handed = {i: at for h in handles.values() for i, at in ray.get(h.handovers.remote())}
            moves = _epochs(pg) - epochs_before
            deadlocks = _deadlocks(pg) - deadlocks_before
            lat = _latencies(pg)
            split = _split(pg, handed)
            turns = int(pg.database.value("SELECT count(*) FROM outbox"))
        outcomes = [s.outcomes for s in statuses]
        return {
            "messages_per_s": args.messages / elapsed,
            "turns_per_s": turns / elapsed,
            "p50_ms": _pct(lat, 0.5),
            "p99_ms": _pct(lat, 0.99),
            "ingest_per_s": args.messages / ingested,
            "cpu_postgres_s": cpu[0],
            "cpu_hosts_s": cpu[1],
            "cpu_driver_s": cpu[2],
            "pulls": sum(s.pulls for s in statuses),
            "rows_read_per_message": sum(s.rows_read for s in statuses) / args.messages,
            "shard_moves": moves,
            "stale_turns": sum(o.get("stale", 0) for o in outcomes),
            "deadlocks": deadlocks,
            **split,
            "turn_mean_ms": 1000
            * sums.get("hermes_turn_duration_seconds_sum", 0)
            / max(1, sums.get("hermes_turn_duration_seconds_count", 0)),
            "agent_mean_ms": 1000
            * sums.get("hermes_agent_call_duration_seconds_sum", 0)
            / max(1, sums.get("hermes_agent_call_duration_seconds_count", 0)),
            "commit_mean_ms": 1000
            * sums.get("hermes_store_commit_duration_seconds_sum", 0)
            / max(1, sums.get("hermes_store_commit_duration_seconds_count", 0)),
            "commit_batch_mean": sums.get("hermes_store_commit_batch_size_sum", 0)
            / max(1, sums.get("hermes_store_commit_batch_size_count", 0)),
            "commits": sums.get("hermes_store_commit_duration_seconds_count", 0),
        }
    finally:
        for handle in handles.values():
            ray.get(handle.stop.remote(), timeout=60)
            ray.kill(handle, no_restart=True)
        postgres.drop_database(name)


def measure_failover(postgres: Cluster, args: argparse.Namespace) -> None:
    import ray

    from hermes_actors.cluster.host.ray_host import ensure_hosts
    from hermes_actors.store.pg.shards import shard_of

    name = postgres.create_database()
    dsn = postgres.dsn(name)
    names = ("fo-0", "fo-1")
    ttl = args.failover_ttl
    settings = [
        HostSettings(name=n, postgres_dsn=dsn, hosts=names, shards=64, lease_ttl_s=ttl, grace_s=ttl / 2) for n in names
    ]
    handles = ensure_hosts(settings)
    try:
        with PostgresStore.open(dsn, migrate_schema=False) as pg:
            poll_until(lambda: all(ray.get(h.status.remote()).shards for h in handles.values()), timeout=60)
            victim = ray.get(handles["fo-0"].status.remote())
            ingress = ClusterIngress(pg, shards=64)
            os.kill(victim.pid, signal.SIGKILL)
            killed = time.time()
            platform = FakePlatform("fake")
            chats = [c for c in range(200) if shard_of(f"agent:main:fake:dm:chat-{c}", 64) in victim.shards][:20]
            sent = 0
            answered: float | None = None
            deadline = time.monotonic() + 60
            while answered is None and time.monotonic() < deadline:  # a trickle into the dead host's shards
                chat = chats[sent % len(chats)]
                ingress.accept(platform.message(f"f{sent}", chat_id=f"chat-{chat}", user_id=f"u{chat}"))
                sent += 1
                time.sleep(0.05)
                found = pg.database.value("SELECT min(created_at) FROM outbox")
                answered = None if found is None else float(found)
        failover = (answered - killed) if answered is not None else float("nan")
        print(
            figure_line("cluster_failover_s", failover, "s", f"kill -9 -> first reply from the new owner, term {ttl} s")
        )
    finally:
        for handle in handles.values():
            ray.kill(handle, no_restart=True)
        postgres.drop_database(name)


def measure_scan(postgres: Cluster, args: argparse.Namespace) -> None:
    """One reset scan of a host holding every shard, over ``--scan-sessions`` live sessions (1% of them idle past
    their reset, the rest active within the idle time), timed once on a fresh database."""
    from hermes_actors.cluster.host.timers import ShardTimers
    from hermes_actors.lifecycle.policy import ResetConfig, ResetMode
    from hermes_actors.store.pg.shards import ShardFence

    name = postgres.create_database()
    try:
        with PostgresStore.open(postgres.dsn(name), migrate_schema=False) as pg:
            now = time.time()
            pg.database.execute(
                "INSERT INTO sessions (id, source, chat_type, started_at, last_active_at) "
                "SELECT 'bench-' || g, 'fake', 'dm', %(now)s - 90000, "
                "CASE WHEN g %% 100 = 0 THEN %(now)s - 90000 ELSE %(now)s - (g %% 80000) END "
                "FROM generate_series(1, %(n)s) AS g",
                {"now": now, "n": args.scan_sessions},
            )
            pg.database.execute("ANALYZE sessions")
            fence = ShardFence("bench", 64)
            fence.grant(dict.fromkeys(range(64), 1), 3600.0, asked_at=time.monotonic())
            timers = ShardTimers(pg, fence, ResetConfig(mode=ResetMode.IDLE, idle_minutes=1440))
            started = time.monotonic()
            added = timers.scan()
            elapsed = time.monotonic() - started
        print(
            figure_line(
                "cluster_reset_scan_ms",
                elapsed * 1000,
                "ms",
                f"one scan, {args.scan_sessions} live sessions, all 64 shards held, {added} resets due",
            )
        )
    finally:
        postgres.drop_database(name)


def measure_sqlite(agent: Agent, args: argparse.Namespace) -> dict[str, float]:
    """One run of the same messages through one single-machine runtime; its figures by name."""
    with tempfile.TemporaryDirectory() as directory:
        with open_fake_gateway(Path(directory) / "state.db", agent=agent, max_concurrent_agent_calls=256) as (gw, fake):
            messages = _messages(args.messages, args.chats)
            started = time.monotonic()
            for message in messages:
                gw.accept(message)
            poll_until(lambda: len(fake.sent) >= len(messages) * 0.99, timeout=300, interval=0.05)
            elapsed = time.monotonic() - started
        return {"messages_per_s": len(fake.sent) / elapsed}


_UNITS = {"messages_per_s": "messages/s", "turns_per_s": "turns/s", "p50_ms": "ms", "p99_ms": "ms"}
_PROFILE = (
    "cpu_postgres_s",
    "cpu_hosts_s",
    "cpu_driver_s",
    "pulls",
    "rows_read_per_message",
    "shard_moves",
    "stale_turns",
    "deadlocks",
    "handover_p50_ms",
    "handover_p99_ms",
    "runtime_p99_ms",
    "tail_before_handover",
    "turn_mean_ms",
    "agent_mean_ms",
    "commit_mean_ms",
    "commit_batch_mean",
    "commits",
)


def _medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {name: statistics.median(run[name] for run in runs) for name in runs[0]}


def measure_throughput(postgres: Cluster, label: str, factory: Callable[[], Agent], args: argparse.Namespace) -> None:
    """Each host count and the single-machine runtime ``--repeat`` times, interleaved; medians and ratios."""
    counts = [int(h) for h in args.hosts.split(",")]
    runs: dict[str, list[dict[str, float]]] = {}
    for _ in range(args.repeat):
        for hosts in counts:
            runs.setdefault(str(hosts), []).append(measure_cluster(postgres, hosts, factory, label, args))
        runs.setdefault("sqlite", []).append(measure_sqlite(factory(), args))
    note = f"median of {args.repeat}, {args.messages} messages over {args.chats} chats"
    sqlite = _medians(runs["sqlite"])["messages_per_s"]
    print(figure_line(f"sqlite_{label}_messages_per_s", sqlite, "messages/s", f"{note}, one hermesd runtime"))
    first = _medians(runs[str(counts[0])])["messages_per_s"]
    for hosts in counts:
        figures = _medians(runs[str(hosts)])
        prefix = f"cluster_{label}_{hosts}_hosts"
        for name, unit in _UNITS.items():
            extra = note if name == "messages_per_s" else ("ingest -> reply committed" if name == "p50_ms" else "")
            print(figure_line(f"{prefix}_{name}", figures[name], unit, extra))
        print(figure_line(f"{prefix}_vs_{counts[0]}_hosts", figures["messages_per_s"] / first, "x", "messages/s"))
        print(figure_line(f"{prefix}_vs_sqlite", figures["messages_per_s"] / sqlite, "x", "messages/s"))
        if args.profile:
            for name in _PROFILE:
                print(figure_line(f"{prefix}_{name}", figures[name]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1500, help="messages per measurement (default 1500)")
    parser.add_argument("--chats", type=int, default=100, help="conversations they are spread over (default 100)")
    parser.add_argument("--hosts", default="1,2,4", help="shard host counts to measure (default 1,2,4)")
    parser.add_argument("--scan-sessions", type=int, default=100_000, help="live sessions in the scan run")
    parser.add_argument(
        "--only", choices=("all", "scan", "throughput", "failover", "cost"), default="all", help="which runs"
    )
    parser.add_argument("--agents", choices=("all", "echo", "agent50ms"), default="all", help="which agents")
    parser.add_argument(
        "--no-settle",
        dest="settle",
        action="store_false",
        help="start each run once every host holds a shard, not once every shard is with its home host (as before)",
    )
    parser.add_argument("--pull-interval", type=float, default=2.0, help="the hosts' periodic pull (s, default 2)")
    parser.add_argument(
        "--repeat", type=int, help="runs of each configuration, alternating; medians (default 3; --only cost: 1)"
    )
    parser.add_argument("--spy", metavar="FILE", help="append py-spy dumps of the host workers during each run")
    parser.add_argument("--profile", action="store_true", help="also print CPU seconds and pulls per run")
    parser.add_argument("--failover-ttl", type=float, default=3.0, help="shard term in the failover run (s)")
    cluster_cost.add_arguments(parser)
    args = parser.parse_args()
    if args.repeat is None:
        args.repeat = 1 if args.only == "cost" else 3
    bin_dir = find_bin_dir()
    if bin_dir is None:
        sys.exit("PostgreSQL server binaries are not installed")
    if args.only == "scan":  # PostgreSQL only: no Ray, no namespace
        postgres = Cluster(bin_dir)
        postgres.prepare_template()
        print(figure_line("load_average_start", os.getloadavg()[0]))
        try:
            measure_scan(postgres, args)
        finally:
            postgres.stop()
        print(figure_line("load_average_end", os.getloadavg()[0]))
        return
    _in_namespace()
    if args.only == "cost":  # its own PostgreSQL, Ray head and hermesd processes
        cluster_cost.run(args)
        return
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ["RAY_AUTH_MODE"] = "disabled"
    import ray

    postgres = Cluster(bin_dir)
    postgres.prepare_template()
    ray.init(
        address="local",
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        num_cpus=2,
        log_to_driver=False,
        _temp_dir=tempfile.mkdtemp(prefix="hermes-ray-"),
        namespace="hermes-bench",
    )
    print(figure_line("load_average_start", os.getloadavg()[0]))
    try:
        agents: dict[str, Callable[[], Agent]] = {
            "echo": EchoAgent,
            "agent50ms": functools.partial(SeeingAgent, 0.05, 0.05),
        }
        for label, factory in agents.items():
            if args.only in ("all", "throughput") and args.agents in ("all", label):
                measure_throughput(postgres, label, factory, args)
        if args.only in ("all", "failover"):
            measure_failover(postgres, args)
        if args.only == "all":
            measure_scan(postgres, args)
    finally:
        ray.shutdown()
        postgres.stop()
    print(figure_line("load_average_end", os.getloadavg()[0]))
    print(figure_line("cpus", os.cpu_count() or 0))


if __name__ == "__main__":
    main()
