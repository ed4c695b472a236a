"""Run the gateway's threads on one CPU (``daemon.cpu_affinity``; hermesd runs inside
:func:`cpu_affinity`).

The runtime is a few hundred Python threads (sessions, the writer, the outbox, the HTTP loops) that take turns at
one interpreter lock; only SQLite's and the network's C code runs beside them. On two CPUs every hand-over of that
lock to a thread parked on the other CPU is a cross-CPU wake-up (an inter-processor interrupt, in a virtual machine
a trip through the hypervisor), and the data the threads share moves between the CPUs' caches. Measured on a 2-CPU
machine, the same process confined to one CPU (``bench/throughput.py``, alternating, bench/README.md):
aggregate CPU per turn 455-483 -> 328-359 µs and turns/s 2,133-2,257 -> 2,703-2,965; one session 849-865 ->
1,374-1,415 turns/s; activation 1,456-1,519 -> 863-866 µs; ``hermesd`` under 80 messages/s of HTTP
(``bench/cluster.py --only cost --sides sqlite``) 3.69-3.77 -> 2.94-3.16 ms of CPU per message.

``one`` (the default) keeps the CPU the process is running on when it starts (so several daemons on a machine
spread as the scheduler placed them), ``all`` changes nothing, and a list of CPU numbers confines the process to
those. Every thread that exists is moved, and threads started later inherit it. A process started from a confined
thread would inherit the confinement too: :func:`unconfined_command` gives the command that first takes back the
CPUs the gateway started with (the MCP servers the gateway starts run through it).

``daemon.cpu_scheduling`` (:func:`cpu_scheduling`): ``batch`` (the default) runs the threads under Linux's
``SCHED_BATCH`` policy, ``normal`` leaves them ``SCHED_OTHER``. A batch thread woken up does not preempt the thread
running on its CPU: the gateway's threads hand work to each other all the time (a message to the writer, a commit
back to a session, a reply to the outbox), and with preemption each hand-over could switch threads twice while the
running one still held the interpreter lock. Measured with ``bench/throughput.py --cpu-scheduling`` (bench/README.md,
five alternating pairs): context switches per turn 5.7 -> 4.2, aggregate CPU per turn 316 -> 304 µs (median). A
process already under another policy (``chrt``) is left as it is, and :func:`unconfined_command` gives a started
program the normal policy back.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence

from hermes_actors.errors import HermesError

__all__ = [
    "CPU_SCHEDULING",
    "CpuAffinity",
    "CpuAffinityError",
    "cpu_affinity",
    "cpu_affinity_problem",
    "cpu_scheduling",
    "cpu_scheduling_problem",
    "current_cpu",
    "describe_cpus",
    "placement",
    "unconfined_command",
]

CpuAffinity = str | Sequence[int]
"""``daemon.cpu_affinity``: ``one``, ``all``, or the CPU numbers to run on."""

_placed: tuple[frozenset[int], str] | None = None  # while confined: the CPUs the process had, and what was done
_batched: str | None = None  # while the threads run SCHED_BATCH: what was done, for the log

CPU_SCHEDULING = ("batch", "normal")
"""``daemon.cpu_scheduling``'s choices."""


class CpuAffinityError(HermesError):
    """The configured CPUs are not ones this process may run on."""


def cpu_affinity_problem(setting: CpuAffinity) -> str | None:
    """What is wrong with a ``daemon.cpu_affinity`` value, or ``None``."""
    if isinstance(setting, str):
        if setting in ("one", "all"):
            return None
        return (
            f"{setting!r} is not a choice; use 'one' (the default: the CPU hermesd starts on), 'all', or a list of "
            "CPU numbers such as [0, 1]"
        )
    if not setting:
        return "an empty list runs on no CPU; list CPU numbers such as [0, 1], or use 'one' or 'all'"
    if any(isinstance(cpu, bool) or cpu < 0 for cpu in setting):
        return f"CPU numbers start at 0, got {list(setting)}; list CPU numbers such as [0, 1]"
    return None


def _supported() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "sched_setaffinity")


