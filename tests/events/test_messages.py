"""Every accepted message ends answered, refused with a reply, or dead-lettered with a reason: what used to end
silently (a turn failing unexpectedly left its rows pending until a restart; a reply given up dropped its message)
is a dead letter, emitted as ``message.dead_lettered``, shown by ``hermesctl messages`` and replayed on request."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hermes_actors.agents.base import AgentReply, EchoAgent
from hermes_actors.agents.turn import TurnInput
from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.config import EventKind, EventsConfig, EventWebhook
from hermes_actors.messages import OutboundError
from hermes_actors.runtime.exchange import Exchange
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.store import InboxState, Store
from hermes_actors.testing import FakePlatform, GatedAgent, open_fake_gateway, poll_until
from tests.events.event_gateway import gateway_with
from tests.events.receiver import Receiver, open_receiver

SECRET = "whsec_" + base64.b64encode(b"dead-letter-test-secret-24b").decode()


class Breaking:
    """Makes every ordinary turn fail unexpectedly (a bug in a step, not the agent) while ``armed``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.armed = True
        original = Exchange.converse

        def converse(exchange: Exchange, *args: Any, **kwargs: Any) -> Any:
            if self.armed:
                raise RuntimeError("boom in a turn step")
            return original(exchange, *args, **kwargs)

        monkeypatch.setattr(Exchange, "converse", converse)


class RaisingAgent(EchoAgent):
    """An agent whose calls fail: its turns are answered with the failure, not dead-lettered."""

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        raise ConnectionError("the model is down")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with open_receiver(SECRET) as running:
        yield running


@pytest.fixture
def running(tmp_path: Path, receiver: Receiver) -> Iterator[tuple[Gateway, FakePlatform]]:
    config = EventsConfig(
        webhooks={"ops": EventWebhook(url=receiver.url, secret=SECRET, events=(EventKind.MESSAGE_DEAD_LETTERED,))}
    )
    with gateway_with(tmp_path, config) as pair:
        yield pair


def _ctl(home: Path, *args: str) -> str:
    result = CliRunner().invoke(hermesctl, [*args, "--home", str(home)])
    assert result.exit_code == 0, result.output
    return result.output


