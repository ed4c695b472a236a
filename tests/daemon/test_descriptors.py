"""hermesd lifts its open-file limit so idle clients at the listeners' caps cannot exhaust it."""

from __future__ import annotations

import resource
import subprocess
import sys
from collections.abc import Callable

import pytest

_PROBE = (
    "import logging, resource, sys\n"
    "logging.basicConfig(level=logging.INFO, stream=sys.stderr, format='%(levelname)s %(message)s')\n"
    "from hermes_actors.daemon.descriptors import raise_descriptor_limit\n"
    "print(raise_descriptor_limit(int(sys.argv[1])), resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
)


def _limited(soft: int, hard: int) -> Callable[[], None]:
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _probe(needed: int, soft: int, hard: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _PROBE, str(needed)],
        preexec_fn=_limited(soft, hard),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def _hard() -> int:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return 1 << 20 if hard == resource.RLIM_INFINITY else hard


@pytest.mark.skipif(_hard() < 4096, reason="this machine's hard open-file limit leaves nothing to raise")
def test_a_soft_limit_of_1024_is_raised_towards_the_hard_one_without_a_warning() -> None:
    hard = _hard()
    done = _probe(2_000, 1024, hard)
    expected = min(65_536, hard)
    assert done.stdout.split() == [str(expected), str(expected)]
    assert "WARNING" not in done.stderr


def test_a_hard_limit_below_what_the_listeners_need_is_one_warning_naming_the_fix() -> None:
    done = _probe(5_000, 256, 512)
    assert done.stdout.split() == ["512", "512"]
    warnings = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1, done.stderr
    assert "512" in warnings[0]
    assert "LimitNOFILE=" in warnings[0]
    assert "daemon.http_max_connections" in warnings[0]
