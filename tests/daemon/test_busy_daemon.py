"""Busy policies through the real ``hermesd``: every policy at once, one chat each (webhook routes of four chat types,
and ``/v1/runs`` of the API), across a SIGHUP and a SIGTERM, and across a ``kill -9``, each followed by a restart.

In each chat, ``<policy>-1`` runs with its model call held by the scripted endpoint (:class:`GatedModel`), then
``<policy>-2`` and ``<policy>-3`` arrive. The daemon stops with the calls still held, the calls are let through, and a
new daemon answers what was left. Each test checks that no message was lost (every inbox row answered, every text
once in the transcript), how many model calls each chat made, and each chat's replies in the order they were
committed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO, cast

import pytest

from hermes_actors.daemon.control import connect
from hermes_actors.messages import OutboundError, decode_outbound
from hermes_actors.runtime.busy import busy_text
from hermes_actors.store import Store
from hermes_actors.testing import poll_until
from tests.agents.chat_server import ChatServer, open_chat_server
from tests.daemon.test_daemon import SECRET, Daemon, _script, _signed
from tests.runtime.busy_model import GatedModel, answer_of

pytestmark = pytest.mark.slow

ROUTES = {"queue": "dm", "collect": "group", "interrupt": "channel", "steer": "thread"}  # webhook route: chat type
TAGS = (*ROUTES, "reject")  # reject: the API's runs
BUSY = busy_text(5)


def _config(model: str, retry_after_s: int = 5) -> str:
    routes = "".join(
        f"      {tag}:\n        secret: {SECRET}\n        chat_type: {chat_type}\n" for tag, chat_type in ROUTES.items()
    )
    chat_types = ", ".join(f"{chat_type}: {{mode: {tag}}}" for tag, chat_type in ROUTES.items())
    return f"""
agent:
  base_url: {model}
  model: test-model
  max_retries: 0
runtime:
  auto_titles: false
daemon:
  drain_timeout_s: 0.2
busy:
  retry_after_s: {retry_after_s}
  platforms:
    webhook: {{chat_types: {{{chat_types}}}}}
    api_server: {{mode: reject}}
platforms:
  api_server:
    port: 0
  webhook:
    port: 0
    routes:
{routes}"""


class Hermesd:
    """``hermesd`` on ``home`` with its log in a file (read while it runs)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.log_path = home / f"hermesd-{time.monotonic_ns()}.log"
        self._log: IO[str] = self.log_path.open("w")
        env = {**os.environ, "HERMES_HOME": str(home), "OPENAI_API_KEY": "unused"}
        env.pop("HERMES_API_KEY", None)
        self.process = subprocess.Popen(
            [*_script("hermesd"), "--home", str(home)], stdout=subprocess.DEVNULL, stderr=self._log, text=True, env=env
        )
        daemon = Daemon.__new__(Daemon)
        daemon.home, daemon.process = home, self.process
        status = daemon.wait_ready()
        daemon.status = status
        self.api, self.webhook = daemon.url("api_server"), daemon.url("webhook")

    def log(self) -> str:
        return self.log_path.read_text()

    def barrier(self) -> int:
        """Ask for the daemon's status: its supervisor has handled every message accepted before; the number of
        messages queued."""
        client = connect(self.home / "hermesd.sock")
        assert client is not None
        with client:
            return client.status().queued_messages

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)
        self._log.close()


@pytest.fixture
def model() -> Iterator[tuple[ChatServer, GatedModel]]:
    with open_chat_server() as server:
        yield server, GatedModel(server)


@pytest.fixture
def daemons() -> Iterator[list[Hermesd]]:
    started: list[Hermesd] = []
    yield started
    for daemon in started:
        daemon.close()


