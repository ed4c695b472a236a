from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_actors.store import Store
from hermes_actors.testing import FakeClock
from tests.postgres import REQUIRE_ENV, Cluster, find_bin_dir, missing_reason


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``: the tests that start Ray, and those that start ``hermesd``, each run one at a time on
    one worker (``tests/xdist_ray.py``)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from tests.xdist_ray import RayGroupScheduling

    return RayGroupScheduling(config, log)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@pytest.fixture
def store(db_path: Path, clock: FakeClock) -> Iterator[Store]:
    with Store.open(db_path, clock=clock) as opened:
        yield opened


def _postgres_bin_dir() -> Path:
    """The PostgreSQL server binaries; without them the test is skipped, unless $HERMES_REQUIRE_POSTGRES is 1 (CI),
    where that is a failure."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(missing_reason())
        pytest.skip(missing_reason())
    return bin_dir


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[Cluster]:
    """A throw-away PostgreSQL cluster for the session (see tests/postgres.py), copying each test's database ahead."""
    cluster = Cluster(_postgres_bin_dir(), spare=True)
    try:
        cluster.prepare_template()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def postgres_dsn(postgres_cluster: Cluster) -> Iterator[str]:
    """The connection string of a fresh database holding the current schema, dropped after the test."""
    name = postgres_cluster.create_database()
    try:
        yield postgres_cluster.dsn(name)
    finally:
        postgres_cluster.drop_database(name)


@pytest.fixture
def own_postgres() -> Iterator[Cluster]:
    """A PostgreSQL cluster for one test alone (one that stops, starts or restarts it), with one migrated database
    ``hermes``."""
    from hermes_actors.store.pg import PostgresStore  # psycopg: only for the tests that take this fixture

    cluster = Cluster(_postgres_bin_dir())
    try:
        cluster.admin("CREATE DATABASE hermes")
        PostgresStore.open(cluster.dsn("hermes"), pool_size=1).close()
        yield cluster
    finally:
        cluster.stop()
