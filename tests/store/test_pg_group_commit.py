"""A group commit's transaction on PostgreSQL (``store/pg/group_commit.py``): its ``BEGIN`` rides with its first
statement, one round trip fewer a batch, and what a batch writes is still one transaction, each write in its own
savepoint."""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from psycopg import pq

from hermes_actors.errors import StoreError
from hermes_actors.store.pg import PostgresStore
from hermes_actors.store.pg.db import Database
from hermes_actors.store.pg.group_commit import group_transaction
from hermes_actors.store.pg.writer import PgWriter


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, migrate_schema=False, pool_size=1) as store:
        store.database.execute("CREATE TABLE IF NOT EXISTS group_things (name text PRIMARY KEY, n bigint)")
        store.database.execute("TRUNCATE group_things")
        yield store


class _Requests:
    """The requests a connection's client sends, from libpq's own trace of the protocol: each ``Sync`` (the end of
    an extended-protocol request or pipeline) and each simple ``Query`` is one round trip to the server."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self._file = Path(tempfile.mkstemp(prefix="hermes-trace-")[1])

    def __enter__(self) -> _Requests:
        with self._database.lend() as connection:  # a pool of one: the connection every test statement gets
            self._pgconn = connection.pgconn
        fd = os.open(self._file, os.O_WRONLY | os.O_TRUNC)
        self._pgconn.trace(fd)  # libpq writes through fdopen(fd) and closes it at untrace
        self._pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
        return self

    def __exit__(self, *exc: object) -> None:
        self._pgconn.untrace()

    def sent(self) -> list[str]:
        """Each request in order: ``Query <text>`` for a simple query, ``Sync`` for the end of the others."""
        found = []
        for line in self._file.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) >= 3 and parts[0] == "F" and parts[2] in ("Sync", "Query"):
                found.append(parts[2] if parts[2] == "Sync" else f"Query {parts[3].strip() if len(parts) > 3 else ''}")
        self._file.unlink(missing_ok=True)
        return found


def _names(pg: PostgresStore) -> dict[str, int]:
    return dict(pg.database.execute("SELECT name, n FROM group_things ORDER BY name"))


def test_a_batch_s_begin_rides_with_its_first_statement_and_commits_in_two_round_trips(pg: PostgresStore) -> None:
    database = pg.database
    with _Requests(database) as requests, group_transaction(database) as transaction, transaction.write():
        database.execute("INSERT INTO group_things (name, n) VALUES (%s, %s)", ("one", 1))
    # the BEGIN, its settings, its savepoint, its id and the INSERT: one pipeline, one Sync; then the COMMIT
    assert requests.sent() == ["Sync", 'Query "COMMIT"']
    assert _names(pg) == {"one": 1}


def test_a_batch_that_sends_no_statement_begins_and_commits_nothing(pg: PostgresStore) -> None:
    database = pg.database
    with _Requests(database) as requests, group_transaction(database) as transaction:
        with transaction.write():
            pass  # a write that sends no statement (a settle: the writer's empty job)
        with transaction.write():
            pass  # and another
    assert requests.sent() == []
    with database.lend() as connection:  # the connection went back to the pool idle, not inside a transaction
        assert connection.pgconn.transaction_status == pq.TransactionStatus.IDLE


def test_the_transaction_s_id_is_the_one_its_first_statement_ran_in(pg: PostgresStore) -> None:
    database = pg.database
    with group_transaction(database) as transaction, transaction.write():
        inside = database.value("SELECT pg_current_xact_id()::text")
        asked = database.xid()
    assert inside == asked
    assert database.outcome(asked, timeout_s=5) is True


def test_a_write_that_fails_in_the_begin_s_pipeline_is_rolled_back_alone_and_the_next_commits(
    pg: PostgresStore,
) -> None:
    database = pg.database
    database.execute("INSERT INTO group_things (name, n) VALUES ('taken', 0)")
    with group_transaction(database) as transaction:
        with pytest.raises(StoreError, match="duplicate key"), transaction.write():
            database.execute("INSERT INTO group_things (name, n) VALUES (%s, %s)", ("taken", 1))
        with transaction.write():
            database.execute("INSERT INTO group_things (name, n) VALUES (%s, %s)", ("after", 2))
    assert _names(pg) == {"after": 2, "taken": 0}


def test_a_first_write_through_a_nested_transaction_or_many_rows_is_inside_the_batch_s_transaction(
    pg: PostgresStore,
) -> None:
    database = pg.database

    class Undone(Exception):
        """Raised inside the batch to roll it back."""

    def undone() -> None:
        with group_transaction(database) as transaction, transaction.write():
            with database.transaction():  # psycopg's own SAVEPOINT: the deferred BEGIN goes first
                database.executemany("INSERT INTO group_things (name, n) VALUES (%s, %s)", [("a", 1), ("b", 2)])
            raise Undone

    with pytest.raises(Undone):
        undone()
    assert _names(pg) == {}  # rolled back with the batch: none of it ran outside the transaction
    with group_transaction(database) as transaction, transaction.write():
        database.executemany("INSERT INTO group_things (name, n) VALUES (%s, %s)", [("a", 1), ("b", 2)])
        assert database.count("UPDATE group_things SET n = n + 10", ()) == 2
    assert _names(pg) == {"a": 11, "b": 12}


def test_the_writer_s_batches_keep_their_writes_apart_with_a_lazy_begin(pg: PostgresStore) -> None:
    writer = PgWriter(pg)
    try:
        gate = threading.Event()
        writer.submit(lambda store: gate.wait(10))  # holds the writer until the batch below is queued whole

        def insert(name: str, n: int) -> Any:
            return lambda store: store.database.execute("INSERT INTO group_things (name, n) VALUES (%s, %s)", (name, n))

        futures: list[Future[Any]] = [
            writer.submit(lambda store: None),  # no statement: the BEGIN still waits for the next write's
            writer.submit(insert("x", 1)),
            writer.submit(insert("x", 2)),  # refused alone
            writer.submit(insert("y", 3)),
        ]
        gate.set()
        futures[0].result(timeout=30)
        futures[1].result(timeout=30)
        with pytest.raises(StoreError, match="duplicate key"):
            futures[2].result(timeout=30)
        futures[3].result(timeout=30)
    finally:
        writer.stop()
    assert _names(pg) == {"x": 1, "y": 3}
