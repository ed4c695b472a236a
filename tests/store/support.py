"""Helpers for store tests that look below the interface, at the SQLite database itself."""

from __future__ import annotations

import apsw
import pytest

from hermes_actors.store import Store, StoreInterface


def sqlite_connection(store: StoreInterface) -> apsw.Connection:
    """The APSW connection under ``store``; skips the test for an implementation that is not SQLite."""
    if not isinstance(store, Store):
        pytest.skip("looks at SQLite itself, below the store interface")
    return store._connection
