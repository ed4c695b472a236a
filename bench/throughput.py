"""Turn throughput and latency of the whole runtime, memory per live actor, and the raw APSW ceiling.

Every figure goes the full path: ``Gateway.accept`` (inbox commit) → supervisor → session actor → agent →
turn commit → outbox actor → ``FakePlatform.send``. Each measurement runs on a fresh temporary database
(synchronous NORMAL). Run ``python bench/throughput.py --help``; bench/README.md explains every line it prints.
Not a test: pytest does not collect it (it is outside ``tests`` and its name does not start with ``test_``).

``HERMES_BENCH_CODE=DIR`` measures the package of the checkout at ``DIR`` with this script (bench/alternate.sh
uses it, so both sides of a comparison are measured the same way).
"""

from __future__ import annotations

import argparse
import bisect
import cProfile
import gc
import importlib
import os
import pstats
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Protocol, TypeVar

# Run from a checkout without installing: the repository root goes first, so the working tree is measured (or the
# checkout HERMES_BENCH_CODE names).
sys.path.insert(0, os.environ.get("HERMES_BENCH_CODE") or str(Path(__file__).resolve().parent.parent))

import apsw
import pykka
from report import figure_line

from hermes_actors.agents.base import AgentReply, EchoAgent, Memory, TurnInput
from hermes_actors.config import RuntimeConfig
from hermes_actors.lifecycle.policy import ResetConfig, ResetMode
from hermes_actors.messages import InboundMessage, OutboundMessage, encode
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.futex import futex_slots_for, size_futex_hash
from hermes_actors.runtime.gateway import AcceptResult, Gateway
from hermes_actors.store import MessageRecord, Synchronous, migrate, open_connection
from hermes_actors.store.sqlite_db import SqliteDb
from hermes_actors.store.writer import WriterStatistics
from hermes_actors.testing import FakePlatform

PLATFORM = "bench"
NO_MERGING = 10**6  # pending_soft_limit = pending_hard_limit: every message is its own turn, none is refused
SLOW_AGENT_DELAY_S = 0.05
WARMUP_TURNS = 20
PARTS = ("serial", "aggregate", "slow", "activate", "handoff", "ceiling")
TARGETS = (  # (figure, ">=" or "<=", bound): issue 34's first, then the earlier ones
    ("aggregate latency p50", "<=", 100.0),
    ("aggregate outbox lag p50", "<=", 10.0),
    ("aggregate CPU per turn", "<=", 300.0),
    ("aggregate / batched ceiling", ">=", 0.5),
    ("one session turns/s", ">=", 1300.0),
    ("RSS per live actor", "<=", 30.0),
    ("activation CPU per session", "<=", 1000.0),
    ("aggregate turns/s", ">=", 2000.0),
    ("50ms agent / aggregate", ">=", 0.8),
    # The same with producers that wait for each accept before the next (no accepts in flight).
    ("aggregate one at a time turns/s", ">=", 2000.0),
    ("aggregate one at a time / ceiling", ">=", 0.5),
    ("50ms agent / aggregate, one at a time", ">=", 0.8),
)
REPLY_TIMEOUT_S = 120.0

R = TypeVar("R")
_figures: dict[str, float] = {}


def figure(name: str, value: float | int, unit: str = "", note: str = "") -> None:
    """Print one figure as ``name: value unit (note)`` and remember it for the summary."""
    _figures[name] = float(value)
    print(figure_line(name, value, unit, note), flush=True)


def percentile(values: Sequence[float], fraction: float) -> float:
    """Return the nearest-rank percentile of ``values`` (``fraction`` in 0..1)."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered) + 0.5) - 1))
    return ordered[index]


def rss_kib() -> int:
    """Return this process's resident set size in KiB (``VmRSS`` of /proc/self/status)."""
    for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS line in /proc/self/status")


# Thread name prefixes → the part of the runtime they belong to (pykka names actor threads "<Class>-<n>").
THREAD_GROUPS = (
    ("hermes-store-writer", "writer"),
    ("SupervisorActor", "supervisor"),
    ("SessionActor", "session actors"),
    ("hermes-agent", "agent pool"),
    ("OutboxActor", "outbox actor"),
    ("outbox-", "outbox lanes"),  # LaneWorkers threads, named outbox-<platform>-<n>
    ("producer", "producers"),
    ("MainThread", "bench main"),
)


def thread_group(name: str) -> str:
    """Return the part of the runtime a thread named ``name`` belongs to."""
    return next((group for prefix, group in THREAD_GROUPS if name.startswith(prefix)), "other")


def thread_cpu_s() -> dict[int, tuple[str, float]]:
    """Return the CPU seconds each live thread has used so far, by thread ident, with its group.

    Producer threads may end while this runs (reading the clock of an ended thread is undefined), so they are
    left out: they measure themselves with ``time.thread_time``.
    """
    used: dict[int, tuple[str, float]] = {}
    for thread in threading.enumerate():
        if thread.ident is None or thread_group(thread.name) == "producers":
            continue
        try:
            clock = time.pthread_getcpuclockid(thread.ident)
            used[thread.ident] = (thread_group(thread.name), time.clock_gettime(clock))
        except OSError:  # the thread ended between enumerate() and the clock read
            continue
    return used


@dataclass
class CpuWindow:
    """CPU use of the process over a measured window: by thread group, and context switches."""

    by_group: dict[str, float]
    user_s: float
    system_s: float
    context_switches: int
    wall_s: float


