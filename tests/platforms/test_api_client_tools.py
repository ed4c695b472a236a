"""Client-side tools over chat completions with the real clients: openai-python's documented streaming loop, the
OpenAI Agents SDK (``Runner.run`` with a function tool, ``OpenAIChatCompletionsModel``) and LangChain's
``ChatOpenAI.bind_tools`` (invoke and stream); :mod:`tests.platforms.test_api_client_tools_responses` does Responses.

The gateway's agent is the built-in OpenAI agent on a scripted model (:mod:`tests.agents.weather_model`): each
question makes it run the server's own ``session_search`` and then call the client's ``get_weather`` in the same
turn; the client runs the tool and sends its result; the model answers. Every test checks that the client's tool ran
once, that the answer arrived, that the session's stored transcript holds the round trip in order, and that the model
was called three times.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from openai import AsyncOpenAI
from pydantic import SecretStr

from hermes_actors.agents.openai_chat import OpenAIAgent
from hermes_actors.config import RuntimeConfig
from hermes_actors.store import Role
from platforms.api_server import SESSION_HEADER
from tests.agents.chat_server import ChatServer, open_chat_server
from tests.agents.weather_model import CLIENT_TOOL, QUESTION, WeatherModel, answer_for
from tests.platforms import test_api_server
from tests.platforms.test_api_server import KEY, Running, Start

start = test_api_server.start  # a gateway and an API server on 127.0.0.1

set_tracing_disabled(True)  # the Agents SDK would send traces to OpenAI

WEATHER = "sunny, 24 degrees"
# What a session holds after one question: the question, the server's search (call, result), the client's call,
# the client's result, the answer.
ROUND_TRIP = [
    (Role.USER, None),
    (Role.ASSISTANT, "session_search"),
    (Role.TOOL, "session_search"),
    (Role.ASSISTANT, CLIENT_TOOL),
    (Role.TOOL, None),
    (Role.ASSISTANT, None),
]


@pytest.fixture
def model() -> Iterator[WeatherModel]:
    server: ChatServer
    with open_chat_server() as server:
        yield WeatherModel(server)


@pytest.fixture
def running(start: Start, model: WeatherModel) -> Iterator[Running]:
    with OpenAIAgent(base_url=model.server.base_url, model="test-model", max_retries=0, timeout_s=10) as agent:
        yield start(agent=agent, runtime=RuntimeConfig(auto_titles=False))  # every model call is the tool loop's


def _shape(running: Running, session_id: str) -> list[tuple[str, str | None]]:
    """The session's transcript as (role, the tool it calls or answers)."""
    with running.gateway.read() as store:
        records = store.load_transcript(session_id)
    shape: list[tuple[str, str | None]] = []
    for record in records:
        if record.role == Role.ASSISTANT and record.tool_calls:
            names = [call["function"]["name"] for call in json.loads(record.tool_calls)]
            shape.append((record.role, ",".join(names)))
        elif record.role == Role.TOOL and record.tool_name == "session_search":
            shape.append((record.role, record.tool_name))
        else:
            shape.append((record.role, None))
    return shape


def last_session(running: Running) -> str:
    with running.gateway.read() as store:
        (session,) = store.list_sessions(limit=10)
    return session.id


def check_round_trip(running: Running, model: WeatherModel, session_id: str) -> None:
    assert _shape(running, session_id) == ROUND_TRIP
    with running.gateway.read() as store:
        records = store.load_transcript(session_id)
    assert records[0].content == QUESTION
    assert records[4].content == WEATHER
    assert records[-1].content == answer_for(WEATHER)
    assert model.calls == 3


# -- openai-python ------------------------------------------------------------------------------------------------


