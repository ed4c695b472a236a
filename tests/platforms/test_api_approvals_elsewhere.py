"""A run paused for approval that is answered elsewhere (the console's operator, a chat, another replica, the
deadline) follows the store: ``GET /v1/runs/{id}`` and its event stream end it with the continued turn's reply,
not ``requires_approval`` for ever. Real gateway, real HTTP on 127.0.0.1."""

from __future__ import annotations

from hermes_actors.agents.approvals import ApprovalSettings, require_approvals
from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.tools import offer_tools
from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.testing import poll_until
from tests.platforms import test_api_server
from tests.platforms.test_api_approvals import _paused
from tests.platforms.test_api_runs import EventStream, get_run
from tests.platforms.test_api_server import Running, Start
from tests.runtime.test_approvals import Deploys

start = test_api_server.start


def _running(start: Start, *, timeout_s: float | None = None) -> tuple[Running, Deploys]:
    deploys = Deploys()
    agent = EchoAgent()
    offer_tools(agent, deploys)
    if timeout_s is not None:
        require_approvals(agent, ApprovalSettings(timeout_s=timeout_s))
    return start(agent=agent), deploys


def _final(running: Running, run_id: str, timeout: float) -> dict[str, object]:
    def finished() -> dict[str, object] | None:
        status, view = get_run(running, run_id)
        assert status == 200, view
        return view if view["status"] not in ("queued", "running", "requires_approval") else None

    found: dict[str, object] = poll_until(finished, timeout, what=f"the end of run {run_id}")
    return found


def test_a_run_the_operator_approves_in_the_console_completes_with_the_continued_reply(start: Start) -> None:
    running, deploys = _running(start)
    view = _paused(running)
    stream = EventStream(running, view["run_id"])
    try:
        assert stream.next()[0] == "run.requires_approval"
        GatewayInbox(running.gateway).approvals.decide(view["approval"]["id"], approved=True)
        events = stream.until_final()
    finally:
        stream.close()
    assert events[-1][0] == "run.completed"
    final = _final(running, view["run_id"], 10)
    assert final["status"] == "completed"
    assert final["output"] == 'echo: deploy returned \'{"deployed": "prod"}\''
    assert deploys.runs == [{"env": "prod"}]


def test_a_run_nobody_answers_in_time_completes_with_the_denial(start: Start) -> None:
    running, deploys = _running(start, timeout_s=1)
    view = _paused(running)
    final = _final(running, view["run_id"], 15)
    assert final["status"] == "completed"
    assert "did not approve this call (nobody answered within 1 s)" in str(final["output"])
    assert deploys.runs == []