class CpuMeter:
    """Reads per-thread CPU clocks and ``getrusage`` at the start and the end of a window."""

    def __init__(self) -> None:
        self._threads = thread_cpu_s()
        self._usage = resource.getrusage(resource.RUSAGE_SELF)
        self._wall = time.perf_counter()

    def stop(self) -> CpuWindow:
        """Close the window (call it while the runtime's threads are still alive)."""
        wall = time.perf_counter() - self._wall
        usage = resource.getrusage(resource.RUSAGE_SELF)
        by_group: dict[str, float] = {}
        for ident, (group, used) in thread_cpu_s().items():
            before = self._threads.get(ident, (group, 0.0))[1]
            by_group[group] = by_group.get(group, 0.0) + used - before
        switches = usage.ru_nvcsw + usage.ru_nivcsw - self._usage.ru_nvcsw - self._usage.ru_nivcsw
        return CpuWindow(
            by_group=by_group,
            user_s=usage.ru_utime - self._usage.ru_utime,
            system_s=usage.ru_stime - self._usage.ru_stime,
            context_switches=switches,
            wall_s=wall,
        )

    @staticmethod
    def describe(window: CpuWindow) -> str:
        """``N% of C cores busy, S% of it in the kernel``."""
        cores = os.cpu_count() or 1
        used = window.user_s + window.system_s
        return (
            f"user+sys of the process: {used / window.wall_s / cores:.0%} of {cores} cores busy, "
            f"{window.system_s / max(used, 1e-9):.0%} of it in the kernel"
        )


class StatementTrace:
    """Counts the SQL statements that every APSW connection opened from now on executes (an exec tracer set by
    ``apsw.connection_hooks``): all of them, and those that open a transaction (``BEGIN``) or a savepoint.

    Each connection counts into its own list (one thread uses a connection at a time), summed by :meth:`totals`.
    The tracer costs a Python call per statement, so it is on only with ``--trace``.
    """

    def __init__(self) -> None:
        self._counts: list[list[int]] = []

    def install(self) -> None:
        """Trace every connection opened from now on."""
        apsw.connection_hooks.append(self._hook)

    def _hook(self, connection: apsw.Connection) -> None:
        counts = [0, 0, 0]
        self._counts.append(counts)

        def trace(cursor: apsw.Cursor, sql: str, bindings: Any) -> bool:
            counts[0] += 1
            head = sql.lstrip()[:9].upper()
            if head.startswith("BEGIN"):
                counts[1] += 1
            elif head.startswith("SAVEPOINT"):
                counts[2] += 1
            return True

        connection.exec_trace = trace

    def totals(self) -> tuple[int, int, int]:
        """(statements, transactions begun, savepoints) so far, over every traced connection."""
        return (
            sum(c[0] for c in self._counts),
            sum(c[1] for c in self._counts),
            sum(c[2] for c in self._counts),
        )


TRACE = StatementTrace()  # installed by main() with --trace; untouched otherwise (totals stay 0)


class ThreadProfiler:
    """cProfile in every thread started while it is on (``threading.setprofile``) and in the calling thread.

    ``save(directory)`` writes one pstats file per thread group (``writer.prof``, ``session-actors.prof``, ...)
    and ``all.prof``. Times are CPU time per thread (``time.thread_time``): blocking and waiting for the GIL do
    not count.
    """

    def __init__(self) -> None:
        self._profiles: list[tuple[str, cProfile.Profile]] = []
        self._lock = threading.Lock()

    def _start_in_thread(self, frame: FrameType, event: str, arg: Any) -> None:
        profile = cProfile.Profile(time.thread_time)  # CPU time of this thread: waits for the GIL do not count
        with self._lock:
            self._profiles.append((thread_group(threading.current_thread().name), profile))
        profile.enable()  # replaces this hook in the thread

    def start(self) -> None:
        """Profile the calling thread and every thread started from now on."""
        threading.setprofile(self._start_in_thread)
        self._start_in_thread(sys._getframe(), "call", None)

    def save(self, directory: Path) -> None:
        """Stop profiling the calling thread and write the merged statistics per thread group."""
        threading.setprofile(None)
        directory.mkdir(parents=True, exist_ok=True)
        groups: dict[str, list[cProfile.Profile]] = {}
        with self._lock:
            for group, profile in self._profiles:
                groups.setdefault(group, []).append(profile)
        for profile in groups.get("bench main", []):
            profile.disable()
        everything: pstats.Stats | None = None
        for group, profiles in groups.items():
            stats = pstats.Stats(profiles[0])
            for profile in profiles[1:]:
                stats.add(profile)
            stats.dump_stats(directory / f"{group.replace(' ', '-')}.prof")
            if everything is None:
                everything = pstats.Stats(profiles[0])
                profiles = profiles[1:]
            for profile in profiles:
                everything.add(profile)
        if everything is not None:
            everything.dump_stats(directory / "all.prof")


def load_average() -> str:
    """The 1, 5 and 15 minute load averages of the machine (other processes compete for the cores)."""
    return " ".join(Path("/proc/loadavg").read_text(encoding="ascii").split()[:3])


ACTIVATION_MAX_LIVE = 12000  # max_live_actors of the activation run, the most threads any part starts


def size_futex_hash_as_hermesd(slots: int | None) -> None:
    """Size the futex hash as hermesd does at start (``hermes_actors.runtime.futex``), or to ``slots`` (-1: leave
    it)."""
    if slots is None:
        slots = futex_slots_for(ACTIVATION_MAX_LIVE + 256 + 64)
    if slots < 0:
        print("# futex hash: the kernel's default", flush=True)
    elif size_futex_hash(slots):
        print(f"# futex hash: {slots} private slots" if slots else "# futex hash: the global one", flush=True)
    else:
        print(f"# futex hash: the kernel refused {slots} slots (older than 6.16?); its default", flush=True)


def _tree_has(module: str, name: str | None = None) -> bool:
    """Whether the measured tree's package has ``module`` (and ``name`` in it)."""
    try:
        found = importlib.import_module(module)
    except ImportError:
        return False
    return name is None or hasattr(found, name)


