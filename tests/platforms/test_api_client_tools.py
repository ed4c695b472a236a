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
