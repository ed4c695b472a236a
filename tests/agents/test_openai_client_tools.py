"""The built-in OpenAI agent with an API client's own tools (``TurnInput.client_tools``): offered after the turn's
own, a call of one ends the turn with the call for the client (after the gateway's own calls of that round ran), and
the client's results (``TurnInput.tool_results``) continue from the call. The echo agent acts the same out."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from hermes_actors.agents.base import AgentError, TurnInput
from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.openai_chat import OpenAIAgent
from hermes_actors.agents.tools import Tool
from hermes_actors.messages import ClientTool, ToolResult
from hermes_actors.store.records import MessageRecord, Role
from hermes_actors.testing import EventRecorder
from tests.agents.chat_server import ChatServer, completion, open_chat_server, tool_call

WEATHER = ClientTool(
    name="get_weather",
    description="The weather in a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with open_chat_server() as running:
        yield running


@pytest.fixture
def agent(server: ChatServer) -> Iterator[OpenAIAgent]:
    with OpenAIAgent(base_url=server.base_url, model="test-model", api_key="sk-test", max_retries=0) as made:
        yield made


class Lookup:
    """A server-side tool that counts its runs."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []
        self.tool = Tool(name="lookup", description="Look a thing up.", parameters={"type": "object"}, handler=self.run)

    def run(self, arguments: dict[str, Any]) -> str:
        self.runs.append(arguments)
        return '{"found": "x"}'


def _record(id: int, role: Role, content: str | None = None, **fields: Any) -> MessageRecord:
    return MessageRecord(id=id, session_id="s1", role=role, content=content, created_at=float(id), **fields)


def test_the_clients_tools_are_offered_after_the_turns_own_as_sent(agent: OpenAIAgent, server: ChatServer) -> None:
    lookup = Lookup()
    server.script(completion("No tool needed."))
    turn = TurnInput(session_id="s1", history=(), user_text="hi", tools=(lookup.tool,), client_tools=(WEATHER,))
    assert agent.run_turn(turn, timeout_s=5).client_calls is None
    (body,) = server.completion_bodies
    assert body["tools"] == [
        lookup.tool.openai_spec(),
        {
            "type": "function",
            "function": {"name": "get_weather", "parameters": WEATHER.parameters, "description": WEATHER.description},
        },
    ]


def test_a_call_of_a_client_tool_ends_the_turn_after_the_rounds_own_calls_ran(
    agent: OpenAIAgent, server: ChatServer
) -> None:
    lookup = Lookup()
    calls = [tool_call("s1", "lookup", {"q": "x"}), tool_call("c1", "get_weather", {"city": "Paris"})]
    server.script(completion("Checking.", tool_calls=calls))
    events = EventRecorder()
    turn = TurnInput(
        session_id="s1", history=(), user_text="weather?", tools=(lookup.tool,), client_tools=(WEATHER,), events=events
    )
    reply = agent.run_turn(turn, timeout_s=5)
    assert len(server.completion_bodies) == 1  # the model is not asked again: the client runs its tool first
    assert lookup.runs == [{"q": "x"}]
    assert [(m.role, m.tool_call_id) for m in reply.messages] == [(Role.ASSISTANT, None), (Role.TOOL, "s1")]
    assert json.loads(reply.messages[0].tool_calls or "[]") == calls  # stored with both calls
    assert json.loads(reply.client_calls or "[]") == [calls[1]]  # the client gets only its own
    assert reply.text == "Checking."
    assert [(name, status) for name, _, status, _ in events.tools] == [("lookup", "running"), ("lookup", "completed")]


def test_the_clients_results_continue_from_its_calls_without_a_user_message(
    agent: OpenAIAgent, server: ChatServer
) -> None:
    server.script(completion("Sunny in Paris."))
    history = (
        _record(1, Role.USER, "weather?"),
        _record(2, Role.ASSISTANT, None, tool_calls=json.dumps([tool_call("c1", "get_weather", {"city": "Paris"})])),
    )
    results = (ToolResult(call_id="c1", output="sunny"),)
    turn = TurnInput(session_id="s1", history=history, user_text="", client_tools=(WEATHER,), tool_results=results)
    reply = agent.run_turn(turn, timeout_s=5)
    assert reply.text == "Sunny in Paris."
    assert reply.client_calls is None
    (body,) = server.completion_bodies
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool"]
    assert body["messages"][1]["tool_calls"][0]["id"] == "c1"
    assert body["messages"][2] == {"role": "tool", "content": "sunny", "tool_call_id": "c1"}


def test_a_result_for_a_call_the_history_does_not_hold_goes_as_text(agent: OpenAIAgent, server: ChatServer) -> None:
    server.script(completion("Noted."))
    turn = TurnInput(
        session_id="s1",
        history=(_record(1, Role.USER, "weather?"),),
        user_text="",
        tool_results=(ToolResult(call_id="c404", output="sunny"),),
    )
    agent.run_turn(turn, timeout_s=5)
    (body,) = server.completion_bodies
    assert body["messages"][-1] == {"role": "user", "content": "[tool result of call c404: sunny]"}


def test_a_client_tool_named_like_one_of_the_turns_own_fails_the_turn(agent: OpenAIAgent, server: ChatServer) -> None:
    lookup = Lookup()
    clash = ClientTool(name="lookup")
    turn = TurnInput(session_id="s1", history=(), user_text="hi", tools=(lookup.tool,), client_tools=(clash,))
    with pytest.raises(AgentError, match="'lookup' has the name of one of this gateway's own tools"):
        agent.run_turn(turn, timeout_s=5)
    assert server.completion_bodies == []


def test_the_echo_agent_ends_a_turn_with_a_call_of_a_client_tool_and_answers_its_result() -> None:
    echo = EchoAgent()
    called = echo.run_turn(
        TurnInput(session_id="s1", history=(), user_text='tool get_weather {"city": "Paris"}', client_tools=(WEATHER,)),
        timeout_s=5,
    )
    (message,) = called.messages
    calls = json.loads(called.client_calls or "[]")
    assert json.loads(message.tool_calls or "[]") == calls
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert called.text == ""
    history = (
        _record(1, Role.USER, "tool get_weather"),
        _record(2, Role.ASSISTANT, None, tool_calls=message.tool_calls),
    )
    results = (ToolResult(call_id=calls[0]["id"], output="sunny"),)
    answered = echo.run_turn(
        TurnInput(session_id="s1", history=history, user_text="", tool_results=results), timeout_s=5
    )
    assert answered.text == "echo: get_weather returned 'sunny'"
    assert answered.client_calls is None