def place_as_hermesd(setting: str | None) -> None:
    """For the rest of the run, put the process on CPUs as the measured tree's hermesd does (``daemon.cpu_affinity``
    of ``hermes_actors.cpu_affinity``: one CPU, the one it starts on; a tree from before it uses every CPU), or as
    ``setting`` says: ``one``, ``all`` or CPU numbers (``0,1``). Written here for trees without the module."""
    allowed = frozenset(os.sched_getaffinity(0))
    if setting is None:  # a tree without the module: its hermesd runs on every CPU
        setting = "one" if _tree_has("hermes_actors.cpu_affinity") else "all"
    if setting == "all":
        cpus = allowed
    elif setting == "one":
        fields = Path("/proc/thread-self/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
        cpus = frozenset({int(fields[36])})
    else:
        cpus = frozenset(int(cpu) for cpu in setting.split(","))
    os.sched_setaffinity(0, cpus)  # before any thread: they inherit it
    print(f"# cpu affinity: {setting}: CPUs {sorted(cpus)} of {sorted(allowed)}", flush=True)


def schedule_as_hermesd(setting: str | None) -> None:
    """For the rest of the run, schedule the process's threads as the measured tree's hermesd does
    (``daemon.cpu_scheduling`` of ``hermes_actors.cpu_affinity``: ``SCHED_BATCH``; a tree from before it, the normal
    policy), or as ``setting`` says: ``batch`` or ``normal``. Written here for trees without the setting."""
    if setting is None:  # a tree without the setting: its hermesd leaves the normal policy
        setting = "batch" if _tree_has("hermes_actors.cpu_affinity", "cpu_scheduling") else "normal"
    if setting == "batch" and hasattr(os, "SCHED_BATCH"):
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))  # before any thread: they inherit it
    print(f"# cpu scheduling: {setting}", flush=True)


def tune_collector_as_hermesd(young: int | None) -> None:
    """For the rest of the run, tune the garbage collector as the measured tree's hermesd does
    (``hermes_actors.runtime.collector``: a tree from before it leaves Python's defaults), or collect the youngest
    generation every ``young`` allocations with what exists now frozen (-1: Python's defaults)."""
    try:
        from hermes_actors.runtime.collector import YOUNG_THRESHOLD
    except ImportError:  # this tree's hermesd leaves the collector alone
        YOUNG_THRESHOLD = -1
    young = YOUNG_THRESHOLD if young is None else young
    if young < 0:
        print(f"# gc: Python's defaults {gc.get_threshold()}", flush=True)
        return
    gc.freeze()  # what hermes_actors.runtime.collector.tune_collector does, written here for trees without it
    gc.set_threshold(young, *gc.get_threshold()[1:])
    print(f"# gc: thresholds {gc.get_threshold()}, {gc.get_freeze_count()} objects frozen at start", flush=True)


# -- the platform and the agents -------------------------------------------------------------------------------


class TimedPlatform(FakePlatform):
    """A :class:`FakePlatform` that timestamps every reply by the inbound message it answers and counts them.

    ``wait_for(n)`` returns once ``n`` replies have been sent in all; only the sender thread that reaches the
    awaited count wakes the waiter, so counting costs one lock per reply.
    """

    def __init__(self) -> None:
        super().__init__(PLATFORM)
        self.replied_at: dict[str, float] = {}
        self.count = 0
        self._target = 0
        self._done = threading.Condition()

    def send(self, message: OutboundMessage) -> str | None:
        """Send through :class:`FakePlatform`, then record when and count."""
        platform_id = super().send(message)
        now = time.perf_counter()
        with self._done:
            if message.reply_to is not None:
                self.replied_at[message.reply_to] = now
            self.count += 1
            if self.count >= self._target:
                self._done.notify_all()
        return platform_id

    def wait_for(self, count: int, timeout: float = REPLY_TIMEOUT_S) -> None:
        """Block until ``count`` replies were sent in all; raise ``TimeoutError`` after ``timeout``."""
        with self._done:
            self._target = count
            if not self._done.wait_for(lambda: self.count >= count, timeout):
                raise TimeoutError(f"only {self.count} of {count} replies within {timeout:.0f} s")

    def inbound(self, text: str, *, session: int, message_id: str) -> InboundMessage:
        """Build the message user ``session`` sends in its own direct chat."""
        return self.message(text, chat_id=f"chat-{session}", user_id=f"user-{session}", message_id=message_id)


class SlowAgent:
    """:class:`EchoAgent` after waiting ``delay_s`` per turn, as if a model answered (the thread sleeps)."""

    def __init__(self, delay_s: float) -> None:
        self._delay = delay_s
        self._echo = EchoAgent()

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        """Wait, then echo."""
        threading.Event().wait(self._delay)
        return self._echo.run_turn(turn, timeout_s=timeout_s)

    def summarize(self, history: Sequence[MessageRecord], *, timeout_s: float) -> str:
        """Echo's summary."""
        return self._echo.summarize(history, timeout_s=timeout_s)

    def save_memories(self, history: Sequence[MessageRecord], *, timeout_s: float) -> list[Memory]:
        """Echo's memories."""
        return self._echo.save_memories(history, timeout_s=timeout_s)


class FinishedTurn(Protocol):
    """What the bench reads of the runtime's ``TurnOutcome`` (passed to the gateway's ``on_turn``)."""

    @property
    def inbox_ids(self) -> tuple[int, ...]:
        """The inbox rows the turn answered."""
        ...

    @property
    def outbox_id(self) -> int | None:
        """The outbox row of the turn's reply."""
        ...


class CommitClock:
    """When the transaction that wrote each outbox row committed, as SQLite saw it.

    The writer connection's commit hook stamps every commit; the writer's observer, which runs right after each of
    its commits on the same thread, pairs the stamp with the highest outbox id assigned so far (one read of
    ``sqlite_sequence`` per commit, a few microseconds at about 0.03 commits a turn). A reply's commit is the first
    whose highest id reaches the reply's. Taken on the writer thread at the commit itself, not when the supervisor
    hears of the turn: the reply may leave before the supervisor's thread gets to its message, so that time made
    the lag read negative under load.
    """

    def __init__(self, gateway: Gateway) -> None:
        writer = gateway._writer  # the benchmark looks at the gateway's private writer
        sql = writer._store.sql
        if not isinstance(sql, SqliteDb):
            raise TypeError(f"the bench's gateway writes SQLite, not {type(sql).__name__}")
        connection = sql.connection
        self._ids: list[int] = []
        self._at: list[float] = []
        stamp = [0.0]

        def hook() -> bool:
            stamp[0] = time.perf_counter()
            return False  # False lets the commit go ahead

        inner = writer._observer

        def observe(writes: int, seconds: float, *, committed: bool) -> None:
            at = stamp[0]  # before the read below, whose own transaction could stamp again
            if committed:
                row = connection.execute("SELECT seq FROM sqlite_sequence WHERE name = 'outbox'").fetchone()
                if row is not None and (not self._ids or row[0] > self._ids[-1]):
                    self._ids.append(row[0])
                    self._at.append(at)
            if inner is not None:
                inner(writes, seconds, committed=committed)

        connection.set_commit_hook(hook)
        writer._observer = observe

    def committed_at(self, outbox_id: int) -> float:
        """When the transaction that wrote outbox row ``outbox_id`` committed (``perf_counter`` time)."""
        index = bisect.bisect_left(self._ids, outbox_id)
        if index == len(self._at):
            raise RuntimeError(f"no commit of outbox row {outbox_id} was seen")
        return self._at[index]


