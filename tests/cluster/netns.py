"""Two "machines" on one: two network namespaces joined by a veth pair, each with its loopback and one private address
(``10.20.0.1`` and ``10.20.0.2``) and no other interface, so nothing started in them can reach or be reached from
anything else.

:class:`TwoMachines` makes them (root and iproute2's ``ip`` needed; :func:`missing_reason` says why not), runs
commands in either (``ip netns exec``), and at :meth:`TwoMachines.close` kills every process still in them, each by
its id, and deletes them (which deletes the veth pair).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence

__all__ = ["ADDRESSES", "TwoMachines", "kill_namespace", "missing_reason", "namespace_pids"]

ADDRESSES = ("10.20.0.1", "10.20.0.2")
PREFIX = 24


def missing_reason() -> str | None:
    """Why two namespaces cannot be made here, or ``None``."""
    if os.geteuid() != 0:
        return "two network namespaces joined by a veth pair need root (ip netns add)"
    if shutil.which("ip") is None:
        return "iproute2's ip is not installed (apt-get install iproute2)"
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")


def namespace_pids(name: str) -> list[int]:
    """The processes in network namespace ``name`` now."""
    done = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, timeout=30, check=False)
    return [int(word) for word in done.stdout.split()]


def kill_namespace(name: str, *, timeout_s: float = 20.0) -> list[int]:
    """SIGKILL every process in network namespace ``name``, each by its id, until none is left; the ids killed."""
    killed: list[int] = []
    deadline = time.monotonic() + timeout_s
    while (pids := [pid for pid in namespace_pids(name) if pid != os.getpid()]) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.1)  # a dying process's children may have been forked meanwhile: look again
    return killed


class TwoMachines:
    """Namespaces ``names[0]`` (machine A, ``ADDRESSES[0]``) and ``names[1]`` (machine B, ``ADDRESSES[1]``)."""

    def __init__(self, tag: str) -> None:
        self.names = (f"hermes-{tag}-a", f"hermes-{tag}-b")
        self.addresses = ADDRESSES
        links = (f"hm{tag}a"[:15], f"hm{tag}b"[:15])
        self._made: list[str] = []
        try:
            for name in self.names:
                _ip("netns", "add", name)
                self._made.append(name)
            _ip("link", "add", links[0], "type", "veth", "peer", "name", links[1])
            for name, link, address in zip(self.names, links, self.addresses, strict=True):
                _ip("link", "set", link, "netns", name)
                _ip("-n", name, "addr", "add", f"{address}/{PREFIX}", "dev", link)
                _ip("-n", name, "link", "set", "lo", "up")
                _ip("-n", name, "link", "set", link, "up")
        except BaseException:
            self.close()
            raise

    def command(self, machine: int, argv: Sequence[str]) -> list[str]:
        """``argv`` run in machine ``machine`` (0: A, 1: B)."""
        return ["ip", "netns", "exec", self.names[machine], *argv]

    def pids(self, machine: int) -> list[int]:
        """The processes in machine ``machine`` now."""
        return namespace_pids(self.names[machine])

    def kill(self, machine: int) -> list[int]:
        """SIGKILL every process in machine ``machine`` (:func:`kill_namespace`)."""
        return kill_namespace(self.names[machine])

    def close(self) -> None:
        """Kill what runs in both machines and delete them."""
        for machine, name in enumerate(self.names):
            if name in self._made:
                self.kill(machine)
                subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30, check=False)
        self._made.clear()
