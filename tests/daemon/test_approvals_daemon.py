"""Approvals through a real ``hermesd``: its agent (a scripted OpenAI-compatible model on 127.0.0.1) calls an MCP tool
that ``require_approval`` holds; the run pauses (``requires_approval``), hermesd is killed with -9 and started again,
and the approval over the API continues the turn in the new process: the tool runs once, after the approval, and the
model is asked once more (two model calls in all: nothing of the paused turn is asked again)."""

from __future__ import annotations

import json
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_actors.store import Store
from hermes_actors.store.approvals import ApprovalState
from hermes_actors.testing import poll_until
from tests.agents.chat_server import ChatServer, completion, open_chat_server, tool_call
from tests.agents.mcp_fixtures import SERVER, received
from tests.daemon.test_daemon import Daemon, start_daemon

pytestmark = pytest.mark.slow


@pytest.fixture
def model() -> Iterator[ChatServer]:
    with open_chat_server() as server:
        yield server


def _config(model: ChatServer, calls: Path) -> str:
    return f"""
daemon:
  drain_timeout_s: 5
platforms:
  api_server:
    port: 0
runtime:
  auto_titles: false
agent:
  base_url: {model.base_url}
  model: test-model
  max_retries: 0
  approvals:
    timeout_s: 600
  mcp_servers:
    files:
      command: [{sys.executable}, {SERVER}, stdio]
      env: {{MCP_CALLS: {calls}}}
      allow: [add]
      require_approval: [add]
"""


def _call(url: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(response.status), json.loads(response.read())


def _run_view(daemon: Daemon, run_id: str, status: str) -> dict[str, Any]:
    def seen() -> dict[str, Any] | None:
        _, view = _call(f"{daemon.api}/v1/runs/{run_id}")
        return view if view["status"] == status else None

    found: dict[str, Any] = poll_until(seen, 60, what=f"run {run_id} {status}")
    return found


def test_an_approval_pending_across_a_kill_9_continues_in_the_new_process_and_runs_the_tool_once(
    tmp_path: Path, model: ChatServer
) -> None:
    home = tmp_path / "h"
    home.mkdir()
    calls = tmp_path / "files-calls.jsonl"
    (home / "config.yaml").write_text(_config(model, calls))
    model.script(
        completion("Let me add them.", tool_calls=[tool_call("c1", "files__add", {"a": 2, "b": 3})]),
        completion("2 + 3 = 5."),
    )
    first = Daemon(home, start_daemon(home))
    try:
        status, created = _call(f"{first.api}/v1/runs", {"input": "add 2 and 3"})
        assert status == 202, created
        run_id = created["run_id"]
        paused = _run_view(first, run_id, "requires_approval")
        approval = paused["approval"]
        assert [(c["name"], json.loads(c["arguments"])) for c in approval["calls"]] == [
            ("files__add", {"a": 2, "b": 3})
        ]
        assert received(calls) == []  # nothing ran before a decision
    finally:
        first.process.kill()  # kill -9: the request waits in the store
        first.process.communicate(timeout=10)
    assert len(model.completion_bodies) == 1

    second = Daemon(home, start_daemon(home))
    try:
        again = _run_view(second, run_id, "requires_approval")  # read back from the store
        assert again["approval"]["id"] == approval["id"]
        status, answered = _call(
            f"{second.api}/v1/runs/{run_id}/approval", {"approval_id": approval["id"], "decision": "approve"}
        )
        assert status == 202, answered
        final = _run_view(second, run_id, "completed")
        assert final["output"] == "2 + 3 = 5."
    finally:
        code, _, err = second.stop()
    assert code == 0, err
    assert [(c["tool"], c["arguments"]) for c in received(calls)] == [("add", {"a": 2, "b": 3})]  # once, after it
    assert len(model.completion_bodies) == 2  # the pause's call and the continuation's: none repeated
    continued = model.completion_bodies[1]["messages"]
    assert [m["role"] for m in continued] == ["user", "assistant", "tool"]
    assert continued[2] == {"role": "tool", "content": "5", "tool_call_id": "c1"}
    with Store.open(home / "state.db", readonly=True) as store:
        row = store.approvals.get(approval["id"])
    assert row is not None
    assert row.state is ApprovalState.APPROVED
    assert row.resumed_at is not None
