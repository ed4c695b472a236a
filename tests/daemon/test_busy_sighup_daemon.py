"""A SIGHUP while every busy policy holds messages, through the real ``hermesd`` (issue 36: no policy drops a message
on a SIGHUP): ``busy:`` is applied in place, nothing queued is dropped, and the same daemon, once the model answers,
answers each chat in its live policy's order: ``queue`` one turn each, ``collect`` and ``steer`` (the running turn
makes no further model call, so nothing is steered) the later two in one turn, ``interrupt`` all three in the third
turn, ``reject`` (the API's runs) the busy notices before the first's answer. Each message once in the transcript.
The stops that restart (SIGHUP then SIGTERM, kill -9) are ``test_busy_daemon``'s."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from hermes_actors.testing import poll_until
from tests.agents.chat_server import ChatServer
from tests.daemon.test_busy_daemon import BUSY, Hermesd, _answered, _busy_everywhere, _config, daemons, model
from tests.runtime.busy_model import GatedModel, answer_of

pytestmark = pytest.mark.slow

__all__ = ["daemons", "model"]  # the fixtures, shared with test_busy_daemon

LIVE = {
    "queue": [answer_of("queue-1"), answer_of("queue-2"), answer_of("queue-3")],
    "collect": [answer_of("collect-1"), answer_of("collect-2", "collect-3")],
    "interrupt": [answer_of("interrupt-1", "interrupt-2", "interrupt-3")],  # the first two turns stopped, unanswered
    "steer": [answer_of("steer-1"), answer_of("steer-2", "steer-3")],
    "reject": [BUSY, BUSY, answer_of("reject-1")],
}
LIVE_CALLS = {"queue": 3, "collect": 2, "interrupt": 3, "steer": 2, "reject": 1}


def test_a_sighup_drops_nothing_and_the_same_daemon_answers_each_chat_in_its_policys_order(
    tmp_path: Path, model: tuple[ChatServer, GatedModel], daemons: list[Hermesd]
) -> None:
    server, gate = model
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.yaml").write_text(_config(server.base_url))
    daemon = Hermesd(home)
    daemons.append(daemon)
    _busy_everywhere(daemon, gate)
    (home / "config.yaml").write_text(_config(server.base_url, retry_after_s=9))
    daemon.process.send_signal(signal.SIGHUP)
    poll_until(lambda: "busy policies reloaded" in daemon.log(), what="the reload")
    assert daemon.barrier() == 4  # nothing queued was dropped
    gate.open()
    _answered(home, LIVE)
    assert dict(gate.calls) == LIVE_CALLS
    assert daemon.process.poll() is None  # the same daemon answered
