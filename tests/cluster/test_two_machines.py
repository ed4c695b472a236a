"""The README's two-machine deployment ("Running a cluster"), on two network namespaces joined by a veth pair: the
driver (``tests/cluster/two_machines_driver.py``) runs it in machine A; this test makes the machines, checks what
the driver saw, and kills whatever is left in them.

Machine A: PostgreSQL on its private address (the recipe's ``pg_hba.conf``, a password role), the Ray head with
fixed ports and token authentication, a ``hermesd --cluster`` replica. Machine B: a Ray worker node joining the
head, a second replica. The shard hosts spread over both nodes; a message into replica B is answered; every
process of machine B killed with -9 loses no accepted message; ``hermesctl cluster stop-hosts`` ends the hosts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.netns import TwoMachines, missing_reason
from tests.cluster.raylab import REQUIRE_ENV
from tests.postgres import find_bin_dir

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def machines() -> Iterator[TwoMachines]:
    reason = missing_reason()
    if reason is None and find_bin_dir() is None:
        reason = "PostgreSQL's server binaries are not installed (apt-get install postgresql)"
    if reason is None:
        try:
            import ray  # noqa: F401
        except ImportError:
            reason = "ray is not installed: pip install -e '.[test]'"
    if reason is not None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    made = TwoMachines(str(os.getpid()))
    try:
        yield made
    finally:
        made.close()


def test_two_machines_spread_the_hosts_answer_through_either_replica_and_lose_nothing_when_one_dies(
    machines: TwoMachines,
) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="hermes-two-machines-"))
    workdir.chmod(0o755)  # the postgres user walks into its directory
    try:
        command = [sys.executable, "-m", "tests.cluster.two_machines_driver", *machines.names, str(workdir)]
        done = subprocess.run(
            machines.command(0, command), cwd=ROOT, capture_output=True, text=True, timeout=400, check=False
        )
    finally:
        machines.close()
        shutil.rmtree(workdir, ignore_errors=True)
    lines = done.stdout.strip().splitlines()
    seen = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
    assert done.returncode == 0, f"{seen}\n{done.stderr[-4000:]}"
    context = json.dumps(seen["events"], indent=1)
    # Ray's token authentication is on: the head's GCS refuses a call without the token or with another one.
    assert seen["token"] == {"none": "AuthenticationError", "wrong": "AuthenticationError", "right": "OK"}
    assert "no pg_hba.conf entry" in seen["superuser_from_b"], seen["superuser_from_b"]
    # placement: spread put one host on each machine
    assert sorted(seen["placement"].values()) == sorted(machines.names), context
    assert set(seen["holders_before"]) == {"host-0", "host-1"}
    status, completion = seen["completion_b"]
    assert status == 200, completion
    assert completion["choices"][0]["message"]["content"] == "echo: hello from machine b"
    assert seen["admin"] == {"10.20.0.1": 200, "10.20.0.2": 200}  # one admin key, shared by the environment
    assert seen["outside_recipe"] == [], seen["listeners"]
    assert seen["replicas_seen"] == 2
    code, first, pid = seen["status_running"]  # hermesctl status on replica A's home while it runs
    assert code == 0
    assert first[0].startswith("hermesd --cluster runs on ")
    assert first[0].endswith(
        f"(pid {pid}): a replica of the cluster whose store is postgresql://hermes@10.20.0.1:5432/hermes"
    )
    assert len(seen["fingerprints"]) == 1  # the same configuration on both replicas
    # machine B killed: every accepted message answered once, with what it said; nothing pending; A holds all
    assert seen["refused"] == {}
    assert seen["accepted"] == 48
    assert seen["unanswered"] == [], context
    assert seen["wrong_answers"] == {}
    assert seen["pending"] == 0
    assert seen["after_kill_on_b_shards"] > 0, "some messages after the kill waited for B's shards to move to A"
    assert seen["counts"] == {"inbox": 49, "outbox": 49, "turns": 49, "user_messages": 49}  # and the completion
    assert seen["order"] == []
    assert sum(seen["holders_after"].values()) == 16
    assert "both hosts run on machine A" in context  # the host of dead machine B was created again on A
    # stopping: the replica exits 0, stop-hosts ends both hosts for good
    assert seen["replica_a_exit"] == 0
    code, first = seen["status_stopped"]
    assert code == 3
    assert first[0].startswith("hermesd --cluster is not running on ")
    assert seen["hosts_without_replicas"] == ["host-0", "host-1"]  # detached: they outlive every replica
    code, out, err = seen["stop_hosts"]
    assert code == 0, err
    assert out.splitlines() == ["host-0: stopped", "host-1: stopped"]
    assert seen["hosts_left"] == []
    # PostgreSQL's password reached the hosts by the environment, never into Ray's files or the replicas' logs
    assert seen["password_in"] == []
