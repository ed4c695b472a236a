"""``hermesctl chat`` in a real terminal (a pty that is its controlling terminal, so Ctrl-C is a real SIGINT) with a
real OpenAI-compatible model server on loopback: the reply streams, tool progress shows on one line, and Ctrl-C or
``/stop`` during a turn stops that turn while the chat goes on; through ``hermesd``'s control socket and in-process
alike."""

from __future__ import annotations

import fcntl
import io
import os
import re
import signal
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_actors.cli.chat_turn import TurnView
from hermes_actors.daemon.control import ChatReply, ChatText, ChatTool
from hermes_actors.store import Role, Store
from tests.agents.chat_server import ChatServer, Scripted, completion, open_chat_server
from tests.daemon.test_chat_terminal import _Terminal
from tests.daemon.test_daemon import Daemon, start_daemon


def _own_terminal() -> None:
    """In the child: make the pty on stdin its controlling terminal, so Ctrl-C there sends it SIGINT, and take SIGINT
    as a terminal's shell would start the chat: not ignored. A suite started in the background (``cmd &`` in a
    script) ignores SIGINT, and a child inherits that: Python then never raises KeyboardInterrupt, and Ctrl-C does
    nothing, as it should for a program started that way."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class _ControllingTerminal(_Terminal):
    """:class:`_Terminal` whose pty is the chat's controlling terminal."""

    def __init__(self, home: Path) -> None:
        self.master, slave = os.openpty()
        env = {**os.environ, "TERM": "xterm", "INPUTRC": os.devnull, "HERMES_HOME": str(home)}
        command = [str(Path(sys.executable).parent / "hermesctl"), "chat", "--home", str(home)]
        self.process = subprocess.Popen(
            command,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,
            preexec_fn=_own_terminal,
            close_fds=True,
        )
        os.close(slave)
        self.shown = b""


def _config(server: ChatServer) -> str:
    return f"""
daemon:
  drain_timeout_s: 10
agent:
  base_url: {server.base_url}
  model: test-model
  max_retries: 0
platforms:
  api_server:
    port: 0
"""


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with open_chat_server() as opened:
        yield opened


@pytest.fixture(params=["hermesd", "in-process"])
def chat_home(request: pytest.FixtureRequest, tmp_path: Path, server: ChatServer) -> Iterator[Path]:
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.yaml").write_text(_config(server))
    if request.param == "in-process":
        yield home
        return
    process = start_daemon(home)
    try:
        Daemon(home, process)
        yield home
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=10)


def _slow(*pieces: str, gap_s: float, hold: threading.Event | None = None, hold_before: int | None = None) -> Scripted:
    answer = completion("".join(pieces))
    return Scripted(body=answer.body, pieces=pieces, gap_s=gap_s, hold=hold, hold_before=hold_before)


def _last_user_text(body: Any) -> str:
    """The last user message of a chat-completions request (a turn's line; other calls are titles)."""
    users = [m for m in body["messages"] if m["role"] == "user"]
    content = users[-1]["content"] if users else ""
    return content if isinstance(content, str) else ""


