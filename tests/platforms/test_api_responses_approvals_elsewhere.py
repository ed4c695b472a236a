"""A ``/v1/responses`` request for approval answered elsewhere (the console's operator, a chat, another replica,
the deadline) follows the store: the client's later ``mcp_approval_response`` (or ``POST
/v1/responses/{id}/approval``) is answered with the turn that continued from that decision, not "answered already",
and a background response whose turn paused while no server watched it is read back with its request. Real
gateway, real HTTP on 127.0.0.1, the openai client."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai

from hermes_actors.agents.approvals import ApprovalSettings, require_approvals
from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.tools import offer_tools
from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.testing import GatedAgent, poll_until
from platforms.api_server import ApiServer, ApiServerConfig
from platforms.api_server.wire import PLATFORM
from tests.platforms import test_api_server
from tests.platforms.test_api_runs import AUTH
from tests.platforms.test_api_server import KEY, Running, Start
from tests.runtime.test_approvals import Deploys

start = test_api_server.start

_DEPLOY = 'tool deploy {"env": "prod"}'
_DEPLOYED = 'echo: deploy returned \'{"deployed": "prod"}\''


def _running(
    start: Start, agent: EchoAgent | None = None, *, timeout_s: float | None = None
) -> tuple[Running, Deploys]:
    deploys = Deploys()
    agent = agent or EchoAgent()
    offer_tools(agent, deploys)
    if timeout_s is not None:
        require_approvals(agent, ApprovalSettings(timeout_s=timeout_s))
    return start(agent=agent), deploys


def _requests(output: list[Any]) -> list[Any]:
    return [item for item in output if item.type == "mcp_approval_request"]


def _approval_id(item: Any) -> int:
    return int(str(item.id).removeprefix("mcpr_").split("_")[0])


def _continued(running: Running, message_id: str, timeout: float) -> None:
    """Wait until the turn of ``message_id`` has continued from its request (the store no longer shows it open)."""

    def continued() -> bool:
        found = GatewayInbox(running.gateway).stored_answer(PLATFORM, message_id)
        return found is not None and found.state == "done" and found.approval is None

    poll_until(continued, timeout, what=f"the turn of {message_id} continued")


def _answer(client: openai.OpenAI, previous_id: str, request_id: str, *, approve: bool) -> Any:
    return client.responses.create(
        model="hermes-agent",
        previous_response_id=previous_id,
        input=[{"type": "mcp_approval_response", "approval_request_id": request_id, "approve": approve}],
    )


def test_an_approval_response_after_the_console_approved_answers_with_the_continued_reply(start: Start) -> None:
    running, deploys = _running(start)
    client = running.client()
    paused = client.responses.create(model="hermes-agent", input=_DEPLOY)
    (asked,) = _requests(paused.output)
    GatewayInbox(running.gateway).approvals.decide(_approval_id(asked), approved=True)
    _continued(running, f"api-{paused.id}", 10)
    answered = _answer(client, paused.id, asked.id, approve=True)
    assert answered.status == "completed"
    assert answered.previous_response_id == paused.id
    assert answered.output_text == _DEPLOYED  # the continued turn's reply, not "answered already"
    assert _requests(answered.output) == []
    assert deploys.runs == [{"env": "prod"}]  # the call ran once, for the console's approval
    assert client.responses.retrieve(answered.id).output_text == _DEPLOYED  # stored like any response


def test_the_approval_route_after_the_deadline_answers_with_the_denial(start: Start) -> None:
    running, deploys = _running(start, timeout_s=1)
    client = running.client()
    paused = client.responses.create(model="hermes-agent", input=_DEPLOY)
    (asked,) = _requests(paused.output)
    _continued(running, f"api-{paused.id}", 15)
    body = {"approval_id": _approval_id(asked), "decision": "approve"}
    status, _, answered = running.request(body, path=f"/v1/responses/{paused.id}/approval", headers=AUTH)
    assert status == 200, answered
    assert answered["previous_response_id"] == paused.id
    (message,) = [item for item in answered["output"] if item["type"] == "message"]
    assert "did not approve this call (nobody answered within 1 s)" in message["content"][0]["text"]
    assert deploys.runs == []


def test_a_streamed_approval_response_after_a_decision_elsewhere_streams_the_continued_reply(start: Start) -> None:
    running, deploys = _running(start)
    client = running.client()
    paused = client.responses.create(model="hermes-agent", input=_DEPLOY)
    (asked,) = _requests(paused.output)
    GatewayInbox(running.gateway).approvals.decide(_approval_id(asked), approved=False, reason="not today")
    _continued(running, f"api-{paused.id}", 10)
    with client.responses.stream(
        model="hermes-agent",
        previous_response_id=paused.id,
        input=[{"type": "mcp_approval_response", "approval_request_id": asked.id, "approve": True}],
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[0] == "response.created"
    assert kinds[-1] == "response.completed"
    assert "did not approve this call (not today)" in final.output_text
    assert deploys.runs == []


class _GatedDeployer(GatedAgent):
    """The echo agent whose turns wait for ``release``: a turn that calls ``deploy`` pauses after it."""


def test_a_background_response_that_paused_unwatched_is_read_back_with_its_request(start: Start) -> None:
    agent = _GatedDeployer()
    running, deploys = _running(start, agent)
    with running.client() as client:
        pending = client.responses.create(model="hermes-agent", input=_DEPLOY, background=True)
        assert agent.started.wait(10)
    running.server.stop(0.5)  # the turn goes on in the gateway, unwatched, and pauses there
    agent.release.set()
    assert running.gateway.wait_idle(10)
    restarted = ApiServer(ApiServerConfig(port=0, key=KEY), environ={})
    restarted.start(GatewayInbox(running.gateway))
    try:
        with openai.OpenAI(base_url=restarted.url + "/v1", api_key=KEY, max_retries=0, timeout=10) as client:
            found = client.responses.retrieve(pending.id)
            assert found.status == "completed"
            (asked,) = _requests(found.output)  # the question, as a watched response would have it
            assert (asked.name, asked.arguments) == ("deploy", '{"env": "prod"}')
            assert [item.type for item in found.output] == ["mcp_approval_request"]  # no empty message before it
    finally:
        restarted.stop(10)
    assert deploys.runs == []
    (waiting,) = GatewayInbox(running.gateway).approvals.pending()
    assert f"mcpr_{waiting.id}_0" == asked.id


def test_a_background_response_decided_elsewhere_while_unwatched_is_read_back_with_the_continued_reply(
    start: Start,
) -> None:
    agent = _GatedDeployer()
    running, deploys = _running(start, agent)
    with running.client() as client:
        pending = client.responses.create(model="hermes-agent", input=_DEPLOY, background=True)
        assert agent.started.wait(10)
    running.server.stop(0.5)
    agent.release.set()
    assert running.gateway.wait_idle(10)
    inbox = GatewayInbox(running.gateway)
    (waiting,) = inbox.approvals.pending()
    inbox.approvals.decide(waiting.id, approved=True)
    _continued(running, f"api-bg-{pending.id}", 10)
    restarted = ApiServer(ApiServerConfig(port=0, key=KEY), environ={})
    restarted.start(inbox)
    try:
        with openai.OpenAI(base_url=restarted.url + "/v1", api_key=KEY, max_retries=0, timeout=10) as client:
            found = client.responses.retrieve(pending.id)
    finally:
        restarted.stop(10)
    assert found.status == "completed"
    assert found.output_text == _DEPLOYED
    assert _requests(found.output) == []
    assert deploys.runs == [{"env": "prod"}]


class _SlowDeploys(Deploys):
    """A deploy that waits for ``release`` once it runs (the continued turn is under way, not yet committed)."""

    def __init__(self) -> None:
        super().__init__()
        self.running = threading.Event()
        self.release = threading.Event()

    def run(self, arguments: dict[str, Any]) -> str:
        self.running.set()
        self.release.wait(10)
        return super().run(arguments)


def test_an_approval_response_that_meets_a_decision_elsewhere_under_way_answers_with_the_continued_reply(
    start: Start,
) -> None:
    deploys = _SlowDeploys()
    agent = EchoAgent()
    offer_tools(agent, deploys)
    running = start(agent=agent)
    client = running.client()
    paused = client.responses.create(model="hermes-agent", input=_DEPLOY)
    (asked,) = _requests(paused.output)
    GatewayInbox(running.gateway).approvals.decide(_approval_id(asked), approved=True)
    assert deploys.running.wait(10)  # decided by the operator; its turn runs the call, not yet committed
    with ThreadPoolExecutor(1) as pool:
        answering = pool.submit(_answer, client, paused.id, asked.id, approve=False)
        poll_until(lambda: running.gateway.statistics().queued_messages == 1, 10, what="the client's answer queued")
        deploys.release.set()
        answered = answering.result(timeout=15)
    assert answered.output_text == _DEPLOYED  # what happened, not "answered already"
    assert deploys.runs == [{"env": "prod"}]


def test_a_background_approval_response_that_meets_a_decision_elsewhere_under_way_ends_with_the_continued_reply(
    start: Start,
) -> None:
    deploys = _SlowDeploys()
    agent = EchoAgent()
    offer_tools(agent, deploys)
    running = start(agent=agent)
    client = running.client()
    paused = client.responses.create(model="hermes-agent", input=_DEPLOY)
    (asked,) = _requests(paused.output)
    GatewayInbox(running.gateway).approvals.decide(_approval_id(asked), approved=True)
    assert deploys.running.wait(10)
    answering = client.responses.create(
        model="hermes-agent",
        previous_response_id=paused.id,
        input=[{"type": "mcp_approval_response", "approval_request_id": asked.id, "approve": False}],
        background=True,
    )
    assert answering.status == "queued"
    deploys.release.set()

    def ended() -> Any:
        found = client.responses.retrieve(answering.id)
        return found if found.status not in ("queued", "in_progress") else None

    answered = poll_until(ended, 15, what="the background answer's end")
    assert answered.status == "completed"
    assert answered.output_text == _DEPLOYED
    assert deploys.runs == [{"env": "prod"}]


def test_an_approval_response_in_a_conversation_after_the_console_approved_answers_with_the_reply(
    start: Start,
) -> None:
    running, deploys = _running(start)
    client = running.client()
    conversation = client.conversations.create()
    paused = client.responses.create(model="hermes-agent", input=_DEPLOY, conversation=conversation.id)
    (asked,) = _requests(paused.output)
    GatewayInbox(running.gateway).approvals.decide(_approval_id(asked), approved=True)
    _continued(running, f"api-{paused.id}", 10)
    answered = client.responses.create(
        model="hermes-agent",
        conversation=conversation.id,
        input=[{"type": "mcp_approval_response", "approval_request_id": asked.id, "approve": True}],
    )
    assert answered.output_text == _DEPLOYED
    assert deploys.runs == [{"env": "prod"}]


def test_another_user_of_the_key_is_not_answered_from_the_store(start: Start) -> None:
    running, deploys = _running(start)
    client = running.client()
    paused = client.responses.create(model="hermes-agent", input=_DEPLOY, user="alice")
    (asked,) = _requests(paused.output)
    GatewayInbox(running.gateway).approvals.decide(_approval_id(asked), approved=True)
    _continued(running, f"api-{paused.id}", 10)
    answered = client.responses.create(
        model="hermes-agent",
        previous_response_id=paused.id,
        user="mallory",
        input=[{"type": "mcp_approval_response", "approval_request_id": asked.id, "approve": True}],
    )
    assert _DEPLOYED not in answered.output_text  # refused by the session, as a chat's /approve from mallory is
    assert "can answer approval" in answered.output_text
    assert deploys.runs == [{"env": "prod"}]
