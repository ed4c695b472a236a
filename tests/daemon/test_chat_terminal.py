"""``hermesctl chat`` in a real terminal (a pty: line editing, history) and with a real ``hermesd`` that stops
mid-chat (the line is answered in-process, nothing is lost)."""

from __future__ import annotations

import io
import os
import re
import select
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from hermes_actors.cli.chat_input import HISTORY_NAME
from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.store import EndReason, Store
from tests.daemon.test_daemon import Daemon, start_daemon


class _Terminal:
    """``hermesctl chat`` on the slave side of a pty; reads what it shows until an expected text appears."""

    def __init__(self, home: Path) -> None:
        self.master, slave = os.openpty()
        env = {**os.environ, "TERM": "xterm", "INPUTRC": os.devnull, "HERMES_HOME": str(home)}
        command = [str(Path(sys.executable).parent / "hermesctl"), "chat", "--home", str(home)]
        self.process = subprocess.Popen(
            command, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True, close_fds=True
        )
        os.close(slave)
        self.shown = b""

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def wait_for(self, text: bytes, *, count: int = 1, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.shown.count(text) < count:
            left = deadline - time.monotonic()
            assert left > 0, f"{text!r} x{count} not shown; the terminal showed {self.shown!r}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.master, 4096)
                except OSError:  # the chat exited and closed its side
                    chunk = b""
                assert chunk, f"the chat ended before showing {text!r}: {self.shown!r}"
                self.shown += chunk

    def close(self) -> int:
        try:
            return self.process.wait(timeout=30)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(timeout=10)
            os.close(self.master)


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[_Terminal]:
    opened = _Terminal(tmp_path)
    try:
        yield opened
    finally:
        if opened.process.poll() is None:
            opened.process.kill()
            opened.process.wait(timeout=10)


@pytest.mark.slow
def test_arrow_keys_edit_and_recall_lines_kept_in_a_private_history_file(terminal: _Terminal, tmp_path: Path) -> None:
    # Each key is typed at a prompt (readline has the terminal then; typed ahead, the tty itself would echo).
    terminal.wait_for(b"you> ")
    terminal.type(b"first line\r")
    terminal.wait_for(b"you> ", count=2)
    terminal.type(b"\x1b[A\r")  # up arrow: the last line again
    terminal.wait_for(b"you> ", count=3)
    terminal.type(b"/help\r")
    terminal.wait_for(b"you> ", count=4)
    terminal.type(b"\x04")  # Ctrl-D leaves
    terminal.wait_for(b"resume it with")
    assert terminal.close() == 0
    assert b"^[[A" not in terminal.shown
    assert terminal.shown.count(b"echo: first line") == 2
    assert b"Commands:" in terminal.shown
    history = tmp_path / HISTORY_NAME
    assert stat.S_IMODE(history.stat().st_mode) == 0o600
    assert history.read_text().splitlines()[-3:] == ["first line", "first line", "/help"]
    session = re.findall(rb"--resume (\S+)", terminal.shown)[-1].decode()
    with Store.open(tmp_path / "state.db", readonly=True) as store:
        contents = [m.content for m in store.load_transcript(session)]
        record = store.get_session(session)
    assert contents == ["first line", "echo: first line"] * 2
    assert record.end_reason == EndReason.USER_EXIT.value


class _Script(io.RawIOBase):
    """Standard input that gives one line per read, running ``before[n]`` before line ``n`` (from 0)."""

    def __init__(self, lines: list[bytes], before: dict[int, Callable[[], object]]) -> None:
        self._lines = lines
        self._before = before
        self._next = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self._next >= len(self._lines) or not len(buffer):  # read(0) probes the stream: it reads nothing
            return 0
        action = self._before.get(self._next)
        if action is not None:
            action()
        line = self._lines[self._next]
        self._next += 1
        buffer[: len(line)] = line
        return len(line)


@pytest.mark.slow
def test_when_the_daemon_stops_mid_chat_the_line_is_answered_in_process_and_the_session_ends_user_exit(
    home: Path,
) -> None:
    process = start_daemon(home)
    try:
        daemon = Daemon(home, process)
        runner = CliRunner()
        # Through the daemon alone: closing the chat ends the session with user_exit there too.
        alone = runner.invoke(hermesctl, ["chat", "--home", str(home)], input="via the daemon\n")
        assert alone.exit_code == 0, alone.output
        first = re.findall(r"--resume (\S+)", alone.output)[-1]
        with Store.open(home / "state.db", readonly=True) as store:
            assert store.get_session(first).end_reason == EndReason.USER_EXIT.value
        stdin = _Script([b"one\n", b"two\n", b"three\n"], {1: daemon.stop})
        result = runner.invoke(hermesctl, ["chat", "--home", str(home)], input=io.BufferedReader(stdin))
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)
    assert result.exit_code == 0, result.output
    assert "hermesd stopped; carrying on in-process on the store, starting with your line" in result.stderr
    assert [line for line in result.stdout.splitlines() if line.startswith("echo:")] == [
        "echo: one",
        "echo: two",
        "echo: three",
    ]
    session = re.findall(r"--resume (\S+)", result.stdout)[-1]
    with Store.open(home / "state.db", readonly=True) as store:
        contents = [m.content for m in store.load_transcript(session)]
        record = store.get_session(session)
    assert contents == ["one", "echo: one", "two", "echo: two", "three", "echo: three"]
    assert record.end_reason == EndReason.USER_EXIT.value
