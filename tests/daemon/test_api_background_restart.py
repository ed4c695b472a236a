"""A ``background: true`` response survives a restart of ``hermesd``: stopped (SIGTERM, or kill -9) while its turn
waits on the model and a second one waits behind it, the restarted daemon runs both from their inbox rows, the
client polls them to ``completed`` with ``responses.retrieve`` and picks a stream up again with ``starting_after``.
The model is called once per attempt that ran.

A real ``hermesd`` subprocess whose agent calls a scripted OpenAI-compatible model in this process (127.0.0.1); the
model holds each call until the test lets it answer.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.responses import Response

from hermes_actors.testing import poll_until
from tests.agents.chat_server import ChatServer, Scripted, completion, open_chat_server
from tests.daemon.test_daemon import SECRET, Daemon, start_daemon


class HeldModel:
    """The scripted model: every call is counted by its newest user text and answered only once its text's gate
    opens (a call of the first attempt, whose daemon is gone, is never answered)."""

    def __init__(self, server: ChatServer) -> None:
        self.server = server
        self.gates: dict[str, threading.Event] = {}
        self.over = threading.Event()  # the test is over: every held call fails at once
        self._lock = threading.Lock()
        server.respond_with(self._answer)

    def gate(self, text: str) -> threading.Event:
        with self._lock:
            return self.gates.setdefault(text, threading.Event())

    def calls(self, text: str) -> int:
        """How many model calls had ``text`` as their newest user message."""
        count = 0
        for body in self.server.completion_bodies:
            users = [m["content"] for m in body["messages"] if m["role"] == "user"]
            count += bool(users) and users[-1] == text
        return count

    def _answer(self, body: Any) -> Scripted:
        users = [m["content"] for m in body["messages"] if m["role"] == "user"]
        text = users[-1] if users else ""
        gate = self.gate(text)
        while not gate.wait(0.1):
            if self.over.is_set() or self.server.released.is_set():
                return Scripted(status=503, body={"error": {"message": "the test is over"}})
        answer = f"done: {text}"
        return Scripted(body=completion(answer).body, pieces=("done: ", text))


@pytest.fixture
def model() -> Iterator[HeldModel]:
    with open_chat_server() as server:
        yield HeldModel(server)


@pytest.fixture
def home(tmp_path: Path, model: HeldModel, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    root = tmp_path / "h"
    root.mkdir()
    (root / "config.yaml").write_text(
        f"""
daemon:
  drain_timeout_s: 1
agent:
  base_url: {model.server.base_url}
  model: test-model
  max_retries: 0
  timeout_s: 120
runtime:
  auto_titles: false
platforms:
  api_server:
    port: 0
  webhook:
    port: 0
    routes:
      default:
        secret: {SECRET}
"""
    )
    return root


def _text(content: list[Any]) -> str:
    """The text of a listed message's content (one text part)."""
    (part,) = content
    return str(part.text)


def _client(daemon: Daemon) -> openai.OpenAI:
    return openai.OpenAI(base_url=daemon.api + "/v1", api_key="unused", max_retries=0, timeout=20)


def _status(daemon: Daemon, response_id: str, status: str) -> Response:
    found: list[Response] = []

    def reached() -> bool:
        with _client(daemon) as client:
            found.append(client.responses.retrieve(response_id))
        return found[-1].status == status

    poll_until(reached, 30, what=f"response {response_id} {status}")
    return found[-1]


def _stop(daemon: Daemon, how: signal.Signals) -> None:
    daemon.process.send_signal(how)
    try:
        _, err = daemon.process.communicate(timeout=15)  # the drain is 1 s
    except subprocess.TimeoutExpired:
        daemon.process.kill()
        daemon.process.communicate(timeout=10)
        raise AssertionError(f"hermesd did not stop within 15 s of {how.name}") from None
    if how is signal.SIGTERM:
        assert daemon.process.returncode == 0, err


@pytest.mark.slow
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
def test_background_responses_survive_a_restart_and_their_stream_resumes(
    home: Path, model: HeldModel, how: signal.Signals
) -> None:
    first = Daemon(home, start_daemon(home))
    try:
        with _client(first) as client:
            conversation = client.conversations.create()
            running = client.responses.create(
                model="hermes-agent", input="long job", background=True, conversation=conversation.id
            )
            waiting = client.responses.create(
                model="hermes-agent", input="next job", background=True, conversation=conversation.id
            )
        assert (running.status, waiting.status) == ("queued", "queued")
        poll_until(lambda: model.calls("long job") == 1, 30, what="the first turn's model call")
        _status(first, running.id, "in_progress")
        assert _status(first, waiting.id, "queued").status == "queued"  # behind it, in the same session
    finally:
        _stop(first, how)
    assert model.calls("next job") == 0

    second = Daemon(home, start_daemon(home))
    try:
        poll_until(lambda: model.calls("long job") == 2, 30, what="the replayed turn's model call")
        _status(second, running.id, "in_progress")
        with _client(second) as client:
            seen = []
            with client.responses.retrieve(running.id, stream=True) as events:
                for event in events:  # from the start, until the turn is running
                    seen.append(event)
                    if event.type == "response.in_progress":
                        break
            resumed = client.responses.retrieve(running.id, stream=True, starting_after=seen[-1].sequence_number)
            model.gate("long job").set()
            rest = list(resumed)
        assert rest[0].sequence_number == seen[-1].sequence_number + 1  # picked up after what was seen
        assert [e.sequence_number for e in rest] == list(range(rest[0].sequence_number, rest[-1].sequence_number + 1))
        assert rest[-1].type == "response.completed"
        deltas = "".join(e.delta for e in rest if e.type == "response.output_text.delta")
        assert deltas == "done: long job"
        assert _status(second, running.id, "completed").output_text == "done: long job"
        model.gate("next job").set()
        assert _status(second, waiting.id, "completed").output_text == "done: next job"
        with _client(second) as client:
            items = list(client.conversations.items.list(conversation.id, order="asc"))
        texts = [(item.role, _text(item.content)) for item in items if item.type == "message"]
        assert texts == [
            ("user", "long job"),
            ("assistant", "done: long job"),
            ("user", "next job"),
            ("assistant", "done: next job"),
        ]
    finally:
        model.over.set()  # a call still held (the test failed) must not hold the daemon's stop
        code, _, err = second.stop()
    assert code == 0, err
    assert model.calls("long job") == 2  # the attempt cut short by the stop, and the one after the restart
    assert model.calls("next job") == 1  # it never began before the stop
