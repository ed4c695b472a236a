"""``daemon.cpu_affinity`` and ``daemon.cpu_scheduling`` on a real ``hermesd``: by default every thread of it runs on
one CPU under ``SCHED_BATCH``, the MCP servers it starts get every CPU and the normal policy back, ``all`` and
``normal`` leave the process alone, and a CPU the process may not use is refused at start naming the key."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_actors.testing import poll_until
from tests.agents.mcp_fixtures import SERVER
from tests.daemon.test_daemon import Daemon, start_daemon

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not sys.platform.startswith("linux") or len(os.sched_getaffinity(0)) < 2,
        reason="needs Linux and at least two CPUs this process may use",
    ),
]


def _config(affinity: str, calls: Path) -> str:
    return f"""
daemon:
  drain_timeout_s: 10
  {affinity}
platforms:
  api_server:
    port: 0
  webhook:
    port: 0
runtime:
  auto_titles: false
agent:
  mcp_servers:
    files:
      command: [{sys.executable}, {SERVER}, stdio]
      env: {{MCP_CALLS: {calls}}}
"""


def _cpus(pid: int, tid: int | None = None) -> frozenset[int]:
    """The CPUs a process (or one of its threads) may run on, as /proc shows them."""
    status = Path(f"/proc/{pid}" + (f"/task/{tid}" if tid is not None else "") + "/status").read_text()
    (line,) = [line for line in status.splitlines() if line.startswith("Cpus_allowed_list:")]
    cpus: set[int] = set()
    for part in line.split(":", 1)[1].strip().split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return frozenset(cpus)


def _policy(tid: int) -> int | None:
    """A thread's scheduling policy (``None``: it ended meanwhile)."""
    try:
        return os.sched_getscheduler(tid)
    except ProcessLookupError:
        return None


def _threads(pid: int) -> list[int]:
    return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for tid in _threads(pid):
        try:
            found.extend(int(child) for child in Path(f"/proc/{pid}/task/{tid}/children").read_text().split())
        except FileNotFoundError:  # the thread ended meanwhile
            continue
    return found


def _start(tmp_path: Path, affinity: str) -> Daemon:
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.yaml").write_text(_config(affinity, tmp_path / "calls.jsonl"))
    return Daemon(home, start_daemon(home))


def _chat(daemon: Daemon) -> None:
    """One turn: the session's agent starts its MCP servers."""
    body = json.dumps({"model": "hermes-agent", "messages": [{"role": "user", "content": "hello"}]}).encode()
    request = urllib.request.Request(
        f"{daemon.api}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert json.load(response)["choices"][0]["message"]["content"]


def _mcp_server(daemon: Daemon) -> int | None:
    for child in _children(daemon.process.pid):
        if str(SERVER) in Path(f"/proc/{child}/cmdline").read_bytes().decode(errors="replace"):
            return child
    return None


@contextlib.contextmanager
def _answering(tmp_path: Path, affinity: str) -> Iterator[tuple[Daemon, list[str]]]:
    """A ``hermesd`` with ``affinity`` under ``daemon:`` that has answered one turn; on exit it is stopped with
    SIGTERM, must exit 0, and its stderr is appended to the yielded list."""
    daemon = _start(tmp_path, affinity)
    stderr: list[str] = []
    try:
        _chat(daemon)
        yield daemon, stderr
    finally:
        code, _, err = daemon.stop()
    assert code == 0, err
    stderr.append(err)


def test_by_default_every_thread_runs_on_one_cpu_and_an_mcp_server_it_starts_gets_every_cpu(tmp_path: Path) -> None:
    mine = frozenset(os.sched_getaffinity(0))
    with _answering(tmp_path, "") as (daemon, stderr):
        pid = daemon.process.pid
        placed = {tid: _cpus(pid, tid) for tid in _threads(pid)}
        assert len(placed) > 10  # the writer, the HTTP loops, the outbox, the session that answered ...
        (cpu,) = _cpus(pid)
        assert cpu in mine
        assert set(placed.values()) == {frozenset({cpu})}, placed
        assert {_policy(tid) for tid in placed} <= {os.SCHED_BATCH, None}  # daemon.cpu_scheduling: batch

        server = poll_until(lambda: _mcp_server(daemon), timeout=20, what="hermesd started no MCP server")
        assert _cpus(server) == mine  # through the command that gives the CPUs back, then the server itself (exec)
        assert _policy(server) == os.SCHED_OTHER  # and the normal policy
        assert Path(f"/proc/{server}/cmdline").read_bytes().split(b"\0")[1] == str(SERVER).encode()
    assert f"running on CPU {cpu} of" in stderr[0]
    assert "threads scheduled as a batch (daemon.cpu_scheduling: batch" in stderr[0]


def test_all_leaves_every_cpu_to_the_process_and_normal_its_scheduling(tmp_path: Path) -> None:
    mine = frozenset(os.sched_getaffinity(0))
    with _answering(tmp_path, "cpu_affinity: all\n  cpu_scheduling: normal") as (daemon, stderr):
        pid = daemon.process.pid
        assert {_cpus(pid, tid) for tid in _threads(pid)} == {mine}
        assert {_policy(tid) for tid in _threads(pid)} <= {os.SCHED_OTHER, None}
    assert "running on CPU" not in stderr[0]
    assert "scheduled as a batch" not in stderr[0]


def test_a_cpu_the_process_may_not_use_is_refused_at_start_naming_the_key(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    outside = max(os.sched_getaffinity(0)) + 1
    (home / "config.yaml").write_text(_config(f"cpu_affinity: [{outside}]", tmp_path / "calls.jsonl"))
    process = start_daemon(home)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 2
    assert f"Error: daemon.cpu_affinity names CPU {outside}, but this process may run only on CPUs" in err
