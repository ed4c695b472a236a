"""``bench/cluster.py --only cost``: the cluster's cost per message against one machine's, same load, one run.

Each side is started as an operator would (``bench/cost_sides.py``): one ``hermesd`` on SQLite; PostgreSQL, a Ray
head and ``--replicas`` ``hermesd --cluster`` with ``--shard-hosts`` shard hosts. Both answer with the echo agent.
Then, on each side in turn (alternating with ``--repeat``):

1. warm-up: each of the ``--sessions`` conversations gets its first message, paced at ``--rate``;
2. idle: ``--idle`` seconds without load, the side's CPU seconds per second;
3. load: ``--rate`` messages/s for ``--seconds``, half signed webhooks answered through a callback the bench
   receives, half non-streaming chat completions (``bench/cost_load.py``), until every one is answered. The window
   runs from the first message to the last answer; the CPU each process group used in it (``/proc``,
   ``bench/cost_procs.py``) is divided by the messages sent.

One ``name: value unit (note)`` line per figure, medians over the runs; bench/README.md lists them.
``--profile`` also traces every statement of the hosts, the replicas and the one machine (``HERMES_SQL_TRACE``),
has PostgreSQL log every round trip with the client group it came from (``log_statement = all``, ``PGAPPNAME``)
and counts its statements (``pg_stat_statements``): per message, statements, round trips, transactions and the top
ones of each group (bench/cost_profile.py). The tracing and the logging cost CPU, which the CPU lines then include.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from cost_load import Load, LoadResult, Receiver
from cost_procs import Group, Snapshot, cpu_between
from cost_profile import (
    Statements,
    backend_waits,
    pg_counters,
    pg_statements,
    read_pg_log,
    read_traces,
    waits_between,
)
from cost_sides import SECRET, ClusterSide, SingleSide
from report import figure_line

__all__ = ["add_arguments", "run"]

_RECEIVER_PORT = 9000
_Side = SingleSide | ClusterSide


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``--only cost`` (``--repeat`` and ``--profile`` are bench/cluster.py's own)."""
    cost = parser.add_argument_group("--only cost")
    cost.add_argument("--rate", type=float, default=80.0, help="messages per second (default 80)")
    cost.add_argument("--seconds", type=float, default=20.0, help="seconds of load (default 20, at most 120)")
    cost.add_argument("--sessions", type=int, default=200, help="conversations, half of each kind (default 200)")
    cost.add_argument("--replicas", type=int, default=1, help="hermesd --cluster replicas (default 1)")
    cost.add_argument("--shard-hosts", type=int, default=2, help="shard hosts (default 2)")
    cost.add_argument("--shards", type=int, default=256, help="cluster.shards (default 256, the config's)")
    cost.add_argument("--idle", type=float, default=3.0, help="idle seconds measured before the load (default 3)")
    cost.add_argument("--top", type=int, default=12, help="--profile: statements listed per side (default 12)")
    cost.add_argument("--sides", choices=("both", "sqlite", "cluster"), default="both", help="which sides")
    cost.add_argument("--keep", action="store_true", help="keep the work directory (logs, traces) and print it")
    cost.add_argument(
        "--together",
        action="store_true",
        help="start both sides once and alternate their load windows (sqlite, cluster, cluster, sqlite, ...) "
        "while both run: each pair's ratio from windows seconds apart, not minutes",
    )


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else float("nan")


def _cpu(before: Snapshot, after: Snapshot, groups: dict[str, Group]) -> dict[str, float]:
    return {name: cpu_between(before, after, group) for name, group in groups.items()}


@dataclass
class Profile:
    """``--profile``'s view of one run: the statements each process group traced, the round trips PostgreSQL
    logged from each, and PostgreSQL's own statement counts (the cluster only)."""

    traced: dict[str, Statements]
    logged: dict[str, Statements] = field(default_factory=dict)
    waits: dict[str, int] = field(default_factory=dict)
    postgres: Statements | None = None


