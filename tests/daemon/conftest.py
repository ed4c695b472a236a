"""Fixtures of the daemon tests: a home with the test configuration, and a real ``hermesd`` on it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.test_daemon import CONFIG, Daemon, start_daemon


@pytest.fixture
def home(tmp_path: Path) -> Path:
    root = tmp_path / "h"
    root.mkdir()
    (root / "config.yaml").write_text(CONFIG)
    return root


@pytest.fixture
def daemon(home: Path) -> Iterator[Daemon]:
    process = start_daemon(home)
    try:
        yield Daemon(home, process)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)
