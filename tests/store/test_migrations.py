from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from hermes_actors.errors import SchemaVersionError, StoreError
from hermes_actors.store import SCHEMA_VERSION, Store, migrate, open_connection
from hermes_actors.store.migrations import schema_version


def test_an_empty_file_is_migrated_to_the_current_version(db_path: Path) -> None:
    db_path.touch()
    connection = open_connection(db_path)
    assert migrate(connection) == 0
    assert schema_version(connection) == SCHEMA_VERSION
    assert migrate(connection) == SCHEMA_VERSION  # a second run changes nothing
    connection.close()


def test_a_newer_database_is_refused_and_left_untouched(db_path: Path) -> None:
    with Store.open(db_path) as opened:
        opened._connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    before = db_path.read_bytes()
    with pytest.raises(SchemaVersionError) as info:
        Store.open(db_path)
    assert f"schema version {SCHEMA_VERSION + 1}" in str(info.value)
    assert "upgrade hermes-actors" in str(info.value)
    assert info.value.found == SCHEMA_VERSION + 1
    assert db_path.read_bytes() == before


def test_a_foreign_database_is_refused_without_writing(db_path: Path) -> None:
    foreign = apsw.Connection(str(db_path))
    foreign.execute("CREATE TABLE schema_version (version INTEGER)")
    foreign.close()
    with pytest.raises(StoreError, match="not a hermes-actors database"):
        Store.open(db_path)
    check = apsw.Connection(str(db_path))
    assert [n for (n,) in check.execute("SELECT name FROM sqlite_schema")] == ["schema_version"]
    check.close()


def test_a_bad_synchronous_level_names_the_choices(db_path: Path) -> None:
    with pytest.raises(StoreError, match="synchronous must be one of OFF, NORMAL, FULL"):
        Store.open(db_path, synchronous="sometimes")


def test_a_readonly_store_reads_what_the_writer_committed(db_path: Path) -> None:
    with Store.open(db_path) as writer:
        writer.create_session("cli", session_id="20261130_120000_abcdef")
        with Store.open(db_path, readonly=True) as reader:
            assert reader.get_session("20261130_120000_abcdef").source == "cli"
            with pytest.raises(apsw.ReadOnlyError):
                reader._connection.execute("DELETE FROM sessions")


FIXTURES = Path(__file__).parent / "fixtures"


def _shape(connection: apsw.Connection) -> dict[str, object]:
    """The schema as SQLite sees it: every table's columns and every index's columns, not the DDL text."""
    shape: dict[str, object] = {}
    for kind, name in connection.execute("SELECT type, name FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'"):
        if kind == "table":
            shape[f"table {name}"] = connection.execute(f"SELECT * FROM pragma_table_xinfo('{name}')").fetchall()
        elif kind == "index":
            shape[f"index {name}"] = connection.execute(f"SELECT * FROM pragma_index_xinfo('{name}')").fetchall()
        else:
            shape[f"{kind} {name}"] = True
    return shape


def test_every_step_from_version_1_ends_in_the_schema_a_fresh_database_gets(tmp_path: Path) -> None:
    old = open_connection(tmp_path / "old.db")
    old.execute((FIXTURES / "schema_v1.sql").read_text(encoding="utf-8"))
    old.execute("PRAGMA user_version = 1")
    old.execute("INSERT INTO home_channels (platform, account_id, chat_id, set_at) VALUES ('telegram', '', '42', 0)")
    old.execute("INSERT INTO sessions (id, source, started_at, last_active_at) VALUES ('s1', 'cli', 0, 0)")
    for text in ("plain english", "我们来讨论全文搜索"):
        old.execute("INSERT INTO messages (session_id, role, content, created_at) VALUES ('s1', 'user', ?, 0)", (text,))
    old.execute("INSERT INTO messages (session_id, role, content, created_at) VALUES ('s1', 'assistant', NULL, 0)")
    old.execute("INSERT INTO routes (routing_key, session_id, updated_at) VALUES ('agent:main:cli:dm', 's1', 0)")
    assert migrate(old) == 1
    # Rebuilt tables keep their rows and the rows that refer to them (no cascade ran while they were swapped).
    assert old.execute("SELECT ref, id FROM sessions").fetchall() == [(1, "s1")]
    assert old.execute("SELECT id, session_ref, content FROM messages ORDER BY id").fetchall() == [
        (1, 1, "plain english"),
        (2, 1, "我们来讨论全文搜索"),
        (3, 1, None),
    ]
    assert old.execute("SELECT session_id FROM routes").fetchall() == [("s1",)]
    assert old.execute("SELECT name, seq FROM sqlite_sequence WHERE name = 'messages'").fetchall() == [("messages", 3)]
    # A message without content (a tool call) is an empty document: the index matches the table row for row.
    old.execute("INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1)")
    assert old.execute("PRAGMA foreign_keys").get == 1
    fresh = open_connection(tmp_path / "fresh.db")
    migrate(fresh)
    assert _shape(old) == _shape(fresh)
    assert schema_version(old) == SCHEMA_VERSION
    assert old.execute("SELECT chat_id, chat_type FROM home_channels").fetchall() == [("42", None)]
    index = old.execute("SELECT sql FROM sqlite_schema WHERE name = 'outbox_unsent'").get
    assert "abandoned_at IS NULL" in str(index)
    # The rebuilt trigram index holds the CJK message, answers LIKE from the index, and stays in sync.
    assert old.execute("SELECT rowid FROM messages_fts_cjk WHERE content LIKE '%全文搜索%'").fetchall() == [(2,)]
    plan = " ".join(
        str(r[-1])
        for r in old.execute("EXPLAIN QUERY PLAN SELECT rowid FROM messages_fts_cjk WHERE content LIKE '%全文搜索%'")
    )
    assert "VIRTUAL TABLE INDEX" in plan
    old.execute("INSERT INTO messages (session_ref, role, content, created_at) VALUES (1, 'user', '新的全文搜索', 0)")
    assert len(old.execute("SELECT rowid FROM messages_fts_cjk WHERE content LIKE '%全文搜索%'").fetchall()) == 2
    old.close()
    fresh.close()


