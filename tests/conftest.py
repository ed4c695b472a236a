from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_actors.store import Store
from hermes_actors.testing import FakeClock
from tests.postgres import REQUIRE_ENV, Cluster, find_bin_dir, missing_reason

RAY_GROUP = "ray"


def _runs_ray(path: Path, seen: dict[Path, bool]) -> bool:
    """Whether the test module at ``path`` starts Ray: it imports ``tests.cluster.raylab`` (the drivers' runner)."""
    if path not in seen:
        seen[path] = path.suffix == ".py" and "tests.cluster.raylab" in path.read_text(encoding="utf-8")
    return seen[path]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put every test of a module that starts Ray in one xdist group: with ``-n 2 --dist loadgroup`` they run one at
    a time on one worker (their loads and faults are timed) while the other worker takes the remaining tests; the
    group, the largest unit of work, is handed out first."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    group = pytest.mark.xdist_group(RAY_GROUP)
    seen: dict[Path, bool] = {}
    for item in items:
        if _runs_ray(item.path, seen):
            item.add_marker(group)


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
    """A throw-away PostgreSQL cluster for the session (see tests/postgres.py)."""
    cluster = Cluster(_postgres_bin_dir())
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