@pytest.mark.slow
def test_the_reply_streams_and_ctrl_c_or_slash_stop_during_a_turn_stops_it_while_the_chat_goes_on(
    chat_home: Path, server: ChatServer
) -> None:
    rest = threading.Event()  # the model writes "beta gamma" only once the test has seen "alpha" alone
    answers = {
        "hello": _slow("alpha ", "beta ", "gamma", gap_s=0.0, hold=rest, hold_before=1),
        "long one": _slow("first ", *["more "] * 40, gap_s=0.5),
        "again": completion("fine"),
        "another long one": _slow("second ", *["more "] * 40, gap_s=0.5),
    }
    server.respond_with(lambda body: answers.get(_last_user_text(body), completion("A title")))
    terminal = _ControllingTerminal(chat_home)
    try:
        terminal.wait_for(b"you> ")
        terminal.type(b"hello\r")
        try:
            terminal.wait_for(b"alpha")
            assert b"beta" not in terminal.shown  # shown while the model still writes (it waits for the test)
        finally:
            rest.set()
        terminal.wait_for(b"alpha beta gamma\r\n")
        terminal.wait_for(b"you> ", count=2)
        terminal.type(b"long one\r")
        terminal.wait_for(b"first")
        terminal.type(b"\x03")  # Ctrl-C: stops the turn, not the chat
        terminal.wait_for(b"turn stopped")
        terminal.wait_for(b"you> ", count=3)
        terminal.type(b"again\r")
        terminal.wait_for(b"fine")
        terminal.wait_for(b"you> ", count=4)
        terminal.type(b"another long one\r")
        terminal.wait_for(b"second")
        terminal.type(b"/stop\r")  # typed while the turn runs
        terminal.wait_for(b"turn stopped", count=2)
        terminal.wait_for(b"you> ", count=5)
        terminal.type(b"\x04")
        terminal.wait_for(b"resume it with")
        assert terminal.close() == 0
    finally:
        if terminal.process.poll() is None:
            terminal.process.kill()
            terminal.process.wait(timeout=10)
    assert b"Aborted" not in terminal.shown
    session = re.findall(rb"--resume (\S+)", terminal.shown)[-1].decode()
    with Store.open(chat_home / "state.db", readonly=True) as store:
        stored = [(m.role, m.content) for m in store.load_transcript(session)]
    assert stored == [
        (Role.USER, "hello"),
        (Role.ASSISTANT, "alpha beta gamma"),
        (Role.USER, "long one"),
        (Role.USER, "again"),
        (Role.ASSISTANT, "fine"),
        (Role.USER, "another long one"),
    ]


@pytest.mark.slow
def test_ctrl_c_at_the_prompt_still_leaves_the_chat(chat_home: Path) -> None:
    terminal = _ControllingTerminal(chat_home)
    try:
        terminal.wait_for(b"you> ")
        # readline sees a signal only while it waits for a key: one that lands while it still sets up the prompt is
        # taken at the next key. A person's Ctrl-C at a waiting prompt is seen at once; the test may be early, so
        # it presses again until the chat reacts (each press is a real SIGINT from the terminal).
        deadline = time.monotonic() + 30.0  # a busy machine (the other test worker's load) delays the prompt's wait
        while time.monotonic() < deadline:
            terminal.type(b"\x03")
            try:
                terminal.wait_for(b"Aborted!", timeout=1.0)
            except AssertionError:
                continue
            break
        assert b"Aborted!" in terminal.shown, terminal.shown
        assert terminal.close() == 1
    finally:
        if terminal.process.poll() is None:
            terminal.process.kill()
            terminal.process.wait(timeout=10)


def test_tool_progress_stays_on_one_status_line_that_text_clears() -> None:
    out = io.StringIO()
    view = TurnView(out)
    view.show(ChatText(delta="Let me look. "))
    view.show(ChatTool(name="search", call_id="c1", status="running"))
    view.show(ChatTool(name="search", call_id="c1", status="completed"))
    view.show(ChatTool(name="fetch", call_id="c2", status="running"))
    view.show(ChatText(delta="Found it."))
    view.finish(ChatReply(session_id="s", text="Let me look. Found it."))
    assert out.getvalue() == ("Let me look. \n\r\x1b[K⚙ search …\r\x1b[K⚙ search ✓\r\x1b[K⚙ fetch …\r\x1b[KFound it.\n")


def test_a_reply_that_did_not_stream_is_shown_whole_and_a_stopped_one_says_so() -> None:
    out = io.StringIO()
    TurnView(out).finish(ChatReply(session_id="s", text="Session title set."))
    stopped = TurnView(out)
    stopped.show(ChatText(delta="partial"))
    stopped.finish(ChatReply(session_id="s", text="(turn stopped)", stopped=True))
    assert out.getvalue() == ("Session title set.\npartial\n⏹ turn stopped (your message is kept, without an answer)\n")
