"""The chat-completions contract with the official ``openai`` client, against a scripted model behind the agent:
stateless clients, fingerprint names, continuation, streaming that streams, tool progress, honest failures."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from hermes_actors.agents.openai_chat import OpenAIAgent
from hermes_actors.config import RuntimeConfig
from hermes_actors.messages import decode_inbound
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.testing import poll_until
from platforms.api_server import SESSION_HEADER, ApiServer, ApiServerConfig
from platforms.api_server.conversation import conversation_name
from platforms.api_server.sessions import COMPLETED_HEADER, CONVERSATION_HEADER, MEMORY_HEADER
from tests.agents.chat_server import ChatServer, completion, failure, open_chat_server, tool_call
from tests.platforms.test_api_server import KEY, Running

Serve = Callable[..., Running]


@pytest.fixture
def model() -> Iterator[ChatServer]:
    with open_chat_server() as server:
        yield server


@pytest.fixture
def serve(tmp_path: Path, model: ChatServer) -> Iterator[Serve]:
    """A gateway whose agent is the OpenAI agent on the scripted ``model``, behind an API server."""
    with ExitStack() as stack:

        def run(**config: Any) -> Running:
            agent = OpenAIAgent(base_url=model.base_url, model="test-model", max_retries=0, timeout_s=10)
            stack.callback(agent.close)
            options: dict[str, Any] = {"port": 0, "key": KEY} | config
            server = ApiServer(ApiServerConfig(**options), environ={})
            runtime = RuntimeConfig(auto_titles=False)  # every model call here is a turn's
            gateway = Gateway(tmp_path / "state.db", config=runtime, agent=agent, senders=server.senders())
            stack.callback(gateway.stop, 10)
            server.start(GatewayInbox(gateway))
            stack.callback(server.stop, 10)
            return Running(server=server, gateway=gateway)

        yield run


def user(text: str) -> ChatCompletionMessageParam:
    return {"role": "user", "content": text}


def assistant(text: str) -> ChatCompletionMessageParam:
    return {"role": "assistant", "content": text}


def test_a_stateless_client_sends_the_conversation_and_the_model_sees_all_of_it(
    serve: Serve, model: ChatServer
) -> None:
    running = serve()
    model.script(completion("Arr, hello"), completion("Arr, fine"))
    system: ChatCompletionMessageParam = {"role": "system", "content": "You are a pirate."}
    with running.client() as client:
        first = client.chat.completions.with_raw_response.create(model="m", messages=[system, user("Hello")])
        second = client.chat.completions.with_raw_response.create(
            model="m", messages=[system, user("Hello"), assistant("Arr, hello"), user("How are you?")]
        )
    seen = model.completion_bodies[-1]["messages"]
    assert seen[0]["role"] == "system"
    assert seen[0]["content"].endswith("You are a pirate.")
    assert [(m["role"], m["content"]) for m in seen[1:]] == [
        ("user", "Hello"),
        ("assistant", "Arr, hello"),
        ("user", "How are you?"),
    ]
    # Both requests began alike, so they are one conversation, stored in one session.
    assert first.headers[CONVERSATION_HEADER] == second.headers[CONVERSATION_HEADER]
    session_id = second.headers[SESSION_HEADER]
    assert first.headers[SESSION_HEADER] == session_id
    assert [c for role, c in running.transcript(session_id) if role in ("user", "assistant")] == [
        "Hello",
        "Arr, hello",
        "How are you?",
        "Arr, fine",
    ]
    usage = second.parse().usage
    assert usage is not None
    assert usage.prompt_tokens == 11  # the model's own count


def test_the_fingerprint_names_are_the_reference_systems_without_key_or_user(serve: Serve, model: ChatServer) -> None:
    assert conversation_name(None, "Hello") == "api-7c129c8425088ece"
    assert conversation_name("You are a pirate.", "Hello") == "api-96ab6318772ae8f9"
    running = serve(key=None)
    model.script(completion("hi"))
    with running.client(key="unused") as client:
        raw = client.chat.completions.with_raw_response.create(model="m", messages=[user("Hello")])
    assert raw.headers[CONVERSATION_HEADER] == "api-7c129c8425088ece"


def test_two_clients_that_open_alike_never_share_a_session(serve: Serve, model: ChatServer) -> None:
    running = serve()
    model.script(completion("one"), completion("two"))
    with running.client() as client:
        alice = client.chat.completions.with_raw_response.create(model="m", messages=[user("Hello")], user="alice")
        bob = client.chat.completions.with_raw_response.create(model="m", messages=[user("Hello")], user="bob")
    assert alice.headers[SESSION_HEADER] != bob.headers[SESSION_HEADER]
    assert alice.headers[CONVERSATION_HEADER] != "api-7c129c8425088ece"  # the key and user are in the seed


def test_continuation_takes_the_history_from_the_store_and_ignores_the_body(serve: Serve, model: ChatServer) -> None:
    running = serve()
    model.script(completion("first answer"), completion("second answer"))
    with running.client() as client:
        first = client.chat.completions.with_raw_response.create(model="m", messages=[user("remember 42")])
        session_id = first.headers[SESSION_HEADER]
        client.chat.completions.create(
            model="m",
            messages=[user("made-up history"), assistant("never said"), user("what number?")],
            extra_headers={SESSION_HEADER: session_id, MEMORY_HEADER: "alice-memories"},
        )
    seen = [(m["role"], m["content"]) for m in model.completion_bodies[-1]["messages"] if m["role"] != "system"]
    assert seen == [("user", "remember 42"), ("assistant", "first answer"), ("user", "what number?")]


def test_a_session_key_header_is_echoed_and_scopes_memory(serve: Serve, model: ChatServer) -> None:
    running = serve()
    model.script(completion("ok"))
    with running.client() as client:
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=[user("hi")], extra_headers={MEMORY_HEADER: "alice-memories"}
        )
    assert raw.headers[MEMORY_HEADER] == "alice-memories"
    with running.gateway.read() as store:
        assert store.get_session(raw.headers[SESSION_HEADER]).user_id == "alice-memories"


def test_streaming_deltas_reach_the_client_while_the_model_still_writes(serve: Serve, model: ChatServer) -> None:
    running = serve()
    pieces = ("one ", "two ", "three ", "four")
    model.script(msgspec_replace(completion("one two three four", prompt_tokens=21, completion_tokens=4), pieces, 0.3))
    arrivals: list[tuple[float, str]] = []
    with running.client() as client:
        stream = client.chat.completions.create(
            model="m", messages=[user("count")], stream=True, stream_options={"include_usage": True}
        )
        roles, finishes, usages = [], [], []
        for chunk in stream:
            if chunk.usage is not None:
                usages.append(chunk.usage)
            for choice in chunk.choices:
                if choice.delta.role:
                    roles.append(choice.delta.role)
                if choice.delta.content:
                    arrivals.append((time.monotonic(), choice.delta.content))
                if choice.finish_reason:
                    finishes.append(choice.finish_reason)
    assert [text for _, text in arrivals] == list(pieces)  # one by one, as the model wrote them
    gaps = [later - earlier for (earlier, _), (later, _) in itertools.pairwise(arrivals)]
    assert min(gaps) > 0.15  # each arrived when the model sent it, not all at the end
    assert roles == ["assistant"]
    assert finishes == ["stop"]
    assert (usages[-1].prompt_tokens, usages[-1].completion_tokens) == (21, 4)
    with running.gateway.read() as store:  # the transcript holds the whole reply once
        replies = [
            m.content for s in store.list_sessions() for m in store.load_transcript(s.id) if m.role == "assistant"
        ]
    assert replies == ["one two three four"]


def msgspec_replace(scripted: Any, pieces: tuple[str, ...], gap_s: float, cut_after: int | None = None) -> Any:
    from dataclasses import replace

    return replace(scripted, pieces=pieces, gap_s=gap_s, cut_after=cut_after)


def test_tool_calls_stream_as_progress_events_to_a_client_that_asks(serve: Serve, model: ChatServer) -> None:
    running = serve()
    model.script(
        completion(None, tool_calls=[tool_call("call_1", "session_search", {"query": "pirates"})]),
        completion("found nothing"),
    )
    connection = running.connection()
    try:
        body = json.dumps({"model": "m", "stream": True, "messages": [user("search pirates")]})
        connection.request(
            "POST",
            "/v1/chat/completions",
            body=body,
            headers={
                "Authorization": f"Bearer {KEY}",
                "Content-Type": "application/json",
                "X-Hermes-Tool-Progress": "1",
            },
        )
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    events = [block for block in text.split("\n\n") if block.startswith("event: hermes.tool.progress")]
    progress = [json.loads(block.split("data: ", 1)[1]) for block in events]
    assert progress == [
        {"tool": "session_search", "toolCallId": "call_1", "status": "running"},
        {"tool": "session_search", "toolCallId": "call_1", "status": "completed"},
    ]
    assert text.index("hermes.tool.progress") < text.index("found nothing") < text.index("data: [DONE]")


def test_an_agent_failure_is_a_502_not_an_answer_and_not_stored(serve: Serve, model: ChatServer) -> None:
    running = serve()
    model.script(failure(500, "model exploded"))
    with running.client() as client, pytest.raises(openai.APIStatusError) as raised:
        client.chat.completions.create(model="m", messages=[user("hi")])
    assert raised.value.status_code == 502
    assert raised.value.code == "agent_incomplete"
    assert "model exploded" in raised.value.message
    assert raised.value.response.headers[COMPLETED_HEADER] == "false"
    session_id = raised.value.response.headers[SESSION_HEADER]
    assert running.transcript(session_id) == [("user", "hi")]  # no "Sorry, the agent failed" as an answer


def test_a_partial_answer_ends_with_finish_reason_error(serve: Serve, model: ChatServer) -> None:
    running = serve()
    model.script(msgspec_replace(completion("never finished"), ("never ", "finished"), 0.0, cut_after=1))
    with running.client() as client:
        raw = client.chat.completions.with_raw_response.create(model="m", messages=[user("hi")])
    assert raw.headers[COMPLETED_HEADER] == "false"
    (choice,) = raw.parse().choices
    assert (choice.message.content, choice.finish_reason) == ("never ", "error")


def test_an_idempotent_retry_is_answered_from_the_store_and_another_body_gets_409(
    serve: Serve, model: ChatServer
) -> None:
    running = serve()
    model.script(completion("only once"))
    headers = {"Idempotency-Key": "retry-me"}
    with running.client() as client:
        first = client.chat.completions.create(model="m", messages=[user("pay")], extra_headers=headers)
        again = client.chat.completions.create(model="m", messages=[user("pay")], extra_headers=headers)
        with pytest.raises(openai.ConflictError) as conflict:
            client.chat.completions.create(model="m", messages=[user("pay twice")], extra_headers=headers)
    assert first.choices[0].message.content == again.choices[0].message.content == "only once"
    assert len(model.completion_bodies) == 1  # the agent ran once
    assert conflict.value.code == "idempotency_key_reused"


def test_requests_over_the_cap_get_429(serve: Serve, model: ChatServer) -> None:
    running = serve(max_concurrent_runs=1)
    model.script(msgspec_replace(completion("slow"), ("slow",), 1.0))
    started = threading.Event()

    def slow() -> None:
        started.set()
        with running.client() as client:
            client.chat.completions.create(model="m", messages=[user("slow one")])

    worker = threading.Thread(target=slow)
    worker.start()
    started.wait(5)
    poll_until(lambda: running.server._service.running == 1, 5, what="the first request running")
    with running.client() as client, pytest.raises(openai.RateLimitError) as raised:
        client.chat.completions.create(model="m", messages=[user("one too many")])
    worker.join(10)
    assert raised.value.code == "rate_limit_exceeded"
    assert raised.value.response.headers["Retry-After"] == "1"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
        ({"messages": ["hi"]}, "messages[0]"),
        ({"messages": [{"role": "user", "content": "hi"}], "n": 2}, "n"),
    ],
)
def test_bad_requests_get_a_400_naming_the_field(serve: Serve, body: dict[str, Any], param: str) -> None:
    running = serve()
    status, _, payload = running.request(body, headers={"Authorization": f"Bearer {KEY}"})
    assert status == 400
    assert payload["error"]["param"] == param


def test_a_body_declared_as_something_else_than_json_gets_a_400(serve: Serve) -> None:
    running = serve()
    status, _, payload = running.request(
        {"messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "text/plain"},
    )
    assert (status, payload["error"]["param"]) == (400, "Content-Type")


def test_a_client_that_disconnects_mid_stream_stops_the_turn(serve: Serve, model: ChatServer) -> None:
    running = serve()
    model.script(msgspec_replace(completion("a b c d e f"), ("a ", "b ", "c ", "d ", "e ", "f"), 0.5))
    connection = running.connection()
    body = json.dumps({"model": "m", "stream": True, "messages": [user("long story")]})
    connection.request(
        "POST",
        "/v1/chat/completions",
        body=body,
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
    )
    response = connection.getresponse()
    line = response.readline()
    while b'"content":"a "' not in line:
        assert line, "the stream ended before its first words"
        line = response.readline()
    session_id = response.headers[SESSION_HEADER]
    connection.close()  # the client leaves after the first words
    assert running.gateway.wait_idle(10)
    # The turn was stopped: its user message is stored, no reply (and no model answer went out whole).
    poll_until(lambda: running.transcript(session_id) == [("user", "long story")], 10, what="the stopped turn")
    with running.gateway.read() as store:
        sent = [decode_inbound(payload).text for payload in store.inbox.payloads_since("api_server", 0.0)]
    assert sent == ["long story", "/stop"]  # one stop, however many ways the server noticed the client leave


def test_the_async_client_streams_too(serve: Serve, model: ChatServer) -> None:
    running = serve()
    model.script(msgspec_replace(completion("async works"), ("async ", "works"), 0.05))

    async def main() -> list[str]:
        client = openai.AsyncOpenAI(base_url=running.server.url + "/v1", api_key=KEY, max_retries=0, timeout=10)
        try:
            stream = await client.chat.completions.create(model="m", messages=[user("hi")], stream=True)
            return [c.choices[0].delta.content async for c in stream if c.choices and c.choices[0].delta.content]
        finally:
            await client.close()

    assert asyncio.run(main()) == ["async ", "works"]