def test_a_turn_failing_unexpectedly_dead_letters_its_message_and_a_replay_answers_it(
    tmp_path: Path, running: tuple[Gateway, FakePlatform], receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway, fake = running
    breaking = Breaking(monkeypatch)
    fake.push("hello")
    notice = fake.pop()
    assert notice.error is OutboundError.AGENT_FAILED
    assert notice.text.startswith("Your message could not be answered: the gateway failed while handling it.")
    receiver.wait_accepted(1)
    (event,) = receiver.of_type("message.dead_lettered")
    assert event["data"]["inbox_id"] == 1
    assert event["data"]["message_id"] == "m1"
    assert event["data"]["reason"] == "the turn failed: RuntimeError('boom in a turn step')"
    with Store.open(tmp_path / "state.db", readonly=True) as store:
        row = store.inbox.get(1)
        assert row is not None
        assert row.state is InboxState.REJECTED  # not pending: no start runs it again by itself
    poll_until(lambda: gateway.vitals().messages["dead_lettered"] == 1, what="the dead letter counted")
    assert gateway.vitals().dead_letters == {"message": 1, "delivery": 0}

    listed = _ctl(tmp_path, "messages", "dead-letters").splitlines()
    assert listed[0].split() == ["ID", "MESSAGE", "PLATFORM", "DEAD", "SINCE", "REPLAY", "REASON"]
    assert listed[1].split()[:3] == ["1", "1", "fake"]
    assert listed[1].endswith("the turn failed: RuntimeError('boom in a turn step')")
    shown = _ctl(tmp_path, "messages", "show", "1")
    assert "Message 1: fake, platform message m1" in shown
    assert "  Inbox:     rejected" in shown
    assert shown.splitlines()[-1] == (
        "Outcome: dead-lettered: the turn failed: RuntimeError('boom in a turn step'). Run it again with: "
        "hermesctl messages replay 1"
    )

    breaking.armed = False
    replayed = _ctl(tmp_path, "messages", "replay", "1")
    assert replayed.startswith("Message 1 will be run again: ")
    assert fake.pop().text == "echo: hello"
    poll_until(lambda: "Outcome: answered." in _ctl(tmp_path, "messages", "show", "1"), what="shown as answered")
    assert _ctl(tmp_path, "messages", "dead-letters") == "No dead letters waiting for a replay.\n"
    assert "replayed" in _ctl(tmp_path, "messages", "dead-letters", "--all")
    refused = CliRunner().invoke(hermesctl, ["messages", "replay", "1", "--home", str(tmp_path)])
    assert refused.exit_code == 1
    assert refused.output == (
        "Error: message 1 has no dead letter waiting for a replay ('hermesctl messages show 1' tells what became of "
        "it)\n"
    )


def test_a_reply_given_up_dead_letters_the_message_it_answers_and_a_replay_sends_it(
    tmp_path: Path, running: tuple[Gateway, FakePlatform], receiver: Receiver
) -> None:
    gateway, fake = running
    fake.fail_next(1, permanent=True)
    fake.push("hi")
    receiver.wait_accepted(1)
    (event,) = receiver.of_type("message.dead_lettered")
    assert event["data"]["reason"] == "its reply (outbox row 1) could not be delivered: fake platform refused the send"
    assert event["data"]["reply_outbox_id"] == 1
    shown = _ctl(tmp_path, "messages", "show", "m1", "--platform", "fake")
    assert "    outbox 1: dead (given up " in shown
    assert "  Inbox:     done, session " in shown
    assert fake.sent == []

    assert _ctl(tmp_path, "messages", "replay", "1").startswith("Message 1 will be its reply sent again: ")
    assert fake.pop().text == "echo: hi"
    poll_until(lambda: "    outbox 1: sent " in _ctl(tmp_path, "messages", "show", "1"), what="the reply sent")
    counts = {"answered": 1, "refused": 0, "stopped": 0, "dead_lettered": 1}
    poll_until(lambda: gateway.vitals().messages == counts, what=lambda: f"{counts}, not {gateway.vitals().messages}")


def test_messages_end_counted_by_outcome(tmp_path: Path) -> None:
    fake = FakePlatform()
    gateway = Gateway(tmp_path / "state.db", agent=RaisingAgent(), senders=[fake])
    fake.attach(gateway)
    try:
        fake.push("anyone there?")
        assert fake.pop().error is OutboundError.AGENT_FAILED
        poll_until(lambda: gateway.vitals().messages.get("refused") == 1, what="one refused message counted")
        exposition = gateway.metrics().body.decode()
    finally:
        gateway.stop(timeout=10)
    assert 'hermes_messages_total{outcome="refused"} 1.0' in exposition
    assert 'hermes_messages_total{outcome="answered"} 0.0' in exposition
    assert 'hermes_dead_letters{kind="message"} 0.0' in exposition


def test_hermesctl_messages_names_what_it_cannot_find(tmp_path: Path) -> None:
    Store.open(tmp_path / "state.db").close()
    runner = CliRunner()
    missing = runner.invoke(hermesctl, ["messages", "show", "9", "--home", str(tmp_path)])
    assert missing.exit_code == 1
    assert missing.output == "Error: no message '9' in the inbox (answered rows go after queue retention)\n"
    wrong = runner.invoke(hermesctl, ["messages", "show", "abc", "--home", str(tmp_path)])
    assert wrong.output == (
        "Error: 'abc' is not an inbox id; name a platform's message id with --platform (and --account)\n"
    )
    assert _ctl(tmp_path, "messages", "dead-letters") == "No dead letters waiting for a replay.\n"


def test_a_message_refused_by_backpressure_is_counted_refused(tmp_path: Path) -> None:
    agent = GatedAgent()
    with open_fake_gateway(tmp_path / "state.db", agent=agent, pending_soft_limit=1, pending_hard_limit=1) as (
        gateway,
        fake,
    ):
        fake.push("first")
        assert agent.started.wait(10)
        fake.push("second")  # waits for the first turn
        fake.push("third")  # over the hard limit: refused with a reply
        assert fake.pop().text.startswith("Too many messages are waiting in this conversation")
        agent.release.set()
        replies = {fake.pop().text, fake.pop().text}
        assert replies == {"echo: first", "echo: second"}
        counts = {"answered": 2, "refused": 1, "stopped": 0, "dead_lettered": 0}
        poll_until(lambda: gateway.vitals().messages == counts, what=lambda: f"not {gateway.vitals().messages}")