def test_the_documented_streaming_loop_gets_the_call_then_the_answer(running: Running, model: WeatherModel) -> None:
    tools: list[Any] = [
        {
            "type": "function",
            "function": {
                "name": CLIENT_TOOL,
                "description": "The weather in a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            },
        }
    ]
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    ran: list[str] = []
    with running.client() as client:
        for _ in range(2):
            stream = client.chat.completions.create(model="hermes-agent", messages=messages, tools=tools, stream=True)
            text, calls, finish = "", dict[int, dict[str, Any]](), None
            for chunk in stream:  # openai-python's documented loop: every chunk has a choice
                delta = chunk.choices[0].delta
                text += delta.content or ""
                for part in delta.tool_calls or []:
                    entry = calls.setdefault(part.index, {"id": "", "name": "", "arguments": ""})
                    entry["id"] += part.id or ""
                    if part.function is not None:
                        entry["name"] += part.function.name or ""
                        entry["arguments"] += part.function.arguments or ""
                finish = chunk.choices[0].finish_reason or finish
            if finish != "tool_calls":
                break
            (called,) = calls.values()
            assert called["name"] == CLIENT_TOOL
            ran.append(json.loads(called["arguments"])["city"])
            function = {"name": called["name"], "arguments": called["arguments"]}
            call = {"id": called["id"], "type": "function", "function": function}
            messages.append({"role": "assistant", "content": text or None, "tool_calls": [call]})
            messages.append({"role": "tool", "tool_call_id": called["id"], "content": WEATHER})
    assert ran == ["Paris"]
    assert finish == "stop"
    assert text == answer_for(WEATHER)
    check_round_trip(running, model, last_session(running))


# -- the OpenAI Agents SDK ----------------------------------------------------------------------------------------


def agents_run(running: Running, *, responses: bool, chained: bool = True) -> tuple[str, list[str]]:
    """Run the Agents SDK's agent with a ``get_weather`` function tool on the API; return its final output and the
    cities the tool ran for. In Responses mode ``chained`` continues with ``previous_response_id`` (else the SDK
    sends its whole conversation each time)."""
    ran: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        ran.append(city)
        return WEATHER

    async def run() -> str:
        client = AsyncOpenAI(base_url=running.server.url + "/v1", api_key=KEY, max_retries=0, timeout=10)
        async with client:
            model = (
                OpenAIResponsesModel("hermes-agent", client)
                if responses
                else OpenAIChatCompletionsModel("hermes-agent", client)
            )
            agent = Agent(name="weather", instructions="Answer about the weather.", tools=[get_weather], model=model)
            result = await Runner.run(
                agent,
                QUESTION,
                run_config=RunConfig(tracing_disabled=True),
                auto_previous_response_id=responses and chained,
            )
        return str(result.final_output)

    return asyncio.run(run()), ran


def test_the_agents_sdk_in_chat_completions_mode_runs_its_tool_once(running: Running, model: WeatherModel) -> None:
    answer, ran = agents_run(running, responses=False)
    assert ran == ["Paris"]
    assert answer == answer_for(WEATHER)
    check_round_trip(running, model, last_session(running))


# -- LangChain ----------------------------------------------------------------------------------------------------


def _langchain(running: Running) -> tuple[Any, list[str], Any]:
    ran: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        ran.append(city)
        return WEATHER

    llm = ChatOpenAI(
        model="hermes-agent", base_url=running.server.url + "/v1", api_key=SecretStr(KEY), max_retries=0, timeout=10
    )
    return llm.bind_tools([get_weather]), ran, get_weather


def test_langchain_bind_tools_invoke_gets_the_call_and_then_the_answer(running: Running, model: WeatherModel) -> None:
    llm, ran, get_weather = _langchain(running)
    history: list[BaseMessage] = [HumanMessage(QUESTION)]
    called = llm.invoke(history)
    assert isinstance(called, AIMessage)
    (call,) = called.tool_calls
    assert (call["name"], call["args"]) == (CLIENT_TOOL, {"city": "Paris"})
    result = get_weather.invoke(call)
    assert isinstance(result, ToolMessage)
    answer = llm.invoke([*history, called, result])
    assert answer.content == answer_for(WEATHER)
    assert ran == ["Paris"]
    check_round_trip(running, model, last_session(running))


def test_langchain_bind_tools_stream_gets_the_call_and_then_the_answer(running: Running, model: WeatherModel) -> None:
    llm, ran, get_weather = _langchain(running)
    history: list[BaseMessage] = [HumanMessage(QUESTION)]
    gathered: Any = None
    for chunk in llm.stream(history):
        gathered = chunk if gathered is None else gathered + chunk
    assert isinstance(gathered, AIMessage)
    (call,) = gathered.tool_calls
    assert (call["name"], call["args"]) == (CLIENT_TOOL, {"city": "Paris"})
    result = get_weather.invoke(call)
    pieces = [chunk.content for chunk in llm.stream([*history, gathered, result])]
    assert "".join(str(piece) for piece in pieces) == answer_for(WEATHER)
    assert ran == ["Paris"]
    check_round_trip(running, model, last_session(running))


def test_a_stateful_client_continues_with_its_session_header(running: Running, model: WeatherModel) -> None:
    tools: list[Any] = [{"type": "function", "function": {"name": CLIENT_TOOL, "parameters": {"type": "object"}}}]
    with running.client() as client:
        raw = client.chat.completions.with_raw_response.create(
            model="hermes-agent", messages=[{"role": "user", "content": QUESTION}], tools=tools
        )
        first = raw.parse()
        session_id = raw.headers[SESSION_HEADER]
        assert first.choices[0].finish_reason == "tool_calls"
        (call,) = first.choices[0].message.tool_calls or []
        second = client.chat.completions.create(
            model="hermes-agent",
            messages=[{"role": "tool", "tool_call_id": call.id, "content": WEATHER}],
            tools=tools,
            extra_headers={SESSION_HEADER: session_id},
        )
    assert second.choices[0].message.content == answer_for(WEATHER)
    check_round_trip(running, model, session_id)


# -- what a client sees and sends -----------------------------------------------------------------------------------

SPEC: list[Any] = [{"type": "function", "function": {"name": CLIENT_TOOL, "parameters": {"type": "object"}}}]


def test_a_tool_turn_streams_only_chunks_with_a_choice_unless_progress_is_asked_for(running: Running) -> None:
    def stream(headers: dict[str, str]) -> list[str]:
        connection = running.connection()
        try:
            body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": QUESTION}], "tools": SPEC}
            connection.request(
                "POST",
                "/v1/chat/completions",
                body=json.dumps(body),
                headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json", **headers},
            )
            return connection.getresponse().read().decode().strip().split("\n\n")
        finally:
            connection.close()

    plain = stream({})
    assert plain[-1] == "data: [DONE]"
    chunks = [json.loads(block.removeprefix("data: ")) for block in plain[:-1]]
    assert all(block.startswith("data: ") for block in plain)  # no event: frames at all
    assert all(len(chunk["choices"]) == 1 for chunk in chunks)
    (calls,) = [
        chunk["choices"][0]["delta"]["tool_calls"] for chunk in chunks if "tool_calls" in chunk["choices"][0]["delta"]
    ]
    assert [call["function"]["name"] for call in calls] == [CLIENT_TOOL]  # session_search ran, and is not among them
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    asked = stream({"X-Hermes-Tool-Progress": "1"})
    progress = [json.loads(b.split("data: ", 1)[1]) for b in asked if b.startswith("event: hermes.tool.progress")]
    assert [(p["tool"], p["status"]) for p in progress] == [
        ("session_search", "running"),
        ("session_search", "completed"),
    ]


def test_tool_choice_none_offers_the_model_none_of_the_clients_tools(running: Running, model: WeatherModel) -> None:
    with running.client() as client:
        completion = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": QUESTION}], tools=SPEC, tool_choice="none"
        )
    assert completion.choices[0].finish_reason == "stop"
    assert completion.choices[0].message.tool_calls is None
    offered = [[t["function"]["name"] for t in body["tools"]] for body in model.server.completion_bodies]
    assert offered == [["session_search"], ["session_search"]]


