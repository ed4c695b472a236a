"""The store under test, one fixture parameter per implementation of :class:`~hermes_actors.store.StoreInterface`
(see ``tests/stores.py``). Tests that look below the interface (the SQLite file, its pragmas, ``store._connection``)
take ``sqlite_store`` instead."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_actors.store import Store, StoreInterface
from hermes_actors.testing import FakeClock
from tests.stores import IMPLEMENTATIONS, open_implementation


@pytest.fixture(params=IMPLEMENTATIONS)
def store(request: pytest.FixtureRequest, db_path: Path, clock: FakeClock) -> Iterator[StoreInterface]:
    with open_implementation(request.param, request, db_path, clock) as opened:
        yield opened


@pytest.fixture
def sqlite_store(store: StoreInterface) -> Store:
    """``store`` when it is the APSW store, for tests of the SQLite specifics under the interface (skipped for
    any other implementation)."""
    if not isinstance(store, Store):
        pytest.skip("looks at SQLite itself, below the store interface")
    return store
