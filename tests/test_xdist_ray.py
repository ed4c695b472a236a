"""The scheduler of ``-n 2 --dist loadgroup``: the tests of modules that start Ray in the group ``ray``, those of
modules that start ``hermesd`` in the group ``hermesd``."""

from __future__ import annotations

from pathlib import Path

from tests.xdist_ray import HERMESD_GROUP, RAY_GROUP, group_of

ROOT = Path(__file__).resolve().parents[1]


def test_the_tests_of_modules_that_start_ray_or_hermesd_share_their_group_and_the_others_have_none() -> None:
    seen: dict[str, str | None] = {}
    ray_tests = [
        "tests/cluster/test_fault.py::test_under_kill_pause_and_stalled_renewals[fenced]",
        "tests/cluster/test_fault.py::test_hermesd_cluster_takes_a_webhook",  # names hermesd, in its own namespace
        "tests/cluster/test_two_machines.py::test_two_machines",
        "tests/cluster/test_pg_fault.py::test_a_postgresql_restart",
        "tests/cluster/test_jobs_cluster.py::test_jobs_due",
    ]
    assert [group_of(ROOT, nodeid, seen) for nodeid in ray_tests] == [RAY_GROUP] * len(ray_tests)
    hermesd_tests = ["tests/daemon/test_daemon.py::test_x", "tests/daemon/test_approvals_daemon.py::test_y"]
    assert [group_of(ROOT, nodeid, seen) for nodeid in hermesd_tests] == [HERMESD_GROUP] * len(hermesd_tests)
    others = [
        "tests/cluster/test_dispatch.py::test_a_reply",  # PostgreSQL, no Ray
        "tests/store/test_fts.py::test_z",
        "tests/missing.py::test_y",
    ]
    assert [group_of(ROOT, nodeid, seen) for nodeid in others] == [None] * len(others)
    assert seen["tests/cluster/test_fault.py"] == RAY_GROUP  # read once a file
