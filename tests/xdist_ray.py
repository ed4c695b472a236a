"""With ``-n 2 --dist loadgroup``, the tests that start Ray (and those that start ``hermesd``) run one at a time.

A test module starts Ray when it imports ``tests.cluster.raylab`` (the drivers' runner). Its tests' loads, kills and
pauses are timed, and with two Ray heads at once on two busy cores a killed host's restart outlasted the jobs test's
60 s wait: so they form one work unit, the group ``ray``, which the scheduler hands out first (units go largest first)
while the other worker takes the remaining tests one by one. Other ``xdist_group`` marks keep their meaning.

The tests of modules that start ``hermesd`` on this machine's loopback (their text names it) form a second group,
``hermesd``: a home whose config leaves the webhook section out listens on its default port, 127.0.0.1:8644, so two of
them at once on two workers clash ("Address already in use"). The Ray drivers run in network namespaces of their
own, so the two groups never meet on a port.

The group is chosen by the scheduler from the test's file, not by adding an ``xdist_group`` mark at collection:
pytest-xdist 3.8 names a marked test after its group by rewriting its node id, which pytest 9.2 no longer reads
(pytest-xdist issue #1386), so a mark alone groups nothing there.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from xdist.remote import Producer  # type: ignore[import-untyped]  # pytest-xdist ships no type information
from xdist.scheduler import LoadGroupScheduling  # type: ignore[import-untyped]

__all__ = ["HERMESD_GROUP", "RAY_GROUP", "RayGroupScheduling", "group_of"]

RAY_GROUP = "ray"
HERMESD_GROUP = "hermesd"


def _group_of_file(path: Path) -> str | None:
    """``RAY_GROUP`` when the module imports ``tests.cluster.raylab``, ``HERMESD_GROUP`` when it names ``hermesd``."""
    if not (path.suffix == ".py" and path.is_file()):
        return None
    text = path.read_text(encoding="utf-8")
    if "tests.cluster.raylab" in text:
        return RAY_GROUP
    return HERMESD_GROUP if "hermesd" in text else None


def group_of(root: Path, nodeid: str, seen: dict[str, str | None]) -> str | None:
    """The group of the test ``nodeid`` (relative to ``root``): ``RAY_GROUP`` for a module that starts Ray,
    ``HERMESD_GROUP`` for one that names ``hermesd``, else ``None``; ``seen`` keeps each file's answer."""
    file = nodeid.split("::", 1)[0]
    if file not in seen:
        seen[file] = _group_of_file(root / file)
    return seen[file]


class RayGroupScheduling(LoadGroupScheduling):  # type: ignore[misc]  # an untyped base
    """``--dist loadgroup`` with the groups ``ray`` and ``hermesd`` chosen from each test's module."""

    def __init__(self, config: pytest.Config, log: Producer | None = None) -> None:
        super().__init__(config, log)
        self._root = config.rootpath
        self._groups: dict[str, str | None] = {}

    def _split_scope(self, nodeid: str) -> str:
        group = group_of(self._root, nodeid, self._groups)
        return group if group is not None else str(super()._split_scope(nodeid))
