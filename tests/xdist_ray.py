"""With ``-n 2 --dist loadgroup``, the tests that start Ray run one at a time on one worker.

A test module starts Ray when it imports ``tests.cluster.raylab`` (the drivers' runner). Its tests' loads, kills and
pauses are timed, and with two Ray heads at once on two busy cores a killed host's restart outlasted the jobs test's
60 s wait: so they form one work unit, the group ``ray``, which the scheduler hands out first (units go largest first)
while the other worker takes the remaining tests one by one. Other ``xdist_group`` marks keep their meaning.

The group is chosen by the scheduler from the test's file, not by adding an ``xdist_group`` mark at collection:
pytest-xdist 3.8 names a marked test after its group by rewriting its node id, which pytest 9.2 no longer reads
(pytest-xdist issue #1386), so a mark alone groups nothing there.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from xdist.remote import Producer  # type: ignore[import-untyped]  # pytest-xdist ships no type information
from xdist.scheduler import LoadGroupScheduling  # type: ignore[import-untyped]

__all__ = ["RAY_GROUP", "RayGroupScheduling", "ray_group_of", "runs_ray"]

RAY_GROUP = "ray"


def runs_ray(path: Path) -> bool:
    """Whether the test module at ``path`` starts Ray: it imports ``tests.cluster.raylab``."""
    return path.suffix == ".py" and path.is_file() and "tests.cluster.raylab" in path.read_text(encoding="utf-8")


def ray_group_of(root: Path, nodeid: str, seen: dict[str, bool]) -> str | None:
    """``RAY_GROUP`` for the test ``nodeid`` (relative to ``root``) of a module that starts Ray, else ``None``;
    ``seen`` keeps each file's answer."""
    file = nodeid.split("::", 1)[0]
    if file not in seen:
        seen[file] = runs_ray(root / file)
    return RAY_GROUP if seen[file] else None


class RayGroupScheduling(LoadGroupScheduling):  # type: ignore[misc]  # an untyped base
    """``--dist loadgroup`` whose group ``ray`` holds every test of a module that starts Ray."""

    def __init__(self, config: pytest.Config, log: Producer | None = None) -> None:
        super().__init__(config, log)
        self._root = config.rootpath
        self._ray_files: dict[str, bool] = {}

    def _split_scope(self, nodeid: str) -> str:
        group = ray_group_of(self._root, nodeid, self._ray_files)
        return group if group is not None else str(super()._split_scope(nodeid))
