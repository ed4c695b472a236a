"""``hermesd`` and a turn waiting on the model: SIGTERM stops it within its drain (exit 0), the turn commits and sends
nothing, and the next start answers the message once, with one more model call; a SIGHUP during the call reloads
without losing or holding the turn.

A real ``hermesd`` subprocess with the webhook entry point (its replies POSTed to a receiver in this process) and an
OpenAI-compatible model in this process that holds each call until the test lets it answer (127.0.0.1 only).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_actors.messages import decode_inbound
from hermes_actors.store import Store
from hermes_actors.testing import poll_until
from tests.agents.chat_server import open_chat_server
from tests.daemon.test_api_background_restart import HeldModel
from tests.daemon.test_daemon import SECRET, Daemon, _signed, start_daemon
from tests.daemon.test_shutdown import SlowReceiver

DRAIN_S = 1.0
MARGIN_S = 2.0  # stopping the entry points and the actors, the store's checkpoint
WAIT_S = 30.0


@pytest.fixture
def model() -> Iterator[HeldModel]:
    with open_chat_server() as server:
        yield HeldModel(server)


@pytest.fixture
def receiver() -> Iterator[SlowReceiver]:
    with SlowReceiver() as running:
        running.release.set()  # the platform answers at once
        yield running


def _config(model: HeldModel, receiver: SlowReceiver, *, busy: str = "queue") -> str:
    return f"""
daemon:
  drain_timeout_s: {DRAIN_S}
agent:
  base_url: {model.server.base_url}
  model: test-model
  max_retries: 0
  timeout_s: 120
runtime:
  auto_titles: false
busy:
  mode: {busy}
platforms:
  webhook:
    port: 0
    routes:
      default:
        secret: {SECRET}
        callback_url: {receiver.url}
"""


@pytest.fixture
def home(tmp_path: Path, model: HeldModel, receiver: SlowReceiver, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    root = tmp_path / "h"
    root.mkdir()
    (root / "config.yaml").write_text(_config(model, receiver))
    return root


def _stored(home: Path) -> tuple[list[tuple[str, str]], list[str], int]:
    """(role and text of every stored message, the texts of the pending inbox rows, the outbox's row count)."""
    with Store.open(home / "state.db", readonly=True) as store:
        messages = [(str(m.role), m.content or "") for s in store.list_sessions() for m in store.load_transcript(s.id)]
        pending = [decode_inbound(row.payload).text for row in store.inbox.pending()]
        outbox = len(store._connection.execute("SELECT id FROM outbox").fetchall())
    return messages, pending, outbox


def _send(daemon: Daemon, text: str, webhook_id: str) -> None:
    payload = {"text": text, "chat_id": "c1", "user_id": "u1"}
    assert _signed(daemon.webhook + "/webhooks/default", payload, webhook_id) == 202


def _stop(daemon: Daemon) -> tuple[float, str]:
    """SIGTERM; return how long ``hermesd`` took to exit and its stderr (it must exit 0)."""
    started = time.monotonic()
    try:
        code, _, err = daemon.stop(timeout=WAIT_S)
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.communicate(timeout=10)
    assert code == 0, err
    return time.monotonic() - started, err


@pytest.mark.slow
def test_sigterm_during_a_model_call_exits_0_in_time_and_the_next_start_answers_the_message_once(
    home: Path, model: HeldModel, receiver: SlowReceiver
) -> None:
    first = Daemon(home, start_daemon(home))
    try:
        _send(first, "long job", "msg_1")
        poll_until(lambda: model.calls("long job") == 1, WAIT_S, what="the model call")
    finally:
        elapsed, err = _stop(first)
    assert elapsed < DRAIN_S + MARGIN_S, f"hermesd took {elapsed:.1f} s to stop with a {DRAIN_S} s drain: {err}"
    assert "agent calls given up" in err
    assert _stored(home) == ([], ["long job"], 0)  # nothing of the turn: no partial answer, no reply
    assert receiver.replies == []

    second = Daemon(home, start_daemon(home))
    try:
        poll_until(lambda: model.calls("long job") == 2, WAIT_S, what="the replayed turn's model call")
        model.gate("long job").set()
        (reply,) = receiver.wait_for(1)
        poll_until(lambda: not _stored(home)[1], WAIT_S, what="the inbox row answered")
    finally:
        model.over.set()  # a call still held (the test failed) must not hold the stop
        _stop(second)
    assert reply["text"] == "done: long job"
    assert [r["text"] for r in receiver.replies] == ["done: long job"]
    assert model.calls("long job") == 2  # the call cut by the stop, and the one after the restart
    assert _stored(home) == ([("user", "long job"), ("assistant", "done: long job")], [], 1)


def _second_route_listed(daemon: Daemon) -> bool:
    lines = [line for p in daemon.wait_ready().platforms for line in p.detail]
    return any("'second'" in line for line in lines)


@pytest.mark.slow
def test_sighup_during_a_model_call_reloads_and_the_turn_answers_once(
    home: Path, model: HeldModel, receiver: SlowReceiver
) -> None:
    daemon = Daemon(home, start_daemon(home))
    try:
        _send(daemon, "long job", "msg_1")
        poll_until(lambda: model.calls("long job") == 1, WAIT_S, what="the model call")
        # A new busy policy (applied in place) and a second webhook route (the webhook adapter restarts).
        (home / "config.yaml").write_text(
            _config(model, receiver, busy="reject") + f"      second:\n        secret: {SECRET}\n"
        )
        daemon.process.send_signal(signal.SIGHUP)
        poll_until(lambda: _second_route_listed(daemon), WAIT_S, what="the reloaded webhook routes")
        model.gate("long job").set()
        (reply,) = receiver.wait_for(1)
        poll_until(lambda: not _stored(home)[1], WAIT_S, what="the inbox row answered")
    finally:
        model.over.set()
        _, err = _stop(daemon)
    assert "configuration reloaded" in err
    assert reply["text"] == "done: long job"
    assert [r["text"] for r in receiver.replies] == ["done: long job"]
    assert model.calls("long job") == 1
    assert _stored(home) == ([("user", "long job"), ("assistant", "done: long job")], [], 1)
