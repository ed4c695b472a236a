"""A full disk and a read-only store: one clear line and exit 2 at start, ``/health`` 503 while running.

How the faults are made, for real and without harming the machine:

* A full disk is a 1 MB tmpfs filled to the last byte, mounted over the home inside a private user and mount
  namespace (``unshare --user --map-root-user --mount``): no privileges needed, nothing outside the namespace
  sees it, and it vanishes with the process. Writes to it fail with ``ENOSPC``, as on a full disk. The same
  mount remounted read-only is a filesystem that turned read-only under a running daemon.
* A read-only ``state.db`` is ``chmod 0400`` for an ordinary user. Root ignores file modes, so when the tests
  run as root the daemon runs as ``nobody`` (``setpriv``) for that case, and root's own case is the immutable
  attribute (``chattr +i``), which stops root too.
"""

from __future__ import annotations

import functools
import json
import os
import pwd
import queue
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_actors.store import Store
from hermes_actors.testing import poll_until
from tests.daemon.test_daemon import CONFIG, Daemon, _script, start_daemon

pytestmark = pytest.mark.slow

MB = 1024 * 1024
WAIT_S = 30.0

# Mount a tmpfs over the home ($1), copy the seed files ($2) in, fill the disk or remount it read-only, run hermesd.
AT_START = """
home=$1; seed=$2; fault=$3; shift 3
mount -t tmpfs -o size=1m,mode=0700 hermes-test "$home" || exit 97
cp -R "$seed"/. "$home"/
if [ "$fault" = full ]; then cat /dev/zero > "$home/filler" 2>/dev/null; fi
if [ "$fault" = read-only ]; then mount -o remount,ro "$home" || exit 98; fi
exec "$@"
"""

# As above without a fault; then each line read from stdin fills or frees the disk under the running daemon.
WHILE_RUNNING = """
home=$1; seed=$2; shift 3
mount -t tmpfs -o size=4m,mode=0700 hermes-test "$home" || exit 97
cp -R "$seed"/. "$home"/
"$@" &
daemon=$!
read step; cat /dev/zero > "$home/filler" 2>/dev/null; echo "step: full"
read step; rm "$home/filler"; echo "step: freed"
read step; kill -TERM $daemon; wait $daemon; echo "step: exited $?"
"""


@functools.cache
def _namespaces() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True, timeout=WAIT_S
    )
    return probe.returncode == 0


needs_namespaces = pytest.mark.skipif(
    not _namespaces(), reason="needs unshare(1) and unprivileged user namespaces to mount a private tmpfs"
)


def _seed(directory: Path, *, database: bool = True) -> Path:
    directory.mkdir(mode=0o700)
    (directory / "config.yaml").write_text(CONFIG)
    if database:
        Store.open(directory / "state.db").close()
    return directory


def _in_namespace(script: str, home: Path, seed: Path, fault: str, *hermesd: str) -> list[str]:
    namespace = ["unshare", "--user", "--map-root-user", "--mount"]
    return [*namespace, "sh", "-c", script, "sh", str(home), str(seed), fault, *hermesd]


def _environment(home: Path) -> dict[str, str]:
    env = {**os.environ, "HERMES_HOME": str(home)}
    env.pop("HERMES_API_KEY", None)
    return env


def _refusal(command: list[str], home: Path) -> tuple[int, str]:
    process = subprocess.run(command, capture_output=True, text=True, timeout=WAIT_S, env=_environment(home))
    return process.returncode, process.stderr


# -- a full disk -----------------------------------------------------------------------------------------------


@needs_namespaces
@pytest.mark.parametrize("database", [True, False], ids=["existing home", "first start"])
def test_starting_on_a_full_disk_is_one_line_naming_the_disk_and_exit_2(tmp_path: Path, database: bool) -> None:
    seed = _seed(tmp_path / "seed", database=database)
    if not database:
        (seed / "config.yaml").unlink()  # a first start writes the default configuration: that write fails too
    home = tmp_path / "home"
    home.mkdir()
    command = _in_namespace(AT_START, home, seed, "full", *_script("hermesd"), "--home", str(home))
    code, err = _refusal(command, home)
    assert code == 2, err
    assert err == (
        f"Error: the disk holding {home} is full (0 bytes free, hermesd needs 1 MB); free space on it, "
        "then start hermesd again\n"
    )


