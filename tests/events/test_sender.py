"""The event sender alone, through a mock transport: Standard Webhooks headers the official package verifies, one
``webhook-id`` per event, only the configured URL, what is retried and what is given up; and the events section's
checks."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner
from standardwebhooks.webhooks import Webhook

from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.cli.hermesd import main as hermesd
from hermes_actors.config import EVENTS_PLATFORM, EventKind, EventsConfig, EventWebhook
from hermes_actors.constraints import decode_section
from hermes_actors.errors import ConfigError
from hermes_actors.messages import OutboundMessage
from hermes_actors.ports import SendError
from hermes_actors.runtime.events import Events, event_body
from hermes_actors.store import Store
from platforms.support.event_webhooks import EventSender
from platforms.support.http_client import HttpClient, HttpRequest, HttpResult, MockTransport, NoAnswer, Unreachable

SECRET = "whsec_" + base64.b64encode(b"sender-test-secret-24-bytes").decode()
URL = "http://10.1.2.3:9000/hooks?token=abc"  # a private address: the operator's own, so allowed
NOW = 1_764_460_800.0


def _delivery(outbox_id: int = 5, webhook: str = "ops", event_id: str = "evt_1") -> OutboundMessage:
    body = event_body(EventKind.TURN_COMPLETED, NOW, {"session_id": "s1", "url": "http://evil.example/steal"})
    return OutboundMessage(
        platform=EVENTS_PLATFORM, account_id=webhook, chat_id=webhook, text=body, reply_to=event_id, outbox_id=outbox_id
    )


def _sender(answer: HttpResult | Exception, queued: float | None = NOW) -> tuple[EventSender, list[HttpRequest]]:
    def handler(request: HttpRequest) -> HttpResult:
        if isinstance(answer, Exception):
            raise answer
        return answer

    transport = MockTransport(handler)
    config = EventsConfig(webhooks={"ops": EventWebhook(url=URL, secret=SECRET, events=(EventKind.TURN_COMPLETED,))})
    sender = EventSender(
        config, queued_at=lambda outbox_id: queued, environ={}, clock=lambda: NOW + 60, client=HttpClient(transport)
    )
    return sender, transport.requests


def test_a_delivery_is_signed_as_standard_webhooks_and_goes_only_to_the_configured_url() -> None:
    sender, requests = _sender(HttpResult(status=204, headers={}, body=b""))
    assert sender.send(_delivery()) == "evt_1"
    assert sender.send(_delivery()) == "evt_1"
    first, second = requests
    assert first.url == URL  # never the URL the event's data names
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == "evt_1"
    assert first.headers["webhook-timestamp"] == str(int(NOW + 60))
    assert first.headers["content-type"] == "application/json"
    assert first.body == second.body
    verified = Webhook(SECRET)  # the official package; its timestamp check is against the real clock
    assert verified.sign("evt_1", _at(NOW + 60), first.body or b"") == first.headers["webhook-signature"]
    body = json.loads(first.body or b"")
    assert body == {
        "type": "turn.completed",
        "timestamp": "2025-11-30T00:00:00.000Z",
        "data": {"session_id": "s1", "url": "http://evil.example/steal"},
    }


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


@pytest.mark.parametrize(
    ("answer", "words", "retry_after", "unknown"),
    [
        (HttpResult(status=500, headers={}, body=b"oops"), "HTTP 500 from event webhook 'ops'", None, False),
        (HttpResult(status=429, headers={"retry-after": "7"}, body=b""), "HTTP 429", 7.0, False),
        (HttpResult(status=503, headers={"retry-after": "3"}, body=b""), "HTTP 503", 3.0, False),
        (HttpResult(status=410, headers={}, body=b""), "HTTP 410", None, False),
        (NoAnswer("POST x: reset", reason="Server disconnected"), "Server disconnected from event webhook", None, True),
        (Unreachable("POST x: refused", reason="Connection refused"), "Connection refused", None, False),
    ],
)
def test_a_failed_attempt_is_retried_with_what_the_receiver_said(
    answer: HttpResult | Exception, words: str, retry_after: float | None, unknown: bool
) -> None:
    sender, _ = _sender(answer)
    with pytest.raises(SendError) as failed:
        sender.send(_delivery())
    assert words in str(failed.value)
    assert str(failed.value).endswith("; it will be retried")
    assert "token=abc" not in str(failed.value)  # the URL's query (a token) never reaches a log line
    assert failed.value.retry_after_s == retry_after
    assert failed.value.outcome_unknown is unknown
    assert not failed.value.permanent


def test_a_delivery_failing_past_give_up_after_s_is_given_up_naming_the_replay() -> None:
    sender, _ = _sender(HttpResult(status=500, headers={}, body=b""), queued=NOW - 86_400)
    with pytest.raises(SendError) as failed:
        sender.send(_delivery(outbox_id=12))
    assert failed.value.permanent
    assert "given up after 86460 s (events.webhooks.ops.give_up_after_s is 86400)" in str(failed.value)
    assert str(failed.value).endswith("send it again with: hermesctl events replay 12")


def test_a_delivery_to_a_webhook_no_longer_configured_is_given_up() -> None:
    sender, requests = _sender(HttpResult(status=204, headers={}, body=b""))
    with pytest.raises(SendError) as failed:
        sender.send(_delivery(webhook="gone"))
    assert failed.value.permanent
    assert "event webhook 'gone' is no longer configured" in str(failed.value)
    assert requests == []


def test_the_secret_may_come_from_the_environment_and_a_missing_one_is_named() -> None:
    hook = EventWebhook(url=URL, secret_env="HOOK_SECRET", events=(EventKind.SESSION_ENDED,))
    config = EventsConfig(webhooks={"ops": hook})
    EventSender(config, queued_at=lambda _: None, environ={"HOOK_SECRET": SECRET})
    with pytest.raises(ConfigError) as missing:
        EventSender(config, queued_at=lambda _: None, environ={})
    assert str(missing.value) == (
        "events.webhooks.ops.secret_env: the environment variable HOOK_SECRET is not set; export the secret there"
    )
    with pytest.raises(ConfigError) as bad:
        EventSender(config, queued_at=lambda _: None, environ={"HOOK_SECRET": "whsec_short"})
    assert str(bad.value).startswith("events.webhooks.ops.secret_env: must be 'whsec_' followed by the base64")


@pytest.mark.parametrize(
    ("section", "path", "words"),
    [
        ({"webhooks": {"a": {"url": "ftp://x", "secret": SECRET, "events": ["turn.completed"]}}}, "url", "http://"),
        ({"webhooks": {"a": {"url": "http://x", "secret": "whsec_abc", "events": ["turn.completed"]}}}, "secret", "24"),
        ({"webhooks": {"a": {"url": "http://x", "secret": SECRET, "events": []}}}, "events", "at least one event"),
        ({"webhooks": {"a": {"url": "http://x", "events": ["session.ended"]}}}, "secret", "secret_env"),
        (
            {"webhooks": {"a": {"url": "http://x", "secret": SECRET, "events": ["job.fired"], "give_up_after_s": 5}}},
            "give_up_after_s",
            "at least 60 seconds",
        ),
        ({"webhooks": {"a b": {"url": "http://x", "secret": SECRET, "events": ["job.fired"]}}}, "", "letters, digits"),
    ],
)
def test_the_events_section_names_a_bad_field(section: object, path: str, words: str) -> None:
    with pytest.raises(ConfigError) as bad:
        decode_section(section, EventsConfig, "events")
    assert bad.value.path.startswith("events.webhooks.a")
    assert bad.value.path.endswith(path)
    assert words in str(bad.value)


def test_an_emit_commits_with_its_fact_and_is_rolled_back_with_it(tmp_path: Path) -> None:
    config = EventsConfig(
        webhooks={
            "one": EventWebhook(url=URL, secret=SECRET, events=(EventKind.SESSION_ENDED,)),
            "two": EventWebhook(url=URL, secret=SECRET, events=tuple(EventKind)),
            "three": EventWebhook(url=URL, secret=SECRET, events=(EventKind.JOB_FIRED,)),
        }
    )
    events = Events(config, clock=lambda: NOW)
    with Store.open(tmp_path / "state.db") as store:

        def untrue() -> None:
            with store.transaction():
                events.emit(store, EventKind.SESSION_ENDED, {"session_id": "x"})
                raise RuntimeError("the fact is not true after all")

        with pytest.raises(RuntimeError):
            untrue()
        assert store.outbox.unsent(EVENTS_PLATFORM) == []
        with store.transaction():
            event_id = events.emit(store, EventKind.SESSION_ENDED, {"session_id": "x", "reason": "idle"})
        assert events.emit(store, EventKind.RUN_COMPLETED, {}) is not None  # "two" wants every kind
        rows = store.outbox.unsent(EVENTS_PLATFORM)
    assert [(r.account_id, r.chat_id) for r in rows] == [("one", "one"), ("two", "two"), ("two", "two")]
    first = msgspec.msgpack.decode(rows[0].payload, type=OutboundMessage)
    assert first.reply_to == event_id
    assert json.loads(first.text) == {
        "type": "session.ended",
        "timestamp": "2025-11-30T00:00:00.000Z",
        "data": {"session_id": "x", "reason": "idle"},
    }
    assert Events(None).emit(store, EventKind.SESSION_ENDED, {}) is None  # no webhooks: nothing, not even a read


def test_hermesd_and_config_check_refuse_an_event_webhook_whose_secret_is_not_set(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(
        "events:\n  webhooks:\n    ops:\n      url: http://127.0.0.1:9/hooks\n      secret_env: HOOK_UNSET\n"
        "      events: [session.ended]\n"
    )
    runner = CliRunner()
    checked = runner.invoke(hermesctl, ["config", "check", "--home", str(home)], env={"HOOK_UNSET": None})
    started = runner.invoke(hermesd, ["--home", str(home)], env={"HOOK_UNSET": None})
    problem = "events.webhooks.ops.secret_env: the environment variable HOOK_UNSET is not set; export the secret there"
    assert (checked.exit_code, started.exit_code) == (2, 2), checked.output + started.output
    assert checked.output == f"Error: configuration {home / 'config.yaml'}: {problem}\n"
    assert started.output.splitlines()[-1] == checked.output.splitlines()[-1]
    assert not (home / "state.db").exists()  # refused before the store was touched
