"""The store under test, one fixture parameter per implementation of :class:`~hermes_actors.store.StoreInterface`.

Every test in ``tests/store`` that takes ``store`` runs once per implementation: a second backend joins the
suite by adding its name to :data:`IMPLEMENTATIONS` and a branch to :func:`open_implementation`. Tests that look
below the interface (the SQLite file, its pragmas, ``store._connection``) take ``sqlite_store`` instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_actors.store import Store, StoreInterface
from hermes_actors.testing import FakeClock

IMPLEMENTATIONS = ("apsw",)
"""The implementations every contract test runs against."""


@contextlib.contextmanager
def open_implementation(name: str, db_path: Path, clock: FakeClock) -> Iterator[StoreInterface]:
    """Open a fresh, empty store of implementation ``name``."""
    if name == "apsw":
        with Store.open(db_path, clock=clock) as opened:
            yield opened
        return
    raise ValueError(f"no store implementation named {name!r}; add it to IMPLEMENTATIONS and here")


@pytest.fixture(params=IMPLEMENTATIONS)
def store(request: pytest.FixtureRequest, db_path: Path, clock: FakeClock) -> Iterator[StoreInterface]:
    with open_implementation(request.param, db_path, clock) as opened:
        yield opened


@pytest.fixture
def sqlite_store(store: StoreInterface) -> Store:
    """``store`` when it is the APSW store, for tests of the SQLite specifics under the interface (skipped for
    any other implementation)."""
    if not isinstance(store, Store):
        pytest.skip("looks at SQLite itself, below the store interface")
    return store
