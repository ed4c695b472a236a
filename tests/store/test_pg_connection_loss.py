"""A connection to PostgreSQL lost inside a transaction or while it commits (issue 37): never taken for a commit
that did not happen, and a commit whose answer was lost is settled by what the server says it did."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from hermes_actors.errors import StoreError
from hermes_actors.store.pg import PostgresStore
from hermes_actors.store.pg.db import CommitUnknownError, Database
from hermes_actors.store.pg.writer import PgWriter
from tests.postgres import Cluster
from tests.store.pg_cutter import CommitCutter


def _kill(dsn: str, pid: int) -> None:
    """End backend ``pid`` from another connection, and wait until it is gone."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))


def _cursor(pg: PostgresStore, name: str) -> str | None:
    return pg.kv.get_cursor(name)


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, migrate_schema=False, pool_size=2) as store:
        yield store


def _lose_connection_mid_transaction(pg: PostgresStore) -> None:
    database = pg.database
    with database.transaction():
        pg.kv.set_cursor("lost", "written before the loss")
        _kill(database.dsn, int(database.value("SELECT pg_backend_pid()")))
        with contextlib.suppress(StoreError):  # a write that fails and is caught, as the writer's savepoints do
            pg.kv.set_cursor("lost", "after the loss")


def test_a_connection_lost_inside_a_transaction_is_a_store_error_not_a_commit(pg: PostgresStore) -> None:
    with pytest.raises(StoreError, match="nothing of it was committed"):
        _lose_connection_mid_transaction(pg)
    assert _cursor(pg, "lost") is None


def _lose_connection_before_commit(pg: PostgresStore, xids: list[str]) -> None:
    database = pg.database
    with database.transaction():
        xids.append(database.xid())
        pg.kv.set_cursor("unknown", "x")
        _kill(database.dsn, int(database.value("SELECT pg_backend_pid()")))


def test_a_commit_whose_connection_is_gone_is_unknown_until_the_server_says_it_rolled_back(
    pg: PostgresStore,
) -> None:
    xids: list[str] = []
    with pytest.raises(CommitUnknownError) as raised:
        _lose_connection_before_commit(pg, xids)
    assert raised.value.xid == xids[0]
    assert pg.database.outcome(xids[0], timeout_s=5) is False
    assert _cursor(pg, "unknown") is None


def test_a_pool_with_no_connection_to_lend_says_so_in_time_instead_of_hanging(pg: PostgresStore) -> None:
    database = Database(pg.database.dsn, pool_size=1)
    try:
        with database.transaction():  # the one pooled connection is held: the next borrower waits, then is told
            started = time.monotonic()
            refusal = database.probe(0.2)
            assert time.monotonic() - started < 2.0
            assert refusal is not None
            assert refusal.startswith("PostgreSQL at ")
            assert "gave no connection within 0.2 s" in refusal
            assert database.outcome("1", timeout_s=0.2) is None
        assert database.probe(1.0) is None
    finally:
        database.close()


def _blocked_batch(writer: PgWriter, *works: Any) -> list[Any]:
    """Submit ``works`` so that they share one batch (the writer is held by a first write until all are queued)."""
    gate = threading.Event()
    writer.submit(lambda store: gate.wait(10))
    futures = [writer.submit(work) for work in works]
    gate.set()
    return futures


def test_a_batch_whose_connection_breaks_after_its_first_write_fails_every_write_of_it(pg: PostgresStore) -> None:
    writer = PgWriter(pg)
    try:

        def first(store: Any) -> str:
            store.kv.set_cursor("batch", "first")
            return "first done"

        def second(store: Any) -> None:
            _kill(pg.database.dsn, int(pg.database.value("SELECT pg_backend_pid()")))
            store.kv.set_cursor("batch", "second")

        futures = _blocked_batch(writer, first, second)
        for future in futures:
            with pytest.raises(StoreError, match="nothing was saved"):
                future.result(timeout=30)
        assert writer.call(lambda store: "the writer goes on") == "the writer goes on"
    finally:
        writer.stop()
    assert _cursor(pg, "batch") is None


def test_a_commit_cut_off_after_the_server_took_it_is_reported_committed(
    postgres_cluster: Cluster, postgres_dsn: str
) -> None:
    database_name = postgres_dsn.rsplit("dbname=", 1)[1]
    with (
        CommitCutter(postgres_cluster.directory, postgres_cluster.port) as cutter,
        PostgresStore.open(cutter.dsn(database_name), migrate_schema=False, pool_size=2) as pg,
    ):
        writer = PgWriter(pg)
        try:
            then: list[str] = []
            cutter.arm()

            def save(store: Any) -> str:
                store.kv.set_cursor("cut", "committed")
                return "saved"

            future = writer.submit(save, then=then.append)
            assert future.result(timeout=30) == "saved"
            assert cutter.cut.is_set(), "the COMMIT's answer was cut off"
            assert then == ["saved"]
            assert writer.unknown_commits == 1
        finally:
            writer.stop()
        assert _cursor(pg, "cut") == "committed"


def test_a_commit_cut_off_is_settled_before_the_next_batch_is_written(
    postgres_cluster: Cluster, postgres_dsn: str
) -> None:
    database_name = postgres_dsn.rsplit("dbname=", 1)[1]
    with (
        CommitCutter(postgres_cluster.directory, postgres_cluster.port) as cutter,
        PostgresStore.open(cutter.dsn(database_name), migrate_schema=False, pool_size=2) as pg,
    ):
        writer = PgWriter(pg)
        order: list[str] = []
        try:
            cutter.arm()
            first = writer.submit(lambda store: store.kv.set_cursor("order", "1"), then=lambda _: order.append("1"))
            second = writer.submit(lambda store: store.kv.get_cursor("order"), then=lambda _: order.append("2"))
            first.result(timeout=30)
            assert second.result(timeout=30) == "1"  # the next write saw the first one committed
            assert order == ["1", "2"]
        finally:
            writer.stop()
