"""Client-side tool round trips as users of the real clients write them, against any base URL: openai-python's
documented streaming loop, the OpenAI Agents SDK's ``Runner.run`` with a function tool (Responses or chat-completions
mode) and LangChain's ``ChatOpenAI.bind_tools`` (invoke, stream). Each asks :data:`QUESTION` of a gateway whose model
is :class:`tests.agents.weather_model.WeatherModel`, runs ``get_weather`` when told to, and returns the final answer
and the cities its tool ran for; :func:`check_transcript` checks what the session stored."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import openai
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
from langchain_core.tools import BaseTool, tool
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from hermes_actors.store import Role
from hermes_actors.store.records import MessageRecord
from tests.agents.weather_model import CLIENT_TOOL, QUESTION, answer_for

__all__ = [
    "ROUND_TRIP",
    "WEATHER",
    "agents_run",
    "check_transcript",
    "langchain_invoke",
    "langchain_stream",
    "stream_loop",
]

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
_SPEC: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": CLIENT_TOOL,
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def _shape(records: Sequence[MessageRecord]) -> list[tuple[str, str | None]]:
    """A transcript as (role, the tool it calls, or session_search for its result)."""
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


def check_transcript(records: Sequence[MessageRecord]) -> None:
    """Assert that a session holds one round trip, in order (see :data:`ROUND_TRIP`)."""
    assert _shape(records) == ROUND_TRIP
    assert records[0].content == QUESTION
    assert records[4].content == WEATHER
    assert records[-1].content == answer_for(WEATHER)


def stream_loop(base_url: str, key: str) -> tuple[str, list[str]]:
    """openai-python's documented streaming loop (``chunk.choices[0].delta``), running the tool it is asked to."""
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    ran: list[str] = []
    text, finish = "", None
    with openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=20) as client:
        for _ in range(3):
            stream = client.chat.completions.create(
                model="hermes-agent", messages=messages, tools=_SPEC, stream=True, user="stream-loop"
            )  # its own user: LangChain's conversation opens the same way, and would share its stored session
            text, calls, finish = "", dict[int, dict[str, Any]](), None
            for chunk in stream:  # every chunk has a choice
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
    assert finish == "stop"
    return text, ran


def agents_run(
    base_url: str, key: str, *, responses: bool, chained: bool = True, streamed: bool = False
) -> tuple[str, list[str]]:
    """The Agents SDK's ``Runner.run`` (``Runner.run_streamed`` when ``streamed``) with a ``get_weather`` function
    tool. In Responses mode ``chained`` continues with ``previous_response_id`` (``auto_previous_response_id``; else
    the SDK sends its whole conversation)."""
    ran: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        ran.append(city)
        return WEATHER

    async def run() -> str:
        async with openai.AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=20) as client:
            model = (
                OpenAIResponsesModel("hermes-agent", client)
                if responses
                else OpenAIChatCompletionsModel("hermes-agent", client)
            )
            agent = Agent(name="weather", instructions="Answer about the weather.", tools=[get_weather], model=model)
            config, chain = RunConfig(tracing_disabled=True), responses and chained
            if not streamed:
                result = await Runner.run(agent, QUESTION, run_config=config, auto_previous_response_id=chain)
                return str(result.final_output)
            running = Runner.run_streamed(agent, QUESTION, run_config=config, auto_previous_response_id=chain)
            async for _ in running.stream_events():
                pass
            return str(running.final_output)

    return asyncio.run(run()), ran


def _langchain(base_url: str, key: str) -> tuple[Any, list[str], BaseTool]:
    ran: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        ran.append(city)
        return WEATHER

    llm = ChatOpenAI(model="hermes-agent", base_url=base_url, api_key=SecretStr(key), max_retries=0, timeout=20)
    return llm.bind_tools([get_weather]), ran, get_weather


def langchain_invoke(base_url: str, key: str) -> tuple[str, list[str]]:
    """``ChatOpenAI.bind_tools`` then ``invoke``: the call, the tool's ``ToolMessage``, the answer."""
    llm, ran, get_weather = _langchain(base_url, key)
    history: list[BaseMessage] = [HumanMessage(QUESTION)]
    called = llm.invoke(history)
    assert isinstance(called, AIMessage)
    (call,) = called.tool_calls
    assert (call["name"], call["args"]) == (CLIENT_TOOL, {"city": "Paris"})
    result = get_weather.invoke(call)
    assert isinstance(result, ToolMessage)
    answer = llm.invoke([*history, called, result])
    return str(answer.content), ran


def langchain_stream(base_url: str, key: str) -> tuple[str, list[str]]:
    """``ChatOpenAI.bind_tools`` then ``stream``: chunks gathered into the call, then the answer's chunks."""
    llm, ran, get_weather = _langchain(base_url, key)
    history: list[BaseMessage] = [HumanMessage(QUESTION)]
    gathered: Any = None
    for chunk in llm.stream(history):
        gathered = chunk if gathered is None else gathered + chunk
    assert isinstance(gathered, AIMessage)
    (call,) = gathered.tool_calls
    assert (call["name"], call["args"]) == (CLIENT_TOOL, {"city": "Paris"})
    result = get_weather.invoke(call)
    return "".join(str(chunk.content) for chunk in llm.stream([*history, gathered, result])), ran
