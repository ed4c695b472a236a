from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import openai
import pytest

from hermes_actors.agent import Agent, AgentError, AgentMessage, Memory, TurnInput
from hermes_actors.agents_openai import OpenAIAgent
from hermes_actors.store.records import MessageRecord, Role
from tests.agents.chat_server import ChatServer, Scripted, completion, failure, open_chat_server

KEY_ENV = "HERMES_TEST_OPENAI_KEY"
MakeAgent = Callable[..., OpenAIAgent]


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with open_chat_server() as running:
        yield running


@pytest.fixture
def make_agent(server: ChatServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[MakeAgent]:
    monkeypatch.setenv(KEY_ENV, "sk-test-123")
    with ExitStack() as stack:

        def make(**overrides: Any) -> OpenAIAgent:
            options: dict[str, Any] = {
                "base_url": server.base_url,
                "model": "test-model",
                "api_key_env": KEY_ENV,
                "timeout_s": 5.0,
                "max_retries": 0,
            }
            return stack.enter_context(OpenAIAgent(**(options | overrides)))

        yield make


@pytest.fixture
def agent(make_agent: MakeAgent) -> OpenAIAgent:
    return make_agent()


def message(
    id: int,
    role: Role,
    content: str | None = None,
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    tool_call_id: str | None = None,
) -> MessageRecord:
    return MessageRecord(
        id=id,
        session_id="s1",
        role=role,
        content=content,
        created_at=float(id),
        tool_calls=None if tool_calls is None else json.dumps(tool_calls),
        tool_name="weather" if role == Role.TOOL else None,
        tool_call_id=tool_call_id,
    )


def call(call_id: str, name: str, arguments: str = "{}") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def turn(
    text: str, *history: MessageRecord, system_prompt: str | None = None, memories: tuple[str, ...] = ()
) -> TurnInput:
    return TurnInput(session_id="s1", history=history, user_text=text, system_prompt=system_prompt, memories=memories)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_the_agent_satisfies_the_agent_protocol(agent: OpenAIAgent) -> None:
    typed: Agent = agent
    assert typed is agent


def test_a_plain_reply_carries_the_text_and_the_token_counts(agent: OpenAIAgent, server: ChatServer) -> None:
    server.script(completion("Hello there.", prompt_tokens=21, completion_tokens=4))
    reply = agent.run_turn(turn("hi"), timeout_s=5)
    assert reply.text == "Hello there."
    assert reply.messages == (AgentMessage(role=Role.ASSISTANT, content="Hello there."),)
    assert (reply.input_tokens, reply.output_tokens) == (21, 4)


def test_a_reply_without_usage_counts_zero_tokens(agent: OpenAIAgent, server: ChatServer) -> None:
    server.script(completion("ok", prompt_tokens=None, completion_tokens=None))
    reply = agent.run_turn(turn("hi"), timeout_s=5)
    assert (reply.input_tokens, reply.output_tokens) == (0, 0)


def test_the_request_holds_system_prompt_memories_history_and_user_text_in_order(
    agent: OpenAIAgent, server: ChatServer
) -> None:
    server.script(completion("It is sunny."))
    history = (
        message(1, Role.USER, "weather in Oslo?"),
        message(2, Role.ASSISTANT, None, tool_calls=[call("call_1", "weather", '{"city": "Oslo"}')]),
        message(3, Role.TOOL, "sunny, 21C", tool_call_id="call_1"),
        message(4, Role.ASSISTANT, "Sunny and 21C."),
        message(5, Role.ASSISTANT, None),
        message(6, Role.SYSTEM, "The user switched to metric."),
    )
    agent.run_turn(
        turn("and tomorrow?", *history, system_prompt="You are terse.", memories=("lives in Oslo", " ", "likes tea")),
        timeout_s=5,
    )
    (request,) = server.requests
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["authorization"] == "Bearer sk-test-123"
    assert request.body["model"] == "test-model"
    assert "temperature" not in request.body
    assert request.body["messages"] == [
        {"role": "system", "content": "You are terse.\n\nKnown about the user:\n- lives in Oslo\n- likes tea"},
        {"role": "user", "content": "weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [call("call_1", "weather", '{"city": "Oslo"}')]},
        {"role": "tool", "content": "sunny, 21C", "tool_call_id": "call_1"},
        {"role": "assistant", "content": "Sunny and 21C."},
        {"role": "system", "content": "The user switched to metric."},
        {"role": "user", "content": "and tomorrow?"},
    ]


def test_memories_without_a_system_prompt_make_their_own_system_message(agent: OpenAIAgent, server: ChatServer) -> None:
    server.script(completion("ok"))
    agent.run_turn(turn("hi", memories=("likes tea",)), timeout_s=5)
    assert server.completion_bodies[0]["messages"][0] == {
        "role": "system",
        "content": "Known about the user:\n- likes tea",
    }


def test_tool_calls_without_a_stored_result_are_sent_as_text_only(agent: OpenAIAgent, server: ChatServer) -> None:
    server.script(completion("ok"))
    history = (
        message(1, Role.TOOL, "stray result", tool_call_id="call_0"),
        message(2, Role.ASSISTANT, None, tool_calls=[call("call_1", "weather"), call("call_2", "clock")]),
        message(3, Role.ASSISTANT, "Let me check.", tool_calls=[call("call_3", "maps")]),
    )
    agent.run_turn(turn("well?", *history), timeout_s=5)
    assert server.completion_bodies[0]["messages"] == [
        {"role": "assistant", "content": "[called tools: weather, clock]"},
        {"role": "assistant", "content": "Let me check."},
        {"role": "user", "content": "well?"},
    ]


def test_the_key_falls_back_to_a_placeholder_when_its_env_var_is_unset(
    make_agent: MakeAgent, server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV)
    server.script(completion("ok"))
    make_agent().run_turn(turn("hi"), timeout_s=5)
    assert server.requests[0].headers["authorization"] == "Bearer not-needed"


def test_a_set_temperature_is_sent(make_agent: MakeAgent, server: ChatServer) -> None:
    server.script(completion("ok"))
    make_agent(temperature=0.2).run_turn(turn("hi"), timeout_s=5)
    assert server.completion_bodies[0]["temperature"] == 0.2


def test_tool_calls_in_the_reply_become_json_and_the_text_names_them(agent: OpenAIAgent, server: ChatServer) -> None:
    calls = [call("call_a", "weather", '{"city": "Oslo"}'), call("call_b", "clock")]
    server.script(completion("", tool_calls=calls))
    reply = agent.run_turn(turn("weather and time?"), timeout_s=5)
    (assistant,) = reply.messages
    assert assistant.role == Role.ASSISTANT
    assert assistant.content is None
    assert assistant.tool_calls is not None
    assert json.loads(assistant.tool_calls) == calls
    assert reply.text == "[called tools: weather, clock]"


def test_an_empty_reply_raises_agent_error(agent: OpenAIAgent, server: ChatServer) -> None:
    server.script(completion(""))
    with pytest.raises(AgentError, match="empty message"):
        agent.run_turn(turn("hi"), timeout_s=5)


def test_summarize_sends_the_history_and_an_instruction_and_returns_the_text(
    agent: OpenAIAgent, server: ChatServer
) -> None:
    server.script(completion("  The user asked about Oslo weather.  "))
    history = (message(1, Role.USER, "weather in Oslo?"), message(2, Role.ASSISTANT, "Sunny."))
    assert agent.summarize(history, timeout_s=5) == "The user asked about Oslo weather."
    sent = server.completion_bodies[0]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert "Summarise the conversation" in sent[-1]["content"]


def test_an_empty_history_is_neither_summarised_nor_mined_for_memories(agent: OpenAIAgent, server: ChatServer) -> None:
    assert agent.summarize([], timeout_s=5) == ""
    assert agent.save_memories([], timeout_s=5) == []
    assert server.requests == []


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('["lives in Oslo", "likes tea"]', ["lives in Oslo", "likes tea"]),
        ('Sure! Here you go:\n```json\n["likes tea", " likes tea ", ""]\n```\nAnything else?', ["likes tea"]),
        ('[1, 2] and then ["prefers metric"]', ["prefers metric"]),
        ("[]", []),
    ],
)
def test_save_memories_reads_a_json_array_of_strings_anywhere_in_the_reply(
    agent: OpenAIAgent, server: ChatServer, reply: str, expected: list[str]
) -> None:
    server.script(completion(reply))
    memories = agent.save_memories([message(1, Role.USER, "I live in Oslo")], timeout_s=5)
    assert memories == [Memory(content=fact) for fact in expected]
    assert "JSON array" in server.completion_bodies[0]["messages"][-1]["content"]


