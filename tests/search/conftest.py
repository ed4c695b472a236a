"""session_search runs against every store implementation (see ``tests/stores.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_actors.store import StoreInterface
from hermes_actors.testing import FakeClock
from tests.stores import IMPLEMENTATIONS, open_implementation


@pytest.fixture(params=IMPLEMENTATIONS)
def store(request: pytest.FixtureRequest, db_path: Path, clock: FakeClock) -> Iterator[StoreInterface]:
    with open_implementation(request.param, request, db_path, clock) as opened:
        yield opened
