"""Discovery's title pass on SQLite walks the titled sessions alone (``sessions_titled``, schema version 14), not
every session: the plan of the statement ``titled_sessions`` runs, and the step that adds the index."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import pytest

from hermes_actors.store import SCHEMA_VERSION, SessionFilter, Store, migrate, open_connection
from hermes_actors.store.migrations import schema_version
from hermes_actors.store.search_query import SearchQuery
from tests.store.test_migrations import _shape

UNTITLED = 3000
TITLED = 40
STEP = 75  # every 75th session is titled, alternately a telegram and a slack one


@pytest.fixture
def filled(tmp_path: Path) -> Store:
    """A store of many untitled sessions and a few titled ones, every session active at its own time."""
    store = Store.open(tmp_path / "titles.db")
    with store.transaction():
        for i in range(UNTITLED + TITLED):
            titled = i % STEP == 0 and i < STEP * TITLED
            store.create_session(
                "telegram" if i % 2 else "slack",
                session_id=f"20261130_000000_{i:08x}",
                title=f"garden notes {i}" if titled else None,
                started_at=1_780_000_000.0 + i,
            )
    return store


def _titled_statements(store: Store, text: str, scope: SessionFilter, *, oldest_first: bool) -> list[Any]:
    """Run ``titled_sessions`` for ``text``; the (statement, bindings) it ran and the rows it gave."""
    reads = store.search_reads()
    query = reads.parse_query(text)
    assert isinstance(query, SearchQuery)
    seen: list[tuple[str, Any]] = []

    def trace(cursor: apsw.Cursor, sql: str, bindings: Any) -> bool:
        seen.append((sql, bindings))
        return True

    store._connection.exec_trace = trace
    try:
        rows = list(reads.titled_sessions(query, oldest_first=oldest_first, scope=scope))
    finally:
        store._connection.exec_trace = None
    (statement,) = [s for s in seen if "title IS NOT NULL" in s[0]]
    return [statement, rows]


def _plan(store: Store, sql: str, bindings: Any) -> str:
    return " | ".join(str(row[-1]) for row in store._connection.execute(f"EXPLAIN QUERY PLAN {sql}", bindings))


@pytest.mark.parametrize("analyzed", [False, True], ids=["no statistics", "after PRAGMA optimize"])
@pytest.mark.parametrize("oldest_first", [False, True], ids=["newest", "oldest"])
@pytest.mark.parametrize("scope", [SessionFilter(), SessionFilter(source="telegram")], ids=["everyone", "scoped"])
def test_the_title_query_walks_the_titled_sessions_index_in_order_without_a_sort(
    filled: Store, analyzed: bool, oldest_first: bool, scope: SessionFilter
) -> None:
    if analyzed:
        filled._connection.execute("ANALYZE; PRAGMA optimize")
    (sql, bindings), rows = _titled_statements(filled, "garden", scope, oldest_first=oldest_first)
    plan = _plan(filled, sql, bindings)
    assert "USING INDEX sessions_titled" in plan, plan
    assert "sessions_last_active" not in plan, plan
    assert "TEMP B-TREE" not in plan, plan
    assert plan.count("|") == 0, plan  # one step: nothing else is read
    titles = [row[5] for row in rows]
    numbers = [int(t.rsplit(" ", 1)[1]) for t in titles]
    assert numbers == sorted(numbers, reverse=not oldest_first)
    expected = [n for n in range(0, STEP * TITLED, STEP) if scope.source != "telegram" or n % 2]
    assert sorted(numbers) == expected


def test_a_title_that_matches_nothing_reads_no_untitled_session(filled: Store) -> None:
    (sql, bindings), rows = _titled_statements(filled, "zzyzx", SessionFilter(), oldest_first=False)
    assert rows == []
    steps = filled._connection.execute(
        "SELECT count(*) FROM sessions INDEXED BY sessions_titled WHERE title IS NOT NULL"
    ).get
    assert steps == TITLED
    assert "USING INDEX sessions_titled" in _plan(filled, sql, bindings)


def test_version_14_adds_the_titled_sessions_index(tmp_path: Path) -> None:
    with Store.open(tmp_path / "v13.db") as old:
        old.create_session("cli", session_id="kept", title="kept title")
        # What version 13 was: the same schema without version 14's index.
        old._connection.execute("DROP INDEX sessions_titled")
        old._connection.execute("PRAGMA user_version = 13")
    connection = open_connection(tmp_path / "v13.db")
    assert migrate(connection) == 13
    assert schema_version(connection) == SCHEMA_VERSION
    fresh = open_connection(tmp_path / "fresh.db")
    migrate(fresh)
    assert _shape(connection) == _shape(fresh)
    rows = connection.execute("SELECT id FROM sessions INDEXED BY sessions_titled WHERE title IS NOT NULL").fetchall()
    assert rows == [("kept",)]
    connection.close()
    fresh.close()
