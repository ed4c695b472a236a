"""Statements sent through libpq itself (``store/pg/direct.py``): what a psycopg cursor would have sent and returned,
the same placeholders, adapters, preparation and errors, for the statements of :class:`Database`."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors as pg_errors

from hermes_actors.errors import StoreError
from hermes_actors.store.pg.db import Database
from hermes_actors.store.pg.direct import DirectStatements


@pytest.fixture
def connection(postgres_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(postgres_dsn, autocommit=True) as opened:
        opened.execute("CREATE TEMP TABLE things (id bigserial PRIMARY KEY, name text UNIQUE, n bigint, x float8)")
        yield opened


@pytest.fixture
def direct(connection: psycopg.Connection[Any]) -> DirectStatements:
    return DirectStatements(connection)


def _prepared(connection: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    return [
        (str(name), str(statement))
        for name, statement in connection.execute(
            "SELECT name, statement FROM pg_prepared_statements WHERE name LIKE '\\_hermes\\_%%' ORDER BY name"
        ).fetchall()
    ]


def _status(connection: psycopg.Connection[Any]) -> psycopg.pq.TransactionStatus:
    return connection.info.transaction_status


def test_rows_and_values_come_back_as_a_cursor_returns_them(
    direct: DirectStatements, connection: psycopg.Connection[Any]
) -> None:
    sql = b"SELECT %s::int, %s::text, %s::float8, %s::bytea, %s::bigint[], %s::timestamptz, %s::text"
    when = datetime.datetime(2026, 12, 7, 6, 0, tzinfo=datetime.UTC)
    params = (7, "héllo 世界", 1.5, b"\x00\x01", [1, 2, 3], when, None)
    expected = connection.execute(sql, params).fetchall()
    assert direct.rows(sql, params) == expected == [(7, "héllo 世界", 1.5, b"\x00\x01", [1, 2, 3], when, None)]
    assert direct.rows(b"SELECT n FROM things", ()) == []  # no rows
    assert direct.rows(b"INSERT INTO things (name) VALUES (%s)", ("a",)) == []  # no result rows at all


def test_named_placeholders_repeat_and_a_doubled_percent_is_one(direct: DirectStatements) -> None:
    sql = b"SELECT %(a)s::int + %(b)s::int, %(a)s::int * 10, 'x%%y' LIKE 'x%%'"
    assert direct.rows(sql, {"a": 2, "b": 3, "unused": 9}) == [(5, 20, True)]
    assert direct.rows(b"SELECT '100%' AS sign", None) == [("100%",)]  # without parameters, the text as it is
    assert direct.rows(b"SELECT %t::text, %b::int", ("t", 4)) == [("t", 4)]
    assert direct.rows(b"SELECT 'no placeholders'", {}) == [("no placeholders",)]


@pytest.mark.parametrize(
    ("sql", "params", "names"),
    [
        (b"SELECT %s, %s", (1,), "2 placeholders but 1 parameters"),
        (b"SELECT %(a)s", {"b": 1}, "query parameter missing: a"),
        (b"SELECT %(a)s", (1,), "named placeholders require a mapping"),
        (b"SELECT %s", {"a": 1}, "positional placeholders require a sequence"),
        (b"SELECT %s, %(a)s", (1, 2), "cannot be mixed"),
        (b"SELECT %d", (1,), "only '%s', '%b', '%t' are allowed"),
    ],
)
def test_bad_placeholders_are_the_errors_psycopg_raises(
    direct: DirectStatements, sql: bytes, params: Any, names: str
) -> None:
    with pytest.raises(psycopg.ProgrammingError, match=names):
        direct.rows(sql, params)


def test_a_statement_is_prepared_on_its_sixth_run_per_parameter_types(
    direct: DirectStatements, connection: psycopg.Connection[Any]
) -> None:
    sql = b"SELECT n FROM things WHERE name = %s"
    for run in range(1, 8):
        direct.rows(sql, (f"k{run}",))
        assert len(_prepared(connection)) == (1 if run >= 6 else 0)
    assert _prepared(connection) == [("_hermes_0", "SELECT n FROM things WHERE name = $1")]
    for _ in range(6):  # the same text with another parameter type is another statement
        direct.rows(b"SELECT %s", (1,))
        direct.rows(b"SELECT %s", ("one",))
    assert [name for name, _ in _prepared(connection)] == ["_hermes_0", "_hermes_1", "_hermes_2"]


def test_errors_are_psycopgs_by_sqlstate_and_the_connection_stays_usable(
    direct: DirectStatements, connection: psycopg.Connection[Any]
) -> None:
    insert = b"INSERT INTO things (name) VALUES (%s) RETURNING id"
    assert direct.rows(insert, ("a",)) == [(1,)]
    with pytest.raises(pg_errors.UniqueViolation, match="things_name_key"):
        direct.rows(insert, ("a",))
    with pytest.raises(pg_errors.UndefinedTable):
        direct.rows(b"SELECT * FROM nowhere WHERE id = %s", (1,))
    assert direct.changed(b"UPDATE things SET n = %s", (5,)) == 1
    assert not connection.broken


def test_several_statements_without_parameters_give_the_last_result(
    direct: DirectStatements, connection: psycopg.Connection[Any]
) -> None:
    started = direct.simple(b"BEGIN; SAVEPOINT s; SELECT pg_current_xact_id()::text")
    xid = started.get_value(0, 0)
    assert xid is not None
    assert xid.isdigit()
    with pytest.raises(pg_errors.DivisionByZero):
        direct.simple(b"SELECT 1/0; SELECT 2")
    assert _status(connection) == psycopg.pq.TransactionStatus.INERROR
    direct.simple(b"ROLLBACK TO SAVEPOINT s; COMMIT")
    assert _status(connection) == psycopg.pq.TransactionStatus.IDLE


def test_a_connection_cut_by_the_server_is_broken_and_database_takes_another(postgres_dsn: str) -> None:
    database = Database(postgres_dsn, pool_size=1)
    try:
        pid = database.execute("SELECT pg_backend_pid() WHERE %s", (True,))[0][0]
        with psycopg.connect(postgres_dsn, autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(StoreError, match="PostgreSQL refused a statement"):
            database.execute("SELECT pg_backend_pid() WHERE %s", (True,))
        assert database.execute("SELECT pg_backend_pid() WHERE %s", (True,))[0][0] != pid
    finally:
        database.close()