async def _drive(
    side: _Side, args: argparse.Namespace, trace_dir: Path | None
) -> tuple[dict[str, float], Profile | None]:
    """Warm-up, idle and load on a started side; its figures, and its profile (``None`` without ``--profile``)."""
    receiver = Receiver(_RECEIVER_PORT)
    await receiver.start()
    count = int(args.rate * args.seconds)
    try:
        async with Load(side.targets, receiver, SECRET, args.sessions, uuid.uuid4().hex[:8]) as load:
            await load.run(args.rate, 0, args.sessions, timeout=120)
            await asyncio.sleep(1.0)
            before = Snapshot()
            idle_from = time.perf_counter()
            await asyncio.sleep(args.idle)
            after = Snapshot()
            idle = {
                name: seconds / (time.perf_counter() - idle_from)
                for name, seconds in _cpu(before, after, side.groups(after)).items()
            }
            counters: dict[str, float] = {}
            backends: dict[int, tuple[str, int]] = {}
            waits: dict[str, int] = {}
            if isinstance(side, ClusterSide) and args.profile:
                side.sql("SELECT pg_stat_statements_reset()")
                counters = pg_counters(side.sql)
                backends = backend_waits(side.sql)
            since = time.time()
            driver = os.times()
            before = Snapshot()
            result = await load.run(args.rate, args.sessions, count, timeout=120)
            after = Snapshot()
            until = time.time()
            driver_cpu = sum(os.times()[:2]) - sum(driver[:2])
            if isinstance(side, ClusterSide) and args.profile:
                waits = waits_between(backends, backend_waits(side.sql), side.applications())
    finally:
        await receiver.stop()
    groups = side.groups(after)
    cpu = _cpu(before, after, groups)
    figures = _figures(result, cpu, idle, driver_cpu)
    figures["callbacks_twice"] = float(receiver.twice)
    figures["pending_after"], figures["unsent_after"] = _drained(side)
    figures |= _split(result, side.turn_times())
    profile: Profile | None = None
    if args.profile:
        assert trace_dir is not None
        profile = Profile(traced=read_traces(trace_dir, groups, since, until))
        if isinstance(side, ClusterSide):
            profile.postgres = pg_statements(side.sql)
            profile.postgres.kinds = {k: v - counters[k] for k, v in pg_counters(side.sql).items()}
            profile.logged = read_pg_log(side.server_log, side.applications(), since, until)
            profile.waits = waits
    return figures, profile


def _figures(result: LoadResult, cpu: dict[str, float], idle: dict[str, float], driver_cpu: float) -> dict[str, float]:
    n = result.messages
    figures = {f"{name}_cpu_ms_per_message": seconds * 1000 / n for name, seconds in cpu.items()}
    figures["cpu_ms_per_message"] = sum(cpu.values()) * 1000 / n
    figures |= {
        "api_p50_ms": _pct(result.api_latency, 0.5),
        "api_p99_ms": _pct(result.api_latency, 0.99),
        "webhook_lag_p50_ms": _pct(result.webhook_lag, 0.5),
        "webhook_lag_p99_ms": _pct(result.webhook_lag, 0.99),
        "webhook_accept_p50_ms": _pct(result.webhook_accept, 0.5),
        "idle_cpu_s_per_s": sum(idle.values()),
        "messages_per_s": n / result.done_for,
        "late_p99_ms": _pct(result.late, 0.99),
        "window_s": result.done_for,
        "driver_cpu_ms_per_message": driver_cpu * 1000 / n,
    }
    if len(idle) > 1:
        figures |= {f"idle_{name}_cpu_s_per_s": seconds for name, seconds in idle.items()}
    return figures


def _split(result: LoadResult, turns: list[tuple[str, float, float]]) -> dict[str, float]:
    """Medians of where each kind of message spent its time: request -> its inbox row committed, -> its turn
    committed, -> the answer (the response, or the callback) received."""
    parts: dict[str, list[tuple[float, float, float]]] = {"api": [], "webhook": []}
    for text, received, committed in turns:
        found = result.answered.get(text)
        if found is not None:
            kind, sent, took = found
            parts[kind].append((received - sent, committed - received, sent + took - committed))
    figures = {}
    for kind, rows in parts.items():
        for index, stage in enumerate(("to_inbox", "inbox_to_turn", "turn_to_answer")):
            figures[f"{kind}_{stage}_p50_ms"] = _pct([row[index] for row in rows], 0.5)
    return figures


def _drained(side: _Side) -> tuple[float, float]:
    """(inbox rows pending, replies unsent) once they are 0, or after 10 s."""
    deadline = time.monotonic() + 10
    while True:
        pending, unsent = side.pending()
        if (pending, unsent) == (0, 0) or time.monotonic() > deadline:
            return float(pending), float(unsent)
        time.sleep(0.2)


