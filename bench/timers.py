"""The timer service at 100,000 pending deadlines: memory per deadline, cost of ``schedule()`` and of firing.

A fake clock stands still while the deadlines (spread over one day, in random order) are scheduled, then jumps
past all of them; every deadline must fire exactly once. The cycle repeats to show that memory stays flat. The
durable path (a ``StoreWriter`` on a temporary database) is measured too unless ``--no-durable``. Prints one
``name: value unit`` line per figure; bench/README.md explains them. A plain script, not a test.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

# Run from a checkout without installing: the repository root goes first, so the working tree is measured.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hermes_actors.runtime.timers import TimerService
from hermes_actors.store import Store
from hermes_actors.store.writer import StoreWriter
from hermes_actors.testing import FakeClock

DAY_S = 86_400.0
PAYLOAD = b"idle"
FIRE_TIMEOUT_S = 120.0


def figure(name: str, value: float | int | str, unit: str = "", note: str = "") -> None:
    """Print one figure as ``name: value unit (note)``."""
    if isinstance(value, float):
        text = f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"
    else:
        text = str(value)
    line = f"{name}: {text}" + (f" {unit}" if unit else "") + (f" ({note})" if note else "")
    print(line, flush=True)


def rss_kib() -> int:
    """Return this process's resident set size in KiB (``VmRSS`` of /proc/self/status), after a full collection."""
    gc.collect()
    for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS line in /proc/self/status")


class Firings:
    """Counts how often each deadline of a cycle fired, in a preallocated table, so checking allocates nothing.

    Names end in the deadline's index as six hex digits (see :func:`make_names`).
    """

    def __init__(self, count: int) -> None:
        self.counts = bytearray(count)
        self.total = 0
        self._target = 0
        self._reached = threading.Event()

    def expect(self, count: int) -> None:
        self.counts[:] = bytes(len(self.counts))
        self.total = 0
        self._target = count
        self._reached.clear()

    def __call__(self, name: str, payload: bytes | None) -> None:
        index = int(name[-6:], 16)
        self.counts[index] = min(self.counts[index] + 1, 255)
        self.total += 1
        if self.total >= self._target:
            self._reached.set()

    def wait(self) -> bool:
        return self._reached.wait(FIRE_TIMEOUT_S)


def schedule_all(
    timers: TimerService, names: Sequence[str], offsets: Sequence[float], base: float, batch: int
) -> list[float]:
    """Schedule every name at ``base + offset``; return the mean µs per call of each batch of ``batch`` calls."""
    per_call: list[float] = []
    for start in range(0, len(names), batch):
        stop = min(start + batch, len(names))
        began = time.perf_counter_ns()
        for index in range(start, stop):
            timers.schedule(names[index], base + offsets[index], PAYLOAD)
        per_call.append((time.perf_counter_ns() - began) / 1000 / (stop - start))
    return per_call


def timer_thread_cpu_s() -> float:
    """Return the CPU seconds the timer service's thread has used (it is named ``hermes-timers``)."""
    thread = next(thread for thread in threading.enumerate() if thread.name == "hermes-timers")
    assert thread.ident is not None
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


def fire_all(timers: TimerService, clock: FakeClock, firings: Firings, names: Sequence[str]) -> tuple[float, float]:
    """Jump the clock past every deadline; return the wall and timer-thread CPU seconds until all fired.

    Checks that each deadline fired exactly once and none is left pending.
    """
    firings.expect(len(names))
    clock.advance(DAY_S + 1)
    cpu = timer_thread_cpu_s()
    began = time.perf_counter()
    timers.poke()
    if not firings.wait():
        raise SystemExit(f"only {firings.total} of {len(names)} deadlines fired within {FIRE_TIMEOUT_S} s")
    elapsed = time.perf_counter() - began
    cpu = timer_thread_cpu_s() - cpu
    if firings.total != len(names) or firings.counts.count(1) != len(names):
        raise SystemExit(f"{firings.total} firings; {firings.counts.count(1)} of {len(names)} fired exactly once")
    if timers.pending():
        raise SystemExit(f"{len(timers.pending())} deadlines still pending after all fired")
    return elapsed, cpu


def make_names(count: int, cycle: int) -> list[str]:
    """Return names shaped like the supervisor's (``reset:<session id>``)."""
    return [f"reset:20261130_040000_{cycle:02d}{index:06x}" for index in range(count)]