def current_cpu() -> int | None:
    """The CPU the calling thread is running on (Linux; ``None`` elsewhere or when unreadable)."""
    try:
        with open("/proc/thread-self/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[36])  # field 39 of proc(5): processor; fields[0] is field 3 (state)


def describe_cpus(cpus: frozenset[int] | set[int]) -> str:
    """``0-3,6``: the CPU numbers as ranges."""
    parts: list[str] = []
    ordered = sorted(cpus)
    start = previous = ordered[0] if ordered else 0
    for cpu in ordered[1:]:
        if cpu != previous + 1:
            parts.append(f"{start}" if start == previous else f"{start}-{previous}")
            start = cpu
        previous = cpu
    if ordered:
        parts.append(f"{start}" if start == previous else f"{start}-{previous}")
    return ",".join(parts)


def _wanted(setting: CpuAffinity, allowed: frozenset[int]) -> frozenset[int] | None:
    """The CPUs to confine the process to, or ``None`` to leave it as it is."""
    if (problem := cpu_affinity_problem(setting)) is not None:
        raise CpuAffinityError(f"daemon.cpu_affinity: {problem}")
    if setting == "all":
        return None
    if setting == "one":
        cpu = current_cpu()
        return None if len(allowed) <= 1 else frozenset({cpu if cpu in allowed else min(allowed)})
    cpus = frozenset(int(cpu) for cpu in setting)
    if outside := cpus - allowed:
        raise CpuAffinityError(
            f"daemon.cpu_affinity names CPU {describe_cpus(outside)}, but this process may run only on CPUs "
            f"{describe_cpus(allowed)}; list some of those, or use 'one' (the default) or 'all'"
        )
    return None if cpus == allowed else cpus


def _every_thread(apply: Callable[[int], object]) -> None:
    """``apply(tid)`` to the calling thread (0; its error is raised), then to every thread of the process (one that
    ended meanwhile, or refuses, is skipped)."""
    apply(0)
    try:
        threads = os.listdir("/proc/self/task")
    except OSError:
        return
    for tid in threads:
        with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
            apply(int(tid))


def _move_threads(cpus: frozenset[int] | set[int]) -> None:
    """Confine every thread of the process to ``cpus``."""
    _every_thread(lambda tid: os.sched_setaffinity(tid, cpus))


@contextlib.contextmanager
def cpu_affinity(setting: CpuAffinity) -> Iterator[frozenset[int] | None]:
    """Within the block, run the process on the CPUs ``setting`` asks for; yields them (``None``: unchanged). On exit
    (hermesd run in-process by a test) every thread gets back the CPUs it had. :class:`CpuAffinityError` when a
    listed CPU is not one the process may use."""
    global _placed
    if not _supported():
        yield None
        return
    allowed = frozenset(os.sched_getaffinity(0))
    cpus = _wanted(setting, allowed)
    if cpus is None:
        yield None
        return
    _move_threads(cpus)
    shown = setting if isinstance(setting, str) else list(setting)
    earlier, _placed = (
        _placed,
        (
            allowed,
            f"running on CPU {describe_cpus(cpus)} of {describe_cpus(allowed)} (daemon.cpu_affinity: {shown}; 'all' "
            "to use every CPU)",
        ),
    )
    try:
        yield cpus
    finally:
        _placed = earlier
        _move_threads(allowed)


def cpu_scheduling_problem(setting: str) -> str | None:
    """What is wrong with a ``daemon.cpu_scheduling`` value, or ``None``."""
    if setting in CPU_SCHEDULING:
        return None
    return f"{setting!r} is not a choice; use 'batch' (the default) or 'normal'"


def _set_policy(policy: int) -> None:
    """Put every thread of the process under ``policy``."""
    _every_thread(lambda tid: os.sched_setscheduler(tid, policy, os.sched_param(0)))


@contextlib.contextmanager
def cpu_scheduling(setting: str) -> Iterator[bool]:
    """Within the block, run every thread under the policy ``setting`` names (``batch``: ``SCHED_BATCH``; threads
    started later inherit it); yields whether anything changed (not with ``normal``, off Linux, or when the process
    runs under a policy other than ``SCHED_OTHER`` already). On exit every thread gets ``SCHED_OTHER`` back."""
    global _batched
    if (problem := cpu_scheduling_problem(setting)) is not None:
        raise CpuAffinityError(f"daemon.cpu_scheduling: {problem}")
    if setting == "normal" or not hasattr(os, "SCHED_BATCH") or os.sched_getscheduler(0) != os.SCHED_OTHER:
        yield False
        return
    try:
        _set_policy(os.SCHED_BATCH)
    except OSError:  # a sandbox that refuses the call: the threads keep the normal policy
        yield False
        return
    earlier, _batched = _batched, "threads scheduled as a batch (daemon.cpu_scheduling: batch; 'normal' to undo)"
    try:
        yield True
    finally:
        _batched = earlier
        _set_policy(os.SCHED_OTHER)


def placement() -> str | None:
    """What :func:`cpu_affinity` and :func:`cpu_scheduling` did, for the log once the process has started
    (``running on CPU 1 of 0-1 ...``), or ``None`` when they changed nothing. It does not log itself: a start
    refused right after keeps its one error line."""
    done = [text for text in (None if _placed is None else _placed[1], _batched) if text is not None]
    return "; ".join(done) or None


_RESTORE_CPUS = "os.sched_setaffinity(0, {cpus}); "
_RESTORE_POLICY = "os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0)); "
_RESTORE = "import os, sys; {restore}os.execvp(sys.argv[1], sys.argv[1:])"


def unconfined_command(command: str, args: Sequence[str]) -> tuple[str, list[str]]:
    """``(command, args)`` to start a program that should not share the gateway's confinement: unchanged unless
    :func:`cpu_affinity` confined the process or :func:`cpu_scheduling` changed its policy, else run through a Python
    that first takes back the CPUs the gateway started with and the normal policy, then becomes the program
    (``exec``: same process, same pipes)."""
    restore = "" if _placed is None else _RESTORE_CPUS.format(cpus=sorted(_placed[0]))
    if _batched is not None:
        restore += _RESTORE_POLICY
    if not restore:
        return command, list(args)
    return sys.executable, ["-c", _RESTORE.format(restore=restore), command, *args]
