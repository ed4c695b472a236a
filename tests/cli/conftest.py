"""Fixtures of the CLI tests: a home directory, and the store in it (created, open for the test to seed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_actors.store import Store


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def store(home: Path) -> Iterator[Store]:
    home.mkdir()
    with Store.open(home / "state.db") as opened:
        yield opened