def run_memory(count: int, cycles: int, batch: int, seed: int) -> None:
    """In-memory deadlines: RSS per pending deadline, schedule() and firing cost, RSS over repeated cycles."""
    rng = random.Random(seed)
    offsets = [rng.uniform(0.0, DAY_S) for _ in range(count)]  # spread over a day, in random order
    all_names = [make_names(count, cycle) for cycle in range(cycles)]  # names exist before: not counted
    clock = FakeClock()
    firings = Firings(count)
    timers = TimerService(clock=clock)
    timers.on("reset:", firings)
    timers.start()
    try:
        scheduled_rss: list[int] = []
        fired_blocks: list[int] = []
        first_growth = 0
        for cycle, names in enumerate(all_names):
            before = rss_kib()
            per_call = schedule_all(timers, names, offsets, clock.now, batch)
            after = rss_kib()
            scheduled_rss.append(after)
            elapsed, cpu = fire_all(timers, clock, firings, names)
            fired_rss = rss_kib()
            fired_blocks.append(sys.getallocatedblocks())
            if cycle == 0:
                first_growth = after - before
                figure("rss_per_pending", first_growth * 1024 / count, "bytes", f"VmRSS growth / {count} deadlines")
                figure("schedule", statistics.median(per_call), "µs/call", f"median of {len(per_call)} batches")
                figure("schedule_p90_batch", sorted(per_call)[int(0.9 * len(per_call))], "µs/call")
                figure("fire", elapsed * 1e6 / count, "µs/deadline", f"wall clock; all {count} fired exactly once")
                figure("fire_cpu", cpu * 1e6 / count, "µs/deadline", "CPU time of the timer thread")
            else:
                figure(f"schedule_cycle{cycle + 1}", statistics.median(per_call), "µs/call")
                figure(
                    f"fire_cycle{cycle + 1}",
                    elapsed * 1e6 / count,
                    "µs/deadline",
                    f"{cpu * 1e6 / count:.2f} µs CPU; all fired exactly once",
                )
            figure(
                f"rss_cycle{cycle + 1}",
                f"{after / 1024:.1f} MiB pending, {fired_rss / 1024:.1f} MiB fired",
                note=f"{before / 1024:.1f} MiB before scheduling; {fired_blocks[-1]} Python blocks after firing",
            )
        drift = scheduled_rss[-1] - scheduled_rss[0]
        figure(
            "rss_drift",
            drift,
            "KiB",
            f"RSS with {count} pending, cycle {cycles} minus cycle 1; "
            f"{100 * drift / max(first_growth, 1):.1f}% of the first growth",
        )
        figure(
            "blocks_drift",
            fired_blocks[-1] - fired_blocks[0],
            "blocks",
            f"Python memory blocks allocated after firing, cycle {cycles} minus cycle 1 "
            f"(a leak of one object per deadline would show {(cycles - 1) * count})",
        )
    finally:
        timers.stop()
    if firings.total != count or timers.pending():
        raise SystemExit("a deadline fired again or stayed pending after its cycle")


def run_durable(count: int, batch: int, seed: int, directory: Path) -> None:
    """Durable deadlines: schedule() cost with a writer, commit throughput, restart load, firing with removal."""
    rng = random.Random(seed)
    offsets = [rng.uniform(0.0, DAY_S) for _ in range(count)]
    names = make_names(count, 99)
    clock = FakeClock()
    firings = Firings(count)
    writer = StoreWriter(Store.open(directory / "state.db"))
    try:
        timers = TimerService(writer=writer, clock=clock)
        timers.on("reset:", firings)
        timers.start()
        try:
            began = time.perf_counter()
            per_call = schedule_all(timers, names, offsets, clock.now, batch)
            submitted = time.perf_counter()
            rows = writer.call(lambda store: len(store.timers.all()), timeout=FIRE_TIMEOUT_S)
            committed = time.perf_counter()
            if rows != count:
                raise SystemExit(f"{rows} timer rows stored, expected {count}")
            stats = writer.statistics()
            figure("durable_schedule", statistics.median(per_call), "µs/call", "submit to the writer + arm")
            figure(
                "durable_commit",
                (committed - began) * 1e6 / count,
                "µs/deadline",
                f"until all {count} rows committed ({committed - submitted:.2f} s after the last call); "
                f"{stats.commits} commits, largest batch {stats.largest_batch}",
            )

            restarted = TimerService(clock=clock)
            began = time.perf_counter()
            stored = writer.call(lambda store: store.timers.all())
            for row in stored:
                restarted.load(row.name, row.due_at, row.payload)
            loaded = time.perf_counter() - began
            if restarted.pending() != timers.pending():
                raise SystemExit("the reloaded deadlines differ from the scheduled ones")
            figure("durable_restart_load", loaded * 1e6 / count, "µs/deadline", "read every row + load()")

            elapsed, _ = fire_all(timers, clock, firings, names)
            removed_at = time.perf_counter()
            left = writer.call(lambda store: len(store.timers.all()), timeout=FIRE_TIMEOUT_S)
            drained = time.perf_counter() - removed_at
            if left != 0:
                raise SystemExit(f"{left} timer rows left after every deadline fired")
            figure(
                "durable_fire",
                elapsed * 1e6 / count,
                "µs/deadline",
                f"all fired exactly once; rows removed {drained:.2f} s later",
            )
        finally:
            timers.stop()
    finally:
        writer.stop()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deadlines", type=int, default=100_000, help="pending deadlines per cycle")
    parser.add_argument("--cycles", type=int, default=5, help="schedule-and-fire cycles of the in-memory run")
    parser.add_argument("--batch", type=int, default=1000, help="schedule() calls per timed batch")
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument("--no-durable", action="store_true", help="skip the run with a store writer")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.perf_counter()
    figure("python", sys.version.split()[0], note=f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    run_memory(args.deadlines, args.cycles, args.batch, args.seed)
    if not args.no_durable:
        with tempfile.TemporaryDirectory(prefix="hermes-bench-timers-") as directory:
            run_durable(args.deadlines, args.batch, args.seed, Path(directory))
    figure("runtime", time.perf_counter() - began, "s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
