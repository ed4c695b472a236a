"""``/v1/responses`` through the official ``openai`` client: chains over stored sessions, conversations, stored
responses, tool items, streaming events, and what a disconnect leaves."""

from __future__ import annotations

import asyncio
import json
import re
import socket
from typing import Any

import openai
import pytest
from openai.types.responses import Response

from hermes_actors.agents.base import EchoAgent
from hermes_actors.agents.turn import AgentError, AgentReply, TurnInput
from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.testing import GatedAgent, poll_until
from platforms.api_server import SESSION_HEADER, ApiServer, ApiServerConfig, key_fingerprint
from tests.platforms import test_api_server
from tests.platforms.test_api_server import KEY, Running, Start

start = test_api_server.start  # the same fixtures: a gateway and an API server on 127.0.0.1
running = test_api_server.running


class RecordingAgent(EchoAgent):
    """An echo agent that keeps what each turn gave it."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[TurnInput] = []

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        self.seen.append(turn)
        return super().run_turn(turn, timeout_s=timeout_s)


class FailingAgent(EchoAgent):
    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        raise AgentError("the model endpoint is down")


class HalfwayAgent(EchoAgent):
    """Streams part of an answer, then fails."""

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        if turn.events is not None:
            turn.events.text("Half an ")
        raise AgentError("the model went away mid-answer")


def _create(running: Running, **params: Any) -> tuple[Response, str]:
    """Create a response; return it and the session it ran in."""
    with running.client() as client:
        raw = client.responses.with_raw_response.create(model="hermes-agent", **params)
    return raw.parse(), raw.headers[SESSION_HEADER]


def _history(turn: TurnInput) -> list[tuple[str, str | None]]:
    return [(m.role, m.content) for m in turn.history]


# -- a turn -------------------------------------------------------------------------------------------------------


def test_a_string_input_gets_a_completed_response_with_the_reply_and_usage(running: Running) -> None:
    response, session_id = _create(running, input="hello")
    assert response.id.startswith("resp_")
    assert response.object == "response"
    assert response.status == "completed"
    assert response.model == "hermes-agent"
    assert response.output_text == "echo: hello"
    (message,) = response.output
    assert message.type == "message"
    assert [part.type for part in message.content] == ["output_text"]
    assert response.usage is not None
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens > 0
    assert running.transcript(session_id)[-2:] == [("user", "hello"), ("assistant", "echo: hello")]


def test_an_array_input_is_history_then_the_new_turn(start: Start) -> None:
    agent = RecordingAgent()
    running = start(agent=agent)
    response, _ = _create(
        running,
        input=[
            {"role": "system", "content": "Answer in French."},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "premier"}]},
            {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"q": "x"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "found x"},
            {"role": "user", "content": [{"type": "input_text", "text": "second"}]},
        ],
    )
    assert response.output_text == "echo: second"
    (turn,) = agent.seen
    assert _history(turn) == [("user", "first"), ("assistant", "premier"), ("assistant", ""), ("tool", "found x")]
    call, result = turn.history[2:]
    assert json.loads(call.tool_calls or "[]") == [
        {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
    ]
    assert result.tool_call_id == "c1"
    assert turn.system_prompt is not None
    assert turn.system_prompt.endswith("Answer in French.")


def test_a_chain_continues_the_session_of_its_previous_response_and_inherits_its_instructions(start: Start) -> None:
    agent = RecordingAgent()
    running = start(agent=agent)
    first, session_id = _create(running, input="ahoy", instructions="Talk like a pirate.")
    second, second_session = _create(running, input="again", previous_response_id=first.id)
    assert second_session == session_id
    assert second.previous_response_id == first.id
    assert second.instructions == "Talk like a pirate."
    assert second.output_text == "echo: again"
    assert [item.type for item in second.output] == ["message"]  # this turn's output only
    turn = agent.seen[-1]
    assert _history(turn) == [("user", "ahoy"), ("assistant", "echo: ahoy")]  # from the store
    assert turn.system_prompt is not None
    assert turn.system_prompt.endswith("Talk like a pirate.")
    inbox = GatewayInbox(running.gateway)
    stored, owner = inbox.stored_answer("api_server", f"api-{second.id}"), inbox.session_owner(session_id)
    assert stored is not None
    assert owner is not None
    assert stored.message.source.user_id == owner.user_id == f"api-{first.id}"  # one participant along the chain
    third, _ = _create(running, input="now plain", previous_response_id=second.id, instructions="Be plain.")
    assert third.instructions == "Be plain."
    assert running.transcript(session_id)[-2:] == [("user", "now plain"), ("assistant", "echo: now plain")]


def test_an_unknown_previous_response_is_a_404(running: Running) -> None:
    with running.client() as client, pytest.raises(openai.NotFoundError) as info:
        client.responses.create(model="hermes-agent", input="hi", previous_response_id="resp_nope")
    assert info.value.code == "response_not_found"
    assert info.value.param == "previous_response_id"


def test_another_keys_response_is_unknown(running: Running) -> None:
    response, _ = _create(running, input="secret")
    other = ApiServer(ApiServerConfig(port=0, key="sk-other"), environ={})
    other.start(GatewayInbox(running.gateway))
    try:
        with openai.OpenAI(base_url=other.url + "/v1", api_key="sk-other", max_retries=0, timeout=10) as client:
            with pytest.raises(openai.NotFoundError):
                client.responses.retrieve(response.id)
            with pytest.raises(openai.NotFoundError):
                client.responses.create(model="m", input="hi", previous_response_id=response.id)
    finally:
        other.stop(5)


def test_a_conversation_follows_its_newest_response(running: Running) -> None:
    first, session_id = _create(running, input="one", conversation="trip")
    assert first.previous_response_id is None
    assert first.conversation is not None
    assert first.conversation.id == "trip"
    second, second_session = _create(running, input="two", conversation={"id": "trip"})
    assert second.previous_response_id == first.id
    assert second_session == session_id
    third, _ = _create(running, input="three", conversation="trip")
    assert third.previous_response_id == second.id
    other, other_session = _create(running, input="elsewhere", conversation="other")
    assert other.previous_response_id is None
    assert other_session != session_id


def test_a_conversation_with_a_previous_response_is_a_400(running: Running) -> None:
    first, _ = _create(running, input="one")
    with running.client() as client, pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="m", input="two", conversation="trip", previous_response_id=first.id)
    assert info.value.param == "conversation"


@pytest.mark.parametrize(
    ("given", "param"),
    [
        ([{"role": "assistant", "content": "I speak last"}], "input[0]"),
        ([{"type": "image_generation_call", "id": "x"}, {"role": "user", "content": "hi"}], "input[0].type"),
        ([{"role": "user", "content": [{"type": "input_image", "image_url": "http://x"}]}], "input[0].content[0].type"),
        ("   ", "input"),
    ],
)
def test_input_that_cannot_be_a_turn_is_a_400_naming_the_item(running: Running, given: Any, param: str) -> None:
    with running.client() as client, pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="m", input=given)
    assert info.value.param == param


# -- stored responses ---------------------------------------------------------------------------------------------


def test_a_stored_response_is_retrieved_and_deleted(running: Running) -> None:
    response, _ = _create(running, input="keep me")
    with running.client() as client:
        again = client.responses.retrieve(response.id)
        assert again.model_dump() == response.model_dump()
        client.responses.delete(response.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(response.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.delete(response.id)


def test_store_false_is_not_retrievable_nor_continued(running: Running) -> None:
    response, _ = _create(running, input="forget me", store=False)
    assert response.output_text == "echo: forget me"
    with running.client() as client:
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(response.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.create(model="m", input="hi", previous_response_id=response.id)


def test_deleting_a_session_deletes_its_responses(running: Running) -> None:
    response, session_id = _create(running, input="short-lived")
    assert running.gateway.wait_idle(10)
    assert running.gateway.write(lambda store: store.delete_session(session_id))
    with running.client() as client, pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)


# -- tool items, failures -------------------------------------------------------------------------------------------


def test_a_tool_turn_lists_the_servers_run_as_an_mcp_call_before_the_message(running: Running) -> None:
    response, _ = _create(running, input="tool weather Paris")
    assert [item.type for item in response.output] == ["mcp_call", "message"]  # never a function_call: not the client's
    run, _ = response.output
    assert run.type == "mcp_call"
    assert (run.server_label, run.name, json.loads(run.arguments), run.status) == (
        "hermes",
        "weather",
        "Paris",
        "completed",
    )
    assert run.output == "weather ran with 'Paris'"
    assert response.output_text == "echo: weather said \"weather ran with 'Paris'\""


def test_a_failed_turn_without_output_is_a_502(start: Start) -> None:
    running = start(agent=FailingAgent())
    with running.client() as client, pytest.raises(openai.InternalServerError) as info:
        client.responses.create(model="m", input="hi")
    assert info.value.status_code == 502
    assert info.value.code == "agent_incomplete"


def test_a_failed_turn_with_partial_text_is_a_failed_response_holding_it(start: Start) -> None:
    running = start(agent=HalfwayAgent())
    with running.client() as client:
        raw = client.responses.with_raw_response.create(model="m", input="hi")
    response = raw.parse()
    assert raw.headers["X-Hermes-Completed"] == "false"
    assert response.status == "failed"
    assert response.error is not None
    assert "the model went away mid-answer" in response.error.message
    (message,) = response.output
    assert message.type == "message"
    assert message.status == "incomplete"
    assert response.output_text == "Half an "


# -- streaming ------------------------------------------------------------------------------------------------------


def test_a_stream_sends_the_events_in_order_numbered_from_zero(running: Running) -> None:
    with running.client() as client:
        events = list(client.responses.create(model="m", input="tool clock now", stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    types = [e.type for e in events]
    deltas = types.count("response.output_text.delta")
    assert deltas > 1  # the echo agent streams word by word
    assert types == [
        "response.created",
        "response.output_item.added",  # mcp_call, running
        "response.output_item.done",  # mcp_call, with its output
        "response.output_item.added",  # message
        "response.content_part.added",
        *["response.output_text.delta"] * deltas,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    created, completed = events[0], events[-1]
    assert created.type == "response.created"
    assert created.response.status == "in_progress"
    assert completed.type == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == completed.response.output_text == "echo: clock said \"clock ran with 'now'\""
    assert [item.type for item in completed.response.output] == ["mcp_call", "message"]
    with running.client() as client:
        assert client.responses.retrieve(completed.response.id).output_text == text


def test_a_streamed_turn_that_fails_ends_with_response_failed(start: Start) -> None:
    running = start(agent=FailingAgent())
    with running.client() as client:
        events = list(client.responses.create(model="m", input="hi", stream=True))
    assert [e.type for e in events] == ["response.created", "response.failed"]
    failed = events[-1]
    assert failed.type == "response.failed"
    assert failed.response.status == "failed"
    assert failed.response.error is not None
    assert str(failed.response.error.code) == "agent_incomplete"  # not one of OpenAI's codes
    with running.client() as client:
        assert client.responses.retrieve(failed.response.id).status == "failed"


def test_the_async_client_creates_streams_and_retrieves(running: Running) -> None:
    async def scenario() -> tuple[Response, list[str], Response]:
        async with openai.AsyncOpenAI(
            base_url=running.server.url + "/v1", api_key=KEY, max_retries=0, timeout=10
        ) as client:
            first = await client.responses.create(model="m", input="hello", instructions="Be kind.")
            stream = await client.responses.create(model="m", input="more", previous_response_id=first.id, stream=True)
            types: list[str] = [event.type async for event in stream]
            second = await client.responses.retrieve(first.id)
            return first, types, second

    first, types, again = asyncio.run(scenario())
    assert first.output_text == "echo: hello"
    assert types[0] == "response.created"
    assert types[-1] == "response.completed"
    assert again.id == first.id
    assert again.instructions == "Be kind."


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "waiting"])
def test_a_client_that_leaves_stops_the_turn_and_an_incomplete_snapshot_is_stored(start: Start, stream: bool) -> None:
    agent = GatedAgent()
    running = start(agent=agent, keepalive_s=0.05)
    inbox = GatewayInbox(running.gateway)
    body = json.dumps({"model": "m", "input": "wait for me", "stream": stream}).encode()
    port = int(running.server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/responses HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {KEY}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        received = b""
        while stream and b": keepalive\n\n" not in received:  # the stream opened, then kept alive
            received += sock.recv(65536)
        assert agent.started.wait(10)
    (message,) = inbox.recent_inbound("api_server", 0)
    response_id = message.message_id.removeprefix("api-")
    if stream:
        created = re.search(rb"event: response.created\ndata: (.*)\n\n", received)
        assert created is not None
        assert json.loads(created[1])["response"]["id"] == response_id

    def stored_status() -> str | None:
        found = inbox.get_response(response_id, key_fingerprint(KEY))
        return json.loads(found.body)["status"] if found is not None else None

    poll_until(lambda: stored_status() == "incomplete", 10, what="the incomplete snapshot")
    agent.release.set()
    assert running.gateway.wait_idle(10)
    with running.client() as client:
        snapshot = client.responses.retrieve(response_id)
    assert snapshot.status == "incomplete"
    assert snapshot.incomplete_details is not None
    assert str(snapshot.incomplete_details.reason) == "client_disconnected"  # not one of OpenAI's reasons
