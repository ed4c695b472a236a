"""Client-side tools over ``/v1/responses``: the OpenAI Agents SDK's ``Runner.run`` with a function tool in Responses
mode, and openai-python's own calls. The gateway's own tool runs are ``mcp_call`` items, never ``function_call``
items; the client's calls are ``function_call`` items, and their ``function_call_output`` items with
``previous_response_id`` continue the same session (see :mod:`tests.platforms.test_api_client_tools` for the
scripted model and the transcript every round trip leaves)."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from openai.types.responses import Response

from platforms.api_server import SESSION_HEADER
from tests.agents.weather_model import CLIENT_TOOL, QUESTION, WeatherModel, answer_for
from tests.platforms import test_api_client_tools, test_api_server
from tests.platforms.test_api_client_tools import check_round_trip, last_session
from tests.platforms.test_api_server import KEY, Running
from tests.platforms.tool_clients import WEATHER, agents_run

start = test_api_server.start
model = test_api_client_tools.model
running = test_api_client_tools.running

TOOLS: list[Any] = [
    {
        "type": "function",
        "name": CLIENT_TOOL,
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]


def test_the_agents_sdk_in_responses_mode_runs_its_tool_once(running: Running, model: WeatherModel) -> None:
    answer, ran = agents_run(running.server.url + "/v1", KEY, responses=True)  # chained: previous_response_id
    assert ran == ["Paris"]
    assert answer == answer_for(WEATHER)
    check_round_trip(running, model, last_session(running))


def test_the_agents_sdk_streaming_in_responses_mode_runs_its_tool_once(running: Running, model: WeatherModel) -> None:
    answer, ran = agents_run(running.server.url + "/v1", KEY, responses=True, streamed=True)
    assert ran == ["Paris"]
    assert answer == answer_for(WEATHER)
    check_round_trip(running, model, last_session(running))


def test_the_agents_sdk_sending_its_whole_conversation_reads_the_servers_items_back(
    running: Running, model: WeatherModel
) -> None:
    answer, ran = agents_run(running.server.url + "/v1", KEY, responses=True, chained=False)
    assert ran == ["Paris"]
    assert answer == answer_for(WEATHER)
    assert model.calls == 3
    # Without previous_response_id every response starts a session of its own, as on OpenAI; the second request
    # sent the first's items back (the mcp_call among them), and the model saw them as the calls they were.
    last = model.server.completion_bodies[-1]["messages"]
    assert [m["role"] for m in last[-5:]] == ["user", "assistant", "tool", "assistant", "tool"]
    assert last[-4]["tool_calls"][0]["function"]["name"] == "session_search"
    assert last[-2]["tool_calls"][0]["function"]["name"] == CLIENT_TOOL
    assert last[-1]["content"] == WEATHER


def _create(running: Running, **params: Any) -> tuple[Response, str]:
    with running.client() as client:
        raw = client.responses.with_raw_response.create(model="hermes-agent", **params)
    return raw.parse(), raw.headers[SESSION_HEADER]


def test_a_client_call_is_a_function_call_item_after_the_servers_own_mcp_call(
    running: Running, model: WeatherModel
) -> None:
    first, session_id = _create(running, input=QUESTION, tools=TOOLS)
    assert first.status == "completed"
    assert [item.type for item in first.output] == ["mcp_call", "function_call"]
    search, call = first.output
    assert search.type == "mcp_call"
    assert (search.server_label, search.name, search.status) == ("hermes", "session_search", "completed")
    assert json.loads(search.arguments) == {"query": "weather"}
    assert search.output is not None
    assert call.type == "function_call"
    assert (call.name, json.loads(call.arguments)) == (CLIENT_TOOL, {"city": "Paris"})
    second, second_session = _create(
        running,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": WEATHER}],
        previous_response_id=first.id,
        tools=TOOLS,
    )
    assert second_session == session_id
    assert [item.type for item in second.output] == ["message"]
    assert second.output_text == answer_for(WEATHER)
    check_round_trip(running, model, session_id)


def test_a_streamed_client_call_adds_and_finishes_each_item(running: Running, model: WeatherModel) -> None:
    with running.client() as client:
        events = list(client.responses.create(model="hermes-agent", input=QUESTION, tools=TOOLS, stream=True))
    assert [e.type for e in events] == [
        "response.created",
        "response.output_item.added",  # mcp_call, in progress, with its arguments
        "response.output_item.done",  # mcp_call, with its output
        "response.output_item.added",  # function_call
        "response.output_item.done",
        "response.completed",
    ]
    added = events[1]
    assert added.type == "response.output_item.added"
    assert added.item.type == "mcp_call"
    assert added.item.status == "in_progress"
    completed = events[-1]
    assert completed.type == "response.completed"
    assert [item.type for item in completed.response.output] == ["mcp_call", "function_call"]
    with running.client() as client:
        stored = client.responses.retrieve(completed.response.id)
    assert [item.type for item in stored.output] == ["mcp_call", "function_call"]


def test_a_client_tool_named_like_the_servers_own_fails_the_turn_naming_it(running: Running) -> None:
    tools: list[Any] = [{**TOOLS[0], "name": "session_search"}]
    with running.client() as client, pytest.raises(openai.InternalServerError) as failed:
        client.responses.create(model="hermes-agent", input=QUESTION, tools=tools)
    assert failed.value.status_code == 502
    assert "'session_search' has the name of one of this gateway's own tools" in str(failed.value)


def test_a_hosted_tool_is_refused_naming_it(running: Running, model: WeatherModel) -> None:
    with running.client() as client, pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="hermes-agent", input=QUESTION, tools=[{"type": "web_search"}])
    assert (refused.value.code, refused.value.param) == ("unsupported_tool", "tools[0].type")
    assert model.calls == 0
