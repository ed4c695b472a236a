from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import openai
import pytest

from hermes_actors.agents.base import Agent, AgentError, AgentMessage, Memory, TurnInput
from hermes_actors.agents.openai_chat import MAX_TOOL_ROUNDS, OpenAIAgent
from hermes_actors.agents.tools import Tool, session_search_tool
from hermes_actors.store import NewMessage, Store
from hermes_actors.store.records import MessageRecord, Role
from tests.agents.chat_server import ChatServer, Scripted, completion, failure, open_chat_server, tool_call

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
    # The assistant message carries the model's own count of it: the completion tokens.
    assert reply.messages == (AgentMessage(role=Role.ASSISTANT, content="Hello there.", token_count=4),)
    assert (reply.input_tokens, reply.output_tokens, reply.tokens_estimated) == (21, 4, False)


def test_a_reply_without_usage_estimates_its_tokens_and_says_so(agent: OpenAIAgent, server: ChatServer) -> None:
    server.script(completion("ok " * 40, prompt_tokens=None, completion_tokens=None))
    reply = agent.run_turn(turn("x" * 400), timeout_s=5)
    assert reply.tokens_estimated
    assert 100 <= reply.input_tokens <= 130  # four characters a token of what was sent
    assert 30 <= reply.output_tokens <= 40
    assert reply.messages[0].token_count is None  # a message's own count is only ever the model's


def test_one_call_without_usage_marks_the_whole_turn_estimated(agent: OpenAIAgent, server: ChatServer) -> None:
    seen: list[dict[str, Any]] = []
    server.script(
        completion(None, tool_calls=[tool_call("call_1", "lookup", {"q": "x"})], prompt_tokens=10, completion_tokens=3),
        completion("done", prompt_tokens=None, completion_tokens=None),
    )
    reply = agent.run_turn(tool_turn("weather?", lookup_tool(seen)), timeout_s=5)
    assert reply.tokens_estimated
    assert [m.token_count for m in reply.messages] == [3, None, None]
    assert reply.input_tokens > 10


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
    with caplog.at_level(logging.WARNING, logger="hermes_actors.agents.openai_chat"):
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


@pytest.mark.slow
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


# -- tools -------------------------------------------------------------------------------------------------------


def lookup_tool(seen: list[dict[str, Any]]) -> Tool:
    def handle(arguments: dict[str, Any]) -> str:
        seen.append(arguments)
        return json.dumps({"found": arguments.get("q")})

    parameters = {"type": "object", "properties": {"q": {"type": "string"}}}
    return Tool(name="lookup", description="Look a thing up.", parameters=parameters, handler=handle)


def tool_turn(text: str, *tools: Tool) -> TurnInput:
    return TurnInput(session_id="s1", history=(), user_text=text, tools=tools)


def test_a_turn_without_tools_offers_none(agent: OpenAIAgent, server: ChatServer) -> None:
    server.script(completion("ok"))
    agent.run_turn(turn("hi"), timeout_s=5)
    assert "tools" not in server.completion_bodies[0]


def test_the_turns_tools_are_offered_as_function_tools(agent: OpenAIAgent, server: ChatServer) -> None:
    server.script(completion("no need"))
    reply = agent.run_turn(tool_turn("hi", lookup_tool([])), timeout_s=5)
    assert reply.text == "no need"
    assert server.completion_bodies[0]["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "Look a thing up.",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            },
        }
    ]


def test_a_tool_call_is_run_and_the_model_asked_again_with_its_result(agent: OpenAIAgent, server: ChatServer) -> None:
    seen: list[dict[str, Any]] = []
    asked = tool_call("call_1", "lookup", {"q": "oslo"})
    server.script(
        completion(None, tool_calls=[asked], prompt_tokens=10, completion_tokens=3),
        completion("Oslo is sunny.", prompt_tokens=20, completion_tokens=5),
    )
    reply = agent.run_turn(tool_turn("weather?", lookup_tool(seen)), timeout_s=5)
    assert seen == [{"q": "oslo"}]
    call_message, result, final = reply.messages
    assert (call_message.role, call_message.content) == (Role.ASSISTANT, None)
    assert json.loads(call_message.tool_calls or "") == [asked]
    assert call_message.token_count == 3  # each assistant message: the completion tokens of its own response
    assert result == AgentMessage(
        role=Role.TOOL, content='{"found": "oslo"}', tool_name="lookup", tool_call_id="call_1"
    )
    assert final == AgentMessage(role=Role.ASSISTANT, content="Oslo is sunny.", token_count=5)
    assert reply.text == "Oslo is sunny."
    assert (reply.input_tokens, reply.output_tokens, reply.tokens_estimated) == (30, 8, False)
    first, second = server.completion_bodies
    assert second["messages"] == [
        *first["messages"],
        {"role": "assistant", "content": None, "tool_calls": [asked]},
        {"role": "tool", "content": '{"found": "oslo"}', "tool_call_id": "call_1"},
    ]


