"""Approvals in Slack: the question carries Approve and Deny buttons (Block Kit), a press reaches the Interactivity
Request URL as a signed ``block_actions`` form and decides as ``/approve``/``/deny`` would, from the person who
pressed; an unsigned or forged press is refused and changes nothing. Real gateway, the fake Slack Web API."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.tools import offer_tools
from platforms.slack import SlackAdapter, SlackConfig
from platforms.slack.actions import APPROVE_ACTION, DENY_ACTION
from tests.platforms.slack_fake import FakeSlack, Posted, deliver, event_callback, message, press
from tests.platforms.support import StartGateway
from tests.platforms.test_slack import OTHER_SECRET, OTHER_TOKEN, SECRET, TOKEN, main_app
from tests.runtime.test_approvals import Deploys

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    fake = FakeSlack(tokens={TOKEN: "T1", OTHER_TOKEN: "T2"}).start()
    yield fake
    fake.stop()


def _start(slack: FakeSlack, start_gateway: StartGateway) -> tuple[str, Deploys]:
    deploys = Deploys()
    agent = EchoAgent()
    offer_tools(agent, deploys)
    adapter = SlackAdapter(SlackConfig(port=0, api_base_url=slack.api_base_url, apps=main_app()), environ={})
    start_gateway(adapter, agent=agent, tick_interval_s=0.1)
    return adapter.url, deploys


def _ask(url: str, slack: FakeSlack) -> tuple[Posted, int, list[dict[str, Any]]]:
    event = message('tool deploy {"env": "prod"}', channel="D1", channel_type="im")
    assert deliver(f"{url}/slack/events/main", event_callback(event), SECRET).status == 200
    question = slack.take()
    assert question.blocks is not None, question
    (buttons,) = [block["elements"] for block in question.blocks if block["type"] == "actions"]
    return question, int(buttons[0]["value"]), buttons


def test_the_question_has_buttons_and_a_signed_press_of_approve_runs_the_call_once(
    slack: FakeSlack, start_gateway: StartGateway
) -> None:
    url, deploys = _start(slack, start_gateway)
    question, approval_id, buttons = _ask(url, slack)
    assert [(b["text"]["text"], b["action_id"]) for b in buttons] == [
        ("Approve", APPROVE_ACTION),
        ("Deny", DENY_ACTION),
    ]
    assert f"/approve {approval_id}" in question.text  # the words too, for a client that shows no blocks
    body = press(APPROVE_ACTION, str(approval_id), channel="D1", message_ts=question.ts)
    forged = deliver(f"{url}/slack/actions/main", body, OTHER_SECRET, headers=FORM)
    assert forged.status == 401
    assert deploys.runs == []
    answer = deliver(f"{url}/slack/actions/main", body, SECRET, headers=FORM)
    assert answer.status == 200, answer.body
    assert slack.take().text == 'echo: deploy returned \'{"deployed": "prod"}\''
    assert deploys.runs == [{"env": "prod"}]
    again = deliver(f"{url}/slack/actions/main", body, SECRET, headers=FORM)  # Slack's retry: the same press
    assert again.body["duplicate"] is True
    assert slack.nothing_more()
    assert deploys.runs == [{"env": "prod"}]


def test_a_press_of_deny_refuses_and_a_press_by_someone_else_is_refused(
    slack: FakeSlack, start_gateway: StartGateway
) -> None:
    url, deploys = _start(slack, start_gateway)
    _, approval_id, _ = _ask(url, slack)
    other = press(APPROVE_ACTION, str(approval_id), user="U9", channel="D1", action_ts="1764461000.000001")
    assert deliver(f"{url}/slack/actions/main", other, SECRET, headers=FORM).status == 200
    assert slack.take().text.startswith("Only the person this conversation belongs to (or the operator)")
    denied = press(DENY_ACTION, str(approval_id), channel="D1", action_ts="1764461001.000001")
    assert deliver(f"{url}/slack/actions/main", denied, SECRET, headers=FORM).status == 200
    assert "did not approve this call" in slack.take().text
    assert deploys.runs == []
    other_button = press("someone_elses_button", "1", channel="D1")
    assert deliver(f"{url}/slack/actions/main", other_button, SECRET, headers=FORM).body["ignored"]
