"""QQ Bot in websocket mode against a real gateway and the fake QQ's websocket gateway.

The fake (``qqbot_fake``) speaks the gateway protocol as QQ documents it: Hello, Identify/READY, Resume/RESUMED
with replay after ``seq``, heartbeats and their ACKs, op 7 and op 9, close codes. The tests check that the session
and ``s`` are committed with the inbox rows and resumed from there after a drop or a restart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from platforms.qqbot import QqbotAdapter, QqbotBot, QqbotConfig
from platforms.qqbot.config import DEFAULT_INTENTS
from tests.platforms.crash import AdapterWorker, wait_for_inbox
from tests.platforms.qqbot_fake import FakeQq
from tests.platforms.support import RunningAdapter, StartGateway, wait_problem

APP = "102030405"
SECRET = "DG5g3B4j9X2KOErG"
OPENID = "E4F4AEA33253A2797FB897C50B81D7ED"


@pytest.fixture
def qq() -> Iterator[FakeQq]:
    fake = FakeQq(secrets={APP: SECRET}).start()
    yield fake
    fake.stop()


def make_config(qq: FakeQq, *, secret: str = SECRET, **options: Any) -> QqbotConfig:
    fields: dict[str, Any] = {
        "port": 0,
        "token_url": qq.token_url,
        "api_base_url": qq.base_url,
        "messages_per_second": 1000.0,
        "reconnect_min_s": 0.05,
        "reconnect_max_s": 0.2,
        "bots": {"main": QqbotBot(app_id=APP, secret=secret, mode="websocket")},
    }
    return QqbotConfig(**(fields | options))


def c2c(text: str, message_id: str) -> dict[str, Any]:
    return {"id": message_id, "author": {"user_openid": OPENID}, "content": text, "timestamp": "2026-12-02T18:00:00"}


@dataclass(frozen=True)
class Running(RunningAdapter[QqbotAdapter]):
    pass


Start = Callable[..., Running]


@pytest.fixture
def start(qq: FakeQq, start_gateway: StartGateway) -> Start:
    def run(config: QqbotConfig | None = None) -> Running:
        adapter = QqbotAdapter(config or make_config(qq), environ={})
        gateway = start_gateway(adapter, tick_interval_s=0.1)
        return Running(adapter=adapter, gateway=gateway)

    return run


def stored_cursor(running: Running) -> dict[str, Any]:
    inbox = running.adapter._inbox
    assert inbox is not None
    stored = inbox.poll_cursor("qqbot", APP)
    assert stored is not None
    return dict(msgspec.json.decode(stored))


def test_a_websocket_bot_identifies_and_answers_a_dispatched_message(start: Start, qq: FakeQq) -> None:
    running = start()
    qq.wait(qq.connected, "identified connection")
    (identify,) = qq.identifies
    assert identify["intents"] == DEFAULT_INTENTS
    assert identify["shard"] == [0, 1]
    assert identify["token"].startswith("QQBot ")
    seq = qq.push("C2C_MESSAGE_CREATE", c2c("hello", "ROBOT1.0_ws1"))
    sent = qq.take()
    assert (sent.kind, sent.target, sent.body["content"], sent.body["msg_id"]) == (
        "users",
        OPENID,
        "echo: hello",
        "ROBOT1.0_ws1",
    )
    assert stored_cursor(running)["seq"] == seq
    assert running.adapter.connection_problem() is None
    assert running.adapter.describe()[0].startswith("QQ bot main (app 102030405): websocket gateway")


def test_a_drop_resumes_the_committed_session_and_a_missed_event_is_replayed_once(start: Start, qq: FakeQq) -> None:
    running = start()
    qq.wait(qq.connected, "identified connection")
    qq.push("C2C_MESSAGE_CREATE", c2c("one", "ROBOT1.0_a"))
    assert qq.take().body["content"] == "echo: one"
    session = stored_cursor(running)["session_id"]
    qq.close(4900)  # an internal error of QQ's: resume
    qq.wait(lambda: not qq.connected() or qq.resumes, "drop")
    qq.push("C2C_MESSAGE_CREATE", c2c("two", "ROBOT1.0_b"))
    qq.wait(lambda: qq.resumes, "resume")
    assert qq.resumes[0]["session_id"] == session
    assert qq.resumes[0]["seq"] == 1
    assert qq.take().body["content"] == "echo: two"
    assert len(qq.identifies) == 1
    assert qq.nothing_more()


def test_a_restart_resumes_the_stored_session(start: Start, qq: FakeQq, start_gateway: StartGateway) -> None:
    first = start()
    qq.wait(qq.connected, "identified connection")
    qq.push("C2C_MESSAGE_CREATE", c2c("before", "ROBOT1.0_r1"))
    assert qq.take().body["content"] == "echo: before"
    first.adapter.stop()
    qq.wait(lambda: not qq.connected(), "closed connection")
    qq.push("C2C_MESSAGE_CREATE", c2c("while down", "ROBOT1.0_r2"))
    inbox = first.adapter._inbox
    assert inbox is not None
    second = QqbotAdapter(make_config(qq), environ={})
    second.start(inbox)
    try:
        qq.wait(lambda: qq.resumes, "resume")
        assert qq.resumes[0]["seq"] == 1
        assert qq.take().body["content"] == "echo: while down"
        assert len(qq.identifies) == 1
    finally:
        second.stop()


@pytest.mark.slow
def test_an_invalidated_session_identifies_anew(start: Start, qq: FakeQq) -> None:
    start()
    qq.wait(qq.connected, "identified connection")
    qq.invalidate()
    qq.wait(lambda: len(qq.identifies) == 2, "second identify")
    qq.push("C2C_MESSAGE_CREATE", c2c("fresh", "ROBOT1.0_i"))
    assert qq.take().body["content"] == "echo: fresh"


def test_op_7_reconnects_and_resumes(start: Start, qq: FakeQq) -> None:
    start()
    qq.wait(qq.connected, "identified connection")
    qq.ask_reconnect()
    qq.wait(lambda: qq.resumes, "resume")
    assert len(qq.identifies) == 1


def test_heartbeats_carry_the_last_sequence(start: Start, qq: FakeQq) -> None:
    qq.heartbeat_ms = 50
    start()
    qq.wait(qq.connected, "identified connection")
    seq = qq.push("GROUP_ADD_ROBOT", {"group_openid": "G", "op_member_openid": "M"})
    qq.wait(lambda: seq in qq.heartbeats, f"heartbeat with s {seq}")


def test_a_banned_bot_stops_and_says_so(start: Start, qq: FakeQq) -> None:
    running = start()
    qq.wait(qq.connected, "identified connection")
    qq.close(4915)
    problem = wait_problem(running.adapter, "stopped")
    assert "banned" in problem
    assert "bot 'main'" in problem


def test_a_refused_secret_is_reported_as_a_connection_problem(start: Start, qq: FakeQq) -> None:
    running = start(make_config(qq, secret="not the secret at all"))
    problem = wait_problem(running.adapter, "reconnecting")
    assert "access token" in problem
    assert qq.identifies == []


def test_a_malformed_frame_is_skipped_and_the_connection_keeps_working(start: Start, qq: FakeQq) -> None:
    start()
    qq.wait(qq.connected, "identified connection")
    qq.push("C2C_MESSAGE_CREATE", {"content": "no id"})
    qq.push("C2C_MESSAGE_CREATE", c2c("after", "ROBOT1.0_m"))
    assert qq.take().body["content"] == "echo: after"


@pytest.mark.slow
def test_a_kill_between_accept_and_reply_resumes_and_replies_once(tmp_path: Path, qq: FakeQq) -> None:
    db = tmp_path / "state.db"
    config = make_config(qq)
    worker = AdapterWorker.start(db, "qqbot", config, agent="hold")
    try:
        qq.wait(qq.connected, "identified connection", timeout=20)
        qq.push("C2C_MESSAGE_CREATE", c2c("survive", "ROBOT1.0_crash"))
        assert wait_for_inbox(db, 1) == [("ROBOT1.0_crash", "pending")]
    finally:
        worker.kill()
    assert qq.sent == []
    worker = AdapterWorker.start(db, "qqbot", config, agent="echo")
    try:
        assert qq.take(20).body["content"] == "echo: survive"
        qq.wait(lambda: qq.resumes, "resume", timeout=20)
        assert qq.resumes[0]["seq"] == 1  # the committed event is not replayed
        qq.wait(qq.connected, "resumed connection", timeout=20)
        qq.push("C2C_MESSAGE_CREATE", c2c("after", "ROBOT1.0_after"))
        assert qq.take(20).body["content"] == "echo: after"
    finally:
        worker.stop()
    assert [sent.body["content"] for sent in qq.sent] == ["echo: survive", "echo: after"]
    assert len(qq.identifies) == 1
