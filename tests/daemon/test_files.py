"""State files are private to their owner whatever the umask: files 0600, directories 0700, a new home 0700."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import stat
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hermes_actors.daemon.banner import ctl_command
from hermes_actors.store import Store
from tests.daemon.test_daemon import CONFIG, Daemon, _script

pytestmark = pytest.mark.slow

# The smallest PNG: a 1x1 transparent pixel.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


def _start(home: Path, config: Path, umask: int) -> subprocess.Popen[str]:
    env = {**os.environ, "HERMES_HOME": str(home)}
    env.pop("HERMES_API_KEY", None)
    return subprocess.Popen(
        [*_script("hermesd"), "--home", str(home), "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        umask=umask,
    )


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    return path


@contextmanager
def _running(home: Path, config: Path, umask: int) -> Iterator[tuple[Daemon, subprocess.Popen[str]]]:
    process = _start(home, config, umask)
    try:
        yield Daemon(home, process), process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)


def _chat_with_an_image(api: str) -> None:
    image = "data:image/png;base64," + base64.b64encode(PNG).decode()
    body = {
        "model": "hermes-agent",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": image}}],
            }
        ],
    }
    request = urllib.request.Request(
        f"{api}/v1/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _modes(home: Path) -> dict[str, int]:
    """The mode of everything under ``home`` (and of ``home`` itself as ``.``)."""
    found = {".": _mode(home)}
    for path in sorted(home.rglob("*")):
        found[str(path.relative_to(home))] = _mode(path)
    return found


@pytest.mark.parametrize("umask", [0o022, 0o000], ids=["umask 022", "umask 000"])
def test_a_new_home_and_every_state_file_are_private_whatever_the_umask(
    tmp_path: Path, config_file: Path, umask: int
) -> None:
    home = tmp_path / "new" / "home"
    with _running(home, config_file, umask) as (running, _process):
        _chat_with_an_image(running.api)
        modes = _modes(home)
        media = [name for name in modes if name.startswith("media")]
        assert len(media) == 3, modes  # media/, its sha256 prefix directory and the image
        wanted = dict.fromkeys(modes, 0o600)
        wanted |= {".": 0o700, "media": 0o700, media[1]: 0o700}
        assert {"state.db", "state.db-wal", "state.db-shm", "hermesd.pid", "hermesd.sock"} <= modes.keys()
        assert modes == wanted
        assert stat.S_ISSOCK((home / "hermesd.sock").lstat().st_mode)


def _leave_an_old_install(home: Path) -> None:
    """What an older hermesd left under umask 022: a 0755 home, 0644 files, the WAL of a killed process."""
    home.mkdir()
    code = (
        "import os, sys\n"
        "from hermes_actors.store import Store\n"
        "store = Store.open(sys.argv[1])\n"
        "store.kv.set_meta('old', 'install')\n"
        "os._exit(0)\n"  # killed: the -wal and -shm stay behind
    )
    subprocess.run([sys.executable, "-c", code, str(home / "state.db")], check=True, timeout=30)
    (home / "media" / "ab").mkdir(parents=True)
    (home / "media" / "ab" / "ab12.png").write_bytes(PNG)
    (home / "hermesd.pid").write_text("4242\n")
    for path in [home, *home.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def test_an_old_install_is_tightened_and_an_open_home_gets_one_warning(tmp_path: Path, config_file: Path) -> None:
    home = tmp_path / "home"
    _leave_an_old_install(home)
    assert (home / "state.db-wal").exists()
    assert (home / "state.db-shm").exists()
    process = _start(home, config_file, 0o022)
    try:
        Daemon(home, process)
        modes = _modes(home)
        for name in ("state.db", "state.db-wal", "state.db-shm", "hermesd.pid", "hermesd.sock"):
            assert modes[name] == 0o600, name
        assert modes["media"] == 0o700  # what is under it is out of other users' reach
        assert modes["."] == 0o755  # the operator's directory: hermesd says what to do instead
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    warnings = [line for line in err.splitlines() if "level=warning" in line]
    assert len(warnings) == 1, err
    assert re.fullmatch(
        r"time=\S+ level=warning logger=hermesd "
        + re.escape(
            f'msg="the home is open to other users (mode 0755), who can reach every transcript in it; make it '
            f'private with chmod 700 {home}"'
        ),
        warnings[0],
    )
    with Store.open(home / "state.db", readonly=True) as store:
        assert store._connection.execute("SELECT value FROM meta WHERE key = 'old'").get == "install"


@pytest.mark.parametrize("umask", [0o022, 0o000], ids=["umask 022", "umask 000"])
def test_hermesctl_creating_a_store_without_the_daemon_makes_it_private(tmp_path: Path, umask: int) -> None:
    home = tmp_path / "ctl" / "home"
    done = subprocess.run(
        [*_script("hermesctl"), "db", "migrate", "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=30,
        umask=umask,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert _modes(home) == {".": 0o700, "state.db": 0o600}


def test_the_banner_gives_the_commands_another_terminal_can_run_as_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hermesctl of this interpreter by its path when the shell would find another (or none: a virtualenv not
    activated), and --home unless the home is the default one."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "hermesctl").write_text("#!/bin/sh\n")
    (bin_dir / "hermesctl").chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "elsewhere"))
    home = tmp_path / "my home"
    assert ctl_command(home, "chat") == f"{bin_dir / 'hermesctl'} chat --home '{home}'"
    monkeypatch.setenv("PATH", str(bin_dir))  # activated: the shell finds this very one
    monkeypatch.setenv("HOME", str(tmp_path))
    assert ctl_command(tmp_path / ".hermes", "status") == "hermesctl status"