@dataclass
class Runtime:
    """A started gateway on a fresh database and its timed platform."""

    gateway: Gateway
    platform: TimedPlatform
    turn_done_at: dict[int, float]  # inbox id → when the supervisor heard its turn had committed
    reply_of: dict[int, int]  # inbox id → the outbox row of its turn's reply
    commits: CommitClock

    def writer_statistics(self) -> WriterStatistics:
        """The store writer's counts (the gateway keeps its writer private; a benchmark may look)."""
        return self.gateway._writer.statistics()

    def settle_writes(self) -> None:
        """Wait until every write queued so far (the outbox's ``mark_sent``, say) has committed."""
        self.gateway._writer.call(lambda store: None)


@contextmanager
def runtime(
    config: RuntimeConfig,
    *,
    agent: EchoAgent | SlowAgent | None = None,
    tick_interval_s: float = 5.0,
    reset: ResetConfig | None = None,
) -> Iterator[Runtime]:
    """Start a gateway with ``config`` on a fresh database in a temporary directory; stop it afterwards."""
    with tempfile.TemporaryDirectory(prefix="hermes-bench-") as directory:
        platform = TimedPlatform()
        turn_done_at: dict[int, float] = {}
        reply_of: dict[int, int] = {}

        def turn_done(outcome: FinishedTurn) -> None:
            now = time.perf_counter()
            for inbox_id in outcome.inbox_ids:
                turn_done_at[inbox_id] = now
                if outcome.outbox_id is not None:
                    reply_of[inbox_id] = outcome.outbox_id

        gateway = Gateway(
            Path(directory) / "state.db",
            config=config,
            agent=agent or EchoAgent(),
            senders=[platform],
            synchronous=Synchronous.NORMAL,
            tick_interval_s=tick_interval_s,
            reset=reset,
            on_turn=turn_done,
        )
        platform.attach(gateway)
        try:
            yield Runtime(gateway, platform, turn_done_at, reply_of, CommitClock(gateway))
        finally:
            gateway.stop(timeout=60)


def throughput_config(*, max_live_actors: int = 5000, max_concurrent_agent_calls: int = 256) -> RuntimeConfig:
    """The runtime settings of the throughput runs: no merging of queued messages, so one message is one turn."""
    return RuntimeConfig(
        pending_soft_limit=NO_MERGING,
        pending_hard_limit=NO_MERGING,
        max_live_actors=max_live_actors,
        max_concurrent_agent_calls=max_concurrent_agent_calls,
    )


# -- 1. one session, one turn at a time --------------------------------------------------------------------------


@dataclass
class SerialResult:
    turns_s: float
    latencies_s: list[float]
    writer: WriterStatistics
    cpu: CpuWindow
    statements: tuple[int, int, int]


def run_serial(turns: int) -> SerialResult:
    """Drive one session: send a message, wait for its reply, repeat. Warm-up turns are not counted."""
    with runtime(throughput_config()) as rt:
        platform, accept = rt.platform, rt.gateway.accept
        latencies: list[float] = []
        for i in range(WARMUP_TURNS):
            accept(platform.inbound(f"turn {i}", session=0, message_id=f"s{i}"))
            platform.wait_for(i + 1)
        rt.settle_writes()
        before = rt.writer_statistics()
        traced = TRACE.totals()
        meter = CpuMeter()
        for i in range(WARMUP_TURNS, WARMUP_TURNS + turns):
            message_id = f"s{i}"
            sent = time.perf_counter()
            accept(platform.inbound(f"turn {i}", session=0, message_id=message_id))
            platform.wait_for(i + 1)
            latencies.append(platform.replied_at[message_id] - sent)
        cpu = meter.stop()
        rt.settle_writes()
        after = rt.writer_statistics()
        statements = tuple(n - b for n, b in zip(TRACE.totals(), traced, strict=True))
    writer = WriterStatistics(
        writes=after.writes - before.writes - 1,  # less the settling call
        commits=after.commits - before.commits - 1,
        largest_batch=after.largest_batch,
        queued=0,
    )
    return SerialResult(
        turns_s=turns / cpu.wall_s,
        latencies_s=latencies,
        writer=writer,
        cpu=cpu,
        statements=(statements[0], statements[1], statements[2]),
    )


# -- 2 and 3. many sessions at once --------------------------------------------------------------------------------


@dataclass
class AggregateResult:
    turns_s: float
    latencies_s: list[float]
    accept_s: float  # until the producers had handed over every message
    accept_calls_s: list[float]  # how long each Gateway.accept call took (the inbox commit)
    committed_s: float  # until the supervisor heard of the last turn's commit
    outbox_lag_s: list[float]  # turn committed → reply sent, per message
    writer: WriterStatistics
    turns: int
    cpu: CpuWindow
    statements: tuple[int, int, int]  # (statements, transactions, savepoints) with --trace, else zeros


