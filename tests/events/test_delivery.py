"""Event webhooks through a real gateway and the durable outbox, to a receiver on loopback that checks every request
with the official ``standardwebhooks`` package."""

from __future__ import annotations

import base64
import json
import threading
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.config import EVENTS_PLATFORM, EventKind, EventsConfig, EventWebhook
from hermes_actors.daemon.startup import queued_at
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.store import Store
from hermes_actors.store.deliveries import DeliveryState
from hermes_actors.testing import poll_until
from platforms.api_server import ApiServer, ApiServerConfig
from platforms.support.event_webhooks import EventSender
from tests.events.event_gateway import gateway_with
from tests.events.receiver import open_receiver
from tests.platforms.test_api_operator import KEY, Api

SECRET = "whsec_" + base64.b64encode(b"events-test-secret-24-bytes!").decode()
ALL = tuple(EventKind)


def webhooks(url: str, events: tuple[EventKind, ...] = ALL, **hook: Any) -> EventsConfig:
    return EventsConfig(webhooks={"ops": EventWebhook(url=url, secret=SECRET, events=events, **hook)})


def _deliveries(db: Path) -> list[Any]:
    with Store.open(db, readonly=True) as store:
        return store.deliveries.of_platform(EVENTS_PLATFORM)


def _all_sent(db: Path, count: int) -> bool:
    rows = _deliveries(db)
    return len(rows) == count and all(row.state is DeliveryState.SENT for row in rows)


def test_a_receiver_failing_three_times_then_succeeding_gets_each_event_exactly_once(tmp_path: Path) -> None:
    with (
        open_receiver(SECRET, ["500", "429", "drop"]) as receiver,
        gateway_with(tmp_path, webhooks(receiver.url)) as (
            _,
            fake,
        ),
    ):
        fake.push("hello")
        assert fake.pop().text == "echo: hello"
        receiver.wait_accepted(1)
        fake.push("/new")
        fake.pop()
        receiver.wait_accepted(2)
        poll_until(lambda: _all_sent(tmp_path / "state.db", 2), what="both deliveries marked sent")

    assert sorted(receiver.accepted.values()) == [1, 1]  # each event once, by its id
    turn = receiver.of_type("turn.completed")[0]
    ended = receiver.of_type("session.ended")[0]
    assert turn["data"]["reply"] == "echo: hello"
    assert turn["data"]["outcome"] == "ok"
    assert turn["data"]["message_ids"] == ["m1"]
    assert ended["data"] == {"session_id": turn["data"]["session_id"], "reason": "new_session"}
    first = next(i for i, body in receiver.events.items() if body is turn)
    assert receiver.answers_of(first) == ["500", "429", "drop", "accepted"]  # one webhook-id on every attempt
    attempts = [a for a in receiver.attempts if a.webhook_id == first]
    assert attempts[2].at - attempts[1].at >= 0.95  # Retry-After: 1 was honoured
    assert {a.path for a in attempts} == {"/hooks"}
    assert {a.body for a in attempts} == {attempts[0].body}  # the same bytes each time, signed afresh


def test_an_event_nobody_subscribed_to_is_not_queued(tmp_path: Path) -> None:
    with open_receiver(SECRET) as receiver:
        config = webhooks(receiver.url, events=(EventKind.SESSION_ENDED,))
        with gateway_with(tmp_path, config) as (_, fake):
            fake.push("hello")
            fake.pop()
            fake.push("/new")
            fake.pop()
            receiver.wait_accepted(1)
            poll_until(lambda: _all_sent(tmp_path / "state.db", 1), what="the one delivery sent")
    assert [body["type"] for body in receiver.events.values()] == ["session.ended"]


