"""Approvals in Feishu: the question's last part is an interactive card with Approve and Deny; a press reaches the
app's event URL as a ``card.action.trigger`` event, sealed and signed like every event of the app, and decides as
``/approve``/``/deny`` would, from the person who pressed. A press with the wrong signature is refused. Real gateway,
the fake Open API."""

from __future__ import annotations

from typing import Any

from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.tools import offer_tools
from hermes_actors.testing import FakeClock
from platforms.feishu import FeishuAdapter, FeishuConfig
from tests.platforms.feishu_fake import FakeFeishu, SentMessage, deliver
from tests.platforms.support import StartGateway
from tests.platforms.test_feishu import ENCRYPT_KEY, MAIN_ID, apps_for, fake
from tests.runtime.test_approvals import Deploys

__all__ = ["fake"]  # the fixture


def _start(fake: FakeFeishu, start_gateway: StartGateway) -> tuple[str, Deploys]:
    deploys = Deploys()
    agent = EchoAgent()
    offer_tools(agent, deploys)
    clock = FakeClock()
    adapter = FeishuAdapter(FeishuConfig(port=0, apps=apps_for(fake)), environ={}, clock=clock)
    start_gateway(adapter, clock=clock, agent=agent)
    return f"{adapter.url}/feishu/events/main", deploys


def _question(url: str, fake: FakeFeishu) -> tuple[SentMessage, list[dict[str, Any]]]:
    event = fake.message_event(MAIN_ID, 'tool deploy {"env": "prod"}', chat_id="oc_dm")
    assert deliver(url, event, encrypt_key=ENCRYPT_KEY)[0] == 200
    (question,) = fake.wait_sent(1)
    assert question.msg_type == "interactive"
    assert question.card is not None
    (buttons,) = [e["actions"] for e in question.card["elements"] if e["tag"] == "action"]
    return question, buttons


def test_the_question_is_a_card_and_a_sealed_press_of_approve_runs_the_call_once(
    fake: FakeFeishu, start_gateway: StartGateway
) -> None:
    url, deploys = _start(fake, start_gateway)
    question, buttons = _question(url, fake)
    assert [b["text"]["content"] for b in buttons] == ["Approve", "Deny"]
    approval_id = buttons[0]["value"]["hermes_approval"]
    assert f"/approve {approval_id}" in question.text  # the words too
    press = fake.card_action_event(MAIN_ID, buttons[0]["value"], chat_id="oc_dm", message_id=question.message_id)
    assert deliver(url, press, encrypt_key=ENCRYPT_KEY, signing_key="wrong-key-123456")[0] == 401
    assert deploys.runs == []
    status, answer = deliver(url, press, encrypt_key=ENCRYPT_KEY)
    assert (status, answer.get("accepted")) == (200, True), answer
    assert fake.wait_sent(2)[1].text == 'echo: deploy returned \'{"deployed": "prod"}\''
    assert deploys.runs == [{"env": "prod"}]


def test_a_press_of_deny_refuses_and_someone_elses_press_is_refused(
    fake: FakeFeishu, start_gateway: StartGateway
) -> None:
    url, deploys = _start(fake, start_gateway)
    _, buttons = _question(url, fake)
    other = fake.card_action_event(MAIN_ID, buttons[0]["value"], chat_id="oc_dm", open_id="ou_eve", union_id="on_eve")
    assert deliver(url, other, encrypt_key=ENCRYPT_KEY)[0] == 200
    assert fake.wait_sent(2)[1].text.startswith("Only the person this conversation belongs to (or the operator)")
    denied = fake.card_action_event(MAIN_ID, buttons[1]["value"], chat_id="oc_dm")
    assert deliver(url, denied, encrypt_key=ENCRYPT_KEY)[0] == 200
    assert "did not approve this call" in fake.wait_sent(3)[2].text
    assert deploys.runs == []
    unrelated = fake.card_action_event(MAIN_ID, {"some": "button"}, chat_id="oc_dm")
    assert deliver(url, unrelated, encrypt_key=ENCRYPT_KEY) == (
        200,
        {"ignored": "a press of a card button that is not an approval's"},
    )
