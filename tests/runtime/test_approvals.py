"""Approvals through a real gateway: a call that needs approval pauses the turn durably, ``/approve`` runs it once and
the turn continues, ``/deny`` and a passed deadline refuse it, only the session's principal may answer, a restart
keeps the request, and a decision replayed after a crash never runs the call twice."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from hermes_actors.agents.approvals import ApprovalSettings, request_approval, require_approvals, tool_call
from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.tools import Tool, offer_tools
from hermes_actors.agents.turn import AgentMessage, AgentReply, TurnInput
from hermes_actors.config import EVENTS_PLATFORM, EventKind, EventsConfig, EventWebhook
from hermes_actors.messages import ApprovalRequest, OutboundMessage, ToolServerHealth, decode_outbound
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.store import Role, Store
from hermes_actors.store.approvals import ApprovalState
from hermes_actors.testing import FakeClock, FakePlatform, open_fake_gateway
from tests.runtime.conftest import MakeGateway


class Deploys:
    """A tool with a side effect: every run is counted."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []
        self.tool = Tool(
            name="deploy",
            description="Deploy the service.",
            parameters={"type": "object"},
            handler=self.run,
            needs_approval=True,
        )

    def run(self, arguments: dict[str, Any]) -> str:
        self.runs.append(arguments)
        return json.dumps({"deployed": arguments.get("env")})

    def fresh(self) -> tuple[Tool, ...]:
        return (self.tool,)

    def current(self) -> tuple[Tool, ...]:
        return (self.tool,)

    def health(self) -> list[ToolServerHealth]:
        return []


class CountingEcho(EchoAgent):
    """The echo agent, counting its turns (each one a model call of a real agent)."""

    def __init__(self) -> None:
        super().__init__()
        self.turns = 0

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        self.turns += 1
        return super().run_turn(turn, timeout_s=timeout_s)


def _agent(deploys: Deploys, **settings: Any) -> CountingEcho:
    agent = CountingEcho()
    offer_tools(agent, deploys)
    if settings:
        require_approvals(agent, ApprovalSettings(**settings))
    return agent


def _asked(reply: OutboundMessage) -> ApprovalRequest:
    assert isinstance(reply.approval, ApprovalRequest), reply
    return reply.approval


def _transcript(db_path: Path, session_id: str | None) -> list[tuple[str, str | None]]:
    assert session_id is not None
    with Store.open(db_path, readonly=True) as store:
        return [(str(m.role), m.content) for m in store.load_transcript(session_id)]


def test_a_call_that_needs_approval_pauses_and_approve_runs_it_once(make_gateway: MakeGateway, db_path: Path) -> None:
    deploys = Deploys()
    agent = _agent(deploys)
    _, fake = make_gateway(agent=agent)
    fake.push('tool deploy {"env": "prod"}')
    question = fake.pop()
    request = _asked(question)
    assert [(c.name, json.loads(c.arguments)) for c in request.calls] == [("deploy", {"env": "prod"})]
    assert f"/approve {request.id}" in question.text
    assert f"/deny {request.id}" in question.text
    assert deploys.runs == []  # nothing runs before a decision
    fake.push(f"/approve {request.id}")
    answer = fake.pop()
    assert answer.text == 'echo: deploy returned \'{"deployed": "prod"}\''
    assert deploys.runs == [{"env": "prod"}]
    assert agent.turns == 2  # the pause, then the continuation: nothing of the first turn is asked again
    roles = [role for role, _ in _transcript(db_path, answer.session_id)]
    assert roles == ["user", "assistant", "tool", "assistant"]  # the call, its result, the answer: no "/approve"
    with Store.open(db_path, readonly=True) as store:
        row = store.approvals.get(request.id)
    assert row is not None
    assert row.state is ApprovalState.APPROVED
    assert row.decided_by == "fake:user-1"
    assert row.resumed_at is not None
    assert json.loads(row.results or "{}") == {request.calls[0].call_id: '{"deployed": "prod"}'}
    fake.push(f"/approve {request.id}")  # answered already: nothing runs again
    assert "was answered already" in fake.pop().text
    assert deploys.runs == [{"env": "prod"}]