def test_an_unknown_tool_or_bad_arguments_get_an_error_result(agent: OpenAIAgent, server: ChatServer) -> None:
    seen: list[dict[str, Any]] = []
    calls = [
        tool_call("call_a", "weather", {"city": "Oslo"}),
        tool_call("call_b", "lookup", "{not json"),
        tool_call("call_c", "lookup", "[1, 2]"),
    ]
    server.script(completion(None, tool_calls=calls), completion("Sorry, I could not look that up."))
    reply = agent.run_turn(tool_turn("weather?", lookup_tool(seen)), timeout_s=5)
    assert seen == []
    errors = [json.loads(m.content or "")["error"] for m in reply.messages if m.role == Role.TOOL]
    assert errors[0] == "there is no function tool named 'weather'; the tools are: lookup"
    assert errors[1].startswith("the arguments of lookup are not JSON (")
    assert errors[2] == "the arguments of lookup must be a JSON object, not '[1, 2]'"
    assert [m.tool_call_id for m in reply.messages if m.role == Role.TOOL] == ["call_a", "call_b", "call_c"]
    assert reply.text == "Sorry, I could not look that up."


def test_tool_rounds_are_bounded_and_the_last_request_offers_no_tools(agent: OpenAIAgent, server: ChatServer) -> None:
    seen: list[dict[str, Any]] = []
    rounds = [completion(None, tool_calls=[tool_call(f"call_{i}", "lookup", {"q": str(i)})]) for i in range(6)]
    server.script(*rounds)
    reply = agent.run_turn(tool_turn("loop forever", lookup_tool(seen)), timeout_s=5)
    bodies = server.completion_bodies
    assert len(bodies) == MAX_TOOL_ROUNDS + 1
    assert all("tools" in body for body in bodies[:-1])
    assert "tools" not in bodies[-1]
    assert len(seen) == MAX_TOOL_ROUNDS
    assert len(reply.messages) == 2 * MAX_TOOL_ROUNDS + 1
    assert reply.text == "[called tools: lookup]"  # the model called a tool anyway: stored, not run


@pytest.mark.slow
def test_slow_tools_cannot_stretch_a_turn_past_its_timeout(agent: OpenAIAgent, server: ChatServer) -> None:
    def slow(arguments: dict[str, Any]) -> str:
        time.sleep(0.4)  # a tool that takes its time, not a synchronisation
        return "{}"

    tool = Tool(name="slow", description="Takes a while.", parameters={"type": "object"}, handler=slow)
    server.script(completion(None, tool_calls=[tool_call("call_1", "slow", {})]), completion("done"))
    with pytest.raises(AgentError, match=r"used up the turn's 0\.3 s after 1 tool rounds"):
        agent.run_turn(tool_turn("go", tool), timeout_s=0.3)
    assert len(server.completion_bodies) == 1


def test_the_model_can_search_earlier_sessions(agent: OpenAIAgent, server: ChatServer, store: Store) -> None:
    earlier = store.create_session("telegram").id
    store.append_messages(earlier, [NewMessage(role=Role.USER, content="my locker code is 4417")])

    @contextmanager
    def read() -> Iterator[Store]:
        yield store

    search = session_search_tool(read, "s1")
    server.script(
        completion(None, tool_calls=[tool_call("call_1", "session_search", {"query": "locker"})]),
        completion("Your locker code is 4417."),
    )
    reply = agent.run_turn(tool_turn("what was my locker code?", search), timeout_s=5)
    assert reply.text == "Your locker code is 4417."
    found = json.loads(reply.messages[1].content or "")
    assert [hit["session_id"] for hit in found["hits"]] == [earlier]
    assert server.completion_bodies[0]["tools"][0]["function"]["name"] == "session_search"
    assert server.completion_bodies[1]["messages"][-1]["content"] == reply.messages[1].content
