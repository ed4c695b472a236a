"""``hermesctl cluster status`` and the ``cluster:`` section of config.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from hermes_actors.cli.hermesctl import main
from hermes_actors.cluster.host_stats import HostStats, encode_stats
from hermes_actors.daemon.config_file import decode_settings
from hermes_actors.errors import ConfigError
from hermes_actors.store.pg import PostgresStore


def test_status_shows_hosts_their_shards_and_the_inbox_lag_per_shard(postgres_dsn: str, tmp_path: Path) -> None:
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as pg:
        pg.shards.ensure(4)
        pg.shards.acquire("h0", [0, 1], 30.0)
        pg.shards.acquire("h1", [2], 30.0)
        pg.shards.beat("h0")
        pg.shards.beat("h1")
        for n, shard in enumerate([1, 1, 3]):
            pg.shard_queue.add(
                shard, platform="t", account_id="", platform_message_id=f"m{n}", routing_key="k", payload=b""
            )
    result = CliRunner().invoke(main, ["cluster", "status", "--home", str(tmp_path), "--dsn", postgres_dsn])
    assert result.exit_code == 1, result.output  # shard 3 was never held: trouble
    lines = result.output.splitlines()
    assert lines[0] == "shards: 4, not held: 1"
    assert lines[1] == "  not held: 3"
    assert lines[2] == "hosts:"
    assert lines[3].startswith("  h0: 2 shards, last heartbeat ")
    assert lines[4].startswith("  h1: 1 shards, last heartbeat ")
    assert lines[5] == "replicas: none is running"
    assert lines[6].startswith("inbox: 3 pending, the oldest ")
    assert lines[7:] == [
        "  shard 1: 2 pending",
        "  shard 3: 1 pending",
        "trouble:",
        "  1 shards held by no host for over 30 s (3): cluster.health.unheld_after_s",
        "Error: the cluster is in trouble: 1 shards held by no host for over 30 s (3): cluster.health.unheld_after_s",
    ]


def test_status_of_a_healthy_cluster_exits_0_with_its_hosts_incarnations_and_replicas(
    postgres_dsn: str, tmp_path: Path
) -> None:
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as pg:
        pg.shards.ensure(2)
        pg.shards.acquire("h0", [0, 1], 30.0)
        pg.shards.beat("h0", incarnation="m1:100:1")
        pg.shards.beat("h0", incarnation="m1:200:2")  # Ray restarted it: a second incarnation
        pg.shards.beat("h0", incarnation="m1:200:2", stats=encode_stats(HostStats(pid=200, shards=2, turns={"ok": 7})))
        pg.replicas.beat("m1:300", fingerprint="abc123", settings="{}")
    result = CliRunner().invoke(main, ["cluster", "status", "--home", str(tmp_path), "--dsn", postgres_dsn])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "shards: 2, not held: 0"
    assert lines[1] == "hosts:"
    assert lines[2].startswith("  h0: 2 shards, last heartbeat ")
    assert ", m1:200:2 up 0 s (incarnation 2); turns: ok 7; handed over 0; fence refusals 0; " in lines[2]
    assert lines[3] == "replicas:"
    assert lines[4].startswith("  m1:300: last heartbeat ")
    assert lines[4].endswith(", up 0 s, config abc123")
    assert lines[5:] == ["inbox: nothing pending", "trouble: none"]


def test_status_without_a_configured_store_names_the_setting(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["cluster", "status", "--home", str(tmp_path)])
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        "Error: cluster.postgres_dsn: is required in cluster mode; set it to the PostgreSQL store, "
        "e.g. postgresql://hermes@db.internal/hermes"
    )


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"shards": 0}, "cluster.shards: 0 is out of range; use 1..65536 (the default is 256)"),
        ({"hosts": []}, "cluster.hosts: must name at least one shard host"),
        ({"hosts": ["a", "a"]}, "cluster.hosts: names a host twice; each name is one Ray actor"),
        ({"hosts": ["a b"]}, "cluster.hosts: 'a b' is not a host name; use letters, digits, '.', '_' and '-'"),
        ({"lease_ttl_s": 0.5}, "cluster.lease_ttl_s: must be at least 1 second (a host renews every third of it)"),
        ({"grace_s": -1}, "cluster.grace_s: must be between 0 and ten times cluster.lease_ttl_s"),
        ({"postgres": "x"}, "cluster.postgres: unknown field"),
    ],
)
def test_a_bad_cluster_section_is_a_config_error_naming_the_field(section: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        decode_settings({"cluster": section})
    assert str(caught.value).startswith(message)


def test_the_cluster_section_defaults_to_256_shards_on_three_hosts() -> None:
    cluster = decode_settings({"cluster": {"postgres_dsn": "postgresql:///hermes"}}).cluster
    assert (cluster.shards, cluster.hosts, cluster.lease_ttl_s, cluster.grace_s) == (
        256,
        ("host-0", "host-1", "host-2"),
        10.0,
        5.0,
    )


def test_hermesd_cluster_without_a_store_exits_2_naming_the_setting(tmp_path: Path) -> None:
    from hermes_actors.cli.hermesd import main as hermesd

    result = CliRunner().invoke(hermesd, ["--home", str(tmp_path), "--cluster"])
    assert result.exit_code == 2
    assert "cluster.postgres_dsn: is required in cluster mode" in result.output.splitlines()[-1]
    assert result.output.splitlines()[-1].startswith("Error: configuration ")


def test_sessions_list_and_show_read_a_cluster_s_postgresql_store_with_dsn(postgres_dsn: str, tmp_path: Path) -> None:
    from hermes_actors.store import NewMessage, Role

    with PostgresStore.open(postgres_dsn, migrate_schema=False) as pg:
        record = pg.create_session("webhook", session_id="20261203_090000_abcdef01", title="In the cluster")
        pg.append_messages(
            record.id,
            [NewMessage(role=Role.USER, content="hello"), NewMessage(role=Role.ASSISTANT, content="echo: hello")],
        )
    listed = CliRunner().invoke(main, ["sessions", "list", "--home", str(tmp_path), "--dsn", postgres_dsn])
    assert listed.exit_code == 0, listed.output
    assert "In the cluster" in listed.output
    shown = CliRunner().invoke(
        main, ["sessions", "show", "In the cluster", "--home", str(tmp_path)], env={"HERMES_CLUSTER_DSN": postgres_dsn}
    )
    assert shown.exit_code == 0, shown.output
    assert "echo: hello" in shown.output
    without = CliRunner().invoke(main, ["sessions", "list", "--home", str(tmp_path)])
    assert without.exit_code == 1  # the home has no SQLite store: the option is what reads PostgreSQL


def test_hermesd_cluster_without_a_reachable_ray_says_so_in_one_error_line(postgres_dsn: str, tmp_path: Path) -> None:
    import json
    import socket

    from hermes_actors.cli.hermesd import main as hermesd

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = {"cluster": {"postgres_dsn": postgres_dsn, "ray_address": f"127.0.0.1:{port}"}}
    (tmp_path / "config.yaml").write_text(json.dumps(config))
    result = CliRunner().invoke(hermesd, ["--home", str(tmp_path), "--cluster"])
    assert result.exit_code == 1
    last = result.output.splitlines()[-1]
    assert last.startswith(f"Error: cannot reach the Ray cluster at cluster.ray_address '127.0.0.1:{port}' (")
    assert last.endswith(
        "); start its head with 'ray start --head --port=6379' (this machine joins one with "
        "'ray start --address=HEAD:6379'), or set cluster.ray_address to the head's host:port"
    )
    assert "Traceback" not in result.output