def run_aggregate(
    sessions: int,
    turns: int,
    producers: int,
    *,
    agent: EchoAgent | SlowAgent | None = None,
    agent_calls: int = 256,
    window: int = 1,
    reset: ResetConfig | None = None,
) -> AggregateResult:
    """``producers`` threads send ``turns`` messages to each of ``sessions`` chats without waiting for replies.

    Producer ``k`` owns the sessions ``k, k + producers, ...`` and sends round by round (message ``t`` to all its
    sessions, then ``t + 1``), so each session's messages are accepted in order. The run ends at the last reply.
    """
    config = throughput_config(max_concurrent_agent_calls=agent_calls, max_live_actors=max(5000, sessions))
    with runtime(config, agent=agent, reset=reset) as rt:
        platform, accept, submit = rt.platform, rt.gateway.accept, rt.gateway.submit
        # Warm up: every session is activated (first turn) before the clock starts, so this measures turns only.
        for s in range(sessions):
            accept(platform.inbound("hello", session=s, message_id=f"w{s}"))
        platform.wait_for(sessions)
        rt.gateway.wait_idle()
        rt.settle_writes()
        before = rt.writer_statistics()
        traced = TRACE.totals()
        accepted_at: dict[str, float] = {}
        accept_calls: list[float] = []
        inbox_ids: dict[str, int] = {}
        accept_done: list[float] = []
        producer_cpu: list[float] = []
        gate = threading.Barrier(producers + 1)

        def produce(k: int) -> None:
            owned = range(k, sessions, producers)
            gate.wait()
            cpu_started = time.thread_time()
            in_flight: deque[tuple[str, float, Future[AcceptResult]]] = deque()

            def settle_oldest() -> None:
                message_id, sent, pending = in_flight.popleft()
                result = pending.result(timeout=REPLY_TIMEOUT_S)
                accept_calls.append(time.perf_counter() - sent)
                if result.inbox_id is not None:
                    inbox_ids[message_id] = result.inbox_id

            for t in range(turns):
                for s in owned:
                    message_id = f"a{s}.{t}"
                    message = platform.inbound(f"message {t} of session {s}", session=s, message_id=message_id)
                    accepted_at[message_id] = sent = time.perf_counter()
                    in_flight.append((message_id, sent, submit(message)))
                    if len(in_flight) >= window:
                        settle_oldest()
            while in_flight:
                settle_oldest()
            accept_done.append(time.perf_counter())
            producer_cpu.append(time.thread_time() - cpu_started)

        threads = [threading.Thread(target=produce, args=(k,), name=f"producer-{k}") for k in range(producers)]
        for thread in threads:
            thread.start()
        meter = CpuMeter()
        gate.wait()
        started = time.perf_counter()
        total = sessions * turns
        platform.wait_for(sessions + total)
        cpu = meter.stop()
        finished = max(platform.replied_at[m] for m in accepted_at)
        for thread in threads:
            thread.join()
        cpu.by_group["producers"] = sum(producer_cpu)  # they ended before the window closed
        rt.settle_writes()  # the last sent marks, which the turns owe
        after = rt.writer_statistics()
        statements = tuple(n - b for n, b in zip(TRACE.totals(), traced, strict=True))
        rt.gateway.wait_idle()
        stats = rt.gateway.statistics()
        if stats.rejected or stats.turns < sessions + total:
            raise RuntimeError(f"expected {sessions + total} turns and no refusals, got {stats}")
    latencies = [platform.replied_at[m] - at for m, at in accepted_at.items()]
    done_at = {m: rt.turn_done_at[i] for m, i in inbox_ids.items()}
    committed_at = {m: rt.commits.committed_at(rt.reply_of[i]) for m, i in inbox_ids.items()}
    writer = WriterStatistics(
        writes=after.writes - before.writes - 1,  # less the settling call
        commits=after.commits - before.commits - 1,
        largest_batch=after.largest_batch,
        queued=0,
    )
    return AggregateResult(
        turns_s=total / (finished - started),
        latencies_s=latencies,
        accept_s=max(accept_done) - started,
        accept_calls_s=accept_calls,
        committed_s=max(done_at.values()) - started,
        outbox_lag_s=[platform.replied_at[m] - at for m, at in committed_at.items()],
        writer=writer,
        turns=total,
        cpu=cpu,
        statements=(statements[0], statements[1], statements[2]),
    )


# -- 4. memory per live actor and activation time ----------------------------------------------------------------


@dataclass
class ActivationResult:
    rss_kib_per_actor: float
    activate_s: float
    live_actors: int
    cpu: CpuWindow


def run_activation(sessions: int, producers: int) -> ActivationResult:
    """Send one first message to each of ``sessions`` new chats and wait for every reply.

    RSS is read after a warm-up session, and again once every reply is sent and every actor is still live (the
    supervisor's passivation tick is pushed out of the run), after a full garbage collection both times.
    """
    config = throughput_config(max_live_actors=ACTIVATION_MAX_LIVE, max_concurrent_agent_calls=256)
    with runtime(config, tick_interval_s=3600.0) as rt:
        platform, accept = rt.platform, rt.gateway.accept
        accept(platform.inbound("warm-up", session=-1, message_id="warm-up"))
        platform.wait_for(1)
        gc.collect()
        rss_before = rss_kib()
        gate = threading.Barrier(producers + 1)

        def produce(k: int) -> None:
            gate.wait()
            for s in range(k, sessions, producers):
                accept(platform.inbound("hello", session=s, message_id=f"f{s}"))

        threads = [threading.Thread(target=produce, args=(k,), name=f"producer-{k}") for k in range(producers)]
        for thread in threads:
            thread.start()
        meter = CpuMeter()
        gate.wait()
        started = time.perf_counter()
        platform.wait_for(1 + sessions)
        elapsed = time.perf_counter() - started
        cpu = meter.stop()
        for thread in threads:
            thread.join()
        gc.collect()
        rss_after = rss_kib()
        live = rt.gateway.statistics().live_actors
    return ActivationResult(
        rss_kib_per_actor=(rss_after - rss_before) / sessions, activate_s=elapsed, live_actors=live, cpu=cpu
    )


# -- 5. what one thread hand-off costs ---------------------------------------------------------------------------


class _Echo(pykka.ThreadingActor):
    def on_receive(self, message: Any) -> Any:
        return message


@dataclass
class HandoffResult:
    wall_us: float
    cpu_us: float


def run_handoff(round_trips: int) -> HandoffResult:
    """Time ``ask`` round trips to an idle pykka actor: two thread hand-offs each (there and back).

    Every turn crosses threads several times (producer → writer → supervisor → session actor → writer → outbox
    actor → writer); this is the price of one crossing on this machine, with nothing else to do.
    """
    echo = _Echo.start()
    try:
        for i in range(200):
            echo.ask(i)
        cpu_started, started = time.process_time(), time.perf_counter()
        for i in range(round_trips):
            echo.ask(i)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    finally:
        echo.stop()
    return HandoffResult(wall_us=wall / round_trips / 2 * 1e6, cpu_us=cpu / round_trips / 2 * 1e6)


