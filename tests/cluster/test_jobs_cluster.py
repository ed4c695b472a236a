"""Scheduled turns and approvals in a cluster (``tests/cluster/jobs_driver.py``, in a network namespace of its own):
jobs falling due while the host holding most of them is killed with -9 (Ray restarts it; its shards change hands)
each fire once and are answered once; of two turns paused on that host for approval, the one approved through the
ingress after the failover runs its call once on the new holder and is answered once, and the one nobody answers
is denied once by the new holder's scan when its deadline passes."""

from __future__ import annotations

import pytest

from tests.cluster.raylab import run_driver

pytestmark = pytest.mark.slow


def test_jobs_due_and_approvals_pending_across_a_host_kill_9_fire_once_and_resume_once(postgres_dsn: str) -> None:
    seen = run_driver(postgres_dsn, module="tests.cluster.jobs_driver", timeout=180)
    report = f"{seen['events']} runs={seen['runs']} approvals={seen['approvals']}"
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
    approved, unanswered = seen["approvals"]["approved"], seen["approvals"]["unanswered"]
    assert (approved["state"], approved["decided_by"], approved["resumed"]) == ("approved", "fake:u", True), report
    assert approved["denials"] == 0, report
    (ran_in,) = approved["ran_in"]  # the call ran once, in the new incarnation
    assert ran_in != seen["killed"], report
    asking, answer = approved["replies"]  # the question, then one reply of the continued turn
    assert f"Approval {approved['id']} needed" in asking, report
    assert "deployed" in answer, report
    assert (unanswered["state"], unanswered["decided_by"], unanswered["resumed"]) == ("denied", "timeout", True), report
    assert (unanswered["denials"], unanswered["ran_in"]) == (1, []), report
    asking, answer = unanswered["replies"]
    assert f"Approval {unanswered['id']} needed" in asking, report
    assert "did not approve this call (nobody answered within" in answer, report
