"""Running ``tests/cluster/ray_driver.py`` in a network namespace of its own, where the loopback interface is the
only one: whatever Ray listens on, nothing outside the namespace can reach it, and no packet leaves the machine.

``unshare -n`` needs root or user namespaces; where neither is allowed the Ray tests are skipped (a failure when
``HERMES_REQUIRE_RAY=1``, as in CI).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

__all__ = ["REQUIRE_ENV", "run_driver"]

REQUIRE_ENV = "HERMES_REQUIRE_RAY"
ROOT = Path(__file__).resolve().parents[2]


def _isolation() -> list[str] | None:
    """The command prefix that runs a program in a fresh network namespace with its loopback up, or ``None``."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return None
    prefix = ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-rn"]
    probe = subprocess.run([*prefix, "ip", "link", "set", "lo", "up"], capture_output=True, check=False, timeout=30)
    return prefix if probe.returncode == 0 else None


def run_driver(*args: str, timeout: float, module: str = "tests.cluster.ray_driver") -> dict[str, Any]:
    """Run the driver ``module`` with ``args`` in its own network namespace; the JSON it printed."""
    try:
        import ray  # noqa: F401
    except ImportError:
        missing = "ray is not installed: pip install -e '.[test]'"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(missing)
        pytest.skip(missing)
    prefix = _isolation()
    if prefix is None:
        reason = "cannot make a network namespace (unshare -n) to keep Ray's listeners off the network"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    command = " ".join(shlex.quote(part) for part in [sys.executable, "-m", module, *args])
    done = subprocess.run(
        [*prefix, "sh", "-c", f"ip link set lo up && exec {command}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(
            f"the Ray driver failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
        )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))