def test_a_tool_that_is_not_a_function_is_refused_naming_it(running: Running, model: WeatherModel) -> None:
    status, _, body = running.request(
        {"messages": [{"role": "user", "content": QUESTION}], "tools": [{"type": "custom", "custom": {"name": "x"}}]},
        headers={"Authorization": f"Bearer {KEY}"},
    )
    assert status == 400
    assert (body["error"]["code"], body["error"]["param"]) == ("unsupported_tool", "tools[0].type")
    assert model.calls == 0


def test_a_tool_result_without_its_call_id_is_refused_naming_it(running: Running, model: WeatherModel) -> None:
    messages = [{"role": "user", "content": QUESTION}, {"role": "tool", "content": WEATHER}]
    status, _, body = running.request({"messages": messages, "tools": SPEC}, headers={"Authorization": f"Bearer {KEY}"})
    assert status == 400
    assert body["error"]["param"] == "messages[1].tool_call_id"
    assert model.calls == 0


def test_the_echo_agent_plays_a_client_tool_round_trip_stored_in_order(start: Start) -> None:
    running = start()  # the echo agent: "tool <name> <args>" calls a client tool when the request offers one
    with running.client() as client:
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": 'tool get_weather {"city": "Oslo"}'}], tools=SPEC
        )
        called, session_id = raw.parse(), raw.headers[SESSION_HEADER]
        (call,) = called.choices[0].message.tool_calls or []
        assert call.type == "function"
        assert (call.function.name, json.loads(call.function.arguments)) == (CLIENT_TOOL, {"city": "Oslo"})
        assert called.choices[0].message.content is None
        answered = client.chat.completions.create(
            model="m",
            messages=[{"role": "tool", "tool_call_id": call.id, "content": "snow"}],
            tools=SPEC,
            extra_headers={SESSION_HEADER: session_id},
        )
    assert answered.choices[0].message.content == "echo: get_weather returned 'snow'"
    with running.gateway.read() as store:
        records = store.load_transcript(session_id)
    assert [(r.role, r.tool_call_id) for r in records] == [
        (Role.USER, None),
        (Role.ASSISTANT, None),
        (Role.TOOL, call.id),
        (Role.ASSISTANT, None),
    ]
    assert json.loads(records[1].tool_calls or "[]")[0]["id"] == call.id
    assert records[2].content == "snow"
