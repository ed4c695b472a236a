"""The connections a PostgreSQL :class:`Database` keeps at hand between statements (``store/pg/spares.py``): taken
from the pool once, never parked while a borrower waits in the pool, and given back to it when broken, inside a
transaction, old, or closing."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from hermes_actors.errors import StoreError
from hermes_actors.store.pg.db import Database
from hermes_actors.store.pg.spares import Spares


@pytest.fixture
def database(postgres_dsn: str) -> Iterator[Database]:
    db = Database(postgres_dsn, pool_size=1)
    try:
        yield db
    finally:
        db.close()


@pytest.fixture
def pool(postgres_dsn: str) -> Iterator[ConnectionPool[psycopg.Connection[Any]]]:
    with ConnectionPool(postgres_dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, timeout=10) as opened:
        opened.wait()
        yield opened


def test_statements_in_a_row_take_one_connection_from_the_pool(database: Database) -> None:
    for n in range(50):
        assert database.execute("SELECT %s::int", (n,)) == [(n,)]
    assert database._spares.pool_takes == 1


def test_a_borrower_waiting_in_the_pool_gets_the_connection_given_back(database: Database) -> None:
    """Pool of one: a transaction holds the connection while another thread's statement waits in the pool. The
    connection given back goes to that waiter at once, not to the spares (where nobody would look for it)."""
    answered: list[float] = []
    with database.transaction():
        database.execute("SELECT 1")
        waiter = threading.Thread(target=lambda: answered.append(database.execute("SELECT 2")[0][0]))
        waiter.start()
        time.sleep(0.3)  # it waits in the pool now
        assert not answered
        released = time.monotonic()
    waiter.join(timeout=20)
    assert answered == [2]
    assert time.monotonic() - released < 5.0  # not the pool's 30 s timeout


def test_a_broken_connection_goes_back_to_the_pool_and_the_next_statement_gets_a_new_one(database: Database) -> None:
    pid = database.execute("SELECT pg_backend_pid()")[0][0]
    with psycopg.connect(database.dsn, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
    with pytest.raises(StoreError, match="PostgreSQL refused a statement"):
        database.execute("SELECT 1")
    assert database.execute("SELECT pg_backend_pid()")[0][0] != pid
    assert database._spares.pool_takes == 2


def test_a_connection_left_inside_a_transaction_is_not_kept(pool: ConnectionPool[psycopg.Connection[Any]]) -> None:
    spares = Spares(pool)
    connection = spares.take(5.0)
    connection.execute("BEGIN")
    spares.give(connection)  # the pool rolls it back
    again = spares.take(5.0)
    assert spares.pool_takes == 2
    assert again.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
    spares.give(again)
    spares.close()


def test_a_connection_out_of_the_pool_for_keep_s_goes_back_to_it(pool: ConnectionPool[psycopg.Connection[Any]]) -> None:
    now = [0.0]
    spares = Spares(pool, keep_s=60.0, monotonic=lambda: now[0])
    spares.give(spares.take(5.0))
    spares.give(spares.take(5.0))
    assert spares.pool_takes == 1  # kept between the two
    now[0] = 61.0
    spares.give(spares.take(5.0))  # taken again from the spares, but returned to the pool: its minute is up
    spares.give(spares.take(5.0))
    assert spares.pool_takes == 2
    spares.close()


def test_closing_gives_every_spare_back(pool: ConnectionPool[psycopg.Connection[Any]]) -> None:
    spares = Spares(pool)
    first, second = spares.take(5.0), spares.take(5.0)
    spares.give(first)
    spares.give(second)
    assert pool.get_stats()["pool_available"] == 0  # both kept as spares
    spares.close()
    assert pool.get_stats()["pool_available"] == 2
    late = pool.getconn(5.0)
    spares.give(late)  # a return after closing goes to the pool too
    assert pool.get_stats()["pool_available"] == 2