def _send(daemon: Hermesd, tag: str, n: int) -> None:
    text = f"{tag}-{n}"
    if tag == "reject":
        body = json.dumps({"input": text, "session_id": f"c-{tag}"}).encode()
        request = urllib.request.Request(
            daemon.api + "/v1/runs", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 202
        return
    payload = {"text": text, "chat_id": f"c-{tag}", "user_id": "u1"}
    assert _signed(f"{daemon.webhook}/webhooks/{tag}", payload, f"msg_{tag}_{n}") == 202


def _busy_everywhere(daemon: Hermesd, gate: GatedModel) -> None:
    """In every chat: the first message's model call is held, then two more messages arrive (an interrupting one
    waits until the turn it started has its call, so the next one interrupts that turn)."""
    for tag in TAGS:
        _send(daemon, tag, 1)
    for tag in TAGS:
        gate.wait_calls(tag, 1)
    for n in (2, 3):
        for tag in TAGS:
            _send(daemon, tag, n)
        gate.wait_calls("interrupt", n)
    assert daemon.barrier() == 4  # queue and collect hold two each; steer's went into the running turn


def _replies(home: Path) -> dict[str, list[str]]:
    """Each chat's replies, in the order they were committed."""
    found: dict[str, list[str]] = {tag: [] for tag in TAGS}
    with Store.open(home / "state.db", readonly=True) as store:
        rows = store._connection.execute("SELECT payload FROM outbox ORDER BY id").fetchall()
    for (payload,) in rows:
        message = decode_outbound(cast(bytes, payload))
        tag = (message.chat_id or "").removeprefix("c-")
        if tag in found:
            assert message.error in (None, OutboundError.SESSION_BUSY)
            found[tag].append(message.text)
    return found


def _pending(home: Path) -> int:
    with Store.open(home / "state.db", readonly=True) as store:
        return len(store.inbox.pending())


def _users(home: Path) -> dict[str, list[str]]:
    with Store.open(home / "state.db", readonly=True) as store:
        rows = store._connection.execute("SELECT content FROM messages WHERE role = 'user' ORDER BY id").fetchall()
    found: dict[str, list[str]] = {tag: [] for tag in TAGS}
    for (content,) in rows:
        found[str(content).split("-")[0]].append(str(content))
    return found


def _answered(home: Path, expected: dict[str, list[str]]) -> None:
    poll_until(lambda: _pending(home) == 0 and _replies(home) == expected, timeout=30, what=lambda: str(_replies(home)))
    users = _users(home)
    for tag in TAGS:
        kept = [f"{tag}-1"] if tag == "reject" else [f"{tag}-{n}" for n in (1, 2, 3)]
        assert users[tag] == kept, tag  # each message once in the transcript (a refused one not at all)


# Left pending when the daemon stops (a SIGTERM's drain gives up the turns still waiting for the model, as a kill -9
# does): all three of queue, collect and steer; the interrupting third; the running reject-1.
PENDING = 11

# Each chat's replies once the restarted daemon has answered what was left (rows replayed together: a gathering
# policy makes them one turn), and its model calls in all.
ANSWERED = {
    "queue": [answer_of("queue-1"), answer_of("queue-2"), answer_of("queue-3")],
    "collect": [answer_of("collect-1", "collect-2", "collect-3")],
    "interrupt": [answer_of("interrupt-1", "interrupt-2", "interrupt-3")],  # the first two stored unanswered
    "steer": [answer_of("steer-1", "steer-2", "steer-3")],  # never taken before the stop: collected
    "reject": [BUSY, BUSY, answer_of("reject-1")],
}
CALLS = {"queue": 4, "collect": 2, "interrupt": 4, "steer": 2, "reject": 2}


@pytest.mark.parametrize("stop", ["sighup-then-sigterm", "kill-9"])
def test_no_message_is_lost_across_a_stop_and_each_chat_is_answered_in_its_policys_order(
    tmp_path: Path, model: tuple[ChatServer, GatedModel], daemons: list[Hermesd], stop: str
) -> None:
    server, gate = model
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.yaml").write_text(_config(server.base_url))
    daemon = Hermesd(home)
    daemons.append(daemon)
    _busy_everywhere(daemon, gate)
    if stop == "kill-9":
        daemon.process.kill()
        daemon.process.wait(timeout=30)
    else:
        (home / "config.yaml").write_text(_config(server.base_url, retry_after_s=9))
        daemon.process.send_signal(signal.SIGHUP)
        poll_until(lambda: "busy policies reloaded" in daemon.log(), what="the reload")
        assert daemon.barrier() == 4  # nothing queued was dropped
        daemon.process.send_signal(signal.SIGTERM)
        assert daemon.process.wait(timeout=30) == 0  # within its drain, the model calls still held
    assert _pending(home) == PENDING

    gate.open()
    daemons.append(Hermesd(home))
    _answered(home, ANSWERED)
    assert dict(gate.calls) == CALLS
