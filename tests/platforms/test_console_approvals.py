"""Approvals for the operator: ``/api/approvals`` lists the requests waiting and answers one (admin key only), and
the console's Approvals page shows them with Approve and Deny forms (CSRF checked like the console's other changes).
An answer is sent in the name of the chat that was asked: the session continues there. Real gateway and API server
on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.tools import offer_tools
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.testing import poll_until
from platforms.api_server import ApiServer, ApiServerConfig
from tests.platforms.console_client import Console
from tests.platforms.test_api_operator import ADMIN, KEY, Api
from tests.runtime.test_approvals import Deploys


@pytest.fixture
def deploys() -> Deploys:
    return Deploys()


@pytest.fixture
def console(tmp_path: Path, deploys: Deploys) -> Iterator[Console]:
    agent = EchoAgent()
    offer_tools(agent, deploys)
    with ExitStack() as stack:
        server = ApiServer(ApiServerConfig(port=0, key=KEY), environ={})
        gateway = Gateway(tmp_path / "state.db", agent=agent, senders=server.senders())
        stack.callback(gateway.stop, 10)
        server.start(GatewayInbox(gateway, admin_key=ADMIN))
        stack.callback(server.stop, 10)
        yield Console(Api(server, gateway))


def _paused(api: Api, text: str = 'tool deploy {"env": "prod"}') -> dict[str, Any]:
    """Start a run that pauses on the deploy call; the request waiting, as ``GET /api/approvals`` lists it."""
    status, created = api.call("POST", "/v1/runs", {"input": text}, key=KEY)
    assert status == 202, created

    def listed() -> dict[str, Any] | None:
        waiting = api.ok("GET", "/api/approvals")["data"]
        return waiting[-1] if waiting else None

    request: dict[str, Any] = poll_until(listed, 10, what="the request for approval")
    return request


def test_the_operator_api_lists_a_request_and_approving_it_runs_the_call_once(
    console: Console, deploys: Deploys
) -> None:
    api = console.api
    request = _paused(api)
    assert [(c["name"], c["arguments"]) for c in request["calls"]] == [("deploy", '{"env": "prod"}')]
    assert (request["platform"], request["state"]) == ("api_server", "pending")
    assert api.call("GET", "/api/approvals", key=KEY)[0] == 401  # the client key is no admin key
    status, answered = api.call("POST", f"/api/approvals/{request['id']}", {"decision": "approve", "reason": "ok"})
    assert status == 202, answered
    assert (answered["state"], answered["decided_by"]) == ("approved", "operator")
    poll_until(lambda: deploys.runs, 10, what="the approved call")
    assert deploys.runs == [{"env": "prod"}]
    assert api.ok("GET", "/api/approvals")["data"] == []

    def continued() -> list[Any] | None:
        messages = api.ok("GET", f"/api/sessions/{request['session_id']}/messages")["data"]
        return messages if messages[-1]["role"] == "assistant" and messages[-1]["content"] else None

    messages = poll_until(continued, 10, what="the continued turn")
    assert messages[-1]["content"] == 'echo: deploy returned \'{"deployed": "prod"}\''
    status, again = api.call("POST", f"/api/approvals/{request['id']}", {"decision": "deny"})
    assert (status, again["error"]["code"]) == (409, "approval_closed")
    assert api.call("POST", "/api/approvals/424242", {"decision": "deny"})[0] == 404
    assert api.call("POST", f"/api/approvals/{request['id']}", {"decision": "maybe"})[0] == 400
    assert deploys.runs == [{"env": "prod"}]


def test_the_console_lists_requests_and_denies_one_with_its_csrf_token(console: Console, deploys: Deploys) -> None:
    request = _paused(console.api)
    client = console.logged_in()
    page = client.get("/console/approvals")
    assert page.status == 200
    assert f'id="approval-{request["id"]}"' in page.text
    assert "deploy" in page.text
    forged = client.post(f"/console/approvals/{request['id']}", {"decision": "deny", "csrf": "forged"})
    assert forged.status == 403
    assert console.api.ok("GET", "/api/approvals")["data"][0]["state"] == "pending"  # nothing changed
    csrf = page.csrf()
    denied = client.post(f"/console/approvals/{request['id']}", {"csrf": csrf, "decision": "deny", "reason": "no"})
    assert (denied.status, denied.location) == (303, "/console/approvals")
    poll_until(lambda: not console.api.ok("GET", "/api/approvals")["data"], 10, what="the answered request")
    assert "Nothing waits for approval." in client.get("/console/approvals").text
    assert deploys.runs == []
    unknown = client.post("/console/approvals/424242", {"csrf": csrf, "decision": "approve"})
    assert unknown.status == 404
