"""Approvals in Teams: the question carries an Adaptive Card with Approve and Deny (``Action.Submit``); a press comes
back as a message activity with the button's ``value``, signed like any activity, and decides as ``/approve``/
``/deny`` would, from the person who pressed. An unsigned press is refused. Real gateway, the fake Bot Connector."""

from __future__ import annotations

from typing import Any

from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.tools import offer_tools
from platforms.teams.cards import CARD_TYPE
from tests.platforms.teams_fake import FakeTeams, deliver, message
from tests.platforms.test_teams import APP, StartTeams, Teams, start_teams, teams
from tests.runtime.test_approvals import Deploys

__all__ = ["start_teams", "teams"]  # the fixtures


def _start(start_teams: StartTeams) -> tuple[Teams, Deploys]:
    deploys = Deploys()
    agent = EchoAgent()
    offer_tools(agent, deploys)
    return start_teams(agent=agent), deploys


def _card(running: Teams, teams: FakeTeams) -> tuple[int, list[dict[str, Any]]]:
    assert running.say('tool deploy {"env": "prod"}', activity_id="2001").status == 200
    question = teams.take()
    (card,) = question.body["attachments"]
    assert card["contentType"] == CARD_TYPE
    actions = card["content"]["actions"]
    assert f"/approve {actions[0]['data']['hermes_approval']}" in question.text  # the words too
    return int(actions[0]["data"]["hermes_approval"]), actions


def _press(running: Teams, teams: FakeTeams, value: dict[str, Any], *, token: bool = True, **fields: str) -> int:
    activity = message("", bot_app_id=APP, service_url=teams.service_url, value=value, **fields)
    return deliver(running.url(), activity, teams.token(APP) if token else None).status


def test_the_question_has_a_card_and_a_signed_press_of_approve_runs_the_call_once(
    start_teams: StartTeams, teams: FakeTeams
) -> None:
    running, deploys = _start(start_teams)
    approval_id, actions = _card(running, teams)
    assert [(a["type"], a["title"]) for a in actions] == [("Action.Submit", "Approve"), ("Action.Submit", "Deny")]
    assert _press(running, teams, actions[0]["data"], token=False, activity_id="2002") == 401
    assert deploys.runs == []
    assert _press(running, teams, actions[0]["data"], activity_id="2003") == 200
    assert teams.take().text == 'echo: deploy returned \'{"deployed": "prod"}\''
    assert deploys.runs == [{"env": "prod"}]
    assert approval_id > 0


def test_a_press_of_deny_refuses_and_someone_elses_press_is_refused(start_teams: StartTeams, teams: FakeTeams) -> None:
    running, deploys = _start(start_teams)
    _, actions = _card(running, teams)
    mallory = _press(running, teams, actions[0]["data"], activity_id="2004", user="29:1user-mallory", aad="aad-mallory")
    assert mallory == 200
    assert teams.take().text.startswith("Only the person this conversation belongs to (or the operator)")
    assert _press(running, teams, actions[1]["data"], activity_id="2005") == 200
    assert "did not approve this call" in teams.take().text
    assert deploys.runs == []
    assert _press(running, teams, {"something": "else"}, activity_id="2006") == 200  # not an approval: skipped
    assert teams.nothing_more()
