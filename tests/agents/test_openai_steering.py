"""The OpenAI agent takes messages sent while its turn runs (``TurnInput.steering``) before each model call, and
its reply keeps them where they were sent."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from hermes_actors.agents.base import AgentMessage, TurnInput, takes_steering
from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.openai_chat import OpenAIAgent
from hermes_actors.agents.tools import Tool
from hermes_actors.store.records import Role
from tests.agents.chat_server import ChatServer, completion, open_chat_server, tool_call


class _Steering:
    """Hands out ``batches``, one a take (then nothing)."""

    def __init__(self, *batches: Sequence[str]) -> None:
        self._batches = list(batches)
        self.takes = 0

    def take(self) -> Sequence[str]:
        self.takes += 1
        return self._batches.pop(0) if self._batches else ()


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with open_chat_server() as running:
        yield running


def _agent(server: ChatServer) -> OpenAIAgent:
    return OpenAIAgent(base_url=server.base_url, model="test-model", api_key="unused", max_retries=0, timeout_s=5)


def _lookup() -> Tool:
    return Tool(name="lookup", description="look up", parameters={"type": "object"}, handler=lambda arguments: "found")


def test_a_steered_text_is_sent_after_the_tool_results_and_kept_there_in_the_reply(server: ChatServer) -> None:
    server.script(completion(None, tool_calls=[tool_call("c1", "lookup", {})]), completion("both answered"))
    steering = _Steering((), ("and also this",))
    turn = TurnInput(session_id="s", history=(), user_text="first", tools=[_lookup()], steering=steering)
    with _agent(server) as agent:
        reply = agent.run_turn(turn, timeout_s=5)
    assert steering.takes == 2  # before each model call
    second = server.completion_bodies[1]["messages"]
    assert [(m["role"], m.get("content")) for m in second[-3:]] == [
        ("assistant", None),
        ("tool", "found"),
        ("user", "and also this"),
    ]
    assert [(m.role, m.content) for m in reply.messages] == [
        (Role.ASSISTANT, None),
        (Role.TOOL, "found"),
        (Role.USER, "and also this"),
        (Role.ASSISTANT, "both answered"),
    ]
    assert reply.text == "both answered"


def test_a_turn_without_steering_sends_what_it_always_sent(server: ChatServer) -> None:
    server.script(completion("hello"))
    with _agent(server) as agent:
        reply = agent.run_turn(TurnInput(session_id="s", history=(), user_text="hi"), timeout_s=5)
    assert reply.messages == (AgentMessage(role=Role.ASSISTANT, content="hello", token_count=7),)
    assert [m["role"] for m in server.completion_bodies[0]["messages"]] == ["user"]


def test_the_openai_agent_takes_steering_and_the_echo_agent_does_not(server: ChatServer) -> None:
    with _agent(server) as agent:
        assert takes_steering(agent)
    assert not takes_steering(EchoAgent())
