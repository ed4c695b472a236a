"""``POST /v1/runs/{id}/approval``: a run whose turn paused on a tool call that needs approval is
``requires_approval``; the run's principal approves (the tool runs once and the run completes with the continued
turn's reply) or denies it; another key's or user's answer is refused; a wrong or stale id is a 409. Real gateway,
real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
from typing import Any

from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.tools import offer_tools
from hermes_actors.testing import poll_until
from tests.platforms import test_api_server
from tests.platforms.test_api_runs import AUTH, EventStream, get_run, post_run, wait_final
from tests.platforms.test_api_server import Running, Start
from tests.runtime.test_approvals import Deploys

start = test_api_server.start


def _running(start: Start) -> tuple[Running, Deploys]:
    deploys = Deploys()
    agent = EchoAgent()
    offer_tools(agent, deploys)
    return start(agent=agent), deploys


def _paused(running: Running, text: str = 'tool deploy {"env": "prod"}', **headers: str) -> dict[str, Any]:
    status, created = post_run(running, {"input": text}, **headers)
    assert status == 202, created

    def waiting() -> dict[str, Any] | None:
        _, view = get_run(running, created["run_id"])
        return view if view["status"] == "requires_approval" else None

    view: dict[str, Any] = poll_until(waiting, 10, what="the run's pause")
    return view


def _answer(running: Running, run_id: str, body: dict[str, Any], **headers: str) -> tuple[int, Any]:
    status, _, payload = running.request(body, path=f"/v1/runs/{run_id}/approval", headers={**AUTH, **headers})
    return status, payload


def test_an_approved_run_runs_the_tool_once_and_completes_with_the_continued_reply(start: Start) -> None:
    running, deploys = _running(start)
    view = _paused(running)
    approval = view["approval"]
    assert [(c["name"], json.loads(c["arguments"])) for c in approval["calls"]] == [("deploy", {"env": "prod"})]
    assert deploys.runs == []
    stream = EventStream(running, view["run_id"])
    try:
        name, data = stream.next()  # what was buffered: the pause
        assert name == "run.requires_approval"
        assert data["approval"]["id"] == approval["id"]
        status, answered = _answer(running, view["run_id"], {"approval_id": approval["id"], "decision": "approve"})
        assert status == 202, answered
        events = stream.until_final()
    finally:
        stream.close()
    assert events[-1][0] == "run.completed"
    final = wait_final(running, view["run_id"])
    assert final["output"] == 'echo: deploy returned \'{"deployed": "prod"}\''
    assert "approval" not in final
    assert deploys.runs == [{"env": "prod"}]


def test_a_denied_run_completes_without_running_the_tool(start: Start) -> None:
    running, deploys = _running(start)
    view = _paused(running)
    body = {"approval_id": view["approval"]["id"], "decision": "deny", "reason": "not today"}
    status, _ = _answer(running, view["run_id"], body)
    assert status == 202
    assert "did not approve this call (not today)" in wait_final(running, view["run_id"])["output"]
    assert deploys.runs == []


def test_another_user_of_the_key_may_not_answer(start: Start) -> None:
    running, deploys = _running(start)
    view = _paused(running, **{"X-Hermes-Session-Key": "alice"})
    body = {"approval_id": view["approval"]["id"], "decision": "approve"}
    status, refused = _answer(running, view["run_id"], body, **{"X-Hermes-Session-Key": "mallory"})
    assert status == 403, refused
    assert refused["error"]["code"] == "not_your_approval"
    assert refused["error"]["message"].startswith("only the user of the run's session")
    assert get_run(running, view["run_id"])[1]["status"] == "requires_approval"
    status, _ = _answer(running, view["run_id"], body, **{"X-Hermes-Session-Key": "alice"})
    assert status == 202
    assert wait_final(running, view["run_id"])["status"] == "completed"
    assert deploys.runs == [{"env": "prod"}]


def test_a_wrong_id_a_finished_run_and_a_bad_body_are_refused(start: Start) -> None:
    running, deploys = _running(start)
    view = _paused(running)
    approval_id = view["approval"]["id"]
    status, wrong = _answer(running, view["run_id"], {"approval_id": approval_id + 1, "decision": "approve"})
    assert (status, wrong["error"]["code"]) == (409, "approval_mismatch")
    status, bad = _answer(running, view["run_id"], {"approval_id": approval_id, "decision": "maybe"})
    assert status == 400, bad
    status, _, stopped = running.request(None, path=f"/v1/runs/{view['run_id']}/stop", headers=AUTH)
    assert (status, stopped["error"]["code"]) == (409, "run_waiting_for_approval")
    assert _answer(running, view["run_id"], {"approval_id": approval_id, "decision": "approve"})[0] == 202
    wait_final(running, view["run_id"])
    status, late = _answer(running, view["run_id"], {"approval_id": approval_id, "decision": "deny"})
    assert (status, late["error"]["code"]) == (409, "run_not_waiting")
    assert deploys.runs == [{"env": "prod"}]