@needs_namespaces
def test_starting_on_a_read_only_filesystem_is_one_line_and_exit_2(tmp_path: Path) -> None:
    seed = _seed(tmp_path / "seed")
    home = tmp_path / "home"
    home.mkdir()
    command = _in_namespace(AT_START, home, seed, "read-only", *_script("hermesd"), "--home", str(home))
    code, err = _refusal(command, home)
    assert code == 2, err
    assert err == (
        f"Error: {home} is on a read-only filesystem; remount it read-write (mount -o remount,rw), "
        "then start hermesd again\n"
    )


class _Lines:
    """The stdout lines of a process, read on a thread so that waits have deadlines."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, args=(process,), daemon=True).start()

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self._queue.put(line)

    def wait_for(self, pattern: str) -> re.Match[str]:
        deadline = time.monotonic() + WAIT_S
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=remaining)
            except queue.Empty:
                break
            found = re.search(pattern, line)
            if found is not None:
                return found
        raise AssertionError(f"no line matched {pattern!r} in time")


def _health(base: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"{base}/health", timeout=10) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return int(error.code), json.loads(error.read())


def _health_becomes(base: str, status: int) -> dict[str, object]:
    """Poll ``/health`` until it answers ``status`` (its verdict is cached for about a second)."""
    last: list[tuple[int, dict[str, object]]] = []

    def probe() -> dict[str, object] | None:
        last[:] = [_health(base)]
        code, body = last[0]
        return body if code == status else None

    def failure() -> str:
        code, body = last[0]
        return f"/health did not answer {status} in time (last: {code} {body})"

    return poll_until(probe, timeout=WAIT_S, interval=0.1, what=failure)


@needs_namespaces
def test_health_is_503_naming_the_reason_while_the_disk_is_full_and_200_once_space_is_freed(tmp_path: Path) -> None:
    seed = _seed(tmp_path / "seed")
    home = tmp_path / "home"
    home.mkdir()
    process = subprocess.Popen(
        _in_namespace(WHILE_RUNNING, home, seed, "none", *_script("hermesd"), "--home", str(home)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_environment(home),
        start_new_session=True,  # the shell and hermesd are one group: a failed test stops both
    )
    lines = _Lines(process)

    def step(name: str) -> None:
        assert process.stdin is not None
        process.stdin.write("next\n")
        process.stdin.flush()
        lines.wait_for(f"^step: {name}")

    try:
        base = lines.wait_for(r"OpenAI-compatible API: (http://127\.0\.0\.1:\d+)/v1").group(1)
        assert _health(base) == (200, {"status": "ok", "platform": "api_server", "waiting": 0})
        step("full")
        assert _health_becomes(base, 503) == {
            "status": "unavailable",
            "reason": f"the disk holding {home} is full (0 bytes free, hermesd needs 1 MB); free space on it",
            "platform": "api_server",
            "waiting": 0,
        }
        step("freed")
        assert _health_becomes(base, 200)["status"] == "ok"
        step("exited 0")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        _, err = process.communicate(timeout=WAIT_S)
    assert "Traceback" not in err


def test_health_is_503_while_another_process_holds_the_write_lock(tmp_path: Path) -> None:
    home = _seed(tmp_path / "home")
    process = start_daemon(home)
    failure: Exception | None = None
    try:
        running = Daemon(home, process)
        assert _health(running.api)[0] == 200
        with Store.open(home / "state.db") as other:
            other._connection.execute("BEGIN IMMEDIATE")
            try:
                assert _health_becomes(running.api, 503)["reason"] == (
                    "the store writer did not answer within 2 s (a long write, or a lock another process holds); "
                    "see the log"
                )
            finally:
                other._connection.execute("ROLLBACK")
        assert _health_becomes(running.api, 200)["status"] == "ok"
    except Exception as exc:  # say what became of hermesd (once in CI its port refused connections)
        failure = exc
    finally:
        alive = process.poll() is None
        if alive:
            process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=WAIT_S)
    if failure is not None:
        state = "was still running" if alive else f"had exited with {process.returncode}"
        raise AssertionError(f"{failure!r}; hermesd {state}; its log ends:\n{err[-4000:]}") from failure
    assert process.returncode == 0, err


# -- a read-only store -----------------------------------------------------------------------------------------


def _nobody() -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        return None


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory another user (``nobody``) can reach: pytest's own temporary root is private to root."""
    directory = Path(tempfile.mkdtemp(prefix="hermes-faults-"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory)


def _as_ordinary_user(home: Path) -> tuple[list[str], str]:
    """The command prefix that runs hermesd as a user file modes apply to, and that user's name."""
    if os.geteuid() != 0:
        return [], pwd.getpwuid(os.geteuid()).pw_name
    nobody = _nobody()
    if nobody is None or shutil.which("setpriv") is None:
        pytest.skip("running as root: needs setpriv(1) and a 'nobody' user to run hermesd as an ordinary user")
    for path in [home, *home.rglob("*")]:
        os.chown(path, nobody.pw_uid, nobody.pw_gid)
    prefix = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups"]
    return prefix, nobody.pw_name


def test_a_read_only_state_db_is_refused_at_start_naming_the_file_and_the_fix(shared_tmp: Path) -> None:
    home = _seed(shared_tmp / "home")
    os.chmod(shared_tmp, 0o755)
    prefix, user = _as_ordinary_user(home)
    database = home / "state.db"
    database.chmod(0o400)
    code, err = _refusal([*prefix, *_script("hermesd"), "--home", str(home)], home)
    assert code == 2, err
    assert err == (
        f"Error: {database} is read-only for user {user} (owner {user}, mode 0400); "
        f"make it writable with chmod 600, then start hermesd again\n"
    )
    assert not (home / "hermesd.sock").exists()
    assert not (home / "hermesd.pid").exists()


def test_a_read_only_home_directory_is_refused_at_start_naming_it_and_the_fix(shared_tmp: Path) -> None:
    home = _seed(shared_tmp / "home")
    os.chmod(shared_tmp, 0o755)
    prefix, user = _as_ordinary_user(home)
    home.chmod(0o500)
    try:
        code, err = _refusal([*prefix, *_script("hermesd"), "--home", str(home)], home)
    finally:
        home.chmod(0o700)
    assert code == 2, err
    assert err == (
        f"Error: {home} is read-only for user {user} (owner {user}, mode 0500); "
        f"make it writable with chmod 700, then start hermesd again\n"
    )


@pytest.fixture
def immutable(tmp_path: Path) -> Iterator[Path]:
    """A seeded home whose ``state.db`` has the immutable attribute, which refuses writes even to root."""
    if os.geteuid() != 0 or shutil.which("chattr") is None:
        pytest.skip("the immutable attribute needs root and chattr(1); the ordinary-user case covers file modes")
    home = _seed(tmp_path / "home")
    database = home / "state.db"
    made = subprocess.run(["chattr", "+i", str(database)], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"this filesystem has no immutable attribute: {made.stderr.strip()}")
    try:
        yield home
    finally:
        subprocess.run(["chattr", "-i", str(database)], check=True)


def test_an_immutable_state_db_is_refused_at_start_even_for_root(immutable: Path) -> None:
    home = immutable
    code, err = _refusal([*_script("hermesd"), "--home", str(home)], home)
    assert code == 2, err
    assert err == (
        f"Error: {home / 'state.db'} is read-only for user root (its mode allows writing, so it is likely "
        "immutable: see lsattr); clear that with chattr -i, then start hermesd again\n"
    )
    assert not (home / "hermesd.pid").exists()
