"""Approvals through ``/v1/responses`` with the openai client: a turn that paused on a call of the gateway's tools
ends with an ``mcp_approval_request`` item; an ``mcp_approval_response`` with ``previous_response_id`` approves it
(the tool runs once and the next response answers), and ``POST /v1/responses/{id}/approval`` denies. Real gateway,
real HTTP on 127.0.0.1."""

from __future__ import annotations

from typing import Any

from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.tools import offer_tools
from tests.platforms import test_api_server
from tests.platforms.test_api_runs import AUTH
from tests.platforms.test_api_server import Running, Start
from tests.runtime.test_approvals import Deploys

start = test_api_server.start


def _running(start: Start) -> tuple[Running, Deploys]:
    deploys = Deploys()
    agent = EchoAgent()
    offer_tools(agent, deploys)
    return start(agent=agent), deploys


def _requests(output: list[Any]) -> list[Any]:
    return [item for item in output if item.type == "mcp_approval_request"]


def test_an_mcp_approval_response_approves_and_the_next_response_answers(start: Start) -> None:
    running, deploys = _running(start)
    client = running.client()
    paused = client.responses.create(model="hermes-agent", input='tool deploy {"env": "prod"}')
    (asked,) = _requests(paused.output)
    assert (asked.name, asked.arguments, asked.server_label) == ("deploy", '{"env": "prod"}', "hermes")
    assert asked.id.startswith("mcpr_")
    assert deploys.runs == []
    answered = client.responses.create(
        model="hermes-agent",
        previous_response_id=paused.id,
        input=[{"type": "mcp_approval_response", "approval_request_id": asked.id, "approve": True}],
    )
    assert answered.output_text == 'echo: deploy returned \'{"deployed": "prod"}\''
    assert _requests(answered.output) == []
    assert deploys.runs == [{"env": "prod"}]


def test_the_approval_route_denies_and_continues_the_session(start: Start) -> None:
    running, deploys = _running(start)
    client = running.client()
    paused = client.responses.create(model="hermes-agent", input='tool deploy {"env": "prod"}')
    (asked,) = _requests(paused.output)
    approval_id = int(asked.id.removeprefix("mcpr_").split("_")[0])
    body = {"approval_id": approval_id, "decision": "deny", "reason": "later"}
    status, _, denied = running.request(body, path=f"/v1/responses/{paused.id}/approval", headers=AUTH)
    assert status == 200, denied
    assert denied["previous_response_id"] == paused.id
    (message,) = [item for item in denied["output"] if item["type"] == "message"]
    assert "did not approve this call (later)" in message["content"][0]["text"]
    assert deploys.runs == []
    status, _, missing = running.request(body, path="/v1/responses/resp_" + "0" * 32 + "/approval", headers=AUTH)
    assert status == 404, missing
