"""Event webhooks from the real ``hermesd`` as a subprocess: a receiver that fails three times gets each event once
by its id, and a ``kill -9`` after the event committed and before its delivery was answered loses nothing: the
restarted daemon delivers it, once."""

from __future__ import annotations

import base64
import json
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.config import EVENTS_PLATFORM
from hermes_actors.store import Store
from hermes_actors.store.deliveries import DeliveryState
from hermes_actors.testing import poll_until
from tests.daemon.test_daemon import Daemon, config, start_daemon
from tests.events.receiver import open_receiver

EVENTS_SECRET = "whsec_" + base64.b64encode(b"daemon-events-secret-24-byte").decode()

pytestmark = pytest.mark.slow


def _config(url: str) -> str:
    return (
        config()
        + f"""
runtime:
  outbox_retry_base_s: 0.2
events:
  webhooks:
    ops:
      url: {url}
      secret_env: OPS_EVENTS_SECRET
      events: [turn.completed, session.ended, message.dead_lettered]
"""
    )


@pytest.fixture
def processes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Daemon]]:
    monkeypatch.setenv("OPS_EVENTS_SECRET", EVENTS_SECRET)  # hermesd inherits it
    started: list[Daemon] = []
    yield started
    for daemon in started:
        if daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.communicate(timeout=10)


def _start(home: Path, processes: list[Daemon]) -> Daemon:
    daemon = Daemon(home, start_daemon(home))
    processes.append(daemon)
    return daemon


def _chat(daemon: Daemon, text: str) -> str:
    body = json.dumps({"model": "hermes-agent", "messages": [{"role": "user", "content": text}]}).encode()
    request = urllib.request.Request(
        daemon.api + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return str(json.load(answer)["choices"][0]["message"]["content"])


def _states(home: Path) -> list[DeliveryState]:
    with Store.open(home / "state.db", readonly=True) as store:
        return [row.state for row in store.deliveries.of_platform(EVENTS_PLATFORM)]


def test_hermesd_delivers_each_event_once_by_id_through_three_failures(tmp_path: Path, processes: list[Daemon]) -> None:
    home = tmp_path / "h"
    home.mkdir()
    with open_receiver(EVENTS_SECRET, ["500", "429", "drop"]) as receiver:
        (home / "config.yaml").write_text(_config(receiver.url))
        daemon = _start(home, processes)
        assert _chat(daemon, "hello hooks") == "echo: hello hooks"
        receiver.wait_accepted(1)
        poll_until(lambda: _states(home) == [DeliveryState.SENT], what="the delivery marked sent")
        code, _, err = daemon.stop()
        assert code == 0, err
    (event_id,) = receiver.accepted
    assert receiver.accepted[event_id] == 1
    assert receiver.answers_of(event_id) == ["500", "429", "drop", "accepted"]
    (turn,) = receiver.of_type("turn.completed")
    assert turn["data"]["reply"] == "echo: hello hooks"
    assert turn["data"]["platform"] == "api_server"
    listed = CliRunner().invoke(hermesctl, ["events", "deliveries", "--home", str(home), "--json"])
    assert listed.exit_code == 0, listed.output
    (shown,) = json.loads(listed.output)
    assert (shown["event_id"], shown["state"], shown["attempts"], shown["type"]) == (
        event_id,
        "sent",
        4,
        "turn.completed",
    )


def test_an_event_committed_before_a_kill_9_is_delivered_once_after_the_restart(
    tmp_path: Path, processes: list[Daemon]
) -> None:
    home = tmp_path / "h"
    home.mkdir()
    hold = threading.Event()
    with open_receiver(EVENTS_SECRET, hold=hold, after_hold="drop") as receiver:
        (home / "config.yaml").write_text(_config(receiver.url))
        daemon = _start(home, processes)
        assert _chat(daemon, "before the crash") == "echo: before the crash"
        assert receiver.held.wait(30)  # the event committed with the turn; its delivery is under way, unanswered
        daemon.process.kill()  # kill -9
        daemon.process.communicate(timeout=10)
        hold.set()  # the dead daemon's request gets no answer: nothing was accepted
        assert receiver.accepted == {}
        assert _states(home) == [DeliveryState.QUEUED]  # still unsent, its attempt counted

        _start(home, processes)
        receiver.wait_accepted(1)
        poll_until(lambda: _states(home) == [DeliveryState.SENT], what="the delivery sent after the restart")
    (event_id,) = receiver.accepted
    assert receiver.accepted[event_id] == 1
    assert receiver.answers_of(event_id) == ["drop", "accepted"]  # the same webhook-id both times
    (turn,) = receiver.of_type("turn.completed")
    assert turn["data"]["reply"] == "echo: before the crash"