# -- 6. the raw ceiling ------------------------------------------------------------------------------------------

_INSERT_SESSION = (
    "INSERT INTO sessions (id, source, user_id, chat_id, chat_type, routing_key, started_at, last_active_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_INBOX = (
    "INSERT INTO inbox (platform, account_id, platform_message_id, routing_key, payload, received_at) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
_COMPLETE_INBOX = "UPDATE inbox SET state = 'done', session_id = ?, completed_at = ? WHERE id = ?"
_INSERT_MESSAGE = (
    "INSERT INTO messages (session_ref, role, content, token_count, created_at, platform_message_id) "
    "VALUES ((SELECT ref FROM sessions WHERE id = ?), ?, ?, ?, ?, ?)"
)
_COUNT_SESSION = (
    "UPDATE sessions SET message_count = message_count + 2, input_tokens = input_tokens + ?, "
    "output_tokens = output_tokens + ?, last_active_at = max(last_active_at, ?) WHERE id = ?"
)
_INSERT_OUTBOX = (
    "INSERT INTO outbox (session_id, platform, account_id, chat_id, payload, created_at) VALUES (?, ?, ?, ?, ?, ?)"
)
_SENT_OUTBOX = "UPDATE outbox SET sent_at = ?, platform_message_id = ? WHERE id = ?"


def run_ceiling(sessions: int, turns: int, per_transaction: int) -> float:
    """Write the rows of ``sessions * turns`` echo turns with plain APSW statements; return turns per second.

    The rows and payloads are the runtime's (msgpack-encoded inbound and outbound messages, FTS triggers on the
    messages); they are built before the clock starts, so only SQLite and the APSW calls are timed.
    """
    plan: list[tuple[str, str, str, str, bytes, bytes]] = []
    for t in range(turns):
        for s in range(sessions):
            text = f"message {t} of session {s}"
            source = SessionSource(platform=PLATFORM, chat_id=f"chat-{s}", user_id=f"user-{s}")
            message_id = f"a{s}.{t}"
            inbound = encode(InboundMessage(source=source, text=text, message_id=message_id))
            reply = f"echo: {text}"
            outbound = encode(
                OutboundMessage(
                    platform=PLATFORM, text=reply, chat_id=f"chat-{s}", user_id=f"user-{s}", reply_to=message_id
                )
            )
            plan.append((f"session-{s}", message_id, text, reply, inbound, outbound))
    with tempfile.TemporaryDirectory(prefix="hermes-bench-") as directory:
        db = open_connection(Path(directory) / "ceiling.db", synchronous=Synchronous.NORMAL)
        try:
            migrate(db)
            now = time.time()
            with db:
                db.executemany(
                    _INSERT_SESSION,
                    [
                        (f"session-{s}", PLATFORM, f"user-{s}", f"chat-{s}", "dm", f"key-{s}", now, now)
                        for s in range(sessions)
                    ],
                )
            started = time.perf_counter()
            for first in range(0, len(plan), per_transaction):
                with db:
                    for session_id, message_id, text, reply, inbound, outbound in plan[first : first + per_transaction]:
                        now = time.time()
                        db.execute(_INSERT_INBOX, (PLATFORM, "", message_id, session_id, inbound, now))
                        inbox_id = db.last_insert_rowid()
                        db.execute(_INSERT_MESSAGE, (session_id, "user", text, None, now, message_id))
                        db.execute(_INSERT_MESSAGE, (session_id, "assistant", reply, None, now, None))
                        db.execute(_COUNT_SESSION, (8, 8, now, session_id))
                        db.execute(_COMPLETE_INBOX, (session_id, now, inbox_id))
                        db.execute(_INSERT_OUTBOX, (session_id, PLATFORM, "", session_id, outbound, now))
                        db.execute(_SENT_OUTBOX, (now, "sent", db.last_insert_rowid()))
            elapsed = time.perf_counter() - started
        finally:
            db.close()
    return len(plan) / elapsed


# -- main ----------------------------------------------------------------------------------------------------------


def median_of(runs: int, measure: Callable[[], float]) -> float:
    """Run ``measure`` ``runs`` times and return the median."""
    return statistics.median(measure() for _ in range(runs))


def report_aggregate(
    prefix: str, result: AggregateResult, note: str, *, by_thread: bool = False, brief: bool = False
) -> None:
    """Print the figures of one many-session run (``brief``: throughput, latency, accept call and CPU only)."""
    figure(f"{prefix} turns/s", result.turns_s, "turns/s", note)
    figure(f"{prefix} latency p50", percentile(result.latencies_s, 0.5) * 1000, "ms", "accept → reply sent")
    figure(f"{prefix} latency p99", percentile(result.latencies_s, 0.99) * 1000, "ms")
    cpu = result.cpu
    if brief:
        figure(f"{prefix} accept call p50", percentile(result.accept_calls_s, 0.5) * 1000, "ms", "its inbox commit")
        figure(f"{prefix} CPU per turn", (cpu.user_s + cpu.system_s) / result.turns * 1e6, "µs", CpuMeter.describe(cpu))
        return
    figure(f"{prefix} accept phase", result.accept_s, "s", "until the producers had handed over every message")
    figure(
        f"{prefix} accept call p50",
        percentile(result.accept_calls_s, 0.5) * 1000,
        "ms",
        "submit → its inbox commit, as the producer saw it",
    )
    figure(
        f"{prefix} turns committed/s",
        result.turns / result.committed_s,
        "turns/s",
        "as the supervisor hears of them, before the outbox sends",
    )
    figure(f"{prefix} outbox lag p50", percentile(result.outbox_lag_s, 0.5) * 1000, "ms", "turn committed → reply sent")
    figure(f"{prefix} outbox lag p99", percentile(result.outbox_lag_s, 0.99) * 1000, "ms")
    w = result.writer
    figure(
        f"{prefix} writes per commit",
        w.writes / max(1, w.commits),
        "",
        f"{w.writes} writes in {w.commits} commits, largest batch {w.largest_batch}",
    )
    figure(f"{prefix} writer jobs per turn", w.writes / result.turns, "", "inbox commits, turns, outbox marks")
    figure(f"{prefix} commits per turn", w.commits / result.turns)
    statements, transactions, savepoints = result.statements
    if statements:
        figure(f"{prefix} statements per turn", statements / result.turns, "", "every connection, --trace")
        figure(f"{prefix} transactions per turn", transactions / result.turns, "", "BEGIN statements")
        figure(f"{prefix} savepoints per turn", savepoints / result.turns)
    figure(f"{prefix} CPU per turn", (cpu.user_s + cpu.system_s) / result.turns * 1e6, "µs", CpuMeter.describe(cpu))
    figure(f"{prefix} context switches per turn", cpu.context_switches / result.turns)
    if by_thread:
        for group, used in sorted(cpu.by_group.items(), key=lambda item: -item[1]):
            figure(f"{prefix} CPU {group}", used / cpu.wall_s * 100, "% of one core", f"{used:.2f} s")


def median_run(runs: list[R], key: Callable[[R], float]) -> R:
    """Return the run with the median ``key`` (the upper middle one of an even count)."""
    return sorted(runs, key=key)[len(runs) // 2]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the parts asked for and print their figures, then the targets."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--serial-turns", type=int, default=2000, help="turns of the one-session run")
    parser.add_argument("--sessions", type=int, default=1000, help="sessions of the aggregate runs")
    parser.add_argument("--turns", type=int, default=10, help="timed turns per session in the aggregate runs")
    parser.add_argument("--producers", type=int, default=4, help="threads calling Gateway.accept")
    parser.add_argument(
        "--window", type=int, default=16, help="accepts each producer keeps in flight (Gateway.submit); 1: accept"
    )
    parser.add_argument("--agent-calls", type=int, default=256, help="max_concurrent_agent_calls of the 50 ms run")
    parser.add_argument("--activate", type=int, default=10000, help="sessions activated for RSS and activation time")
    parser.add_argument("--ceiling-tx", type=int, default=5000, help="turns per transaction of the raw ceiling")
    parser.add_argument(
        "--batched-tx",
        type=int,
        default=100,
        help="turns per transaction of the batched ceiling run after each aggregate run (aggregate / batched ceiling)",
    )
    parser.add_argument(
        "--trace", action="store_true", help="count SQL statements per turn (a tracer on every connection; costs CPU)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs of each throughput figure (medians printed)")
    parser.add_argument("--only", choices=PARTS, action="append", help="run only this part (repeatable)")
    parser.add_argument(
        "--futex-hash-slots",
        type=int,
        metavar="N",
        help="Linux >= 6.16: N private futex hash slots (0: the global hash, -1: the kernel's default); "
        "default: sized as hermesd sizes it",
    )
    parser.add_argument(
        "--gc-young",
        type=int,
        metavar="N",
        help="collect the youngest generation every N allocations, what exists at start frozen (-1: Python's "
        "defaults); default: as the measured tree's hermesd (hermes_actors.runtime.collector)",
    )
    parser.add_argument(
        "--cpu-affinity",
        metavar="WHICH",
        help="one (the CPU the bench starts on), all, or CPU numbers such as 0,1; default: as the measured tree's "
        "hermesd (daemon.cpu_affinity: one CPU; a tree from before it, every CPU)",
    )
    parser.add_argument(
        "--cpu-scheduling",
        choices=("batch", "normal"),
        help="the threads' scheduling policy (batch: SCHED_BATCH); default: as the measured tree's hermesd "
        "(daemon.cpu_scheduling: batch; a tree from before it, normal)",
    )
    parser.add_argument(
        "--profile", type=Path, metavar="DIR", help="cProfile every thread; write pstats files per thread group to DIR"
    )
    args = parser.parse_args(argv)
    if args.trace:
        TRACE.install()
    place_as_hermesd(args.cpu_affinity)
    schedule_as_hermesd(args.cpu_scheduling)
    size_futex_hash_as_hermesd(args.futex_hash_slots)
    tune_collector_as_hermesd(args.gc_young)
    profiler = ThreadProfiler() if args.profile else None
    if profiler is not None:
        profiler.start()
    parts = set(args.only or PARTS)
    started = time.perf_counter()
    print(f"# load average before: {load_average()}; {os.cpu_count()} cores", flush=True)
    print(
        f"# synchronous NORMAL, pending_soft_limit = pending_hard_limit = {NO_MERGING} (every message is its own "
        f"turn), throughput figures are medians of {args.repeats} runs",
        flush=True,
    )
    if "serial" in parts:
        serial = median_run([run_serial(args.serial_turns) for _ in range(args.repeats)], lambda r: r.turns_s)
        figure("one session turns/s", serial.turns_s, "turns/s", f"{args.serial_turns} turns, one at a time")
        figure("one session latency p50", percentile(serial.latencies_s, 0.5) * 1000, "ms", "accept → reply sent")
        figure("one session latency p99", percentile(serial.latencies_s, 0.99) * 1000, "ms")
        tenth = max(1, len(serial.latencies_s) // 10)
        figure(
            "one session latency p50 first 10%",
            percentile(serial.latencies_s[:tenth], 0.5) * 1000,
            "ms",
            f"turns 1-{tenth}, short history",
        )
        figure(
            "one session latency p50 last 10%",
            percentile(serial.latencies_s[-tenth:], 0.5) * 1000,
            "ms",
            f"the last {tenth} turns, history of ~{2 * (WARMUP_TURNS + args.serial_turns)} messages",
        )
        w = serial.writer
        figure(
            "one session commits per turn",
            w.commits / args.serial_turns,
            "",
            f"{w.writes / args.serial_turns:.2f} writes per turn, {w.writes} in {w.commits} commits",
        )
        if serial.statements[0]:
            figure("one session statements per turn", serial.statements[0] / args.serial_turns, "", "--trace")
        cpu = serial.cpu
        figure(
            "one session CPU per turn",
            (cpu.user_s + cpu.system_s) / args.serial_turns * 1e6,
            "µs",
            CpuMeter.describe(cpu),
        )
    shape = f"{args.sessions} sessions x {args.turns} turns, {args.producers} producers"
    pipelined = f"{shape}, {args.window} accepts in flight each"

    def median_aggregate(
        *,
        agent: EchoAgent | SlowAgent | None = None,
        window: int,
        reset: ResetConfig | None = None,
        ceilings: list[tuple[float, float]] | None = None,
    ) -> AggregateResult:
        """The run of median turns/s of ``--repeats``; with ``ceilings``, a batched ceiling runs after each one and
        (its turns/s, the run's) is added, so the two meet the same load."""
        runs = []
        for _ in range(args.repeats):
            run = run_aggregate(
                args.sessions,
                args.turns,
                args.producers,
                agent=agent,
                agent_calls=args.agent_calls,
                window=window,
                reset=reset,
            )
            runs.append(run)
            if ceilings is not None:
                ceilings.append((run_ceiling(args.sessions, args.turns, args.batched_tx), run.turns_s))
        return median_run(runs, lambda r: r.turns_s)

    if "aggregate" in parts:
        ceilings: list[tuple[float, float]] = []
        aggregate = median_aggregate(window=args.window, ceilings=ceilings)
        report_aggregate("aggregate", aggregate, f"echo agent, {pipelined}", by_thread=True)
        figure(
            "batched ceiling",
            statistics.median(c for c, _ in ceilings),
            "turns/s",
            f"raw APSW, {args.batched_tx} turns per transaction, run after each aggregate run",
        )
        figure("aggregate / batched ceiling", statistics.median(t / c for c, t in ceilings), "", "median of the pairs")
        report_aggregate(
            "aggregate one at a time",
            median_aggregate(window=1),
            f"echo agent, {shape}, each waiting for its accept",
            brief=True,
        )
        # Every turn moves the session's reset deadline (a durable row) when a reset policy is on.
        report_aggregate(
            "aggregate with resets",
            median_aggregate(window=args.window, reset=ResetConfig(mode=ResetMode.BOTH)),
            f"echo agent, {pipelined}, session_reset mode both",
            brief=True,
        )
    if "slow" in parts:
        agent = SlowAgent(SLOW_AGENT_DELAY_S)
        delay = f"{SLOW_AGENT_DELAY_S * 1000:.0f} ms agent"
        slow = median_aggregate(agent=agent, window=args.window)
        report_aggregate(
            "50ms agent", slow, f"{delay}, max_concurrent_agent_calls {args.agent_calls}, {pipelined}", by_thread=True
        )
        figure(
            "50ms agent calls waiting at once",
            SLOW_AGENT_DELAY_S * slow.turns_s,
            "",
            "on average: 50 ms × turns/s (1 = no overlap)",
        )
        # The echo agent runs on the session's own thread; an agent that waits runs in the agent pool. The
        # same pooled path with no wait isolates what the 50 ms waits cost once they overlap.
        pooled = median_aggregate(agent=SlowAgent(0.0), window=args.window)
        report_aggregate("pooled 0ms agent", pooled, f"agent pool, no wait, {pipelined}")
        figure("50ms agent / pooled 0ms agent", _figures["50ms agent turns/s"] / _figures["pooled 0ms agent turns/s"])
        if "aggregate turns/s" in _figures:
            figure("50ms agent / aggregate", _figures["50ms agent turns/s"] / _figures["aggregate turns/s"])
        report_aggregate(
            "50ms agent one at a time",
            median_aggregate(agent=agent, window=1),
            f"{delay}, {shape}, each waiting for its accept",
            brief=True,
        )
        if "aggregate one at a time turns/s" in _figures:
            figure(
                "50ms agent / aggregate, one at a time",
                _figures["50ms agent one at a time turns/s"] / _figures["aggregate one at a time turns/s"],
            )
    if "activate" in parts:
        activation = run_activation(args.activate, args.producers)
        figure(
            "RSS per live actor",
            activation.rss_kib_per_actor,
            "KiB",
            f"VmRSS growth over {args.activate} first messages / {args.activate}; {activation.live_actors} live actors",
        )
        figure(
            f"activate {args.activate} sessions", activation.activate_s, "s", "first message each, until all replied"
        )
        cpu = activation.cpu
        figure(
            "activation CPU per session",
            (cpu.user_s + cpu.system_s) / args.activate * 1e6,
            "µs",
            CpuMeter.describe(cpu),
        )
    if "handoff" in parts:
        handoffs = median_run([run_handoff(20000) for _ in range(args.repeats)], lambda r: r.cpu_us)
        figure("thread hand-off", handoffs.cpu_us, "µs CPU", f"{handoffs.wall_us:.1f} µs wall; pykka ask, halved")
    if "ceiling" in parts:
        ceiling = median_of(args.repeats, lambda: run_ceiling(args.sessions, args.turns, args.ceiling_tx))
        figure("raw APSW ceiling", ceiling, "turns/s", f"{args.ceiling_tx} turns per transaction, same rows as a turn")
        for name in ("aggregate", "aggregate one at a time"):
            if f"{name} turns/s" in _figures:
                figure(f"{name} / ceiling", _figures[f"{name} turns/s"] / ceiling)
        # Half the ceiling leaves this much CPU per turn to a process that keeps one core busy (one GIL).
        figure("CPU per turn at half the ceiling", 2e6 / ceiling, "µs", "on one core, for everything a turn does")
        small = median_of(args.repeats, lambda: run_ceiling(args.sessions, args.turns, 1))
        figure("raw APSW one turn per transaction", small, "turns/s", "what a commit per turn costs, for comparison")
    for name, direction, bound in TARGETS:
        if name in _figures:
            value = _figures[name]
            met = value >= bound if direction == ">=" else value <= bound
            shown = f"{value:.3g}" if bound < 10 else f"{value:.0f}"
            print(f"target {name} {direction} {bound:g}: {'met' if met else 'MISSED'} ({shown})", flush=True)
    figure("total runtime", time.perf_counter() - started, "s")
    print(f"# load average after: {load_average()}", flush=True)
    if profiler is not None and args.profile is not None:
        profiler.save(args.profile)
        print(f"# profiles written to {args.profile}/ (python -m pstats {args.profile}/writer.prof)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