def test_save_memories_keeps_none_and_logs_when_the_reply_has_no_array(
    agent: OpenAIAgent, server: ChatServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.script(completion("I'd rather not say [unclosed"))
    with caplog.at_level(logging.WARNING, logger="hermes_actors.agents_openai"):
        assert agent.save_memories([message(1, Role.USER, "hi")], timeout_s=5) == []
    assert "no JSON array" in caplog.text


def test_a_500_then_a_200_is_retried_and_succeeds(make_agent: MakeAgent, server: ChatServer) -> None:
    server.script(failure(500, "warming up"), completion("ready"))
    reply = make_agent(max_retries=1).run_turn(turn("hi"), timeout_s=5)
    assert reply.text == "ready"
    assert [r.headers["x-stainless-retry-count"] for r in server.requests] == ["0", "1"]


def test_a_persistent_500_raises_agent_error_naming_endpoint_model_and_retries(
    make_agent: MakeAgent, server: ChatServer
) -> None:
    server.script(failure(500, "model crashed"), failure(500, "model crashed"))
    with pytest.raises(AgentError) as raised:
        make_agent(max_retries=1).run_turn(turn("hi"), timeout_s=5)
    text = str(raised.value)
    assert server.base_url in text
    assert "'test-model'" in text
    assert "HTTP 500 after 1 retry: model crashed" in text
    assert "check its log" in text
    assert len(server.requests) == 2


def test_a_rejected_key_names_the_env_var_to_fix(agent: OpenAIAgent, server: ChatServer) -> None:
    server.script(failure(401, "invalid api key", retry_after_ms=None))
    with pytest.raises(AgentError, match=f"HTTP 401: invalid api key; check the API key .*{KEY_ENV}"):
        agent.run_turn(turn("hi"), timeout_s=5)


def test_a_slow_server_raises_agent_error_about_the_timeout_quickly(agent: OpenAIAgent, server: ChatServer) -> None:
    server.script(Scripted(body=completion("too late").body, delay_s=10))
    started = time.monotonic()
    with pytest.raises(AgentError, match=r"timed out: no answer within 0\.3 s") as raised:
        agent.run_turn(turn("hi"), timeout_s=0.3)
    assert time.monotonic() - started < 2
    assert server.base_url in str(raised.value)


def test_a_closed_port_raises_agent_error_about_connecting() -> None:
    base_url = f"http://127.0.0.1:{closed_port()}/v1"
    with OpenAIAgent(base_url=base_url, model="m", max_retries=0) as agent, pytest.raises(AgentError) as raised:
        agent.run_turn(turn("hi"), timeout_s=2)
    text = str(raised.value)
    assert text.startswith(f"cannot connect to agent endpoint {base_url} (model 'm')")
    assert "check agent.base_url and that the server is running" in text


@pytest.mark.parametrize(
    ("body", "problem"),
    [({"object": "chat.completion", "choices": []}, "no choices"), (b"<<not json>>", "not a chat completion")],
)
def test_a_malformed_answer_raises_agent_error(agent: OpenAIAgent, server: ChatServer, body: Any, problem: str) -> None:
    server.script(Scripted(body=body))
    with pytest.raises(AgentError, match=problem):
        agent.run_turn(turn("hi"), timeout_s=5)


def test_an_injected_client_is_used_and_left_open(server: ChatServer) -> None:
    with openai.OpenAI(base_url=server.base_url, api_key="injected", max_retries=0) as client:
        with OpenAIAgent(base_url=server.base_url, model="other-model", client=client) as agent:
            server.script(completion("ok"))
            agent.run_turn(turn("hi"), timeout_s=5)
        assert not client.is_closed()
    assert server.requests[0].headers["authorization"] == "Bearer injected"
    assert server.completion_bodies[0]["model"] == "other-model"


def test_the_server_lists_its_model(server: ChatServer) -> None:
    with openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client:
        assert [model.id for model in client.models.list()] == ["test-model"]
