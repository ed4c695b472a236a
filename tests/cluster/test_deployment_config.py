"""Configuring a cluster replica: the ``cluster:`` section's errors and template, a DSN that keeps its password out
of Ray, and what ``hermesctl`` says on a replica's home (``status``, the store commands without ``--dsn``)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import msgspec
import pytest
import yaml
from click.testing import CliRunner

from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.cluster.settings import ClusterHealth, ClusterSettings
from hermes_actors.daemon.config_file import decode_settings
from hermes_actors.daemon.config_template import default_config_text
from hermes_actors.daemon.pid_lock import PidLock
from hermes_actors.errors import ConfigError

DSN = "postgresql://hermes@10.20.0.1:5432/hermes"
SECRET = "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="


@pytest.fixture
def replica_home(tmp_path: Path) -> Path:
    home = tmp_path / "replica"
    home.mkdir()
    (home / "config.yaml").write_text(json.dumps({"cluster": {"postgres_dsn": DSN}}))
    return home


def test_hosts_given_as_a_count_is_refused_with_the_shape_of_a_list(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("cluster:\n  postgres_dsn: postgresql://hermes@db/hermes\n  hosts: 3\n")
    result = CliRunner().invoke(hermesctl, ["config", "check", "--config", str(config)])
    assert result.exit_code == 2
    assert result.output == (
        f"Error: configuration {config}: cluster.hosts: Expected `array`, got `int`; write a list of the shard "
        "hosts' names, not a count: hosts: [host-0, host-1, host-2]\n"
    )


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://hermes:s3cret@db.internal/hermes",
        "postgres://hermes:s3cret@db.internal:5432/hermes?sslmode=require",
        "postgresql://hermes@db.internal/hermes?sslmode=require&password=s3cret",
        "host=db.internal user=hermes password=s3cret dbname=hermes",
        "host=db.internal user=hermes dbname=hermes password = s3cret",
    ],
)
def test_a_dsn_holding_a_password_is_refused_naming_where_the_password_goes(dsn: str) -> None:
    with pytest.raises(ConfigError) as caught:
        decode_settings({"cluster": {"postgres_dsn": dsn}})
    assert str(caught.value) == (
        "cluster.postgres_dsn: holds a password, which Ray would keep in clear with every shard host's arguments; "
        "remove it and give it to hermesd and to 'ray start' on every machine as PGPASSWORD (or in a ~/.pgpass file)"
    )


@pytest.mark.parametrize(
    "dsn",
    [DSN, "postgresql:///hermes", "host=/run/postgresql port=5432 user=hermes dbname=hermes", "host=db passfile=/x"],
)
def test_a_dsn_without_a_password_is_taken(dsn: str) -> None:
    assert decode_settings({"cluster": {"postgres_dsn": dsn}}).cluster.postgres_dsn == dsn


def test_placement_spreads_the_hosts_by_default_and_names_its_choices_when_wrong() -> None:
    assert ClusterSettings().placement == "spread"
    assert decode_settings({"cluster": {"placement": "pack"}}).cluster.placement == "pack"
    with pytest.raises(ConfigError) as caught:
        decode_settings({"cluster": {"placement": "anywhere"}})
    assert str(caught.value) == "cluster.placement: Invalid enum value 'anywhere' (expected one of: spread, pack)"


def _commented_cluster_block(text: str) -> str:
    lines = text.splitlines()
    start = lines.index("# cluster:")
    block = []
    for line in lines[start:]:
        if not line.startswith("# "):
            break
        block.append(line[2:].split("  #")[0].rstrip())
    return "\n".join(block)


def test_the_template_s_commented_cluster_section_names_every_setting_at_its_default() -> None:
    section = yaml.safe_load(_commented_cluster_block(default_config_text(SECRET)))["cluster"]
    assert set(section) == {field.name for field in msgspec.structs.fields(ClusterSettings)}
    assert set(section["health"]) == {field.name for field in msgspec.structs.fields(ClusterHealth)}
    assert decode_settings({"cluster": section}).cluster == ClusterSettings()


def test_status_on_a_replica_s_home_without_its_replica_says_what_the_home_is_and_how_to_see_the_cluster(
    replica_home: Path,
) -> None:
    result = CliRunner().invoke(hermesctl, ["status", "--home", str(replica_home)])
    assert result.exit_code == 3
    assert result.output.splitlines() == [
        f"hermesd --cluster is not running on {replica_home} (a cluster replica's home: cluster.postgres_dsn is set)",
        f"  start it with: hermesd --home {replica_home} --cluster",
        f"  the cluster may run on without it; see it with: hermesctl cluster status --dsn {DSN}",
    ]


def test_status_on_a_replica_s_home_while_its_replica_runs_names_its_pid_and_the_cluster(replica_home: Path) -> None:
    lock = PidLock(replica_home)  # what hermesd --cluster holds while it runs
    lock.acquire()
    try:
        result = CliRunner().invoke(hermesctl, ["status", "--home", str(replica_home)])
        as_json = CliRunner().invoke(hermesctl, ["status", "--home", str(replica_home), "--json"])
    finally:
        lock.release()
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"hermesd --cluster runs on {replica_home} (pid {os.getpid()}): a replica of the cluster whose store is {DSN}",
        f"  sessions, hosts and shards are the cluster's; see them with: hermesctl cluster status --dsn {DSN}",
    ]
    assert json.loads(as_json.output) == {
        "running": True,
        "home": str(replica_home),
        "cluster_replica": True,
        "pid": str(os.getpid()),
        "dsn": DSN,
    }


def test_hermesd_cluster_refuses_a_home_whose_replica_runs(replica_home: Path) -> None:
    from hermes_actors.cli.hermesd import main as hermesd

    lock = PidLock(replica_home)
    lock.acquire()
    try:
        result = CliRunner().invoke(hermesd, ["--home", str(replica_home), "--cluster"])
    finally:
        lock.release()
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        f"Error: another hermesd (pid {os.getpid()}) is running on {replica_home}; stop it with "
        f"'kill -TERM {os.getpid()}' or start this one with a different --home"
    )


@pytest.mark.parametrize(
    "command",
    [
        ["sessions", "list"],
        ["sessions", "stats"],
        ["sessions", "show", "x"],
        ["sessions", "search", "hi"],
        ["sessions", "end", "x"],
    ],
)
def test_a_store_command_on_a_replica_s_home_without_dsn_points_at_the_cluster_s_store(
    replica_home: Path, command: list[str]
) -> None:
    result = CliRunner().invoke(hermesctl, [*command, "--home", str(replica_home)], env={"HERMES_CLUSTER_DSN": None})
    assert result.exit_code == 1
    assert result.output == (
        f"Error: {replica_home} is a cluster replica's home (cluster.postgres_dsn in its config.yaml), with no "
        f"SQLite store; the cluster's sessions are in its PostgreSQL store: pass --dsn {DSN} (or set "
        "HERMES_CLUSTER_DSN)\n"
    )


def test_a_sqlite_only_command_on_a_replica_s_home_says_it_works_on_sqlite_only(replica_home: Path) -> None:
    result = CliRunner().invoke(hermesctl, ["db", "check", "--home", str(replica_home)])
    assert result.exit_code == 1
    assert result.output == (
        f"Error: {replica_home} is a cluster replica's home (cluster.postgres_dsn in its config.yaml), with no "
        f"SQLite store; this command works on a home's SQLite store only (the cluster's store: {DSN})\n"
    )


def test_stop_hosts_without_a_reachable_ray_is_one_error_line(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = {"cluster": {"postgres_dsn": DSN, "ray_address": f"127.0.0.1:{port}"}}
    (tmp_path / "config.yaml").write_text(json.dumps(config))
    result = CliRunner().invoke(hermesctl, ["cluster", "stop-hosts", "--home", str(tmp_path)])
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: cannot reach the Ray cluster at cluster.ray_address '127.0.0.1:{port}' (")
    assert len(result.output.splitlines()) == 1


def test_replicas_with_different_admin_keys_have_different_shared_configs_without_showing_the_key() -> None:
    from hermes_actors.cluster.replica.fingerprint import cluster_config, differences

    settings = ClusterSettings(postgres_dsn=DSN)
    one = cluster_config(settings, {}, admin_key="hk-admin-one-0123456789")
    same = cluster_config(settings, {}, admin_key="hk-admin-one-0123456789")
    other = cluster_config(settings, {}, admin_key="hk-admin-two-0123456789")  # a home that generated its own
    assert one == same
    assert one[1] != other[1]
    assert differences(one[0], other[0]) == ["operator.admin_key"]
    assert "hk-admin" not in one[0]


def test_a_ray_head_that_takes_the_connection_but_refuses_to_be_joined_is_named_with_the_token_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    def refused(**_: object) -> None:  # what ray.init raises after its retries, with another token than the head's
        raise ConnectionError("Failed to connect to Ray cluster at 127.0.0.1:1")

    monkeypatch.setattr(ray, "init", refused)
    with socket.socket() as head:  # takes connections, as a head's port does
        head.bind(("127.0.0.1", 0))
        head.listen()
        address = f"127.0.0.1:{head.getsockname()[1]}"
        (tmp_path / "config.yaml").write_text(json.dumps({"cluster": {"postgres_dsn": DSN, "ray_address": address}}))
        result = CliRunner().invoke(hermesctl, ["cluster", "stop-hosts", "--home", str(tmp_path)])
    assert result.exit_code == 1
    assert result.output == (
        f"Error: the Ray cluster at cluster.ray_address '{address}' takes connections but this process could not "
        "join it (Failed to connect to Ray cluster at 127.0.0.1:1); if its nodes run with token authentication "
        "(RAY_AUTH_MODE=token), give this process the same RAY_AUTH_MODE and RAY_AUTH_TOKEN; every node and "
        f"replica needs Ray {ray.__version__}, as here\n"
    )
