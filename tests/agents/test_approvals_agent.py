"""The agent side of approvals: which calls wait (a tool's ``needs_approval``, an MCP server's ``require_approval``,
``agent.approvals.tools`` patterns), the built-in OpenAI agent ending a turn on them after the round's other calls
ran, and the plug-in API's ``request_approval``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from mcp import types

from hermes_actors.agents import ApprovalDecision, ApprovalGate, request_approval, tool_call
from hermes_actors.agents.approvals import ApprovalSettings, approval_settings, require_approvals
from hermes_actors.agents.base import TurnInput
from hermes_actors.agents.mcp.catalog import offered_tools
from hermes_actors.agents.mcp.settings import McpServerSettings
from hermes_actors.agents.openai_chat import OpenAIAgent
from hermes_actors.agents.tools import Tool, freeze_tools, thaw_tools
from hermes_actors.errors import ConfigError
from hermes_actors.store.records import Role
from tests.agents.chat_server import ChatServer, completion, open_chat_server
from tests.agents.chat_server import tool_call as scripted_call


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with open_chat_server() as running:
        yield running


@pytest.fixture
def agent(server: ChatServer) -> Iterator[OpenAIAgent]:
    with OpenAIAgent(base_url=server.base_url, model="test-model", api_key="sk-test", max_retries=0) as made:
        yield made


class Counted:
    def __init__(self, name: str, *, needs_approval: bool = False) -> None:
        self.runs: list[dict[str, Any]] = []
        self.tool = Tool(
            name=name,
            description=f"The {name} tool.",
            parameters={"type": "object"},
            handler=self.run,
            needs_approval=needs_approval,
        )

    def run(self, arguments: dict[str, Any]) -> str:
        self.runs.append(arguments)
        return '{"ok": true}'


def test_the_openai_agent_runs_the_rounds_other_calls_and_ends_the_turn_on_the_held_one(
    agent: OpenAIAgent, server: ChatServer
) -> None:
    lookup, delete = Counted("lookup"), Counted("delete", needs_approval=True)
    calls = [scripted_call("l1", "lookup", {"q": "x"}), scripted_call("d1", "delete", {"path": "/x"})]
    server.script(completion("Deleting it.", tool_calls=calls))
    turn = TurnInput(session_id="s1", history=(), user_text="delete x", tools=(lookup.tool, delete.tool))
    reply = agent.run_turn(turn, timeout_s=5)
    assert len(server.completion_bodies) == 1  # the model waits for the decision
    assert lookup.runs == [{"q": "x"}]
    assert delete.runs == []
    assert [(m.role, m.tool_call_id) for m in reply.messages] == [(Role.ASSISTANT, None), (Role.TOOL, "l1")]
    assert json.loads(reply.messages[0].tool_calls or "[]") == calls  # stored with both calls
    assert json.loads(reply.approval_calls or "[]") == [calls[1]]
    assert reply.client_calls is None
    assert reply.text == "Deleting it."


def test_a_pattern_of_agent_approvals_holds_a_call_of_a_tool_that_does_not_say_so(
    agent: OpenAIAgent, server: ChatServer
) -> None:
    search = Counted("session_search")
    server.script(completion(None, tool_calls=[scripted_call("s1", "session_search", {})]))
    turn = TurnInput(
        session_id="s1",
        history=(),
        user_text="look",
        tools=(search.tool,),
        approvals=ApprovalGate(patterns=("session_*",)),
    )
    reply = agent.run_turn(turn, timeout_s=5)
    assert search.runs == []
    assert [call["id"] for call in json.loads(reply.approval_calls or "[]")] == ["s1"]
    assert reply.text == ""


def test_the_gate_answers_for_tools_flags_patterns_and_decisions() -> None:
    held, free = Counted("delete", needs_approval=True).tool, Counted("read").tool
    decided = ApprovalDecision(call_id="c1", tool_name="wipe", approved=False, reason="no")
    gate = ApprovalGate(patterns=("wipe*",), decisions=(decided,))
    assert gate.required("delete", (held, free))
    assert not gate.required("read", (held, free))
    assert gate.required("wipe_disk")  # an agent's own tool, named by a pattern
    assert gate.decision("c1") == decided
    assert gate.decision("c2") is None


def test_request_approval_ends_a_turn_on_the_calls_its_last_message_carries() -> None:
    call = tool_call("w1", "wipe", {"path": "/tmp/x"})
    assert call == {"id": "w1", "type": "function", "function": {"name": "wipe", "arguments": '{"path": "/tmp/x"}'}}
    reply = request_approval([call], text="May I?")
    assert json.loads(reply.approval_calls or "[]") == [call]
    (asking,) = reply.messages
    assert (asking.role, asking.content, json.loads(asking.tool_calls or "[]")) == (Role.ASSISTANT, "May I?", [call])
    with pytest.raises(ValueError, match="at least one call"):
        request_approval([])


def test_an_mcp_servers_require_approval_marks_its_tools_and_a_frozen_list_keeps_todays_marks() -> None:
    listed = [types.Tool(name=name, inputSchema={"type": "object"}) for name in ("read_file", "delete_file")]
    every = McpServerSettings(command=["x"], require_approval=True)
    some = McpServerSettings(command=["x"], require_approval=["delete_*"])
    none = McpServerSettings(command=["x"])
    assert [t.needs_approval for t in offered_tools("files", every, listed, lambda tool, args: "")] == [True, True]
    tools = offered_tools("files", some, listed, lambda tool, args: "")
    assert [(t.name, t.needs_approval) for t in tools] == [("files__read_file", False), ("files__delete_file", True)]
    assert [t.needs_approval for t in offered_tools("files", none, listed, lambda tool, args: "")] == [False, False]
    frozen = freeze_tools(tools)
    thawed = thaw_tools(frozen, offered_tools("files", every, listed, lambda tool, args: ""))
    assert [t.needs_approval for t in thawed] == [True, True]  # the setting of today, not of the session's start
    assert msgspec.json.decode(frozen)[1]["function"]["name"] == "files__delete_file"


def test_agent_approvals_settings_reach_the_runtime_and_are_checked() -> None:
    agent = object.__new__(OpenAIAgent)
    assert approval_settings(agent) == ApprovalSettings()
    require_approvals(agent, ApprovalSettings(tools=["deploy"], timeout_s=30))
    assert approval_settings(agent).tools == ["deploy"]
    with pytest.raises(ConfigError, match=r"agent\.approvals\.timeout_s"):
        ApprovalSettings(timeout_s=0)
