"""Exactly one turn per message across processes: a second process never replays a turn its owner is running.

Real processes on one home: ``hermesctl chat`` without a daemon (in-process turns under the session lease) and
``hermesd``, against a scripted OpenAI-compatible model on 127.0.0.1 that records every request it gets.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_actors.store import Store
from hermes_actors.testing import poll_until
from tests.agents.chat_server import ChatServer, Scripted, completion, open_chat_server
from tests.daemon.test_daemon import CONFIG, Daemon, start_daemon
from tests.runtime.test_leases import start_holder

pytestmark = pytest.mark.slow

SLOW_TURN_S = 3.0  # how long the model takes over the in-flight message: long enough to start another process
# (where the test cannot see the other process at work; elsewhere the model holds the answer until it has been)


def _config(model: ChatServer) -> str:
    """The daemon tests' configuration (ports 0, a webhook route), with the scripted model as the agent."""
    return f"""
agent:
  base_url: {model.base_url}
  model: test-model
  max_retries: 0
runtime:
  auto_titles: false
{CONFIG}"""


def _hermesctl() -> list[str]:
    installed = Path(sys.executable).parent / "hermesctl"
    return [str(installed)] if installed.exists() else [sys.executable, "-m", "hermes_actors.cli.hermesctl"]


def _chat(home: Path, *args: str, stdin: str) -> subprocess.Popen[str]:
    env = {**os.environ, "HERMES_HOME": str(home), "OPENAI_API_KEY": "unused"}
    lines = home / f"stdin-{time.monotonic_ns()}.txt"
    lines.write_text(stdin)
    with lines.open() as piped:
        return subprocess.Popen(
            [*_hermesctl(), "chat", "--home", str(home), *args],
            stdin=piped,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )


def _finish(process: subprocess.Popen[str], timeout: float = 60.0) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def _wait_for_request(model: ChatServer, text: str, timeout: float = 30.0) -> None:
    poll_until(lambda: _asked(model, text), timeout, what=lambda: f"the model was never asked {text!r}")


def _asked(model: ChatServer, text: str) -> int:
    """How many model calls had ``text`` as their newest user message."""
    count = 0
    for body in model.completion_bodies:
        users = [m["content"] for m in body["messages"] if m["role"] == "user"]
        count += bool(users) and users[-1] == text
    return count


@pytest.fixture
def model() -> Iterator[ChatServer]:
    with open_chat_server() as server:
        yield server


@pytest.fixture
def home(tmp_path: Path, model: ChatServer) -> Path:
    root = tmp_path / "home"
    root.mkdir()
    (root / "config.yaml").write_text(_config(model))
    return root


def _session_with_history(home: Path, model: ChatServer) -> str:
    model.script(completion("hello back"))
    code, out, err = _finish(_chat(home, stdin="hello\n"))
    assert code == 0, err
    found = re.search(r"resume it with: hermesctl chat --resume (\S+)", out + err)
    assert found is not None, out + err
    return found[1]


def _script_slow_answer(model: ChatServer, hold: threading.Event | None = None) -> None:
    """The next model call answers once ``hold`` is set (without one: after SLOW_TURN_S); any later (duplicate)
    call gets a quick spare answer."""
    answer = completion("the slow answer")
    delay_s = SLOW_TURN_S if hold is None else 0.0
    model.script(Scripted(status=answer.status, body=answer.body, delay_s=delay_s, hold=hold))
    model.script(*(completion(f"spare {n}") for n in range(4)))


def _users(home: Path, session_id: str) -> list[str | None]:
    with Store.open(home / "state.db", readonly=True) as store:
        return [m.content for m in store.load_transcript(session_id) if m.role == "user"]