def test_version_5_adds_lease_epochs_and_inbox_owners_and_moves_memories_to_the_principal_key(tmp_path: Path) -> None:
    from hermes_actors.routing import SessionSource

    with Store.open(tmp_path / "v4.db") as old:
        scoped = old.create_session(SessionSource(platform="slack", scope_id="T1", user_id="U1"))
        plain = old.create_session(SessionSource(platform="telegram", user_id="42"))
        old.memories.add("slack:U1", ["likes pelicans"], source_session_id=scoped.id)
        old.memories.add("telegram:42", ["likes tea"], source_session_id=plain.id)
        # What version 4 was: the same schema without version 5's columns, memories under '<platform>:<user>'.
        old._connection.execute("ALTER TABLE leases DROP COLUMN epoch")
        old._connection.execute("ALTER TABLE inbox DROP COLUMN owner")
        old._connection.execute("DROP TABLE api_responses")  # version 7's
        old._connection.execute("PRAGMA user_version = 4")
    connection = open_connection(tmp_path / "v4.db")
    assert migrate(connection) == 4
    keys = {str(content): str(key) for content, key in connection.execute("SELECT content, user_key FROM memories")}
    assert keys == {"likes pelicans": "slack.T1:U1", "likes tea": "telegram:42"}
    columns = {str(row[1]) for row in connection.execute("PRAGMA table_info(leases)")}
    assert "epoch" in columns
    connection.close()
    with Store.open(tmp_path / "v4.db") as upgraded:
        first = upgraded.leases.grant(plain.id, "host:1:1", 30)
        assert upgraded.leases.grant(plain.id, "host:1:1", 30) == first  # a renewal keeps the tenure
        upgraded.leases.release(plain.id, "host:1:1")
        second = upgraded.leases.grant(plain.id, "host:1:1", 30)
        assert isinstance(first, int)
        assert isinstance(second, int)
        assert second > first  # a new tenure, even for the same owner


def test_version_6_adds_the_frozen_tool_list_and_the_estimated_tokens_mark(tmp_path: Path) -> None:
    with Store.open(tmp_path / "v5.db") as old:
        kept = old.create_session("telegram", model="m1", system_prompt="Be brief.")
        # What version 5 was: the same schema without version 6's columns.
        old._connection.execute("ALTER TABLE sessions DROP COLUMN tools")
        old._connection.execute("ALTER TABLE sessions DROP COLUMN tokens_estimated")
        old._connection.execute("DROP TABLE api_responses")  # version 7's
        old._connection.execute("ALTER TABLE sessions DROP COLUMN agent")  # version 8's
        old._connection.execute("PRAGMA user_version = 5")
    connection = open_connection(tmp_path / "v5.db")
    assert migrate(connection) == 5
    assert schema_version(connection) == SCHEMA_VERSION
    fresh = open_connection(tmp_path / "fresh.db")
    migrate(fresh)
    assert _shape(connection) == _shape(fresh)
    connection.close()
    fresh.close()
    with Store.open(tmp_path / "v5.db") as upgraded:
        record = upgraded.get_session(kept.id)
        assert (record.model, record.system_prompt, record.tools, record.tokens_estimated) == (
            "m1",
            "Be brief.",
            None,  # not frozen yet: its next turn freezes it
            0,
        )
        upgraded.freeze_prefix(kept.id, system_prompt="Be brief.", tools="[]")
        assert upgraded.get_session(kept.id).tools == "[]"


def test_version_7_adds_the_api_responses_tied_to_their_sessions(tmp_path: Path) -> None:
    from hermes_actors.messages import ResponseRecord

    with Store.open(tmp_path / "v6.db") as old:
        kept = old.create_session("api_server")
        # What version 6 was: the same schema without the responses table.
        old._connection.execute("DROP TABLE api_responses")
        old._connection.execute("PRAGMA user_version = 6")
    connection = open_connection(tmp_path / "v6.db")
    assert migrate(connection) == 6
    assert schema_version(connection) == SCHEMA_VERSION
    fresh = open_connection(tmp_path / "fresh.db")
    migrate(fresh)
    assert _shape(connection) == _shape(fresh)
    connection.close()
    fresh.close()
    with Store.open(tmp_path / "v6.db") as upgraded:
        response = ResponseRecord(
            id="resp_1", session_id=kept.id, scope=None, status="completed", body=b"{}", created_at=1.0
        )
        upgraded.responses.save(response)
        assert upgraded.responses.get("resp_1", None) == response
        assert upgraded.delete_session(kept.id)
        assert upgraded.responses.get("resp_1", None) is None
