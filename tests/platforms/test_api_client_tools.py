"""Client-side tools over chat completions with the real clients (:mod:`tests.platforms.tool_clients`):
openai-python's documented streaming loop, the OpenAI Agents SDK (``Runner.run`` with a function tool,
``OpenAIChatCompletionsModel``) and LangChain's ``ChatOpenAI.bind_tools`` (invoke and stream);
:mod:`tests.platforms.test_api_client_tools_responses` does Responses.

The gateway's agent is the built-in OpenAI agent on a scripted model (:mod:`tests.agents.weather_model`): each
question makes it run the server's own ``session_search`` and then call the client's ``get_weather`` in the same
turn; the client runs the tool and sends its result; the model answers. Every test checks that the client's tool ran
once, that the answer arrived, that the session's stored transcript holds the round trip in order, and that the model
was called three times.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hermes_actors.agents.openai_chat import OpenAIAgent
from hermes_actors.config import RuntimeConfig
from hermes_actors.messages import Attachment, AttachmentKind, InboundMessage, ToolResult
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.protocol import Delivery
from hermes_actors.runtime.turn_input import posted_messages
from hermes_actors.store import Role
from platforms.api_server import SESSION_HEADER
from tests.agents.chat_server import ChatServer, open_chat_server
from tests.agents.weather_model import CLIENT_TOOL, QUESTION, WeatherModel, answer_for
from tests.platforms import test_api_server
from tests.platforms.test_api_server import KEY, Running, Start
from tests.platforms.tool_clients import (
    WEATHER,
    agents_run,
    check_transcript,
    langchain_invoke,
    langchain_stream,
    stream_loop,
)

start = test_api_server.start  # a gateway and an API server on 127.0.0.1

SPEC: list[Any] = [{"type": "function", "function": {"name": CLIENT_TOOL, "parameters": {"type": "object"}}}]


@pytest.fixture
def model() -> Iterator[WeatherModel]:
    server: ChatServer
    with open_chat_server() as server:
        yield WeatherModel(server)


@pytest.fixture
def running(start: Start, model: WeatherModel) -> Iterator[Running]:
    with OpenAIAgent(base_url=model.server.base_url, model="test-model", max_retries=0, timeout_s=10) as agent:
        yield start(agent=agent, runtime=RuntimeConfig(auto_titles=False))  # every model call is the tool loop's


def last_session(running: Running) -> str:
    with running.gateway.read() as store:
        (session,) = store.list_sessions(limit=10)
    return session.id


def check_round_trip(running: Running, model: WeatherModel, session_id: str) -> None:
    """The session holds the round trip in order, and the model was asked three times (search, call, answer)."""
    with running.gateway.read() as store:
        check_transcript(store.load_transcript(session_id))
    assert model.calls == 3


Client = Callable[[str, str], tuple[str, list[str]]]


@pytest.mark.parametrize(
    "client",
    [
        pytest.param(stream_loop, id="openai-python's streaming loop"),
        pytest.param(lambda url, key: agents_run(url, key, responses=False), id="the Agents SDK, chat completions"),
        pytest.param(
            lambda url, key: agents_run(url, key, responses=False, streamed=True),
            id="the Agents SDK, chat completions, streamed",
        ),
        pytest.param(langchain_invoke, id="LangChain bind_tools, invoke"),
        pytest.param(langchain_stream, id="LangChain bind_tools, stream"),
    ],
)
def test_a_real_client_runs_its_tool_once_beside_a_server_side_tool_and_gets_the_answer(
    running: Running, model: WeatherModel, client: Client
) -> None:
    answer, ran = client(running.server.url + "/v1", KEY)
    assert ran == ["Paris"]
    assert answer == answer_for(WEATHER)
    check_round_trip(running, model, last_session(running))


def test_a_stateful_client_continues_with_its_session_header(running: Running, model: WeatherModel) -> None:
    with running.client() as client:
        raw = client.chat.completions.with_raw_response.create(
            model="hermes-agent", messages=[{"role": "user", "content": QUESTION}], tools=SPEC
        )
        first = raw.parse()
        session_id = raw.headers[SESSION_HEADER]
        assert first.choices[0].finish_reason == "tool_calls"
        (call,) = first.choices[0].message.tool_calls or []
        assert call.type == "function"
        assert call.function.name == CLIENT_TOOL  # session_search ran in the same turn, and is not here
        second = client.chat.completions.create(
            model="hermes-agent",
            messages=[{"role": "tool", "tool_call_id": call.id, "content": WEATHER}],
            tools=SPEC,
            extra_headers={SESSION_HEADER: session_id},
        )
    assert second.choices[0].message.content == answer_for(WEATHER)
    check_round_trip(running, model, session_id)


# -- what a client sees and sends -----------------------------------------------------------------------------------


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


def test_an_idempotent_retry_of_a_turn_that_called_a_client_tool_gets_the_same_calls(
    running: Running, model: WeatherModel
) -> None:
    asked: list[Any] = [{"role": "user", "content": QUESTION}]
    with running.client() as client:
        first = client.chat.completions.create(
            model="m", messages=asked, tools=SPEC, extra_headers={"Idempotency-Key": "ask-1"}
        )
        (call,) = first.choices[0].message.tool_calls or []
        assert call.type == "function"
        answered = [*asked, first.choices[0].message.model_dump(exclude_none=True)]
        answered.append({"role": "tool", "tool_call_id": call.id, "content": WEATHER})
        second = client.chat.completions.create(
            model="m", messages=answered, tools=SPEC, extra_headers={"Idempotency-Key": "answer-1"}
        )
        assert second.choices[0].message.content == answer_for(WEATHER)
        again = client.chat.completions.create(  # after the answer: still the first request's own outcome
            model="m", messages=asked, tools=SPEC, extra_headers={"Idempotency-Key": "ask-1"}
        )
    assert again.choices[0].finish_reason == "tool_calls"
    assert [(c.id, c.type) for c in again.choices[0].message.tool_calls or []] == [(call.id, "function")]
    assert model.calls == 3  # the retry ran nothing


def test_a_tool_name_openai_would_refuse_is_refused_naming_its_field(running: Running, model: WeatherModel) -> None:
    tools = [{"type": "function", "function": {"name": "get weather!", "parameters": {"type": "object"}}}]
    status, _, body = running.request(
        {"messages": [{"role": "user", "content": QUESTION}], "tools": tools},
        headers={"Authorization": f"Bearer {KEY}"},
    )
    assert status == 400
    assert body["error"]["param"] == "tools[0].function.name"
    assert model.calls == 0


def test_a_turn_stores_tool_results_as_tool_messages_and_records_attachments_on_user_messages() -> None:
    source = SessionSource(platform="api_server", chat_type="dm", chat_id="c", user_id="u")
    picture = Attachment(kind=AttachmentKind.IMAGE, path="/tmp/picture.png")
    results = InboundMessage(
        source=source, text="", message_id="r1", tool_results=(ToolResult(call_id="c1", output="a"),) * 2
    )
    asked = InboundMessage(source=source, text="and this?", message_id="u2", attachments=(picture,))
    deliveries = [Delivery(inbox_id=1, message=results), Delivery(inbox_id=2, message=asked)]
    new, firsts = posted_messages(deliveries, ["", "and this?"], 5.0)
    assert [(m.role, m.content, m.tool_call_id, m.platform_message_id) for m in new] == [
        (Role.TOOL, "a", "c1", "r1"),
        (Role.TOOL, "a", "c1", None),
        (Role.USER, "and this?", None, "u2"),
    ]
    assert firsts == [0, 2]  # the user message's attachments go on record 2
