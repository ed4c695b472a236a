"""DingTalk stream mode against a real gateway and a fake gateway that speaks the stream protocol on loopback.

The robot opens its connection through ``/v1.0/gateway/connections/open`` and receives robot messages as
``CALLBACK`` frames; each is acknowledged only once it is committed.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, cast

import pytest

from hermes_actors.messages import InboundMessage
from hermes_actors.testing import FakeClock
from platforms.base import AcceptResult, Inbox, PollCursor
from platforms.dingtalk import DingtalkAdapter, DingtalkConfig, DingtalkRobot
from tests.platforms.crash import AdapterWorker, inbox_rows, wait_for_inbox
from tests.platforms.dingtalk_fake import Canary, FakeDingtalk
from tests.platforms.support import StartGateway, wait_problem

KEY = "dingstreamkey001"
SECRET = "stream-secret-0123456789"
NOW_MS = 1_764_460_800_000


@pytest.fixture
def fake() -> Iterator[FakeDingtalk]:
    fake = FakeDingtalk()
    fake.add_app(KEY, SECRET)
    fake.start()
    yield fake
    fake.stop()


def config_for(fake: FakeDingtalk, secret: str = SECRET) -> DingtalkConfig:
    robot = DingtalkRobot(app_key=KEY, app_secret=secret)
    return DingtalkConfig(mode="stream", api_base_url=fake.base_url, robots={"main": robot})


def start(fake: FakeDingtalk, start_gateway: StartGateway, *, secret: str = SECRET, **options: Any) -> DingtalkAdapter:
    clock = FakeClock()
    adapter = DingtalkAdapter(config_for(fake, secret), environ={}, clock=clock)
    start_gateway(adapter, clock=clock, **options)
    return adapter


class _HeldInbox:
    """An inbox whose commits wait until the test releases them (to see what the robot does meanwhile)."""

    def __init__(self, inbox: Inbox) -> None:
        self._inbox = inbox
        self.submitted = threading.Event()
        self.release = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inbox, name)

    def submit_many(
        self, batch: Sequence[InboundMessage], *, cursor: PollCursor | None = None
    ) -> Future[list[AcceptResult]]:
        self.submitted.set()
        assert self.release.wait(10), "never released"
        return self._inbox.submit_many(batch, cursor=cursor)


def test_a_stream_message_is_acknowledged_only_after_the_inbox_commit_and_answered_through_its_webhook(
    fake: FakeDingtalk, start_gateway: StartGateway
) -> None:
    held: list[_HeldInbox] = []

    def hold(inbox: Inbox) -> Inbox:
        held.append(_HeldInbox(inbox))
        return cast(Inbox, held[0])

    adapter = start(fake, start_gateway, inbox_for=hold)
    fake.wait_stream(1)
    assert adapter.connection_problem() is None
    frame = fake.push_message(fake.callback(KEY, "hello", msg_id="m1", expires_ms=NOW_MS + 3_600_000))
    assert held[0].submitted.wait(10)
    assert fake.acks == []  # the commit has not happened: nothing is acknowledged
    held[0].release.set()
    (ack,) = fake.wait_acks(1)
    assert (ack["code"], ack["headers"]["messageId"], json.loads(ack["data"])) == (200, frame, {"response": None})
    (sent,) = fake.wait_sent(1)
    assert (sent.via, sent.text) == ("webhook", "echo: hello")


def test_a_stream_message_naming_a_session_webhook_off_dingtalks_host_is_answered_through_the_robot_api(
    fake: FakeDingtalk, start_gateway: StartGateway
) -> None:
    canary = Canary()
    canary.start()
    try:
        start(fake, start_gateway)
        fake.wait_stream(1)
        elsewhere = f"{canary.url}/robot/sendBySession?session=x"
        fake.push_message(
            fake.callback(KEY, "hi", msg_id="m1", expires_ms=NOW_MS + 3_600_000, sessionWebhook=elsewhere)
        )
        (sent,) = fake.wait_sent(1)
        assert (sent.via, sent.target, sent.text) == ("oto", "staff-alice", "echo: hi")
        assert canary.hits == []
    finally:
        canary.stop()


def test_a_redelivered_frame_is_acknowledged_again_and_runs_one_turn(
    fake: FakeDingtalk, start_gateway: StartGateway
) -> None:
    start(fake, start_gateway)
    fake.wait_stream(1)
    body = fake.callback(KEY, "once", msg_id="m-again", expires_ms=NOW_MS + 3_600_000)
    fake.push_message(body, "frame-1")
    fake.wait_sent(1)
    fake.push_message(body, "frame-2")  # DingTalk sends an unacknowledged message again under a new frame
    acks = fake.wait_acks(2)
    assert [(a["code"], a["headers"]["messageId"]) for a in acks] == [(200, "frame-1"), (200, "frame-2")]
    assert [m.text for m in fake.sent] == ["echo: once"]


@pytest.mark.slow
def test_ping_is_answered_and_disconnect_or_a_drop_reconnects_with_a_fresh_ticket(
    fake: FakeDingtalk, start_gateway: StartGateway
) -> None:
    start(fake, start_gateway)
    fake.wait_stream(1)
    fake.send_frame("SYSTEM", "ping", '{"opaque": "abc"}', "ping-1")
    (pong,) = fake.wait_acks(1)
    assert (pong["code"], pong["headers"]["messageId"], pong["data"]) == (200, "ping-1", '{"opaque": "abc"}')
    fake.send_frame("SYSTEM", "disconnect", "{}")
    fake.wait_stream(2)
    fake.close_stream()  # dropped from the server's side
    fake.wait_stream(3)
    assert len(set(fake.opens)) == 3
    fake.push_message(fake.callback(KEY, "after", msg_id="m-after", expires_ms=NOW_MS + 3_600_000))
    assert [m.text for m in fake.wait_sent(1)] == ["echo: after"]


def test_unreadable_frames_are_acknowledged_with_400_and_the_stream_keeps_working(
    fake: FakeDingtalk, start_gateway: StartGateway
) -> None:
    adapter = start(fake, start_gateway)
    fake.wait_stream(1)
    fake.send_frame("CALLBACK", "/v1.0/im/bot/messages/get", "{not json", "bad-1")
    fake.send_frame("CALLBACK", "/v1.0/im/bot/messages/get", json.dumps({"msgId": 7}), "bad-2")
    fake.send_frame("EVENT", "chat_update", "{}", "event-1")
    acks = fake.wait_acks(3)
    assert [(a["code"], a["headers"]["messageId"]) for a in acks] == [(400, "bad-1"), (400, "bad-2"), (200, "event-1")]
    assert "not valid JSON" in acks[0]["message"]
    assert "$.msgId" in acks[1]["message"]
    fake.push_message(fake.callback(KEY, "fine", msg_id="m-fine", expires_ms=NOW_MS + 3_600_000))
    assert [m.text for m in fake.wait_sent(1)] == ["echo: fine"]
    assert adapter.connection_problem() is None


def test_a_robot_dingtalk_refuses_is_a_connection_problem_naming_the_answer(
    fake: FakeDingtalk, start_gateway: StartGateway
) -> None:
    adapter = start(fake, start_gateway, secret="wrong")
    problem = wait_problem(adapter, "connections/open answered HTTP 400")
    assert problem.startswith("robot 'main': reconnecting (")
    assert "check app_key and app_secret" in problem


def test_the_stream_mode_opens_no_server_and_says_so_in_the_banner(fake: FakeDingtalk) -> None:
    adapter = DingtalkAdapter(config_for(fake), environ={})
    adapter.probe_listen()  # nothing to bind
    (line,) = adapter.describe()
    assert "stream mode, a WebSocket opened through" in line
    assert "/v1.0/gateway/connections/open" in line


@pytest.mark.slow
def test_a_kill_between_commit_and_reply_loses_nothing_and_replies_once(tmp_path: Path, fake: FakeDingtalk) -> None:
    db = tmp_path / "state.db"
    config = config_for(fake)
    expires = int(time.time() * 1000) + 3_600_000
    body = fake.callback(KEY, "survive", msg_id="m-crash", session="crash", expires_ms=expires)
    worker = AdapterWorker.start(db, "dingtalk", config, agent="hold")
    try:
        fake.wait_stream(1)
        fake.push_message(body, "frame-1")
        assert wait_for_inbox(db, 1) == [("m-crash", "pending")]
        fake.wait_acks(1)
    finally:
        worker.kill()
    assert fake.sent == []
    worker = AdapterWorker.start(db, "dingtalk", config, agent="echo")
    try:
        (sent,) = fake.wait_sent(1, timeout=20)
        fake.wait_stream(2)
        fake.push_message(body, "frame-2")
        assert fake.wait_acks(2)[-1]["headers"]["messageId"] == "frame-2"
    finally:
        worker.stop()
    assert (sent.via, sent.target, sent.text) == ("webhook", "crash", "echo: survive")
    assert [m.text for m in fake.sent] == ["echo: survive"]
    assert [state for _, state in inbox_rows(db)] == ["done"]