class _Started:
    """One side started in a work directory of its own (its logs and traces), stopped and removed by :meth:`stop`."""

    def __init__(self, kind: str, args: argparse.Namespace, code: Path) -> None:
        self.kind = kind
        self.workdir = Path(tempfile.mkdtemp(prefix=f"hermes-cost-{kind}-"))
        self.trace_dir = self.workdir / "traces" if args.profile else None
        if self.trace_dir is not None:
            self.trace_dir.mkdir()
        callback = f"http://127.0.0.1:{_RECEIVER_PORT}/replies"
        self.side: _Side
        if kind == "sqlite":
            self.side = SingleSide(self.workdir, code, self.trace_dir, callback)
        else:
            self.side = ClusterSide(
                self.workdir,
                code,
                self.trace_dir,
                callback,
                replicas=args.replicas,
                hosts=args.shard_hosts,
                shards=args.shards,
                statements=args.profile,
            )
        self._keep = args.keep

    def drive(self, args: argparse.Namespace) -> tuple[dict[str, float], Profile | None]:
        return asyncio.run(_drive(self.side, args, self.trace_dir))

    def stop(self) -> None:
        try:
            self.side.stop()
        finally:
            if self._keep:
                print(f"# {self.kind}: logs and traces kept in {self.workdir}", flush=True)
            else:
                shutil.rmtree(self.workdir, ignore_errors=True)


def _measure(kind: str, args: argparse.Namespace, code: Path) -> tuple[dict[str, float], Profile | None]:
    started = _Started(kind, args, code)
    try:
        started.side.start()
        return started.drive(args)
    finally:
        started.stop()


def _together(
    kinds: list[str], args: argparse.Namespace, code: Path, runs: dict[str, list[dict[str, float]]]
) -> dict[str, Profile | None]:
    """``--together``: every side started once; ``args.repeat`` load windows of each, alternating, while all run
    (a side's CPU counts its own processes only; the other's idle CPU, about 0.03 CPU-s/s for the cluster, runs
    beside it)."""
    profiles: dict[str, Profile | None] = {}
    sides: list[_Started] = []
    try:
        for kind in kinds:
            sides.append(_Started(kind, args, code))
            sides[-1].side.start()
        for number in range(args.repeat):
            for started in sides if number % 2 == 0 else sides[::-1]:
                figures, profiles[started.kind] = started.drive(args)
                runs[started.kind].append(figures)
                _said(started.kind, number, figures)
    finally:
        for started in sides:
            started.stop()
    return profiles


def _said(kind: str, number: int, figures: dict[str, float]) -> None:
    cpu, api = figures["cpu_ms_per_message"], figures["api_p50_ms"]
    print(f"# {kind} run {number + 1}: {cpu:.2f} ms CPU per message, API p50 {api:.1f} ms", flush=True)


_UNITS = {"_ms": "ms", "_per_message": "", "_s_per_s": "CPU-s/s", "_per_s": "messages/s", "_s": "s"}
_NOTES = {
    "cpu_ms_per_message": "CPU of every process of the side over the window / messages",
    "api_p50_ms": "chat completion, request -> whole response",
    "webhook_lag_p50_ms": "webhook request -> its callback received",
    "pending_after": "inbox rows still pending at the end (must be 0)",
    "unsent_after": "replies not marked sent at the end",
    "driver_cpu_ms_per_message": "the bench's own load and receiver, not counted above",
    "api_to_inbox_p50_ms": "request sent -> its inbox row committed",
    "api_inbox_to_turn_p50_ms": "inbox row -> the turn's commit (it dates its messages)",
    "api_turn_to_answer_p50_ms": "turn's commit -> the whole response received",
    "webhook_turn_to_answer_p50_ms": "turn's commit -> the callback received",
}


def _unit(name: str) -> str:
    if name.endswith("cpu_ms_per_message"):
        return "ms"
    return next((unit for suffix, unit in _UNITS.items() if name.endswith(suffix)), "")


def _print_side(kind: str, runs: list[dict[str, float]], note: str) -> dict[str, float]:
    medians = {name: statistics.median(run[name] for run in runs) for name in runs[0]}
    for name, value in medians.items():
        extra = _NOTES.get(name, "")
        if name == "cpu_ms_per_message":
            extra = f"{extra}; {note}"
        print(figure_line(f"cost_{kind}_{name}", value, _unit(name), extra), flush=True)
    return medians


def _print_tops(prefix: str, statements: Statements, messages: int, top: int, *, timed: bool = True) -> None:
    for rank, (sql, count, seconds) in enumerate(statements.top(top), 1):
        mean = f"{seconds * 1000 / max(count, 1):.3f} ms each" if timed else ""
        if sql in statements.plans:
            plans, planning = statements.plans[sql]
            mean += f", planned {plans / max(count, 1):.2f} times a run ({planning * 1000 / max(plans, 1):.3f} ms each)"
        print(f"{figure_line(f'{prefix}_{rank}', count / messages, 'per message', mean)}: {sql[:180]}")


