"""``hermesctl chat --resume ID`` whose session another process ends before a line runs: the chat says so and offers
to reopen it; the model is asked each line once, and only in an open session.

In-process chats (no daemon) on a home whose agent is a scripted OpenAI-compatible model on 127.0.0.1; the session's
lease is held by a second process (:mod:`tests.runtime.lease_holder`) that ends the session while the line waits.
"""

from __future__ import annotations

import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hermes_actors.cli import ctl_chat
from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.store import EndReason, Store
from hermes_actors.testing import poll_until
from tests.agents.chat_server import ChatServer, Scripted, completion, open_chat_server
from tests.runtime.test_leases import start_holder


@pytest.fixture
def model() -> Iterator[ChatServer]:
    with open_chat_server() as server:

        def answer(body: Any) -> Scripted:
            users = [m["content"] for m in body["messages"] if m["role"] == "user"]
            return completion(f"answer to {users[-1]}")

        server.respond_with(answer)
        yield server


@pytest.fixture
def home(tmp_path: Path, model: ChatServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    config = (
        f"agent:\n  base_url: {model.base_url}\n  model: test-model\n  max_retries: 0\nruntime:\n  auto_titles: false\n"
    )
    (tmp_path / "config.yaml").write_text(config)
    return tmp_path


def _asked(model: ChatServer, text: str) -> int:
    """How many model calls had ``text`` as their newest user message."""
    count = 0
    for body in model.completion_bodies:
        users = [m["content"] for m in body["messages"] if m["role"] == "user"]
        count += bool(users) and users[-1] == text
    return count


def _session(home: Path) -> str:
    result = CliRunner().invoke(hermesctl, ["chat", "--home", str(home)], input="hello\n")
    assert result.exit_code == 0, result.output
    found = re.search(r"resume it with: hermesctl chat --resume (\S+)", result.output)
    assert found is not None, result.output
    return found[1]


def _end_once_the_line_waits(home: Path, holder: subprocess.Popen[str]) -> threading.Thread:
    """In the background: once the chat's line is in the inbox (its turn waits for the lease), the holder ends the
    session with ``user_exit`` and releases the lease."""

    def pending() -> bool:
        with Store.open(home / "state.db", readonly=True) as store:
            return bool(store.inbox.pending())

    def end() -> None:
        poll_until(pending, 20, what="the chat's line in the inbox")
        assert holder.stdin is not None
        holder.stdin.write("end\n")
        holder.stdin.flush()

    thread = threading.Thread(target=end, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        process.kill()
        process.communicate(timeout=10)


def _held(home: Path, session: str, holders: list[subprocess.Popen[str]]) -> subprocess.Popen[str]:
    holder = start_holder(home / "state.db", session)
    holders.append(holder)
    assert holder.stdout is not None
    assert holder.stdout.readline().startswith("HELD ")
    return holder


@pytest.mark.slow
def test_a_resumed_chat_whose_session_ended_before_its_line_ran_offers_to_reopen_it_and_sends_the_line_once(
    home: Path, model: ChatServer, holders: list[subprocess.Popen[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    session = _session(home)
    holder = _held(home, session, holders)
    monkeypatch.setattr(ctl_chat, "_interactive", lambda: True)
    ender = _end_once_the_line_waits(home, holder)
    result = CliRunner().invoke(hermesctl, ["chat", "--home", str(home), "-r", session], input="still there?\ny\n")
    ender.join(timeout=5)
    assert result.exit_code == 0, result.output
    assert f"Session {session} ended (user_exit) before your message could run" in result.output
    assert f"Reopen session {session} and send your line there?" in result.output
    assert "answer to still there?" in result.output
    assert _asked(model, "still there?") == 1  # after the reopening only: never while the session had ended
    with Store.open(home / "state.db", readonly=True) as store:
        users = [m.content for m in store.load_transcript(session) if m.role == "user"]
        assert users == ["hello", "still there?"]
        assert store.get_session(session).end_reason == EndReason.USER_EXIT.value  # the chat closed it again
        assert store.inbox.pending() == []


@pytest.mark.slow
def test_declining_to_reopen_the_ended_session_starts_a_new_conversation_with_the_next_line(
    home: Path, model: ChatServer, holders: list[subprocess.Popen[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    session = _session(home)
    holder = _held(home, session, holders)
    monkeypatch.setattr(ctl_chat, "_interactive", lambda: True)
    ender = _end_once_the_line_waits(home, holder)
    result = CliRunner().invoke(
        hermesctl, ["chat", "--home", str(home), "-r", session], input="still there?\nn\nsomething new\n"
    )
    ender.join(timeout=5)
    assert result.exit_code == 0, result.output
    assert "your next line starts a new conversation" in result.output
    assert "answer to something new" in result.output
    assert _asked(model, "still there?") == 0
    assert _asked(model, "something new") == 1
    found = re.search(r"resume it with: hermesctl chat --resume (\S+)", result.output)
    assert found is not None
    assert found[1] != session
    with Store.open(home / "state.db", readonly=True) as store:
        assert [m.content for m in store.load_transcript(session) if m.role == "user"] == ["hello"]
        assert [m.content for m in store.load_transcript(found[1]) if m.role == "user"] == ["something new"]
