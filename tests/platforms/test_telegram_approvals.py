"""Approvals in Telegram: the question carries Approve and Deny buttons (an inline keyboard), a press comes back as a
``callback_query`` from the person who pressed it and decides as ``/approve``/``/deny`` would (answered with
``answerCallbackQuery``), a press by someone else in a group is refused, and a webhook bot's press is checked like any
update (its secret). Real gateway, the fake Bot API on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.tools import offer_tools
from platforms.telegram import TelegramAdapter, TelegramBot
from tests.platforms.support import StartGateway
from tests.platforms.telegram_fake import (
    TelegramFake,
    callback_query,
    group_chat,
    message,
    post_update,
    private_chat,
    user,
)
from tests.platforms.test_telegram import SECRET, TOKEN, make_config, wait_calls, wait_sent
from tests.runtime.test_approvals import Deploys

ALICE = user(5001, "Alice", username="alice")
MALLORY = user(5009, "Mallory")


@pytest.fixture
def fake() -> Iterator[TelegramFake]:
    with TelegramFake() as server:
        server.add_bot(TOKEN)
        yield server


def _start(fake: TelegramFake, start_gateway: StartGateway, **config: Any) -> Deploys:
    deploys = Deploys()
    agent = EchoAgent()
    offer_tools(agent, deploys)
    adapter = TelegramAdapter(make_config(fake, **config), environ={})
    start_gateway(adapter, agent=agent, tick_interval_s=0.1)
    return deploys


def _question(fake: TelegramFake, count: int = 1) -> dict[str, Any]:
    """The ``count``-th message the bot sent, which asks for approval, as Telegram answered it."""
    wait_sent(fake, count)
    asked = fake.sent_messages()[count - 1]
    assert "reply_markup" in asked, asked
    return asked


def test_the_question_has_buttons_and_a_press_of_approve_runs_the_call_once(
    fake: TelegramFake, start_gateway: StartGateway
) -> None:
    deploys = _start(fake, start_gateway)
    fake.push(TOKEN, message(private_chat(ALICE), ALICE, 'tool deploy {"env": "prod"}'))
    asked = _question(fake)
    (row,) = asked["reply_markup"]["inline_keyboard"]
    approve, deny = row
    assert (approve["text"], deny["text"]) == ("Approve", "Deny")
    approval_id = int(approve["callback_data"].removeprefix("approve:"))
    assert deny["callback_data"] == f"deny:{approval_id}"
    assert f"/approve {approval_id}" in asked["text"]  # the words too, for a client that shows no buttons
    fake.push(TOKEN, callback_query(ALICE, asked, approve["callback_data"], query_id="press-1"))
    sent = wait_sent(fake, 2)
    assert sent[1]["text"] == 'echo: deploy returned \'{"deployed": "prod"}\''
    assert deploys.runs == [{"env": "prod"}]
    (answered,) = wait_calls(fake, "answerCallbackQuery", 1)
    assert answered.params == {"callback_query_id": "press-1"}
    fake.push(TOKEN, callback_query(ALICE, asked, approve["callback_data"], query_id="press-2"))  # pressed again
    assert "was answered already" in wait_sent(fake, 3)[2]["text"]
    assert deploys.runs == [{"env": "prod"}]


def test_a_press_of_deny_refuses_the_call(fake: TelegramFake, start_gateway: StartGateway) -> None:
    deploys = _start(fake, start_gateway)
    fake.push(TOKEN, message(private_chat(ALICE), ALICE, 'tool deploy {"env": "prod"}'))
    asked = _question(fake)
    deny = asked["reply_markup"]["inline_keyboard"][0][1]
    fake.push(TOKEN, callback_query(ALICE, asked, deny["callback_data"]))
    assert "did not approve this call" in wait_sent(fake, 2)[1]["text"]
    assert deploys.runs == []


def test_in_a_group_only_the_person_asked_may_press(fake: TelegramFake, start_gateway: StartGateway) -> None:
    deploys = _start(fake, start_gateway)
    team = group_chat(-100777, "Team")
    fake.push(TOKEN, message(team, ALICE, 'tool deploy {"env": "prod"}'))
    asked = _question(fake)
    approve = asked["reply_markup"]["inline_keyboard"][0][0]
    fake.push(TOKEN, callback_query(MALLORY, asked, approve["callback_data"], query_id="mallory"))
    refusal = wait_sent(fake, 2)[1]["text"]
    assert refusal.startswith("Only the person this conversation belongs to (or the operator) can answer approval")
    assert deploys.runs == []
    fake.push(TOKEN, callback_query(ALICE, asked, approve["callback_data"], query_id="alice"))
    assert "deployed" in wait_sent(fake, 3)[2]["text"]
    assert deploys.runs == [{"env": "prod"}]


def test_a_webhook_press_needs_the_secret_and_is_answered_in_the_reply(
    fake: TelegramFake, start_gateway: StartGateway
) -> None:
    deploys = Deploys()
    agent = EchoAgent()
    offer_tools(agent, deploys)
    bots = {"hook": TelegramBot(token=TOKEN, mode="webhook", secret_token=SECRET)}
    adapter = TelegramAdapter(make_config(fake, bots), environ={})
    start_gateway(adapter, agent=agent, tick_interval_s=0.1)
    url = adapter.url + "/telegram/hook"
    first = {"update_id": 10, **message(private_chat(ALICE), ALICE, 'tool deploy {"env": "prod"}', message_id=1)}
    assert post_update(url, first, SECRET)[0] == 200
    asked = _question(fake)
    data = asked["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
    press = {"update_id": 11, **callback_query(ALICE, asked, data, query_id="hook-press")}
    assert post_update(url, press, "not-the-secret")[0] == 401  # checked like any update
    assert deploys.runs == []
    status, answer = post_update(url, press, SECRET)
    assert (status, answer["method"], answer["callback_query_id"]) == (200, "answerCallbackQuery", "hook-press")
    assert "deployed" in wait_sent(fake, 2)[1]["text"]
    assert deploys.runs == [{"env": "prod"}]
