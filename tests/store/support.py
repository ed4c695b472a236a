"""Helpers for store tests that look below the interface, at the database itself."""

from __future__ import annotations

import apsw
import pytest

from hermes_actors.store import Store, StoreInterface


def sqlite_connection(store: StoreInterface) -> apsw.Connection:
    """The APSW connection under ``store``; skips the test for an implementation that is not SQLite."""
    if not isinstance(store, Store):
        pytest.skip("looks at SQLite itself, below the store interface")
    return store._connection


def count_rows(store: StoreInterface, table: str) -> int:
    """How many rows ``table`` holds, on either implementation (PostgreSQL: committed rows, read on a connection
    of the pool outside any transaction of the caller's)."""
    if isinstance(store, Store):
        value = store._connection.execute(f"SELECT count(*) FROM {table}").get
        assert isinstance(value, int)
        return value
    from hermes_actors.store.pg import PostgresStore

    assert isinstance(store, PostgresStore)
    return int(store.database.value(f"SELECT count(*) FROM {table}"))