def test_a_delivery_failing_past_give_up_after_s_is_a_dead_letter_that_a_replay_sends(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    real = queued_at(db)
    aged = threading.Event()
    aged.set()

    def queued(outbox_id: int) -> float | None:  # while set, every delivery looks queued days ago
        at = real(outbox_id)
        return at - 200_000 if at is not None and aged.is_set() else at

    with (
        open_receiver(SECRET, ["500"]) as receiver,
        gateway_with(tmp_path, webhooks(receiver.url), queued_at=queued) as (
            _,
            fake,
        ),
    ):
        fake.push("hello")
        fake.pop()
        poll_until(lambda: [r.state for r in _deliveries(db)] == [DeliveryState.DEAD], what="the delivery given up")
        runner = CliRunner()
        listed = runner.invoke(hermesctl, ["events", "deliveries", "--home", str(tmp_path)])
        assert listed.exit_code == 0, listed.output
        assert listed.output.splitlines()[0].split() == [
            "ID", "WEBHOOK", "TYPE", "EVENT", "STATE", "ATTEMPTS", "QUEUED", "LAST", "ERROR"
        ]  # fmt: skip
        row = listed.output.splitlines()[1].split()
        assert row[1:6] == ["ops", "turn.completed", row[3], "dead", "1"]
        assert "HTTP 500" in listed.output
        assert "give_up_after_s" in _deliveries(db)[0].last_error
        assert "1 dead delivery: send one again with 'hermesctl events replay ID'." in listed.output
        assert receiver.accepted == {}

        aged.clear()
        replayed = runner.invoke(hermesctl, ["events", "replay", row[0], "--home", str(tmp_path)])
        assert replayed.exit_code == 0, replayed.output
        assert f"Delivery {row[0]} to webhook 'ops' will be sent again" in replayed.output
        receiver.wait_accepted(1)
        poll_until(lambda: _all_sent(db, 1), what="the replayed delivery sent")
        again = runner.invoke(hermesctl, ["events", "replay", row[0], "--home", str(tmp_path)])
        assert again.exit_code == 1
        assert (
            again.output
            == f"Error: delivery {row[0]} is sent, not dead: only a delivery that was given up is replayed\n"
        )
    assert list(receiver.accepted.values()) == [1]
    assert next(iter(receiver.accepted)) == row[3]  # the event's own id, as before it died
    with Store.open(db, readonly=True) as store:
        (letter,) = store.dead_letters.listed(messages=False, open_only=False)
    assert letter.replayed_at is not None
    assert "HTTP 500" in letter.reason


def test_deliveries_left_unsent_by_a_stopped_gateway_go_at_the_next_start(tmp_path: Path) -> None:
    hold = threading.Event()
    with open_receiver(SECRET, hold=hold) as receiver:
        with gateway_with(tmp_path, webhooks(receiver.url)) as (gateway, fake):
            fake.push("hello")
            fake.pop()
            assert receiver.held.wait(10)  # its first attempt is under way, unanswered
            gateway.stop(timeout=1)  # the held attempt outlasts any drain: a short one stops the gateway as surely
        hold.set()  # the stopped gateway's attempt is answered now; it may or may not count as sent
        with gateway_with(tmp_path, webhooks(receiver.url)):
            poll_until(lambda: _all_sent(tmp_path / "state.db", 1), what="the delivery sent after the restart")
    assert len(receiver.accepted) == 1


def test_hermesctl_events_deliveries_refuses_what_it_cannot_replay(tmp_path: Path) -> None:
    Store.open(tmp_path / "state.db").close()
    result = CliRunner().invoke(hermesctl, ["events", "replay", "7", "--home", str(tmp_path)])
    assert result.exit_code == 1
    assert (
        result.output == "Error: no event delivery 7; 'hermesctl events deliveries --state dead' lists the dead ones\n"
    )
    listed = CliRunner().invoke(hermesctl, ["events", "deliveries", "--home", str(tmp_path)])
    assert listed.output == "No event deliveries.\n"


def test_an_api_run_that_completes_is_a_run_completed_event(tmp_path: Path) -> None:
    with open_receiver(SECRET) as receiver:
        config = webhooks(receiver.url, events=(EventKind.RUN_COMPLETED,))
        server = ApiServer(ApiServerConfig(port=0, key=KEY), environ={})
        sender = EventSender(config, queued_at=queued_at(tmp_path / "state.db"), environ={})
        gateway = Gateway(tmp_path / "state.db", senders=[*server.senders(), sender], events=config)
        server.start(GatewayInbox(gateway))
        try:
            api = Api(server, gateway)
            status, _, body = api.raw("POST", "/v1/runs", {"input": "run me", "model": "hermes-agent"}, key=KEY)
            assert status == 202, body
            run_id = json.loads(body)["run_id"]
            receiver.wait_accepted(1)
        finally:
            server.stop(10)
            gateway.stop(10)
    (event,) = receiver.of_type("run.completed")
    assert event["data"]["run_id"] == run_id
    assert (event["data"]["status"], event["data"]["output"]) == ("completed", "echo: run me")