def test_deny_refuses_the_call_with_the_reason_and_the_agent_answers(make_gateway: MakeGateway) -> None:
    deploys = Deploys()
    _, fake = make_gateway(agent=_agent(deploys))
    fake.push('tool deploy {"env": "prod"}')
    request = _asked(fake.pop())
    fake.push(f"/deny {request.id} not on a Friday")
    answer = fake.pop()
    assert "did not approve this call (not on a Friday)" in answer.text
    assert deploys.runs == []


def test_only_the_sessions_principal_may_answer(make_gateway: MakeGateway) -> None:
    deploys = Deploys()
    _, fake = make_gateway(agent=_agent(deploys))
    fake.push('tool deploy {"env": "prod"}', chat_id="team", chat_type="group", user_id="alice")
    request = _asked(fake.pop())
    fake.push(f"/approve {request.id}", chat_id="team", chat_type="group", user_id="mallory")
    refusal = fake.pop()
    assert refusal.text == (
        f"Only the person this conversation belongs to (or the operator) can answer approval {request.id}; "
        "nothing was changed."
    )
    assert deploys.runs == []
    fake.push(f"/approve {request.id}", chat_id="team", chat_type="group", user_id="alice")
    assert "deployed" in fake.pop().text
    assert deploys.runs == [{"env": "prod"}]


def test_no_answer_before_the_deadline_is_a_denial(make_gateway: MakeGateway, clock: FakeClock) -> None:
    deploys = Deploys()
    gateway, fake = make_gateway(agent=_agent(deploys, timeout_s=30), clock=clock)
    fake.push('tool deploy {"env": "prod"}')
    request = _asked(fake.pop())
    assert request.expires_at == clock() + 30
    assert "No answer within 30 seconds counts as a refusal" in fake.sent[-1].text
    clock.advance(31)
    gateway.timers.poke()
    answer = fake.pop()
    assert "did not approve this call (nobody answered within 30 s)" in answer.text
    assert deploys.runs == []
    fake.push(f"/approve {request.id}")
    assert "was answered already (denied by timeout)" in fake.pop().text
    assert deploys.runs == []


def test_another_message_while_a_request_waits_denies_it_and_is_answered(make_gateway: MakeGateway) -> None:
    deploys = Deploys()
    _, fake = make_gateway(agent=_agent(deploys))
    fake.push('tool deploy {"env": "prod"}')
    request = _asked(fake.pop())
    fake.push("never mind")
    assert fake.pop().text.endswith("echo: never mind")
    fake.push(f"/approve {request.id}")
    assert "was answered already" in fake.pop().text
    assert deploys.runs == []


def test_a_request_waits_across_a_restart_and_the_decision_continues_the_turn(db_path: Path) -> None:
    deploys = Deploys()
    agent = _agent(deploys)
    with open_fake_gateway(db_path, agent=agent) as (_, fake):
        fake.push('tool deploy {"env": "prod"}')
        request = _asked(fake.pop())
    with open_fake_gateway(db_path, agent=agent) as (_, fake):
        fake.push(f"/approve {request.id}", message_id="after-restart")
        answer = fake.pop()
    assert answer.text == 'echo: deploy returned \'{"deployed": "prod"}\''
    assert deploys.runs == [{"env": "prod"}]
    assert agent.turns == 2


def test_a_decision_replayed_after_a_crash_never_runs_the_call_again(make_gateway: MakeGateway, db_path: Path) -> None:
    """The commit that approved a request claimed its calls; a process that died after it (before the results were
    kept) leaves the row approved: the replayed decision gets an error result instead of a second run."""
    deploys = Deploys()
    gateway, fake = make_gateway(agent=_agent(deploys))
    fake.push('tool deploy {"env": "prod"}')
    request = _asked(fake.pop())
    # What the dead process committed: the approval (its claim), and nothing after it.
    gateway.submit_write(lambda store: store.approvals.decide(request.id, approved=True, by="fake:user-1")).result(5)
    fake.push(f"/approve {request.id}")
    answer = fake.pop()
    assert "may have been running, so it was not run again" in answer.text
    assert deploys.runs == []


