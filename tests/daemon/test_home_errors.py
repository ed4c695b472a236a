"""A home that cannot be made or used is one line naming the path, the cause and the fix, with exit 2."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.cli.hermesd import main as hermesd
from hermes_actors.daemon.home import HomeError, make_home
from tests.daemon.test_daemon import _script
from tests.daemon.test_faults import _as_ordinary_user


def _one_error(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert lines[0].startswith("Error: "), output
    return lines[0]


def test_hermesd_and_hermesctl_name_the_file_in_the_way_of_the_home(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("not a directory")
    home = tmp_path / "taken" / "hermes"
    for command, args in ((hermesd, []), (hermesctl, ["db", "migrate"])):
        result = CliRunner().invoke(command, args, env={"HERMES_HOME": str(home)})
        assert result.exit_code == 2, result.output
        line = _one_error(result.output)
        assert f"{tmp_path / 'taken'} is a file; move that file away or choose another home" in line
        assert "File exists" not in line
        assert "Not a directory" not in line


def test_hermesd_names_a_home_that_is_itself_a_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.write_text("")
    result = CliRunner().invoke(hermesd, [], env={"HERMES_HOME": str(home)})
    assert result.exit_code == 2
    assert f"the home {home} cannot be a directory: {home} is a file" in _one_error(result.output)


def test_a_home_this_user_may_not_create_names_the_directory_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "srv" / "hermes"

    def refuse(self: Path, mode: int = 0o777, parents: bool = False, exist_ok: bool = False) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", refuse)  # root may create anything: stand in for an unprivileged user
    with pytest.raises(HomeError) as raised:
        make_home(home)
    assert f"cannot create the home {home}: this user" in str(raised.value)
    assert f"may not write in {tmp_path}" in str(raised.value)
    assert f"sudo install -d -m 700 -o $USER {home}" in str(raised.value)
    result = CliRunner().invoke(hermesd, [], env={"HERMES_HOME": str(home)})
    assert result.exit_code == 2
    assert "Permission denied" not in _one_error(result.output)


def test_a_home_that_cannot_be_created_for_another_reason_says_why_once(tmp_path: Path) -> None:
    result = CliRunner().invoke(hermesctl, ["db", "migrate"], env={"HERMES_HOME": "/proc/no-such-home"})
    assert result.exit_code == 2, result.output
    assert _one_error(result.output) == (
        "Error: cannot create the home /proc/no-such-home: No such file or directory; "
        "choose another home with --home DIR or HERMES_HOME=DIR"
    )


@pytest.fixture
def reachable_tmp() -> Iterator[Path]:
    """A directory another user (``nobody``) can reach: pytest's own temporary root is private to root."""
    directory = Path(tempfile.mkdtemp(prefix="hermes-home-"))
    directory.chmod(0o755)
    try:
        yield directory
    finally:
        shutil.rmtree(directory)


@pytest.mark.slow
def test_an_ordinary_user_refused_a_home_in_a_directory_of_roots_gets_one_line_with_the_fix(
    reachable_tmp: Path,
) -> None:
    owned = reachable_tmp / "owned"
    owned.mkdir()
    prefix, _ = _as_ordinary_user(owned)
    home = reachable_tmp / "srv" / "hermes"
    (reachable_tmp / "srv").mkdir(mode=0o755)  # root's: the ordinary user may enter but not write
    result = subprocess.run(
        [*prefix, *_script("hermesd")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HERMES_HOME": str(home)},
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"Error: cannot create the home {home}: this user (uid {_uid(prefix)}) may not write in "
        f"{reachable_tmp / 'srv'}; create it for this user (sudo install -d -m 700 -o $USER {home}) or choose "
        "another home with --home DIR or HERMES_HOME=DIR"
    ]


def _uid(prefix: list[str]) -> int:
    reuid = [part for part in prefix if part.startswith("--reuid=")]
    return int(reuid[0].removeprefix("--reuid=")) if reuid else os.getuid()