def test_a_second_standalone_chat_does_not_replay_the_first_ones_turn(home: Path, model: ChatServer) -> None:
    session = _session_with_history(home, model)
    hold = threading.Event()
    _script_slow_answer(model, hold)
    first = _chat(home, "--resume", session, stdin="question one\n")
    _wait_for_request(model, "question one")
    second = _chat(home, "--resume", session, stdin="")  # starts, recovers, leaves
    code, _, err = _finish(second)
    hold.set()  # the first chat's turn ran through the second one's whole life
    assert code == 0, err
    code, out, err = _finish(first)
    assert code == 0, err
    assert "the slow answer" in out
    assert _users(home, session) == ["hello", "question one"]
    assert _asked(model, "question one") == 1


def test_a_daemon_started_mid_turn_leaves_the_turn_to_its_owner(home: Path, model: ChatServer) -> None:
    session = _session_with_history(home, model)
    _script_slow_answer(model)
    first = _chat(home, "--resume", session, stdin="question one\n")
    _wait_for_request(model, "question one")
    process = start_daemon(home)
    try:
        daemon = Daemon(home, process)
        code, out, err = _finish(first)
        assert code == 0, err
        assert "the slow answer" in out
        stopped, _, daemon_err = daemon.stop()
        assert stopped == 0, daemon_err
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)
    assert _users(home, session) == ["hello", "question one"]
    assert _asked(model, "question one") == 1


def _all_users(home: Path) -> list[str | None]:
    """The user messages of every session of the home."""
    with Store.open(home / "state.db", readonly=True) as store:
        sessions = store.list_sessions(limit=1000)
        return [m.content for s in sessions for m in store.load_transcript(s.id) if m.role == "user"]


def _pending(home: Path) -> int:
    with Store.open(home / "state.db", readonly=True) as store:
        return len(store.inbox.pending())


def test_a_resumed_chat_whose_session_ends_while_its_line_waits_for_the_lease_never_asks_the_model(
    home: Path, model: ChatServer
) -> None:
    session = _session_with_history(home, model)
    holder = start_holder(home / "state.db", session)
    try:
        assert holder.stdout is not None
        assert holder.stdin is not None
        assert holder.stdout.readline().startswith("HELD ")
        waiting = _chat(home, "--resume", session, stdin="from B\n")
        poll_until(lambda: _pending(home), 30, what="the chat's line in the inbox")
        holder.stdin.write("end\n")  # the holder's chat closed: the session ends with user_exit
        holder.stdin.flush()
        assert holder.stdout.readline() == "RELEASED\n"
        code, _, err = _finish(waiting)
    finally:
        holder.kill()
        holder.communicate(timeout=10)
    assert code == 1, err
    assert f"Session {session} ended (user_exit) before your message could run" in err
    assert f"hermesctl chat --resume {session}" in err
    assert _asked(model, "from B") == 0
    assert "from B" not in _all_users(home)
    assert _pending(home) == 0  # answered, so no later process replays it into a session its chat never sees


def test_a_line_waiting_while_another_chat_finishes_and_closes_the_session_asks_the_model_at_most_once(
    home: Path, model: ChatServer
) -> None:
    session = _session_with_history(home, model)
    hold = threading.Event()
    _script_slow_answer(model, hold)
    first = _chat(home, "--resume", session, stdin="question one\n")  # closes the session once answered
    _wait_for_request(model, "question one")
    second = _chat(home, "--resume", session, stdin="from B\n")
    try:  # the first chat's turn ends only once the second one's line waits in the inbox beside its own
        poll_until(lambda: _pending(home) == 2, 30, what="the second chat's line in the inbox")
    finally:
        hold.set()
    code, out, err = _finish(first)
    assert code == 0, err
    assert "the slow answer" in out
    code, out, err = _finish(second)
    # Whichever took the lease first after the first chat's turn: its close (the line is told the session ended
    # and never reaches the model) or the waiting line (it runs once, and the close leaves the session to it).
    asked = _asked(model, "from B")
    assert asked <= 1, f"the model was asked {asked} times for one line"
    stored = _all_users(home).count("from B")
    assert stored == asked
    if asked:
        assert code == 0, err
    else:
        assert code == 1, err
        assert f"Session {session} ended (user_exit) before your message could run" in err
    assert _asked(model, "question one") == 1
    assert _pending(home) == 0