def test_an_agent_asks_about_a_tool_of_its_own_and_runs_it_only_when_approved(make_gateway: MakeGateway) -> None:
    """A plug-in agent asks through the plug-in API: ``turn.approvals.required`` for its own tool (named by
    ``agent.approvals.tools``), :func:`request_approval` to pause, ``turn.approvals.decision`` when it continues."""
    wiped: list[str] = []

    class Wiper(EchoAgent):
        def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
            decision = turn.approvals.decision("wipe-1")
            if decision is None:
                if not turn.approvals.required("wipe"):
                    raise AssertionError("agent.approvals.tools names wipe")
                return request_approval([tool_call("wipe-1", "wipe", {"path": turn.user_text})], text="Wipe it?")
            if decision.approved:
                wiped.append("done")
            said = "wiped" if decision.approved else f"kept ({decision.reason})"
            return AgentReply(
                messages=(
                    AgentMessage(role=Role.TOOL, content=said, tool_name="wipe", tool_call_id="wipe-1"),
                    AgentMessage(role=Role.ASSISTANT, content=said),
                ),
                text=said,
            )

    agent = Wiper()
    require_approvals(agent, ApprovalSettings(tools=["wipe"]))
    _, fake = make_gateway(agent=agent)
    fake.push("/tmp/scratch")
    question = fake.pop()
    assert question.text.startswith("Wipe it?\n\nApproval ")
    request = _asked(question)
    fake.push(f"/deny {request.id} keep it")
    assert fake.pop().text == "kept (keep it)"
    assert wiped == []
    fake.push("/tmp/other")
    fake.push(f"/approve {_asked(fake.pop()).id}")
    assert fake.pop().text == "wiped"
    assert wiped == ["done"]


@pytest.mark.parametrize("argument", ["", "seven", "-1"])
def test_a_decision_without_an_id_is_told_how_to_answer(make_gateway: MakeGateway, argument: str) -> None:
    _, fake = make_gateway(agent=_agent(Deploys()))
    fake.push(f"/approve {argument}".strip())
    assert fake.pop().text == "Usage: /approve ID, or /deny ID [reason]; the ID is in the question."


def test_an_unknown_request_is_named(make_gateway: MakeGateway) -> None:
    _, fake = make_gateway(agent=_agent(Deploys()))
    fake.push("/deny 4242")
    assert fake.pop().text == "There is no approval 4242 waiting here."


def test_the_request_is_told_to_event_webhooks_in_its_commit_and_the_turn_is_paused(db_path: Path) -> None:
    secret = "whsec_" + base64.b64encode(b"approvals-test-secret-24b").decode()
    kinds = (EventKind.APPROVAL_REQUESTED, EventKind.TURN_COMPLETED)
    hook = EventWebhook(url="http://10.1.2.3:9000/hooks", secret=secret, events=kinds)
    fake = FakePlatform()
    gateway = Gateway(db_path, agent=_agent(Deploys()), senders=[fake], events=EventsConfig(webhooks={"ops": hook}))
    fake.attach(gateway)
    try:
        fake.push('tool deploy {"env": "prod"}')
        request = _asked(fake.pop())
        with gateway.read() as store:
            rows = store.outbox.unsent(EVENTS_PLATFORM, limit=10)
    finally:
        gateway.stop(timeout=10)
    bodies = [json.loads(decode_outbound(row.payload).text) for row in rows]
    assert [body["type"] for body in bodies] == ["approval.requested", "turn.completed"]
    assert bodies[0]["data"]["approval_id"] == request.id
    assert bodies[0]["data"]["calls"] == [{"name": "deploy", "arguments": '{"env": "prod"}'}]
    assert bodies[1]["data"]["outcome"] == "paused"
