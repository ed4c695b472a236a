from __future__ import annotations

from pathlib import Path

import apsw

from hermes_actors.store import Store
from hermes_actors.store.migrations import schema_sql

ROOT = Path(__file__).resolve().parents[2]


def test_packaged_schema_equals_the_top_level_schema_sql() -> None:
    top = (ROOT / "schema.sql").read_text(encoding="utf-8")
    assert schema_sql() == top


def test_the_database_has_every_table_the_spec_lists(sqlite_store: Store) -> None:
    names = {str(n) for (n,) in sqlite_store._connection.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    for required in [
        "sessions",
        "messages",
        "messages_fts",
        "messages_fts_cjk",
        "routes",
        "inbox",
        "outbox",
        "poll_cursors",
        "home_channels",
        "memories",
        "leases",
        "timers",
        "meta",
    ]:
        assert required in names


def test_connections_use_wal_foreign_keys_and_the_chosen_synchronous_level(db_path: Path) -> None:
    with Store.open(db_path, synchronous="full") as opened:
        db = opened._connection
        assert db.execute("PRAGMA journal_mode").get == "wal"
        assert db.execute("PRAGMA foreign_keys").get == 1
        assert db.execute("PRAGMA synchronous").get == 2  # FULL
    with Store.open(db_path) as opened:
        assert opened._connection.execute("PRAGMA synchronous").get == 1  # NORMAL


def test_fts_tables_are_external_content_so_text_is_stored_once(sqlite_store: Store) -> None:
    sql = {
        str(n): str(s)
        for n, s in sqlite_store._connection.execute(
            "SELECT name, sql FROM sqlite_schema WHERE name LIKE 'messages_fts%'"
        )
        if s is not None
    }
    assert "content = 'messages'" in sql["messages_fts"]
    assert "content = 'messages'" in sql["messages_fts_cjk"]
    shadow = {
        str(n) for (n,) in sqlite_store._connection.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")
    }
    # An external-content table has no _content shadow table holding a copy of the text.
    assert "messages_fts_content" not in shadow
    assert "messages_fts_cjk_content" not in shadow


def test_a_plain_connection_without_the_tokenizer_can_still_read_sessions(sqlite_store: Store, db_path: Path) -> None:
    sqlite_store.create_session("cli", session_id="20261130_120000_abcdef")
    plain = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
    assert plain.execute("SELECT id FROM sessions").get == "20261130_120000_abcdef"
    plain.close()


def test_writers_checkpoint_the_wal_every_ten_thousand_pages(sqlite_store: Store) -> None:
    assert sqlite_store._connection.execute("PRAGMA wal_autocheckpoint").get == 10_000
