"""Scheduled turns in a cluster: jobs falling due while the host holding most of them is killed with -9 (Ray
restarts it; its shards change hands) each fire once and are answered once (``tests/cluster/jobs_driver.py``, in a
network namespace of its own)."""

from __future__ import annotations

import pytest

from tests.cluster.raylab import run_driver

pytestmark = pytest.mark.slow


def test_jobs_due_while_a_host_is_killed_9_fire_once_and_are_answered_once(postgres_dsn: str) -> None:
    seen = run_driver(postgres_dsn, module="tests.cluster.jobs_driver", timeout=150)
    report = f"{seen['events']} runs={seen['runs']}"
    assert seen["restarted"], "Ray restarted the killed host in a new worker"
    assert seen["pending"] == 0
    jobs, runs, said = seen["jobs"], seen["runs"], seen["said"]
    for job_id in seen["once"]:
        prompt = jobs[job_id]["prompt"]
        assert (jobs[job_id]["state"], jobs[job_id]["runs"], runs[job_id]) == ("done", 1, ["done"]), report
        assert (said["user"][prompt], said["assistant"][f"echo: {prompt}"]) == (1, 1), report
    ticks = jobs[seen["ticker"]]["runs"]
    assert ticks >= 3, report
    assert runs[seen["ticker"]] == ["done"] * ticks, report  # each due time fired once
    assert (said["user"]["tick"], said["assistant"]["echo: tick"]) == (ticks, ticks), report
