"""CPU time of groups of processes, read from ``/proc`` (for ``bench/cluster_cost.py``).

A :class:`Snapshot` reads every process's CPU seconds once; :func:`cpu_between` sums a group's growth between two
snapshots. A group is a set of process ids (from :func:`tree` and :func:`titled`) and the ids among them whose
reaped children count too (a PostgreSQL postmaster reaps its backends as they exit, so their CPU stays counted).
A process that started inside the window counts from zero; one that ended inside it counts only through the
parent that reaped it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Group", "Snapshot", "cpu_between", "titled", "tree"]

_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class _Proc:
    ppid: int
    started: int  # clock ticks after boot: a reused pid is another process
    own: int  # utime + stime, ticks
    reaped: int  # cutime + cstime: the children it waited for


@dataclass(frozen=True)
class Group:
    """Processes counted together; ``reaped``: those whose waited-for children count too."""

    pids: frozenset[int]
    reaped: frozenset[int] = field(default_factory=frozenset)


class Snapshot:
    """Every process's CPU ticks at one moment."""

    def __init__(self) -> None:
        self.procs: dict[int, _Proc] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            self.procs[int(entry.name)] = _Proc(
                ppid=int(fields[1]),
                started=int(fields[19]),
                own=int(fields[11]) + int(fields[12]),
                reaped=int(fields[13]) + int(fields[14]),
            )


def tree(snapshot: Snapshot, root: int) -> set[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for pid, proc in snapshot.procs.items():
        children.setdefault(proc.ppid, []).append(pid)
    found: set[int] = set()
    todo = [root] if root in snapshot.procs else []
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def titled(pids: set[int], prefix: bytes) -> set[int]:
    """The processes of ``pids`` whose command line starts with ``prefix`` (Ray titles an actor's worker
    ``ray::ClassName...``)."""
    found = set()
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(prefix):
                found.add(pid)
        except OSError:
            continue
    return found


def _pairs(before: Snapshot, after: Snapshot, group: Group) -> list[tuple[int, _Proc | None, _Proc]]:
    found = []
    for pid in group.pids:
        now = after.procs.get(pid)
        if now is None:
            continue
        then = before.procs.get(pid)
        found.append((pid, then if then is not None and then.started == now.started else None, now))
    return found


def cpu_between(before: Snapshot, after: Snapshot, group: Group) -> float:
    """CPU seconds ``group`` used from ``before`` to ``after``."""
    ticks = 0
    for pid, then, now in _pairs(before, after, group):
        ticks += now.own - (then.own if then else 0)
        if pid in group.reaped:
            ticks += now.reaped - (then.reaped if then else 0)
    return ticks / _TICK
