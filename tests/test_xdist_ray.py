"""The scheduler of ``-n 2 --dist loadgroup``: every test of a module that starts Ray in the one group ``ray``."""

from __future__ import annotations

from pathlib import Path

from tests.xdist_ray import RAY_GROUP, ray_group_of

ROOT = Path(__file__).resolve().parents[1]


def test_the_tests_of_modules_that_start_ray_share_one_group_and_the_others_have_none() -> None:
    seen: dict[str, bool] = {}
    ray_tests = [
        "tests/cluster/test_fault.py::test_under_kill_pause_and_stalled_renewals[fenced]",
        "tests/cluster/test_fault.py::test_hermesd_cluster_takes_a_webhook",
        "tests/cluster/test_two_machines.py::test_two_machines",
        "tests/cluster/test_pg_fault.py::test_a_postgresql_restart",
        "tests/cluster/test_jobs_cluster.py::test_jobs_due",
    ]
    assert [ray_group_of(ROOT, nodeid, seen) for nodeid in ray_tests] == [RAY_GROUP] * len(ray_tests)
    others = [
        "tests/cluster/test_dispatch.py::test_a_reply",  # PostgreSQL, no Ray
        "tests/daemon/test_daemon.py::test_x",
        "tests/missing.py::test_y",
        "examples/calculator-agent/test_calculator.py::test_z",
    ]
    assert [ray_group_of(ROOT, nodeid, seen) for nodeid in others] == [None] * len(others)
    assert seen["tests/cluster/test_fault.py"] is True  # read once a file
