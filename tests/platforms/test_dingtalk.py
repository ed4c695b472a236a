"""DingTalk robots (HTTP callback mode) against a real gateway, a real loopback server and a fake Open Platform.

The fake (``dingtalk_fake``) signs callbacks and answers the token, robot and session-webhook APIs as DingTalk
documents them, independently of the adapter's code.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from hermes_actors.errors import ConfigError
from hermes_actors.messages import OutboundMessage
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.testing import FakeClock
from platforms import registry
from platforms.base import PollCursor, SendError
from platforms.dingtalk import DingtalkAdapter, DingtalkConfig, DingtalkRobot
from platforms.dingtalk.callback import Route, encode_route, route_key
from platforms.dingtalk.webhook import webhook_problem
from platforms.support.fetch_policy import FetchSettings
from tests.platforms.crash import AdapterWorker, inbox_rows, wait_for_inbox
from tests.platforms.dingtalk_fake import Canary, Failure, FakeDingtalk, Sent, deliver
from tests.platforms.support import StartGateway, inbound_messages

MAIN_KEY = "dingmainkey0001"
MAIN_SECRET = "main-secret-0123456789"
OTHER_KEY = "dingotherkey002"
OTHER_SECRET = "other-secret-9876543210"
NOW_MS = 1_764_460_800_000


@pytest.fixture
def fake() -> Iterator[FakeDingtalk]:
    fake = FakeDingtalk()
    fake.add_app(MAIN_KEY, MAIN_SECRET)
    fake.add_app(OTHER_KEY, OTHER_SECRET)
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture
def canary() -> Iterator[Canary]:
    canary = Canary()
    canary.start()
    yield canary
    canary.stop()


def config_for(fake: FakeDingtalk, **options: Any) -> DingtalkConfig:
    robots = {
        "main": DingtalkRobot(app_key=MAIN_KEY, app_secret=MAIN_SECRET),
        "other": DingtalkRobot(app_key=OTHER_KEY, app_secret=OTHER_SECRET),
    }
    return DingtalkConfig(port=0, api_base_url=fake.base_url, robots=robots, **options)


@dataclasses.dataclass(frozen=True)
class Ding:
    """An adapter on a gateway; :meth:`push` signs each callback at a millisecond of its own, as DingTalk does."""

    adapter: DingtalkAdapter
    gateway: Gateway
    fake: FakeDingtalk
    clock: FakeClock
    stamps: Iterator[int] = dataclasses.field(default_factory=itertools.count)

    def push(self, payload: Any, robot: str = "main", **options: Any) -> tuple[int, dict[str, Any]]:
        options.setdefault("secret", MAIN_SECRET if robot == "main" else OTHER_SECRET)
        options.setdefault("timestamp_ms", int(self.clock.now * 1000) + next(self.stamps))
        return deliver(f"{self.adapter.url}/dingtalk/robot/{robot}", payload, **options)

    def say(self, text: str = "hello", robot: str = "main", **fields: Any) -> str:
        code = MAIN_KEY if robot == "main" else OTHER_KEY
        status, answer = self.push(self.fake.callback(code, text, **fields), robot)
        assert (status, answer.get("accepted")) == (200, True), answer
        return str(answer["routing_key"])


StartDing = Callable[..., Ding]


@pytest.fixture
def start_ding(fake: FakeDingtalk, start_gateway: StartGateway) -> StartDing:
    def start(**options: Any) -> Ding:
        clock = FakeClock()
        adapter = DingtalkAdapter(config_for(fake, **options), environ={}, clock=clock)
        gateway = start_gateway(adapter, clock=clock)
        return Ding(adapter=adapter, gateway=gateway, fake=fake, clock=clock)

    return start


def sessions(ding: Ding) -> int:
    with ding.gateway.read() as store:
        return len(store.list_sessions())


def test_a_one_to_one_message_is_keyed_by_corp_and_robot_and_answered_through_its_session_webhook(
    start_ding: StartDing,
) -> None:
    ding = start_ding()
    key = ding.say("hello")
    assert key == "agent:main:dingtalk.ding-corp-a~main:dm:cid-dm-alice"
    (sent,) = ding.fake.wait_sent(1)
    assert sent == ding.fake.sent[0]
    assert (sent.via, sent.target, sent.text) == ("webhook", "s1", "echo: hello")
    assert ding.fake.token_requests == []  # the session webhook needs no token


def test_group_members_each_get_a_session_and_two_corps_never_share_one(start_ding: StartDing) -> None:
    ding = start_ding()
    group = {"conversation_type": "2", "conversation_id": "cid-group"}
    alice = ding.say("a", msg_id="m1", **group)
    bob = ding.say("b", msg_id="m2", staff_id="staff-bob", **group)
    elsewhere = ding.say("c", msg_id="m3", corp_id="ding-corp-b", **group)
    other_robot = ding.say("d", robot="other", msg_id="m4", **group)
    assert alice == "agent:main:dingtalk.ding-corp-a~main:group:cid-group:staff-alice"
    assert bob == "agent:main:dingtalk.ding-corp-a~main:group:cid-group:staff-bob"
    assert elsewhere == "agent:main:dingtalk.ding-corp-b~main:group:cid-group:staff-alice"
    assert other_robot == "agent:main:dingtalk.ding-corp-a~other:group:cid-group:staff-alice"
    assert sorted(m.text for m in ding.fake.wait_sent(4)) == ["echo: a", "echo: b", "echo: c", "echo: d"]


def test_after_the_session_webhook_expires_replies_use_the_robot_api_with_a_cached_token(
    start_ding: StartDing,
) -> None:
    ding = start_ding()
    expired = NOW_MS - 1000
    ding.say("one", msg_id="m1", expires_ms=expired)
    ding.fake.wait_sent(1)  # one turn at a time: queued messages of one chat may merge into one turn
    ding.say("two", msg_id="m2", expires_ms=expired)
    group = {"conversation_type": "2", "conversation_id": "cid-group"}
    ding.say("three", msg_id="m3", expires_ms=expired, **group)
    sent = ding.fake.wait_sent(3)
    assert ding.gateway.wait_idle()
    assert sorted((m.via, m.target, m.text) for m in sent) == [
        ("group", "cid-group", "echo: three"),
        ("oto", "staff-alice", "echo: one"),
        ("oto", "staff-alice", "echo: two"),
    ]
    assert {m.robot_code for m in sent} == {MAIN_KEY}
    assert ding.fake.token_requests == [MAIN_KEY]
    ding.fake.revoke_tokens()
    ding.say("four", msg_id="m4", expires_ms=expired)  # 401 once, then a fresh token
    assert ding.fake.wait_sent(4)[-1].text == "echo: four"
    assert ding.fake.token_requests == [MAIN_KEY, MAIN_KEY]


def test_a_webhook_within_a_minute_of_expiry_is_not_used(start_ding: StartDing) -> None:
    ding = start_ding()
    ding.say("late", expires_ms=NOW_MS + 30_000)
    (sent,) = ding.fake.wait_sent(1)
    assert (sent.via, sent.text) == ("oto", "echo: late")


def test_a_replayed_msg_id_runs_one_turn(start_ding: StartDing) -> None:
    ding = start_ding()
    payload = ding.fake.callback(MAIN_KEY, "once", msg_id="m-replayed")
    answers = [ding.push(payload)[1] for _ in range(3)]
    assert [a["duplicate"] for a in answers] == [False, True, True]
    ding.fake.wait_sent(1)
    assert ding.gateway.wait_idle()
    assert [m.text for m in ding.fake.sent] == ["echo: once"]


def test_a_signed_pair_carries_one_message_and_a_replay_with_another_body_is_refused_even_after_a_restart(
    start_ding: StartDing, canary: Canary, caplog: pytest.LogCaptureFixture
) -> None:
    ding = start_ding()
    stamp = NOW_MS + 300_000  # five minutes ahead of our clock: still inside DingTalk's hour
    original = ding.fake.callback(MAIN_KEY, "hello", msg_id="m-original")
    assert ding.push(original, timestamp_ms=stamp)[1]["duplicate"] is False
    ding.fake.wait_sent(1)
    forged = ding.fake.callback(
        MAIN_KEY,
        "what did alice say?",
        msg_id="m-forged",
        conversation_id="cid-dm-alice",
        sessionWebhook=f"{canary.url}/robot/sendBySession?session=stolen",
    )
    with caplog.at_level(logging.WARNING, logger="platforms.dingtalk.adapter"):
        status, answer = ding.push(forged, timestamp_ms=stamp)
    assert status == 401, answer
    assert "already carried another message" in answer["error"]
    assert any("refused a request (401" in r.getMessage() for r in caplog.records)
    # DingTalk delivering the original again with its own headers is the duplicate it is, not a replay
    assert ding.push(original, timestamp_ms=stamp) == (200, {**answer_of(ding, original), "duplicate": True})
    # ... and a copy of it with another (even a DingTalk-looking) webhook does not move the conversation's replies
    tampered = {**original, "sessionWebhook": f"{ding.fake.base_url}/session/tampered"}
    assert ding.push(tampered, timestamp_ms=stamp)[1]["duplicate"] is True
    route = ding.adapter.sender.route("main", "cid-dm-alice")
    assert route is not None
    assert route.webhook == f"{ding.fake.base_url}/session/s1"
    ding.adapter.stop()
    ding.gateway.stop()
    again = start_ding()  # the same store: the pair is remembered
    assert again.push(forged, timestamp_ms=stamp)[0] == 401
    assert again.push(original, timestamp_ms=stamp)[1]["duplicate"] is True
    assert again.gateway.wait_idle()
    assert [m.message_id for m in inbound_messages(again.gateway, "dingtalk")] == ["m-original"]
    assert [m.text for m in again.fake.sent] == ["echo: hello"]
    assert canary.hits == []


def answer_of(ding: Ding, payload: dict[str, Any]) -> dict[str, Any]:
    """The answer to an accepted callback, less ``duplicate``."""
    key = f"agent:main:dingtalk.{payload['chatbotCorpId']}~main:dm:{payload['conversationId']}"
    return {"accepted": True, "routing_key": key}


def test_a_callback_with_nothing_to_answer_uses_up_its_pair_too(start_ding: StartDing) -> None:
    ding = start_ding()
    stamp = NOW_MS + 1
    assert ding.push(ding.fake.callback(MAIN_KEY, " ", msg_id="m-empty"), timestamp_ms=stamp)[0] == 200
    status, answer = ding.push(ding.fake.callback(MAIN_KEY, "forged", msg_id="m-forged"), timestamp_ms=stamp)
    assert (status, sessions(ding)) == (401, 0), answer


def test_pairs_are_remembered_per_millisecond_and_a_slot_is_reused_once_its_pair_left_the_window(
    start_ding: StartDing,
) -> None:
    ding = start_ding()
    for offset, msg_id in ((0, "m-a"), (1, "m-b"), (999, "m-c")):  # one second, three pairs
        status, answer = ding.push(ding.fake.callback(MAIN_KEY, msg_id, msg_id=msg_id), timestamp_ms=NOW_MS + offset)
        assert status == 200, answer
    assert ding.push(ding.fake.callback(MAIN_KEY, "x", msg_id="m-x"), timestamp_ms=NOW_MS + 1)[0] == 401
    ding.clock.advance(3 * 3600)  # the same slot, three hours on: the old pair is out of the window
    later = NOW_MS + 3 * 3600 * 1000 + 1
    assert ding.push(ding.fake.callback(MAIN_KEY, "later", msg_id="m-later"), timestamp_ms=later)[0] == 200
    assert ding.push(ding.fake.callback(MAIN_KEY, "y", msg_id="m-y"), timestamp_ms=later)[0] == 401
    with ding.gateway.read() as store:
        slots = store.sql.execute("SELECT account_id FROM poll_cursors WHERE account_id LIKE 'signed:%'")
        keys = sorted(key for (key,) in slots)
    assert keys == sorted(f"signed:main:{(NOW_MS + offset) % 10_800_000}" for offset in (0, 1, 999))


def test_a_session_webhook_off_dingtalks_host_is_never_posted_to_and_never_replaces_the_stored_route(
    start_ding: StartDing, canary: Canary, caplog: pytest.LogCaptureFixture
) -> None:
    ding = start_ding()
    ding.say("hello", msg_id="m1", expires_ms=NOW_MS + 3_600_000)
    ding.fake.wait_sent(1)
    stored = ding.adapter.sender.route("main", "cid-dm-alice")
    assert stored is not None
    assert stored.webhook == f"{ding.fake.base_url}/session/s1"
    elsewhere = f"{canary.url}/robot/sendBySession?session=evil"
    with caplog.at_level(logging.WARNING, logger="platforms.dingtalk"):
        ding.say("and now?", msg_id="m2", sessionWebhook=elsewhere)
        assert ding.fake.wait_sent(2)[1] == Sent(via="webhook", target="s1", text="echo: and now?")
        assert ding.adapter.sender.route("main", "cid-dm-alice") == stored
        # a conversation with no route yet: the robot API
        ding.say("hi", msg_id="m3", conversation_id="cid-dm-bob", staff_id="staff-bob", sessionWebhook=elsewhere)
        assert ding.fake.wait_sent(3)[2] == Sent(via="oto", target="staff-bob", text="echo: hi", robot_code=MAIN_KEY)
    assert ding.gateway.wait_idle()
    assert canary.hits == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum("ignored the sessionWebhook" in w and f"{canary.url}/robot/sendBySession" in w for w in warnings) == 2
    assert not any("session=evil" in w for w in warnings)  # the session in the query is a credential


def test_a_stored_route_to_a_foreign_webhook_is_not_posted_to(
    start_ding: StartDing, canary: Canary, caplog: pytest.LogCaptureFixture
) -> None:
    ding = start_ding()
    route = Route(
        chat_type="dm",
        conversation_id="cid-old",
        user_id="staff-old",
        webhook=f"{canary.url}/hook",
        webhook_expires_at=ding.clock.now + 3600,
    )  # as a version before this check may have stored it
    cursor = PollCursor(platform="dingtalk", cursor=encode_route(route), account_id=route_key("main", "cid-old"))
    ding.gateway.accept_many([], cursor=cursor)
    reply = OutboundMessage(platform="dingtalk", text="hi", account_id="main", chat_id="cid-old", outbox_id=1)
    with caplog.at_level(logging.WARNING, logger="platforms.dingtalk.sender"):
        assert ding.adapter.sender.send(reply) is not None
    assert ding.fake.sent == [Sent(via="oto", target="staff-old", text="hi", robot_code=MAIN_KEY)]
    assert canary.hits == []
    assert any("not DingTalk's session webhook" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://oapi.dingtalk.com/robot/sendBySession?session=abc", True),
        ("https://OAPI.dingtalk.com:443/robot/sendBySession?session=abc", True),
        ("http://oapi.dingtalk.com/robot/sendBySession?session=abc", False),
        ("https://oapi.dingtalk.com/robot/send?access_token=someone-elses-group", False),
        ("https://oapi.dingtalk.com:8443/robot/sendBySession?session=abc", False),
        ("https://oapi.dingtalk.com.example.net/robot/sendBySession?session=abc", False),
        ("https://evil@oapi.dingtalk.com/robot/sendBySession?session=abc", False),
        ("https://api.dingtalk.com/robot/sendBySession?session=abc", False),
        ("http://127.0.0.1:9/robot/sendBySession?session=abc", False),
        ("https://[::1/robot/sendBySession", False),
        ("http://127.0.0.1:8080/session/s1", True),  # the origin of the configured api_base_url
        ("http://127.0.0.1:8081/session/s1", False),
        ("https://127.0.0.1:8080/session/s1", False),
    ],
)
def test_replies_go_only_to_dingtalks_session_webhooks_or_the_configured_api_origin(url: str, allowed: bool) -> None:
    problem = webhook_problem(url, "http://127.0.0.1:8080")
    assert (problem is None) == allowed, problem


def test_forged_stale_and_future_callbacks_are_refused_with_401_and_nothing_is_stored(
    start_ding: StartDing, caplog: pytest.LogCaptureFixture
) -> None:
    ding = start_ding()
    payload = ding.fake.callback(MAIN_KEY, "x")
    now = int(ding.clock.now * 1000)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"secret": None}, "the timestamp and sign headers are required"),
        ({"secret": "wrong"}, "does not match the app secret of robot 'main'"),
        ({"secret": OTHER_SECRET}, "does not match the app secret"),
        ({"timestamp_ms": now - 3_601_000}, "3601 s old, outside the 3600 s window"),
        ({"timestamp_ms": now + 3_601_000}, "3601 s in the future"),
        ({"headers": {"timestamp": "soon"}}, "integer number of Unix milliseconds"),
    ]
    with caplog.at_level(logging.WARNING, logger="platforms.dingtalk.adapter"):
        for options, reason in cases:
            status, answer = ding.push(payload, **options)
            assert status == 401, (options, answer)
            assert reason in answer["error"], answer
    assert sum("refused a request (401" in r.getMessage() for r in caplog.records) == len(cases)
    assert sessions(ding) == 0
    assert ding.push(payload, timestamp_ms=now - 3_500_000)[0] == 200  # inside the hour


def test_malformed_unknown_and_oversized_callbacks_get_4xx_and_the_adapter_keeps_working(
    start_ding: StartDing, caplog: pytest.LogCaptureFixture
) -> None:
    ding = start_ding(max_body_bytes=4096)
    good = ding.fake.callback(MAIN_KEY, "x")
    cases: list[tuple[Any, int, str]] = [
        (b"{not json", 400, "not valid JSON"),
        (b"[]", 400, "robot callback format"),
        ({**good, "msgId": 7}, 400, "$.msgId"),
        ({k: v for k, v in good.items() if k != "conversationId"}, 400, "conversationId"),
        ({**good, "conversationType": "3"}, 400, "conversationType"),
        ({**good, "robotCode": OTHER_KEY}, 400, "give each robot its own URL"),
        ({**good, "text": {"content": "x" * 5000}}, 413, "platforms.dingtalk.max_body_bytes"),
        (b"[" * 10_000 + b"]" * 10_000, 413, "larger than"),
    ]
    with caplog.at_level(logging.WARNING, logger="platforms.dingtalk.adapter"):
        for payload, status, reason in cases:
            got, answer = ding.push(payload)
            assert got == status, (payload if isinstance(payload, dict) else payload[:20], answer)
            assert reason in answer["error"], answer
    assert len([r for r in caplog.records if "refused a request" in r.getMessage()]) == len(cases)
    assert ding.push(good, robot="nope")[0] == 404
    assert ding.push(ding.fake.callback(MAIN_KEY, "   "))[1] == {"ignored": "message msg-1 has no text"}
    assert sessions(ding) == 0
    assert ding.say("still here", msg_id="m-ok").endswith(":dm:cid-dm-alice")
    ding.fake.wait_sent(1)
    pic = ding.fake.callback(MAIN_KEY, None, msg_id="m-pic")
    assert ding.push(pic)[1]["accepted"] is True
    first, second = ding.fake.wait_sent(2)
    assert first.text == "echo: still here"
    assert second.text.startswith("I could not read the image: DingTalk would not hand it over (invalidParameter: ")


def test_pictures_and_files_are_downloaded_by_download_code_before_the_callback_is_answered(
    start_ding: StartDing,
) -> None:
    ding = start_ding(fetch=FetchSettings(allow_private=["127.0.0.1"]))  # the fake's downloadUrl is on loopback
    ding.fake.files["dc-png"] = (b"\x89PNG\r\n\x1a\n" + b"p" * 50, "image/png")
    ding.fake.files["dc-pdf"] = (b"%PDF-1.7 report", "application/octet-stream")
    picture = ding.fake.callback(MAIN_KEY, None, msg_id="m2", content={"downloadCode": "dc-png"})
    file = ding.fake.callback(
        MAIN_KEY, None, msg_id="m3", msgtype="file", content={"downloadCode": "dc-pdf", "fileName": "r.pdf"}
    )
    gone = ding.fake.callback(MAIN_KEY, None, msg_id="m4", content={"downloadCode": "dc-expired"})
    rich = ding.fake.callback(
        MAIN_KEY,
        None,
        msg_id="m5",
        msgtype="richText",
        content={"richText": [{"text": "look: "}, {"type": "picture", "downloadCode": "dc-png"}]},
    )
    voice = ding.fake.callback(MAIN_KEY, None, msg_id="m6", msgtype="audio", content={"recognition": "hello there"})
    assert ding.push(picture)[1]["accepted"] is True
    ding.fake.revoke_tokens()  # the next locate is refused once, then made with a fresh token
    for payload in (file, gone, rich, voice):
        assert ding.push(payload)[1]["accepted"] is True
    messages = {m.message_id: m for m in inbound_messages(ding.gateway, "dingtalk")}
    (image,) = messages["m2"].attachments
    assert (messages["m2"].text, image.kind, image.mime_type, image.size, image.error) == (
        "[image]",
        "image",
        "image/png",
        58,
        None,
    )
    (pdf,) = messages["m3"].attachments
    assert (messages["m3"].text, pdf.name, pdf.mime_type, pdf.error) == ("[file]", "r.pdf", "application/pdf", None)
    assert pdf.path is not None
    assert Path(pdf.path).read_bytes() == b"%PDF-1.7 report"
    assert messages["m4"].attachments[0].error == (
        "DingTalk would not hand it over (invalidParameter: downloadCode is invalid)"
    )
    assert (messages["m5"].text, len(messages["m5"].attachments)) == ("look: [image]", 1)
    assert (messages["m6"].text, messages["m6"].attachments) == ("[audio] hello there", ())
    assert ding.fake.file_requests[:3] == [("dc-png", 200), ("dc-pdf", 401), ("dc-pdf", 200)]
    assert ding.fake.token_requests == [MAIN_KEY, MAIN_KEY]


def test_a_message_that_cannot_be_stored_gets_503(start_ding: StartDing) -> None:
    ding = start_ding()
    ding.gateway.stop()
    status, answer = ding.push(ding.fake.callback(MAIN_KEY, "x"))
    assert (status, answer) == (503, {"error": "the message could not be stored; deliver it again later"})


def test_a_throttled_reply_is_retried_when_retry_after_says(start_ding: StartDing) -> None:
    ding = start_ding()
    ding.fake.fail_next(Failure(429, {"code": "Throttling.Api", "message": "slow down"}, {"Retry-After": "7"}))
    ding.say("hello", expires_ms=NOW_MS)
    ding.fake.wait_calls(1)
    assert ding.gateway.wait_idle()
    with ding.gateway.read() as store:
        (row,) = store.outbox.unsent()
    assert row.next_attempt_at == pytest.approx(ding.clock.now + 7)
    ding.clock.advance(7)
    ding.gateway.tick()
    assert [m.text for m in ding.fake.wait_sent(1)] == ["echo: hello"]


def sender_for(fake: FakeDingtalk, clock: FakeClock, start_gateway: StartGateway) -> DingtalkAdapter:
    adapter = DingtalkAdapter(config_for(fake), environ={}, clock=clock)
    start_gateway(adapter, clock=clock)
    return adapter


def test_send_failures_become_send_errors_that_say_what_happened(
    fake: FakeDingtalk, start_gateway: StartGateway
) -> None:
    clock = FakeClock()
    adapter = sender_for(fake, clock, start_gateway)
    status, _ = deliver(
        f"{adapter.url}/dingtalk/robot/main",
        fake.callback(MAIN_KEY, "x", expires_ms=NOW_MS + 3_600_000),
        secret=MAIN_SECRET,
    )
    assert status == 200
    fake.wait_sent(1)
    reply = OutboundMessage(platform="dingtalk", text="hi", account_id="main", chat_id="cid-dm-alice", outbox_id=9)
    fake.fail_next(Failure(200, {"errcode": 130101, "errmsg": "send too fast"}, webhook=True))
    with pytest.raises(SendError, match="too fast") as fast:
        adapter.sender.send(reply)
    assert fast.value.retry_after_s == 30
    clock.advance(3600)  # the webhook has expired: the robot API
    fake.fail_next(Failure(403, {"code": "Forbidden.AccessDenied", "message": "robot not in the group"}))
    with pytest.raises(SendError, match=r"HTTP 403 \(Forbidden.AccessDenied: robot not in the group\)") as refused:
        adapter.sender.send(reply)
    assert refused.value.permanent
    fake.fail_next(Failure(500, {"code": "ServiceUnavailable", "message": "busy"}))
    with pytest.raises(SendError, match="HTTP 500") as busy:
        adapter.sender.send(reply)
    assert not busy.value.permanent
    unknown = msgspec.structs.replace(reply, chat_id="cid-never-seen")
    with pytest.raises(SendError, match="no callback from this conversation") as never:
        adapter.sender.send(unknown)
    assert never.value.permanent
    with pytest.raises(SendError, match="not configured") as nobody:
        adapter.sender.send(msgspec.structs.replace(reply, account_id="ghost"))
    assert nobody.value.permanent
    assert adapter.sender.send(msgspec.structs.replace(reply, text="x" * 12_000)) is not None
    assert [len(m.text) for m in fake.sent[-3:]] == [5000, 5000, 2000]


@pytest.mark.parametrize(
    ("section", "path", "problem"),
    [
        ({"robots": {"main": {"app_key": "k"}}}, "platforms.dingtalk.robots.main.app_secret", "is required"),
        (
            {"robots": {"main": {"app_key": "k", "app_secret": "s", "app_secret_env": "X"}}},
            "platforms.dingtalk.robots.main.app_secret_env",
            "not both",
        ),
        ({"robots": {"a b": {"app_key": "k", "app_secret": "s"}}}, "platforms.dingtalk.robots.a b", "robot name"),
        ({"robots": {"main": {"app_key": " ", "app_secret": "s"}}}, "platforms.dingtalk.robots.main.app_key", "empty"),
        ({"api_base_url": "ftp://x"}, "platforms.dingtalk.api_base_url", "http(s) URL"),
        ({"port": 70000}, "platforms.dingtalk.port", "not a TCP port"),
        ({"chat_messages_per_minute": 0}, "platforms.dingtalk.chat_messages_per_minute", "positive"),
    ],
)
def test_a_bad_section_is_a_config_error_naming_its_field(section: dict[str, Any], path: str, problem: str) -> None:
    with pytest.raises(ConfigError) as raised:
        msgspec.convert(section, DingtalkConfig)  # as the daemon loads config.yaml
    assert raised.value.path == path
    assert problem in str(raised.value)


def test_secrets_come_from_the_environment_and_a_missing_one_names_its_variable() -> None:
    config = DingtalkConfig(robots={"main": DingtalkRobot(app_key="k", app_secret_env="DING_SECRET")})
    adapter = registry.build("dingtalk", config, {"DING_SECRET": "s"})
    assert "secret from $DING_SECRET" in adapter.describe()[0]
    with pytest.raises(ConfigError, match="DING_SECRET is not set") as raised:
        DingtalkAdapter(config, environ={})
    assert raised.value.path == "platforms.dingtalk.robots.main.app_secret_env"


@pytest.mark.slow
def test_a_kill_between_accept_and_reply_loses_nothing_and_replies_once_through_the_stored_webhook(
    tmp_path: Path, fake: FakeDingtalk
) -> None:
    db = tmp_path / "state.db"
    config = config_for(fake)
    now_ms = int(time.time() * 1000)
    payload = fake.callback(MAIN_KEY, "survive", msg_id="m-crash", session="crash", expires_ms=now_ms + 3_600_000)
    worker = AdapterWorker.start(db, "dingtalk", config, agent="hold")
    try:
        status, _ = deliver(worker.url() + "/dingtalk/robot/main", payload, secret=MAIN_SECRET, timestamp_ms=now_ms)
        assert status == 200
        assert wait_for_inbox(db, 1) == [("m-crash", "pending")]
    finally:
        worker.kill()
    assert fake.sent == []
    worker = AdapterWorker.start(db, "dingtalk", config, agent="echo")
    try:
        (sent,) = fake.wait_sent(1, timeout=20)
        status, answer = deliver(
            worker.url() + "/dingtalk/robot/main", payload, secret=MAIN_SECRET, timestamp_ms=int(time.time() * 1000)
        )
        assert (status, answer["duplicate"]) == (200, True)
    finally:
        worker.stop()
    assert (sent.via, sent.target, sent.text) == ("webhook", "crash", "echo: survive")
    assert [m.text for m in fake.sent] == ["echo: survive"]
    assert [state for _, state in inbox_rows(db)] == ["done"]


def test_save_sends_the_markdown_as_text_since_a_robot_cannot_send_a_markdown_file(start_ding: StartDing) -> None:
    ding = start_ding()
    ding.say("hello", msg_id="msg-1")
    ding.fake.wait_sent(1)
    ding.say("/save", msg_id="msg-2")
    _, saved = ding.fake.wait_sent(2)
    assert ding.gateway.wait_idle()
    assert saved.via == "webhook"
    assert saved.text.startswith("# ")
    assert saved.text.index("hello") < saved.text.index("echo: hello")
    assert len(ding.fake.sent) == 2
