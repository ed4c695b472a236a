"""The PostgreSQL fault test of issue 37: two shard hosts under load while PostgreSQL restarts (``pg_ctl restart
-m fast``) and connections are killed (``pg_terminate_backend``: seven in the middle of a group commit, then all).
Every message the ingress accepted must be answered once, in order, from the whole committed history before it: a
commit whose connection broke is either in the store and in the session's memory, or in neither, and a row whose
turn did not commit is handed over again. PostgreSQL is a cluster of this test's own, since it restarts it.

On the code before issue 37 it fails (3 runs in 3): a group commit whose connection broke after its first write was
taken for committed, so 2-3 messages stayed pending for good while 20-40 later turns were answered from a history
holding them."""

from __future__ import annotations

import pytest

from hermes_actors.store.pg import PostgresStore
from tests.cluster.checks import counts, order_violations, overlapping_turns, pending_rows, stale_context_commits
from tests.cluster.raylab import run_driver
from tests.postgres import Cluster, find_bin_dir

pytestmark = pytest.mark.slow


def test_a_postgresql_restart_and_killed_connections_under_load_lose_and_repeat_nothing(own_postgres: Cluster) -> None:
    dsn = own_postgres.dsn("hermes")
    bin_dir = find_bin_dir()
    assert bin_dir is not None
    seen = run_driver(dsn, str(own_postgres.data), str(bin_dir), module="tests.cluster.pg_fault_driver", timeout=110)
    report = f"{seen['events']} outcomes={seen['outcomes']} dispatched={seen['dispatched']}"
    with PostgresStore.open(dsn, migrate_schema=False) as pg:
        assert pending_rows(pg) == 0, report
        accepted = int(seen["accepted"])
        assert accepted == 1000
        assert counts(pg) == {"inbox": accepted, "outbox": accepted, "turns": accepted, "user_messages": accepted}, (
            report
        )
        assert order_violations(pg) == [], report
        assert stale_context_commits(pg) == [], report
        assert overlapping_turns(pg) == [], report
