"""The database seam: one statement text in SQLite's placeholders runs on both backends, list membership and the
greater-of fragment mean the same on both, and the trace hook sees every statement with its time."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hermes_actors.store import Store, StoreInterface
from hermes_actors.store.sql import TRACE_ENV, Dialect, pg_sql, tracing
from hermes_actors.testing import FakeClock
from tests.stores import IMPLEMENTATIONS, open_implementation


@pytest.mark.parametrize(
    ("sqlite", "postgres"),
    [
        ("SELECT a FROM t WHERE b = ? AND c = ?", "SELECT a FROM t WHERE b = %s AND c = %s"),
        ("UPDATE t SET a = :a WHERE id = :id_2", "UPDATE t SET a = %(a)s WHERE id = %(id_2)s"),
        ("SELECT x::bigint FROM t WHERE y LIKE 'a%?:b' || ?", "SELECT x::bigint FROM t WHERE y LIKE 'a%%?:b' || %s"),
        ("SELECT '%' || \"col?\" FROM t WHERE z % 2 = ?", "SELECT '%%' || \"col?\" FROM t WHERE z %% 2 = %s"),
    ],
)
def test_sqlite_placeholders_become_psycopg_ones_outside_quotes_and_casts(sqlite: str, postgres: str) -> None:
    assert pg_sql(sqlite) == postgres
    assert pg_sql(sqlite) is pg_sql(sqlite)  # translated once, then cached


def test_fragments_differ_only_where_the_databases_do() -> None:
    assert Dialect.SQLITE.greatest("a", "b") == "max(a, b)"
    assert Dialect.POSTGRES.greatest("a", "b") == "greatest(a, b)"
    assert Dialect.SQLITE.for_update == ""
    assert Dialect.POSTGRES.for_key_share == " FOR KEY SHARE"


def test_one_statement_text_runs_on_every_backend(store: StoreInterface) -> None:
    db = store.sql
    db.execute("INSERT INTO meta (key, value) VALUES (?, ?)", ("seam:a", "1"))
    db.execute("INSERT INTO meta (key, value) VALUES (:key, :value)", {"key": "seam:b", "value": "2"})
    db.execute("INSERT INTO meta (key, value) VALUES (?, ?)", ("seam:c%", "3"))
    assert db.value("SELECT value FROM meta WHERE key = ?", ("seam:b",)) == "2"
    assert db.value("SELECT value FROM meta WHERE key LIKE 'seam:c%'") == "3"
    rows = db.execute(
        f"SELECT key FROM meta WHERE {db.dialect.member('key')} ORDER BY key",
        (db.dialect.members(["seam:a", "seam:c%", "x"]),),
    )
    assert rows == [("seam:a",), ("seam:c%",)]
    assert db.value(f"SELECT {db.dialect.greatest('?', '?')}", (3, 7)) == 7
    with db.transaction():
        assert db.in_transaction
        assert db.count("UPDATE meta SET value = 'x' WHERE key LIKE 'seam:%'") == 3
    assert not db.in_transaction


def test_a_trace_sees_each_statement_with_its_time_and_nothing_once_it_ends(store: StoreInterface) -> None:
    with tracing(store.sql) as trace:
        store.kv.set_meta("traced", "1")
        assert store.kv.get_meta("traced") == "1"
    store.kv.get_meta("traced")
    texts = [sql for sql, _ in trace.statements]
    assert len(texts) == 2
    assert texts[0].startswith("INSERT INTO meta")
    assert texts[1].startswith("SELECT value FROM meta")
    assert all(seconds >= 0 for _, seconds in trace.statements)
    assert [count for _, count, _ in trace.summary()] == [1, 1]
    assert store.sql.trace is None


def test_a_limit_of_none_returns_every_row_and_keeps_room_for_an_offset(store: StoreInterface) -> None:
    db = store.sql
    db.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", [(f"all:{i}", str(i)) for i in range(3)])
    sql = "SELECT key FROM meta WHERE key LIKE 'all:%' ORDER BY key LIMIT ? OFFSET ?"
    assert [k for (k,) in db.execute(sql, (db.dialect.limit(None), 1))] == ["all:1", "all:2"]
    assert [k for (k,) in db.execute(sql, (db.dialect.limit(1), 0))] == ["all:0"]


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_hermes_sql_trace_has_each_store_opened_append_its_statements_and_transactions_to_a_file(
    implementation: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    monkeypatch.setenv(TRACE_ENV, str(traces))
    with open_implementation(implementation, request, tmp_path / "traced.db", clock) as store:
        with store.transaction():
            store.kv.set_meta("traced", "1")
        assert store.kv.get_meta("traced") == "1"
    (path,) = traces.iterdir()
    assert path.name == f"sql-{os.getpid()}.trace"
    texts: dict[str, str] = {}
    runs: list[str] = []
    for line in path.read_text().splitlines():
        kind, number, rest = line.split("\t")
        if kind == "S":
            texts[number] = rest
        else:
            assert float(kind) > 0
            assert float(rest) >= 0
            runs.append(texts[number])
    insert = next(i for i, text in enumerate(runs) if text.startswith("INSERT INTO meta"))
    after = runs[insert + 1 :]
    if implementation == "postgres":  # the transaction is reported as it ends, after its statements
        assert after[0] == "BEGIN"
        after = after[1:]
    assert after[0].startswith("SELECT value FROM meta")


def test_without_hermes_sql_trace_a_store_traces_nothing(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TRACE_ENV, raising=False)
    with Store.open(tmp_path / "plain.db", clock=clock) as store:
        assert store.sql.trace is None
