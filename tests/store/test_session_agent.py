"""A session's named agent (``sessions.agent``, schema version 8 / PostgreSQL version 6): recorded when the session
is created, read back by every read of the session, kept by an import, and NULL for sessions from before."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_actors.store import SCHEMA_VERSION, EndReason, Store, StoreInterface, migrate, open_connection
from hermes_actors.store.export import encode_export_line, iter_exports
from hermes_actors.store.migrations import schema_version
from hermes_actors.store.records import SessionFilter
from tests.postgres import Cluster
from tests.store.test_migrations import _shape


def test_a_session_records_the_agent_it_was_created_with(store: StoreInterface) -> None:
    named = store.create_session("webhook", session_id="s-named", agent="support")
    plain = store.create_session("webhook", session_id="s-plain")
    assert named.agent == "support"
    assert plain.agent is None  # the default agent
    assert store.get_session("s-named").agent == "support"
    assert [r.agent for r in store.find_sessions(["s-plain", "s-named"])] == [None, "support"]
    listed = {r.id: r.agent for r in store.list_sessions(limit=10)}
    assert listed == {"s-named": "support", "s-plain": None}


def test_a_compression_child_created_with_its_parents_agent_keeps_it(store: StoreInterface) -> None:
    parent = store.create_session("telegram", session_id="s-parent", agent="big")
    store.end_session(parent.id, EndReason.COMPRESSION)
    child = store.create_session("telegram", session_id="s-child", agent=parent.agent, parent_session_id=parent.id)
    assert store.get_session(child.id).agent == "big"
    assert store.lineage_chain(child.id) == ["s-parent", "s-child"]


def test_an_inserted_record_keeps_its_agent(store: StoreInterface) -> None:
    record = store.create_session("slack", session_id="s-source", agent="helper")
    store.delete_session(record.id)
    store.insert_session(record)
    assert store.get_session("s-source").agent == "helper"
    assert [r.id for r in store.list_sessions(limit=5, visible=SessionFilter())] == ["s-source"]


def test_an_export_line_carries_the_agent_and_an_import_of_it_keeps_it(tmp_path: Path) -> None:
    from hermes_actors.importer.jsonl import parse_line

    with Store.open(tmp_path / "a.db") as store:
        store.create_session("webhook", session_id="s-exported", agent="support")
        (export,) = iter_exports(store)
    parsed = parse_line(1, encode_export_line(export))
    assert parsed.record.agent == "support"


def test_version_8_adds_the_agent_column_and_older_sessions_keep_the_default(tmp_path: Path) -> None:
    with Store.open(tmp_path / "v7.db") as old:
        kept = old.create_session("telegram", model="m1")
        # What version 7 was: the same schema without version 8's column.
        old._connection.execute("ALTER TABLE sessions DROP COLUMN agent")
        old._connection.execute("PRAGMA user_version = 7")
    connection = open_connection(tmp_path / "v7.db")
    assert migrate(connection) == 7
    assert schema_version(connection) == SCHEMA_VERSION == 14
    fresh = open_connection(tmp_path / "fresh.db")
    migrate(fresh)
    assert _shape(connection) == _shape(fresh)
    connection.close()
    fresh.close()
    with Store.open(tmp_path / "v7.db") as upgraded:
        assert upgraded.get_session(kept.id).agent is None
        assert upgraded.get_session(kept.id).model == "m1"
        assert upgraded.create_session("telegram", agent="big").agent == "big"


def test_postgres_version_6_adds_the_agent_column_and_older_sessions_keep_the_default(
    postgres_cluster: Cluster,
) -> None:
    pytest.importorskip("psycopg")
    from hermes_actors.store.pg import PostgresStore
    from hermes_actors.store.pg.migrations import SCHEMA_VERSION as PG_VERSION
    from tests.store.test_pg import _schema

    old_name = postgres_cluster.create_database(empty=True)
    fresh_name = postgres_cluster.create_database(empty=True)
    try:
        with PostgresStore.open(postgres_cluster.dsn(old_name)) as old:
            old.create_session("cli", session_id="kept")
            old.database.execute("ALTER TABLE sessions DROP COLUMN agent")  # what version 5 was
            old.database.execute(  # without what version 7 adds
                "ALTER TABLE shard_hosts DROP COLUMN incarnation, DROP COLUMN started_at, "
                "DROP COLUMN incarnations, DROP COLUMN stats"
            )
            old.database.execute("DROP TABLE cluster_replicas")
            old.kv.set_meta("schema_version", "5")
        with (
            PostgresStore.open(postgres_cluster.dsn(old_name)) as upgraded,
            PostgresStore.open(postgres_cluster.dsn(fresh_name)) as fresh,
        ):
            assert upgraded.schema_version() == PG_VERSION >= 6
            assert upgraded.get_session("kept").agent is None
            assert _schema(upgraded) == _schema(fresh)
            assert upgraded.create_session("cli", agent="big").agent == "big"
    finally:
        postgres_cluster.drop_database(old_name)
        postgres_cluster.drop_database(fresh_name)
