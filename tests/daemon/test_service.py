"""``hermesctl service unit`` and hermesd's side of systemd's notification protocol."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.config import HttpLimits
from hermes_actors.daemon.notify import Notifier
from platforms.registry import PLATFORMS
from tests.daemon.test_daemon import SECRET


def _unit(*args: str) -> str:
    result = CliRunner().invoke(hermesctl, ["service", "unit", *args])
    assert result.exit_code == 0, result.output
    return result.output


def _settings(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            found.setdefault(key, []).append(value)
    return found


def test_the_unit_is_a_sandboxed_notify_service_running_this_hermesd_on_its_state_directory() -> None:
    unit = _settings(_unit())
    expected = {
        "Type": ["notify"],
        "NotifyAccess": ["main"],
        "WatchdogSec": ["30"],
        "Restart": ["on-failure"],
        "ProtectSystem": ["strict"],
        "PrivateTmp": ["yes"],
        "NoNewPrivileges": ["yes"],
        "StateDirectory": ["hermes"],
        "Environment": ["HERMES_HOME=%S/hermes"],
        "ExecReload": ["/bin/kill -HUP $MAINPID"],
        "WantedBy": ["multi-user.target"],
    }
    assert {key: unit.get(key) for key in expected} == expected
    assert unit["ExecStart"] == [str(Path(sys.executable).parent / "hermesd")]
    assert unit["ProtectHome"] in (["yes"], ["read-only"])


@pytest.mark.parametrize("args", [[], ["--user"]], ids=["system", "user"])
def test_the_unit_allows_descriptors_for_every_http_listener_at_its_connection_cap(args: list[str]) -> None:
    # systemd's default is 1024 (soft); 1,100 idle connections once took every entry point down with it.
    (limit,) = _settings(_unit(*args))["LimitNOFILE"]
    listeners = len(PLATFORMS)  # at most one listener per platform (fewer with daemon.http_port)
    assert int(limit) >= 4 * listeners * HttpLimits().max_connections


def test_a_unit_for_another_home_may_write_there_only_and_a_user_unit_drops_namespace_options(
    tmp_path: Path,
) -> None:
    home = tmp_path / "my hermes"
    unit = _settings(_unit("--home", str(home)))
    assert unit["Environment"] == [f'HERMES_HOME="{home}"']
    assert unit["ReadWritePaths"] == [f'"{home}"']
    assert "StateDirectory" not in unit
    user = _settings(_unit("--user"))
    assert user["WantedBy"] == ["default.target"]
    assert "User" not in user
    assert "ProtectSystem" not in user
    assert user["Type"] == ["notify"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here")
@pytest.mark.parametrize("args", [[], ["--user"]], ids=["system", "user"])
def test_systemd_analyze_verify_accepts_the_printed_unit(tmp_path: Path, args: list[str]) -> None:
    path = tmp_path / "hermesd.service"
    path.write_text(_unit(*args))
    runtime = tmp_path / "run"  # a user manager needs a runtime directory, which a CI shell may not have
    runtime.mkdir(mode=0o700)
    verified = subprocess.run(
        ["systemd-analyze", "verify", *(["--user"] if args else []), str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
    )
    assert verified.returncode == 0, verified.stderr
    assert "hermesd.service" not in verified.stderr, verified.stderr  # no warning about our unit


def test_without_a_notify_socket_nothing_is_sent_and_the_watchdog_period_is_for_this_process_only() -> None:
    assert not Notifier({}).enabled
    assert Notifier({"NOTIFY_SOCKET": "@abstract", "WATCHDOG_USEC": "3000000"}).watchdog_interval_s == 1.5
    assert Notifier({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": "1"}).watchdog_interval_s is None
    assert Notifier({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": str(os.getpid())}).watchdog_interval_s == 1.5


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.mark.slow
def test_hermesd_says_ready_once_listening_feeds_the_watchdog_and_says_stopping_at_sigterm(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    port = _free_port()
    (home / "config.yaml").write_text(
        f"platforms:\n  api_server:\n    port: {port}\n  webhook:\n    port: 0\n"
        f"    routes:\n      default:\n        secret: {SECRET}\n"
    )
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(tmp_path / "notify"))
    listener.settimeout(30)
    env = {**os.environ, "NOTIFY_SOCKET": str(tmp_path / "notify"), "WATCHDOG_USEC": "200000"}
    env.pop("WATCHDOG_PID", None)
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "hermesd"), "--home", str(home)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = listener.recv(4096).decode()
        assert first.splitlines()[0] == "READY=1", first
        assert f"MAINPID={process.pid}" in first.splitlines()
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # already listening when READY=1 was sent: no retry needed
        beats = [listener.recv(4096).decode() for _ in range(3)]
        assert beats == ["WATCHDOG=1"] * 3
        process.send_signal(signal.SIGTERM)
        while (message := listener.recv(4096).decode()) == "WATCHDOG=1":
            pass
        assert message.splitlines()[0] == "STOPPING=1", message
        _, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
    finally:
        listener.close()
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)
