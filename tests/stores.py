"""The store implementations the contract tests run against, one fixture parameter each.

``tests/store`` and ``tests/search`` build their ``store`` fixture from :func:`open_implementation`: every test that
takes ``store`` runs once on the SQLite store and once on the PostgreSQL store (a fresh database of the session's
throw-away cluster, skipped when PostgreSQL is not installed; see ``tests/postgres.py``). Tests that look below the
interface at SQLite itself take ``sqlite_store`` (or call :func:`tests.store.support.sqlite_connection`), which
skips the PostgreSQL parameter.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_actors.store import Store, StoreInterface
from hermes_actors.testing import FakeClock

IMPLEMENTATIONS = ("sqlite", "postgres")
"""The implementations every contract test runs against."""


@contextlib.contextmanager
def open_implementation(
    name: str, request: pytest.FixtureRequest, db_path: Path, clock: FakeClock
) -> Iterator[StoreInterface]:
    """Open a fresh, empty store of implementation ``name``."""
    if name == "sqlite":
        with Store.open(db_path, clock=clock) as opened:
            yield opened
        return
    if name == "postgres":
        from hermes_actors.store.pg import PostgresStore

        dsn = request.getfixturevalue("postgres_dsn")
        # Leases expire by the database clock; the fake clock's advances are added to it.
        with PostgresStore.open(dsn, clock=clock, lease_skew=clock.monotonic, migrate_schema=False) as pg:
            yield pg
        return
    raise ValueError(f"no store implementation named {name!r}; add it to IMPLEMENTATIONS and here")


def skip_unless_sqlite(request: pytest.FixtureRequest, why: str) -> None:
    """Skip the running test's PostgreSQL parameter (before its store is opened): the test is SQLite's alone."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("store") not in (None, "sqlite"):
        pytest.skip(why)
