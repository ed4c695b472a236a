from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_actors.store import Store
from hermes_actors.testing import FakeClock


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
