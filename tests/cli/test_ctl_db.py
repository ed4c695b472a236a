from __future__ import annotations

import re
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner, Result

from hermes_actors.cli.hermesctl import main
from hermes_actors.store import EndReason, NewMessage, Role, Store


def run(home: Path, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--home", str(home)])


def number(store: Store, sql: str) -> int:
    value = store._connection.execute(sql).get
    assert isinstance(value, int)
    return value


def test_optimize_repairs_a_stale_search_index(home: Path, store: Store) -> None:
    session = store.create_session("cli")
    store.append_messages(
        session.id, [NewMessage(role=Role.USER, content=t) for t in ("hello world", "你好世界朋友", "plain")]
    )
    # Change the text behind the indexes' backs, as a foreign tool without the triggers would.
    store._connection.execute("DROP TRIGGER messages_fts_update")
    store._connection.execute("DROP TRIGGER messages_fts_cjk_update")
    store._connection.execute("UPDATE messages SET content = 'something else' WHERE content = 'hello world'")
    store._connection.execute("UPDATE messages SET content = '早上好世界' WHERE content = 'plain'")
    assert run(home, "db", "check").exit_code == 1

    result = run(home, "db", "optimize")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("Rebuilt the search indexes (3 messages, 2 with CJK text).\n")
    assert "Size: " in result.stdout
    checked = run(home, "db", "check")
    assert (checked.exit_code, checked.stdout) == (0, "ok\n")
    assert [h.message_id for h in store.fts_query("something").hits] == [1]
    assert store.fts_query("hello").hits == []
    assert [h.message_id for h in store.fts_query("早上好").hits] == [3]
    # The trigram index holds the CJK messages only, as its triggers would have chosen them.
    assert number(store, "SELECT count(*) FROM messages_fts_cjk_docsize") == 2


def test_optimize_gives_free_pages_back_and_empties_the_wal(home: Path, store: Store) -> None:
    for _ in range(3):
        session = store.create_session("cli")
        store.append_messages(session.id, [NewMessage(role=Role.USER, content="x" * 3000)] * 40)
        store.end_session(session.id, EndReason.IDLE)
        store.delete_session(session.id)
    assert number(store, "PRAGMA freelist_count") > 0
    result = run(home, "db", "optimize")
    assert result.exit_code == 0, result.output
    assert number(store, "PRAGMA freelist_count") == 0
    assert (home / "state.db-wal").stat().st_size == 0
    assert number(store, "SELECT count(*) FROM sqlite_stat1") > 0  # ANALYZE ran


@pytest.mark.slow
def test_optimize_refuses_while_another_process_holds_the_write_lock(home: Path, store: Store) -> None:
    store.create_session("cli")
    other = apsw.Connection(str(home / "state.db"))
    try:
        other.execute("BEGIN IMMEDIATE")
        result = run(home, "db", "optimize", "--wait", "0.05")
        other.execute("ROLLBACK")
    finally:
        other.close()
    assert result.exit_code == 1
    progress, error = result.stderr.splitlines()
    assert re.fullmatch(r"waiting for the write lock: \d+\.\d s, failed", progress)
    assert error == (
        "Error: the database stayed busy for 0.05 s while waiting for the write lock: another process "
        "(hermesd, a terminal chat) holds it; stop that process or retry with a longer --wait"
    )


def test_optimize_of_a_missing_database_creates_nothing(home: Path) -> None:
    result = run(home, "db", "optimize")
    assert result.exit_code == 1
    assert result.output.startswith("Error: no database at ")
    assert not home.exists()


def test_a_database_without_the_schema_is_named_with_its_likely_cause(home: Path) -> None:
    """A copy of state.db taken without its -wal while hermesd ran has no tables: not a traceback."""
    home.mkdir()
    connection = apsw.Connection(str(home / "state.db"))
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("CREATE TABLE unrelated (x)")
    connection.close()
    for args in (["sessions", "list"], ["sessions", "stats"], ["db", "check"]):
        result = run(home, *args)
        assert result.exit_code == 1, (args, result.output)
        assert "Traceback" not in result.output
        assert "has no hermes-actors schema" in result.output
        assert "state.db-wal" in result.output  # the likely cause, and the fix


def phases_of(stderr: str) -> list[str]:
    """The phases a command reported, each line ``<phase>: <seconds> s`` off a terminal."""
    lines = stderr.splitlines()
    assert all(re.fullmatch(r".+: \d+\.\d s", line) for line in lines), lines
    return [line.rsplit(": ", 1)[0] for line in lines]


def test_check_and_optimize_report_each_phase_with_its_time_on_stderr(home: Path, store: Store) -> None:
    session = store.create_session("cli")
    store.append_messages(session.id, [NewMessage(role=Role.USER, content="hello")])
    checked = run(home, "db", "check")
    assert (checked.exit_code, checked.stdout) == (0, "ok\n")
    assert phases_of(checked.stderr) == [
        "integrity check",
        "foreign key check",
        "search index messages_fts",
        "search index messages_fts_cjk",
    ]
    optimized = run(home, "db", "optimize")
    assert optimized.exit_code == 0, optimized.output
    assert phases_of(optimized.stderr) == [
        "waiting for the write lock",
        "rebuilding the search indexes",
        "analyzing",
        "vacuuming",
        "checkpointing",
    ]
    assert optimized.stdout.startswith("Rebuilt the search indexes (1 messages, 0 with CJK text).\n")
