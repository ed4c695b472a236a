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
        opened.connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
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
                reader.connection.execute("DELETE FROM sessions")
