"""What ``hermesctl cluster status`` and a replica's ``/health/cluster`` find (issue 37): where the stuck messages
are, silent hosts, shards no host holds; ``--json``; an exit status that says so; a bounded text under load."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from click.testing import CliRunner

from hermes_actors.cli.hermesctl import main
from hermes_actors.cluster.host_stats import HandedRow, HostStats, encode_stats
from hermes_actors.cluster.settings import ClusterHealth
from hermes_actors.cluster.status import cluster_status, status_text
from hermes_actors.store.pg import PostgresStore


def _add(pg: PostgresStore, shard: int, message_id: str) -> int:
    inbox_id = pg.shard_queue.add(
        shard, platform="webhook", account_id="", platform_message_id=message_id, routing_key="k", payload=b""
    )
    assert inbox_id is not None
    return inbox_id


def test_stuck_messages_are_shown_where_they_are_and_the_status_exits_1(postgres_dsn: str, tmp_path: Path) -> None:
    long_ago = time.time() - 600
    with PostgresStore.open(postgres_dsn, migrate_schema=False, clock=lambda: long_ago) as old:
        old.shards.ensure(4)
        for shard in range(4):
            old.shards.acquire("h0", [shard], 30.0)
        in_session = _add(old, 1, "handed")
        before_session = _add(old, 2, "waiting")
        old.shards.beat(
            "h0",
            incarnation="m1:1:1",
            stats=encode_stats(
                HostStats(pid=1, shards=4, handed_over=1, oldest_handed=[HandedRow(in_session, 1, 590.0)])
            ),
        )
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as pg:
        _add(pg, 3, "fresh")
    result = CliRunner().invoke(
        main, ["cluster", "status", "--home", str(tmp_path), "--dsn", postgres_dsn, "--json"], catch_exceptions=False
    )
    assert result.exit_code == 1
    shown = json.loads(result.stdout)
    assert shown["stuck_count"] == 2
    assert [(row["inbox_id"], row["holder"], row["handed"]) for row in shown["stuck"]] == [
        (in_session, "h0", "yes"),
        (before_session, "h0", "no"),
    ]
    assert shown["stuck"][0]["handed_s_ago"] == 590.0
    assert shown["hosts"][0]["stats"]["oldest_handed"] == [[in_session, 1, 590.0]]
    assert re.match(r"2 messages pending for over 120 s \(the oldest 60\d s\)", shown["trouble"][0])
    assert result.stderr.startswith("Error: the cluster is in trouble: 2 messages pending for over 120 s")
    text = CliRunner().invoke(main, ["cluster", "status", "--home", str(tmp_path), "--dsn", postgres_dsn]).stdout
    assert re.search(
        rf"  inbox {in_session} \(webhook, shard 1, 60\d s\): held by h0, handed to its session 590 s ago", text
    )
    assert re.search(rf"  inbox {before_session} \(webhook, shard 2, 60\d s\): held by h0, not handed over", text)


def test_a_silent_host_and_a_configured_host_that_never_started_are_trouble(postgres_dsn: str) -> None:
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as pg:
        pg.shards.ensure(1)
        pg.shards.acquire("h0", [0], 300.0)
        pg.shards.beat("h0")
    with PostgresStore.open(postgres_dsn, migrate_schema=False, lease_skew=lambda: 45.0) as later:
        status = cluster_status(later, health=ClusterHealth(host_silent_after_s=30), expected_hosts=("h0", "h1"))
    assert status.trouble == [
        "host h0 silent for 45 s (no heartbeat): cluster.health.host_silent_after_s",
        "host h1 has never started (no heartbeat in the store)",
    ]
    assert [(h.name, h.shards) for h in status.hosts] == [("h0", 1), ("h1", 0)]
    assert "  h1: 0 shards, last heartbeat never" in status_text(status).splitlines()


def test_the_text_stays_bounded_under_load_and_json_has_every_shard(postgres_dsn: str, tmp_path: Path) -> None:
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as pg:
        pg.shards.ensure(64)
        pg.shards.acquire("h0", range(64), 30.0)
        pg.shards.beat("h0")
        for shard in range(64):
            for n in range(3):
                _add(pg, shard, f"m{shard}-{n}")
        for n in range(40):
            pg.roles.acquire(f"adapter:telegram:bot{n}", "replica-a", 30.0)
    text = CliRunner().invoke(main, ["cluster", "status", "--home", str(tmp_path), "--dsn", postgres_dsn])
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert len(lines) <= 40
    assert "inbox: 192 pending, the oldest " in text.stdout
    assert sum(1 for line in lines if line.startswith("  shard ")) == 10
    assert "  ... 54 more shards with pending messages (--json lists all)" in lines
    assert "  ... 20 more roles (--json lists all)" in lines
    shown = json.loads(
        CliRunner().invoke(main, ["cluster", "status", "--home", str(tmp_path), "--dsn", postgres_dsn, "--json"]).stdout
    )
    assert len(shown["lag"]) == 64
    assert len(shown["roles"]) == 40
