"""``hermesctl import-hermes --dsn``: the reference system's history into a cluster's PostgreSQL store, reported as
an import into a home is (the target named by its DSN, without a password)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from hermes_actors.cli.hermesctl import main
from hermes_actors.store.pg import PostgresStore
from hermes_actors.store.pg.db import redact
from hermes_actors.store.pg.migrations import SCHEMA_VERSION
from tests.importer.hermes_v22 import HermesDb
from tests.importer.test_ctl_import import configure, summary
from tests.postgres import Cluster


@pytest.fixture
def reference(tmp_path: Path) -> Path:
    """The two sessions of ``test_ctl_import``'s reference: a Telegram DM with a route, a Slack channel's."""
    path = tmp_path / "hermes" / "state.db"
    path.parent.mkdir()
    with HermesDb(path) as h:
        h.session("20260528_100000_aaaa0001", session_key="agent:main:telegram:dm:7", chat_id="7", title="plans")
        h.messages("20260528_100000_aaaa0001", ["hello", "hi", "what next?", "tests"])
        h.message("20260528_100000_aaaa0001", "user", "taken back", active=0)
        h.route("agent:main:telegram:dm:7", "20260528_100000_aaaa0001")
        h.session("20260528_100100_aaaa0002", source="slack", chat_type="channel", chat_id="C2")
        h.messages("20260528_100100_aaaa0002", ["in a channel"])
        h.route("agent:main:slack:channel:C2:U2", "20260528_100100_aaaa0002")
    return path


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as store:
        yield store


def run(home: Path, dsn: str, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(main, ["import-hermes", *args, "--home", str(home), "--dsn", dsn], input=input)


def into_cluster(reference: Path, dsn: str, verb: str) -> str:
    """``test_ctl_import``'s summary, into the cluster's store instead of a home's state.db."""
    placeholder = Path("/HOME")
    return summary(reference, placeholder, verb).replace(str(placeholder / "state.db"), redact(dsn))


def test_an_import_into_a_cluster_store_writes_it_and_reports_as_into_a_home(
    reference: Path, tmp_path: Path, postgres_dsn: str, pg: PostgresStore
) -> None:
    home = tmp_path / "home"
    configure(home)
    dry = run(home, postgres_dsn, str(reference), "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert dry.stdout == into_cluster(reference, postgres_dsn, "Would import")
    assert pg.list_sessions(limit=None) == []

    result = run(home, postgres_dsn, str(reference), "--yes")
    assert result.exit_code == 0, result.output
    assert result.stdout == into_cluster(reference, postgres_dsn, "Imported")
    assert pg.get_route("agent:main:telegram~main:dm:7") == "20260528_100000_aaaa0001"
    assert pg.resolve_session("plans").message_count == 4
    assert [p.name for p in home.iterdir()] == ["config.yaml"]  # nothing went into a home

    again = run(home, postgres_dsn, str(reference), input="")
    assert again.exit_code == 0, again.output
    assert again.stdout.startswith("Nothing new to import.\nWould import from ")
    assert "  sessions: 0 new, 0 updated, 2 already imported, 0 skipped (of 2)\n" in again.stdout


def test_a_database_without_the_schema_is_refused_naming_the_fix(
    reference: Path, tmp_path: Path, postgres_cluster: Cluster
) -> None:
    name = postgres_cluster.create_database(empty=True)
    try:
        dsn = postgres_cluster.dsn(name)
        result = run(tmp_path / "home", dsn, str(reference), "--yes")
        assert result.exit_code == 1
        assert result.output == (
            f"Error: {redact(dsn)} has schema version 0, not {SCHEMA_VERSION}: start the cluster with this version's "
            "'hermesd --cluster' (it migrates the store), or fill an empty database with 'hermesctl db copy'\n"
        )
    finally:
        postgres_cluster.drop_database(name)


def test_a_session_open_in_a_shard_host_is_not_updated_until_it_is_idle(
    tmp_path: Path, postgres_dsn: str, pg: PostgresStore
) -> None:
    path = tmp_path / "state.db"
    session_id = "20260528_100000_aaaa0001"
    with HermesDb(path) as h:
        h.session(session_id, session_key="agent:main:telegram:dm:7", chat_id="7")
        h.messages(session_id, ["hello", "hi"])
        assert run(tmp_path / "home", postgres_dsn, str(path), "--yes").exit_code == 0
        h.messages(session_id, ["more", "since"])  # the reference system went on
        host = "host-0:4242:1"
        assert pg.leases.acquire(session_id, host, ttl_s=600) is None  # a shard host runs the session now
        held = run(tmp_path / "home", postgres_dsn, str(path), "--yes")
        assert held.exit_code == 0, held.output
        assert "  sessions: 0 new, 0 updated, 0 already imported, 1 skipped (of 1)\n" in held.stdout
        assert (
            f"  {session_id}: it is open here (a live session's lease is held by {host}), so what the source added "
            "since was not imported; run the import again once the session is idle\n"
        ) in held.stdout
        assert pg.get_session(session_id).message_count == 2
        assert pg.leases.holder(session_id) == host
        pg.leases.release(session_id, host)  # the host passivated it
        idle = run(tmp_path / "home", postgres_dsn, str(path), "--yes")
        assert "  sessions: 0 new, 1 updated, 0 already imported, 0 skipped (of 1)\n" in idle.stdout
        assert pg.get_session(session_id).message_count == 4
        assert pg.leases.holder(session_id) is None  # the import gave its lease back
