"""Fixtures of the importer tests: the hostile reference database (built once) and an empty store of ours."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_actors.importer import ImportReport, import_hermes
from hermes_actors.store import Store
from tests.importer.hostile import Hostile, build_hostile


@pytest.fixture(scope="session")
def hostile_master(tmp_path_factory: pytest.TempPathFactory) -> Hostile:
    return build_hostile(tmp_path_factory.mktemp("hostile") / "state.db")


@pytest.fixture
def hostile(hostile_master: Hostile, tmp_path: Path) -> Hostile:
    """A private copy of the hostile database (with its sessions.json), so a test may change it."""
    folder = tmp_path / "reference"
    folder.mkdir()
    for name in ("state.db", "sessions.json"):
        shutil.copy(hostile_master.path.parent / name, folder / name)
    return dataclasses.replace(hostile_master, path=folder / "state.db")


@pytest.fixture
def target(tmp_path: Path) -> Iterator[Store]:
    """An empty store of ours, in its own home."""
    home = tmp_path / "ours"
    home.mkdir()
    with Store.open(home / "state.db") as store:
        yield store


@dataclasses.dataclass
class Imported:
    """The hostile database imported once into a fresh store, for tests that only read."""

    fx: Hostile
    store: Store
    report: ImportReport


@pytest.fixture(scope="module")
def imported(hostile_master: Hostile, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Imported]:
    with Store.open(tmp_path_factory.mktemp("imported") / "state.db") as store:
        yield Imported(fx=hostile_master, store=store, report=import_hermes(hostile_master.path, store))
