"""``hermes_actors.cpu_affinity``: confining this process's threads, giving them back, and the command that gives a
started program every CPU again."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from hermes_actors.cpu_affinity import (
    CpuAffinityError,
    cpu_affinity,
    cpu_affinity_problem,
    cpu_scheduling,
    cpu_scheduling_problem,
    current_cpu,
    describe_cpus,
    placement,
    unconfined_command,
)

linux_with_two_cpus = pytest.mark.skipif(
    not sys.platform.startswith("linux") or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux and at least two CPUs this process may use",
)


def _threads() -> dict[int, frozenset[int]]:
    return {int(tid): frozenset(os.sched_getaffinity(int(tid))) for tid in os.listdir("/proc/self/task")}


@pytest.fixture
def parked() -> Iterator[threading.Thread]:
    """A thread that exists before the process is confined, parked until the test ends."""
    release = threading.Event()
    thread = threading.Thread(target=release.wait, name="parked", daemon=True)
    thread.start()
    yield thread
    release.set()
    thread.join(5)


def test_cpu_lists_read_as_ranges() -> None:
    assert describe_cpus({0, 1, 2, 3, 6}) == "0-3,6"
    assert describe_cpus(frozenset({5})) == "5"
    assert describe_cpus({1, 3, 4}) == "1,3-4"
    assert describe_cpus(set()) == ""


def test_bad_settings_name_the_problem_and_the_choices() -> None:
    assert cpu_affinity_problem("one") is None
    assert cpu_affinity_problem("all") is None
    assert cpu_affinity_problem((0, 2)) is None
    assert "'two' is not a choice; use 'one'" in (cpu_affinity_problem("two") or "")
    assert "an empty list runs on no CPU" in (cpu_affinity_problem(()) or "")
    assert "CPU numbers start at 0, got [-1]" in (cpu_affinity_problem((-1,)) or "")


@linux_with_two_cpus
def test_one_moves_every_thread_to_the_cpu_it_started_on_and_gives_them_back(parked: threading.Thread) -> None:
    before = _threads()
    mine = frozenset(os.sched_getaffinity(0))
    with cpu_affinity("one") as cpus:
        assert cpus is not None
        assert len(cpus) == 1
        assert cpus <= mine
        started: list[frozenset[int]] = []
        later = threading.Thread(target=lambda: started.append(frozenset(os.sched_getaffinity(0))))
        later.start()
        later.join(5)
        assert set(_threads().values()) == {cpus}  # the parked thread too
        assert started == [cpus]  # a thread started meanwhile inherits it
        assert current_cpu() in cpus
        (cpu,) = cpus
        assert (
            placement()
            == f"running on CPU {cpu} of {describe_cpus(mine)} (daemon.cpu_affinity: one; 'all' to use every CPU)"
        )
    assert placement() is None  # for the log; nothing confined now
    after = _threads()
    assert {tid: after[tid] for tid in before if tid in after} == {tid: before[tid] for tid in before if tid in after}


@linux_with_two_cpus
def test_a_list_confines_the_process_to_those_cpus_and_all_leaves_it_alone() -> None:
    mine = frozenset(os.sched_getaffinity(0))
    last = max(mine)
    with cpu_affinity((last,)) as cpus:
        assert cpus == frozenset({last})
        assert frozenset(os.sched_getaffinity(0)) == cpus
    assert frozenset(os.sched_getaffinity(0)) == mine
    with cpu_affinity("all") as cpus:
        assert cpus is None
        assert placement() is None
        assert frozenset(os.sched_getaffinity(0)) == mine
    with cpu_affinity(tuple(sorted(mine))) as cpus:
        assert cpus is None  # every CPU it has already: nothing to change


@linux_with_two_cpus
def test_a_cpu_the_process_may_not_use_is_refused_and_nothing_changes() -> None:
    mine = frozenset(os.sched_getaffinity(0))
    outside = max(mine) + 1
    refused = rf"names CPU {outside}, but this process may run only on CPUs"
    with pytest.raises(CpuAffinityError, match=refused):
        cpu_affinity((0, outside)).__enter__()
    assert frozenset(os.sched_getaffinity(0)) == mine


@linux_with_two_cpus
def test_a_program_started_through_the_unconfined_command_gets_every_cpu_back() -> None:
    mine = sorted(os.sched_getaffinity(0))
    probe = ["-c", "import os, sys; print(sorted(os.sched_getaffinity(0)), sys.argv[1:])", "a b", "c"]
    assert unconfined_command(sys.executable, probe) == (sys.executable, probe)  # not confined: as it is
    with cpu_affinity("one") as cpus:
        assert cpus is not None
        plain = subprocess.run([sys.executable, *probe], capture_output=True, text=True, check=True, timeout=30)
        program, args = unconfined_command(sys.executable, probe)
        freed = subprocess.run([program, *args], capture_output=True, text=True, check=True, timeout=30)
    assert plain.stdout.strip() == f"{sorted(cpus)} ['a b', 'c']"  # a child inherits the confinement ...
    assert freed.stdout.strip() == f"{mine} ['a b', 'c']"  # ... unless started through the command


linux = pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="needs Linux's scheduling policies")


def _policies() -> dict[int, int]:
    return {int(tid): os.sched_getscheduler(int(tid)) for tid in os.listdir("/proc/self/task")}


def test_a_bad_scheduling_setting_names_the_choices() -> None:
    assert cpu_scheduling_problem("batch") is None
    assert cpu_scheduling_problem("normal") is None
    assert cpu_scheduling_problem("fifo") == "'fifo' is not a choice; use 'batch' (the default) or 'normal'"
    with pytest.raises(CpuAffinityError, match=r"daemon\.cpu_scheduling: 'fifo' is not a choice"):
        cpu_scheduling("fifo").__enter__()


@linux
def test_batch_puts_every_thread_under_sched_batch_and_gives_the_normal_policy_back(parked: threading.Thread) -> None:
    assert set(_policies().values()) == {os.SCHED_OTHER}
    started: list[int] = []
    with cpu_scheduling("batch") as changed:
        assert changed
        assert set(_policies().values()) == {os.SCHED_BATCH}  # the parked thread and this one
        later = threading.Thread(target=lambda: started.append(os.sched_getscheduler(0)))
        later.start()
        later.join(5)
        assert started == [os.SCHED_BATCH]  # a thread started inside inherits it
        assert "threads scheduled as a batch (daemon.cpu_scheduling: batch" in (placement() or "")
        program, args = unconfined_command(sys.executable, ["-c", "import os; print(os.sched_getscheduler(0))"])
        freed = subprocess.run([program, *args], capture_output=True, text=True, check=True, timeout=30)
        assert int(freed.stdout) == os.SCHED_OTHER  # a program started through the command: the normal policy
    assert set(_policies().values()) == {os.SCHED_OTHER}
    assert placement() is None
    with cpu_scheduling("normal") as changed:
        assert not changed
        assert set(_policies().values()) == {os.SCHED_OTHER}


@linux
def test_a_sandbox_that_refuses_the_policy_leaves_the_threads_as_they_are(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(pid: int, policy: int, param: os.sched_param) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    with cpu_scheduling("batch") as changed:
        assert not changed
        assert set(_policies().values()) == {os.SCHED_OTHER}
        assert placement() is None
