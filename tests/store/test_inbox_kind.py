"""The kind of an inbox row (``inbox.kind``, schema version 9 / PostgreSQL version 8): a platform's message unless
a cluster wrote a control row; a control row of an older cluster, which carried its kind as a platform name, gets
its kind and no platform when the database is upgraded."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_actors.store import SCHEMA_VERSION, Store, StoreInterface, migrate, open_connection
from hermes_actors.store.records import InboxKind
from tests.postgres import Cluster
from tests.store.test_migrations import _shape

_OLD_ROWS = (("hermes-timer", "reset:s1:100"), ("hermes-admin", "r1"), ("telegram", "m1"))


def test_a_message_is_of_kind_message_and_a_control_row_keeps_its_kind(store: StoreInterface) -> None:
    message = store.inbox.add(platform="fake", account_id="", platform_message_id="m1", routing_key="k", payload=b"x")
    control = store.inbox.add(
        kind=InboxKind.TIMER, platform="", account_id="", platform_message_id="reset:s:1", routing_key="k", payload=b""
    )
    assert message is not None
    assert control is not None
    assert [(row.id, row.kind) for row in store.inbox.pending()] == [
        (message, InboxKind.MESSAGE),
        (control, InboxKind.TIMER),
    ]
    found = store.inbox.get(control)
    assert found is not None
    assert found.kind is InboxKind.TIMER
    assert found.platform == ""


def test_version_9_gives_old_control_rows_their_kind_and_no_platform(tmp_path: Path) -> None:
    with Store.open(tmp_path / "v8.db") as old:
        old._connection.execute("ALTER TABLE inbox DROP COLUMN kind")  # what version 8 was
        for platform, message_id in _OLD_ROWS:
            old._connection.execute(
                "INSERT INTO inbox (platform, platform_message_id, routing_key, payload, received_at) "
                "VALUES (?, ?, 'k', x'', 0)",
                (platform, message_id),
            )
        old._connection.execute("PRAGMA user_version = 8")
    connection = open_connection(tmp_path / "v8.db")
    assert migrate(connection) == 8
    assert connection.execute("PRAGMA user_version").get == SCHEMA_VERSION
    rows = connection.execute("SELECT platform, platform_message_id, kind FROM inbox ORDER BY id").fetchall()
    assert rows == [("", "reset:s1:100", "timer"), ("", "r1", "admin"), ("telegram", "m1", "message")]
    fresh = open_connection(tmp_path / "fresh.db")
    migrate(fresh)
    assert _shape(connection) == _shape(fresh)
    connection.close()
    fresh.close()


def test_postgres_version_8_gives_old_control_rows_their_kind_and_no_platform(postgres_cluster: Cluster) -> None:
    pytest.importorskip("psycopg")
    from hermes_actors.store.pg import PostgresStore
    from hermes_actors.store.pg.migrations import SCHEMA_VERSION as PG_VERSION
    from tests.store.test_pg import _schema

    old_name = postgres_cluster.create_database(empty=True)
    fresh_name = postgres_cluster.create_database(empty=True)
    try:
        with PostgresStore.open(postgres_cluster.dsn(old_name)) as old:
            old.database.execute("ALTER TABLE inbox DROP COLUMN kind")  # what version 7 was
            for platform, message_id in _OLD_ROWS:
                old.database.execute(
                    "INSERT INTO inbox (platform, platform_message_id, routing_key, payload, received_at) "
                    "VALUES (%s, %s, 'k', '', 0)",
                    (platform, message_id),
                )
            old.kv.set_meta("schema_version", "7")
        with (
            PostgresStore.open(postgres_cluster.dsn(old_name)) as upgraded,
            PostgresStore.open(postgres_cluster.dsn(fresh_name)) as fresh,
        ):
            assert upgraded.schema_version() == PG_VERSION
            rows = upgraded.database.execute("SELECT platform, platform_message_id, kind FROM inbox ORDER BY id")
            assert rows == [("", "reset:s1:100", "timer"), ("", "r1", "admin"), ("telegram", "m1", "message")]
            assert [row.kind for row in upgraded.inbox.pending()] == [
                InboxKind.TIMER,
                InboxKind.ADMIN,
                InboxKind.MESSAGE,
            ]
            assert _schema(upgraded) == _schema(fresh)
    finally:
        postgres_cluster.drop_database(old_name)
        postgres_cluster.drop_database(fresh_name)
