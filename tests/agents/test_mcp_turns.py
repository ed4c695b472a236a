"""MCP tools in a gateway's turns: a scripted OpenAI-compatible model calls a real MCP server's tools, the calls reach
the server and are stored as the turn's tool messages, the tool list is frozen with each session, a dead server gives
an error result instead of a failed turn, and a plug-in agent gets the same tools through ``TurnInput.tools``."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from hermes_actors.agents.base import AgentMessage, AgentReply, Memory, TurnInput
from hermes_actors.agents.mcp import attach_mcp_tools
from hermes_actors.agents.mcp.hub import McpTools
from hermes_actors.agents.openai_chat import OpenAIAgent
from hermes_actors.agents.tools import find_tool
from hermes_actors.runtime.gateway import AcceptResult, Gateway
from hermes_actors.store import MessageRecord, Role
from hermes_actors.testing import open_fake_gateway
from tests.agents.chat_server import ChatServer, completion, open_chat_server, tool_call
from tests.agents.mcp_fixtures import received, stdio_server

pytestmark = pytest.mark.slow  # an MCP server process per test


@pytest.fixture
def model() -> Iterator[ChatServer]:
    with open_chat_server() as server:
        yield server


@pytest.fixture
def calls(tmp_path: Path) -> Path:
    return tmp_path / "calls.jsonl"


def offered_names(body: Any) -> list[str]:
    return [entry["function"]["name"] for entry in body.get("tools") or ()]


def session_of(gateway: Gateway, accepted: object) -> str:
    assert isinstance(accepted, AcceptResult)
    session = gateway.session_for(accepted.routing_key)
    assert session is not None
    return session


def transcript(gateway: Gateway, session_id: str) -> list[MessageRecord]:
    assert gateway.wait_idle()
    with gateway.read() as store:
        return store.load_transcript(session_id)


@pytest.fixture
def agent(model: ChatServer, calls: Path) -> Iterator[tuple[OpenAIAgent, McpTools]]:
    with OpenAIAgent(base_url=model.base_url, model="test-model", max_retries=0) as built:
        source = attach_mcp_tools(built, {"calc": stdio_server(calls, deny=["drop_*"])}, {})
        assert source is not None
        try:
            yield built, source
        finally:
            source.close()


def test_the_model_calls_an_mcp_tool_and_the_call_and_result_are_the_turns_tool_messages(
    db_path: Path, model: ChatServer, calls: Path, agent: tuple[OpenAIAgent, McpTools]
) -> None:
    model.script(
        completion(None, tool_calls=[tool_call("c1", "calc__add", {"a": 19, "b": 23})]),
        completion("19 + 23 = 42"),
    )
    with open_fake_gateway(db_path, agent=agent[0], auto_titles=False) as (gateway, fake):
        accepted = fake.push("what is 19 + 23?")
        assert fake.pop().text == "19 + 23 = 42"
        stored = transcript(gateway, session_of(gateway, accepted))
    assert [(m.role, m.tool_name) for m in stored] == [
        (Role.USER, None),
        (Role.ASSISTANT, None),
        (Role.TOOL, "calc__add"),
        (Role.ASSISTANT, None),
    ]
    assert json.loads(stored[1].tool_calls or "[]")[0]["function"]["name"] == "calc__add"
    assert (stored[2].content, stored[2].tool_call_id) == ("42", "c1")
    assert [(c["tool"], c["arguments"]) for c in received(calls)] == [("add", {"a": 19, "b": 23})]
    first, second = model.completion_bodies
    names = offered_names(first)
    assert names[0] == "session_search"
    assert "calc__add" in names
    assert "calc__drop_tables" not in names
    assert second["messages"][-1] == {"role": "tool", "content": "42", "tool_call_id": "c1"}


def test_a_sessions_tools_stay_as_they_were_when_it_started_and_new_tools_reach_new_sessions(
    db_path: Path, model: ChatServer, agent: tuple[OpenAIAgent, McpTools]
) -> None:
    model.script(
        completion(None, tool_calls=[tool_call("c1", "calc__learn", {"name": "weather"})]),
        completion("I learned the weather tool."),
        completion("Still here."),
        completion("A new conversation."),
    )
    with open_fake_gateway(db_path, agent=agent[0], auto_titles=False) as (gateway, fake):
        fake.push("learn the weather", chat_id="old")
        fake.pop()
        fake.push("and now?", chat_id="old")
        fake.pop()
        fake.push("hello", chat_id="new")
        fake.pop()
        assert gateway.wait_idle()
    started, after_tool, later, other = model.completion_bodies
    assert "calc__weather" not in offered_names(started)
    assert after_tool["tools"] == started["tools"]
    assert later["tools"] == started["tools"]
    assert offered_names(other) == [*offered_names(started), "calc__weather"]


def test_a_server_that_dies_during_a_call_gives_the_model_an_error_result_and_the_next_turn_works(
    db_path: Path, model: ChatServer, calls: Path, agent: tuple[OpenAIAgent, McpTools]
) -> None:
    model.script(
        completion(None, tool_calls=[tool_call("c1", "calc__crash", {})]),
        completion("The calculator broke."),
        completion(None, tool_calls=[tool_call("c2", "calc__add", {"a": 1, "b": 1})]),
        completion("1 + 1 = 2"),
    )
    with open_fake_gateway(db_path, agent=agent[0], auto_titles=False) as (gateway, fake):
        accepted = fake.push("crash it")
        assert fake.pop().text == "The calculator broke."  # a reply, not a failed turn
        fake.push("1 + 1?")
        assert fake.pop().text == "1 + 1 = 2"
        stored = transcript(gateway, session_of(gateway, accepted))
    results = [(m.tool_name, m.content) for m in stored if m.role == Role.TOOL]
    assert results == [
        ("calc__crash", '{"error":"the MCP server calc went away during the call; it is started again: retry"}'),
        ("calc__add", "2"),
    ]
    assert [c["tool"] for c in received(calls)] == ["crash", "add"]
    (health,) = agent[1].health()
    assert (health.restarts, health.failures) == (1, 1)


class ToolUsingAgent:
    """A plug-in agent: it calls the turn's tool named in the user's text with ``{"text": ...}``."""

    def __init__(self) -> None:
        self.offered: list[list[str]] = []

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        self.offered.append([tool.name for tool in turn.tools])
        name, _, text = turn.user_text.partition(" ")
        tool = find_tool(turn.tools, name)
        result = tool.run({"text": text}) if tool is not None else f"no tool {name}"
        messages = (
            AgentMessage(role=Role.TOOL, content=result, tool_name=name, tool_call_id="p1"),
            AgentMessage(role=Role.ASSISTANT, content=f"the tool said: {result}"),
        )
        return AgentReply(messages=messages, text=f"the tool said: {result}")

    def summarize(self, history: Sequence[MessageRecord], *, timeout_s: float) -> str:
        return ""

    def save_memories(self, history: Sequence[MessageRecord], *, timeout_s: float) -> list[Memory]:
        return []


def test_a_plug_in_agent_is_offered_the_mcp_tools_in_its_turn_input(
    db_path: Path, calls: Path, model: ChatServer
) -> None:
    plugin = ToolUsingAgent()
    source = attach_mcp_tools(plugin, {"calc": stdio_server(calls, allow=["echo"])}, {})
    assert source is not None
    try:
        with open_fake_gateway(db_path, agent=plugin, auto_titles=False) as (gateway, fake):
            fake.push("calc__echo bonjour")
            assert fake.pop().text == "the tool said: bonjour"
            assert gateway.wait_idle()
    finally:
        source.close()
    assert plugin.offered == [["session_search", "calc__echo"]]
    assert received(calls)[0]["arguments"] == {"text": "bonjour"}


def test_an_agent_without_mcp_servers_offers_only_session_search(db_path: Path, model: ChatServer) -> None:
    model.script(completion("hi"))
    with (
        OpenAIAgent(base_url=model.base_url, model="test-model", max_retries=0) as plain,
        open_fake_gateway(db_path, agent=plain, auto_titles=False) as (_, fake),
    ):
        assert attach_mcp_tools(plain, {}, {}) is None
        fake.push("hello")
        fake.pop()
    assert offered_names(model.completion_bodies[0]) == ["session_search"]