def _print_profile(kind: str, profile: Profile, messages: int, top: int) -> None:
    side = f"cost_{kind}"
    for name, statements in sorted(profile.traced.items()):
        prefix = f"{side}_{name}" if kind == "cluster" else side
        note = "statements through the store's SqlDb, traced in the process (HERMES_SQL_TRACE)"
        print(figure_line(f"{prefix}_statements_per_message", statements.count / messages, "", note))
        for what, value in sorted(statements.kinds.items()):
            print(figure_line(f"{prefix}_traced_{what}_per_message", value / messages))
        _print_tops(f"{prefix}_statement", statements, messages, top)
    for name, waits in sorted(profile.waits.items()):
        note = "its PostgreSQL backends' voluntary context switches: one per request waited for, or NOTIFY delivered"
        print(figure_line(f"{side}_{name}_round_trips_per_message", waits / messages, "", note))
    for name, statements in sorted(profile.logged.items()):
        note = "statements PostgreSQL logged from these processes (log_statement = all); a pipeline's each apart"
        print(figure_line(f"{side}_{name}_pg_statements_per_message", statements.count / messages, "", note))
        opened = statements.kinds.get("transactions", 0) / messages
        print(figure_line(f"{side}_{name}_transactions_per_message", opened, "", "statements that BEGIN"))
        _print_tops(f"{side}_{name}_pg_statement", statements, messages, top, timed=False)
    if profile.postgres is not None:
        note = "pg_stat_statements calls, BEGIN and COMMIT included"
        print(figure_line(f"{side}_postgres_statements_per_message", profile.postgres.count / messages, "", note))
        for what, value in sorted(profile.postgres.kinds.items()):
            print(figure_line(f"{side}_postgres_{what}_per_message", value / messages, "", "pg_stat_database"))
        _print_tops(f"{side}_postgres_statement", profile.postgres, messages, top)


def run(args: argparse.Namespace) -> None:
    """Measure both sides ``args.repeat`` times, alternating; print the medians and the cluster's ratio."""
    if not 0 < args.seconds <= 120:
        raise SystemExit("--seconds must be more than 0 and at most 120")
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # the sides stop in their finally
    code = Path(os.environ.get("HERMES_BENCH_CODE") or Path(__file__).resolve().parent.parent)
    kinds = ["sqlite", "cluster"] if args.sides == "both" else [args.sides]
    runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
    profiles: dict[str, Profile | None] = {}
    started = time.monotonic()
    print(figure_line("load_average_start", os.getloadavg()[0]), flush=True)
    if args.together:
        profiles = _together(kinds, args, code, runs)
    for number in range(0 if args.together else args.repeat):
        for kind in kinds if number % 2 == 0 else kinds[::-1]:
            figures, profile = _measure(kind, args, code)
            runs[kind].append(figures)
            _said(kind, number, figures)
            profiles[kind] = profile
    count = int(args.rate * args.seconds)
    note = f"median of {args.repeat}, {count} messages at {args.rate:g}/s over {args.sessions} conversations" + (
        "; traced (--profile)" if args.profile else ""
    )
    medians = {kind: _print_side(kind, runs[kind], note) for kind in kinds}
    if len(kinds) == 2:
        ratio = medians["cluster"]["cpu_ms_per_message"] / medians["sqlite"]["cpu_ms_per_message"]
        print(figure_line("cost_cluster_vs_sqlite", ratio, "x", "CPU per message, cluster / one machine"))
        pairs = [
            cluster["cpu_ms_per_message"] / sqlite["cpu_ms_per_message"]
            for sqlite, cluster in zip(runs["sqlite"], runs["cluster"], strict=True)
        ]
        shown = ", ".join(f"{pair:.2f}" for pair in pairs)
        print(figure_line("cost_cluster_vs_sqlite_pairs_median", statistics.median(pairs), "x", f"each pair: {shown}"))
    for kind in kinds:
        found = profiles.get(kind)
        if found is not None:
            _print_profile(kind, found, count, args.top)
    print(figure_line("load_average_end", os.getloadavg()[0]))
    print(figure_line("cost_runtime_s", time.monotonic() - started, "s"))
    left = {kind: [run["pending_after"] for run in runs[kind]] for kind in kinds}
    if any(any(counts) for counts in left.values()):
        raise SystemExit(f"messages were left pending at the end of a run (by side, per run): {left}")
