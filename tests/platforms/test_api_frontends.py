"""What chat frontends and client libraries do with chat completions, as they do it: LangChain's ``stream_usage``
counts a turn's tokens once, and a failed turn is neither retried by openai-python nor run again when a client
retries it anyway. Real gateway, real HTTP on 127.0.0.1, the official clients."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest
from langchain_core.messages import AIMessageChunk
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from hermes_actors.testing import poll_until
from platforms.api_server import SESSION_HEADER
from platforms.api_server.retry_fold import RetryFold
from tests.agents.chat_server import ChatServer, Scripted, completion, failure
from tests.platforms import test_api_contract
from tests.platforms.test_api_contract import Serve, msgspec_replace, user
from tests.platforms.test_api_server import KEY, Running

model = test_api_contract.model  # a scripted OpenAI-compatible model on 127.0.0.1
serve = test_api_contract.serve  # a gateway whose agent calls it, behind an API server


def _stream_text(running: Running, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON chunks of a raw streamed chat completion."""
    connection = running.connection()
    try:
        connection.request(
            "POST",
            "/v1/chat/completions",
            body=json.dumps(body),
            headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
        )
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    datas = [block.split("data: ", 1)[1] for block in text.split("\n\n") if block.startswith("data: ")]
    assert datas[-1] == "[DONE]"
    return [json.loads(data) for data in datas[:-1]]


# -- usage in streams ----------------------------------------------------------------------------------------------


def test_langchain_stream_usage_reports_exactly_the_turns_tokens(serve: Serve, model: ChatServer) -> None:
    running = serve()
    model.script(msgspec_replace(completion("one two", prompt_tokens=4, completion_tokens=5), ("one ", "two"), 0.0))
    chat = ChatOpenAI(
        base_url=running.server.url + "/v1",
        api_key=SecretStr(KEY),
        model="m",
        stream_usage=True,
        max_retries=0,
        timeout=10,
    )
    total: AIMessageChunk | None = None
    for chunk in chat.stream("count"):
        total = chunk if total is None else total + chunk
    assert total is not None
    assert total.content == "one two"
    assert total.usage_metadata is not None
    assert (total.usage_metadata["input_tokens"], total.usage_metadata["output_tokens"]) == (4, 5)
    assert total.usage_metadata["total_tokens"] == 9


def test_usage_comes_once_in_a_final_chunk_with_empty_choices(serve: Serve, model: ChatServer) -> None:
    running = serve()
    model.script(completion("hello", prompt_tokens=4, completion_tokens=5))
    body = {"model": "m", "stream": True, "stream_options": {"include_usage": True}, "messages": [user("hi")]}
    chunks = _stream_text(running, body)
    with_usage = [chunk for chunk in chunks if chunk.get("usage") is not None]
    assert with_usage == [chunks[-1]]  # one, the last
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9}
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]][-1] == "stop"


def test_a_stream_without_include_usage_has_no_usage(serve: Serve, model: ChatServer) -> None:
    running = serve()
    model.script(completion("hello"))
    chunks = _stream_text(running, {"model": "m", "stream": True, "messages": [user("hi")]})
    assert all("usage" not in chunk for chunk in chunks)
    assert all(chunk["choices"] for chunk in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


# -- retries -------------------------------------------------------------------------------------------------------


def test_a_failed_turn_is_not_retried_by_openai_python(serve: Serve, model: ChatServer) -> None:
    running = serve()
    model.script(failure(500, "model exploded"), completion("never asked for"))
    client = openai.OpenAI(base_url=running.server.url + "/v1", api_key=KEY, timeout=10)  # retries by default
    assert client.max_retries == 2
    with client, pytest.raises(openai.APIStatusError) as raised:
        client.chat.completions.create(model="m", messages=[user("hi")])
    assert raised.value.status_code == 502
    assert raised.value.response.headers["x-should-retry"] == "false"
    assert len(model.completion_bodies) == 1  # the model was called once
    session_id = raised.value.response.headers[SESSION_HEADER]
    assert running.transcript(session_id) == [("user", "hi")]  # the message is stored once


def test_an_identical_retry_folds_into_the_failed_turn(serve: Serve, model: ChatServer) -> None:
    """A client that retries anyway (no Idempotency-Key, the same body) gets the first turn's outcome."""
    running = serve()
    model.script(failure(500, "model exploded"), completion("a second answer"))
    body = {"model": "m", "messages": [user("hi")]}
    auth = {"Authorization": f"Bearer {KEY}"}
    first = running.request(body, headers=auth)
    again = running.request(body, headers=auth)
    assert (first[0], again[0]) == (502, 502)
    assert again[2]["error"]["code"] == "agent_incomplete"
    assert "retr" in again[2]["error"]["message"]  # it says it is the earlier request's outcome
    assert again[1]["x-should-retry"] == "false"
    assert len(model.completion_bodies) == 1
    session_id = first[1][SESSION_HEADER]
    assert again[1][SESSION_HEADER] == session_id
    assert running.transcript(session_id) == [("user", "hi")]


def test_a_retry_while_the_first_request_still_runs_gets_its_answer(serve: Serve, model: ChatServer) -> None:
    running = serve()
    asked, go = threading.Event(), threading.Event()

    def slow(body: Any) -> Scripted:
        asked.set()
        go.wait(10)
        return completion("slow answer")

    model.respond_with(slow)
    body = {"model": "m", "messages": [user("hi")]}
    auth = {"Authorization": f"Bearer {KEY}"}
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(running.request, body, headers=auth)
        assert asked.wait(10)
        again = pool.submit(running.request, body, headers=auth)
        poll_until(lambda: running.server._service.running == 2, what="the retry to be admitted")
        go.set()
        answers = [first.result(), again.result()]
    assert [a[2]["choices"][0]["message"]["content"] for a in answers] == ["slow answer", "slow answer"]
    assert len(model.completion_bodies) == 1


def test_the_same_request_after_an_answer_is_a_new_turn(serve: Serve, model: ChatServer) -> None:
    """A frontend's "regenerate" sends the conversation again as it was: it gets a new answer."""
    running = serve()
    model.script(completion("one"), completion("two"))
    auth = {"Authorization": f"Bearer {KEY}"}
    body = {"model": "m", "messages": [user("hi")]}
    assert running.request(body, headers=auth)[2]["choices"][0]["message"]["content"] == "one"
    assert running.request(body, headers=auth)[2]["choices"][0]["message"]["content"] == "two"


def test_with_folding_off_the_same_request_is_a_new_turn(serve: Serve, model: ChatServer) -> None:
    running = serve(retry_fold_s=0)
    model.script(completion("one"), completion("two"))
    auth = {"Authorization": f"Bearer {KEY}"}
    body = {"model": "m", "messages": [user("hi")]}
    assert running.request(body, headers=auth)[2]["choices"][0]["message"]["content"] == "one"
    assert running.request(body, headers=auth)[2]["choices"][0]["message"]["content"] == "two"


def test_the_same_message_from_another_user_is_a_new_turn(serve: Serve, model: ChatServer) -> None:
    running = serve()
    model.script(completion("one"), completion("two"))
    auth = {"Authorization": f"Bearer {KEY}"}
    body = {"model": "m", "messages": [user("hi")]}
    assert running.request(body, headers=auth)[2]["choices"][0]["message"]["content"] == "one"
    other = {**body, "user": "bob"}
    assert running.request(other, headers=auth)[2]["choices"][0]["message"]["content"] == "two"


def test_the_fold_window_counts_from_the_end_of_the_last_request() -> None:
    now = [100.0]
    fold = RetryFold(window_s=5.0, clock=lambda: now[0])
    first = fold.begin(b"body", "scope")
    second = fold.begin(b"body", "scope")  # while the first runs: the same turn
    assert (second.message_id, second.retried, first.retried) == (first.message_id, True, False)
    fold.end(first, failed=True)
    fold.end(second, failed=True)
    now[0] += 4.9
    third = fold.begin(b"body", "scope")
    assert third.message_id == first.message_id
    assert fold.begin(b"body", "another key").message_id != first.message_id
    assert fold.begin(b"other body", "scope").message_id != first.message_id
    fold.end(third, failed=True)
    now[0] += 5.1
    later = fold.begin(b"body", "scope")
    assert later.message_id != first.message_id
    assert not later.retried
    fold.end(later, failed=False)  # answered: the same request at once is a new turn (a regenerate)
    assert not fold.begin(b"body", "scope").retried
    assert RetryFold(window_s=0).begin(b"body").idempotency() is None


# -- OpenAI parameters the server does not use -------------------------------------------------------------------

LIBRECHAT_PARAMETERS: dict[str, Any] = {  # what LibreChat and the SDKs send that the agent's own model settings decide
    "temperature": 0.7,
    "top_p": 0.9,
    "presence_penalty": 0.1,
    "frequency_penalty": 0.2,
    "stop": ["\nUser:"],
    "max_tokens": 512,
    "max_completion_tokens": 512,
    "logit_bias": {"50256": -100},
    "seed": 7,
    "parallel_tool_calls": True,
    "reasoning_effort": "low",
    "logprobs": False,
    "top_logprobs": 0,
    "metadata": {"app": "librechat"},
    "store": False,
    "service_tier": "auto",
    "response_format": {"type": "text"},
    "modalities": ["text"],
    "verbosity": "low",
    "prompt_cache_key": "conversation-1",
    "safety_identifier": "user-1",
}


def test_openai_parameters_the_server_does_not_use_are_accepted_and_named(serve: Serve, model: ChatServer) -> None:
    running = serve()
    model.script(completion("fine"))
    body = {"model": "m", "messages": [user("hi")], **LIBRECHAT_PARAMETERS}
    status, _, answer = running.request(body, headers={"Authorization": f"Bearer {KEY}"})
    assert status == 200, answer
    assert answer["choices"][0]["message"]["content"] == "fine"
    sent = model.completion_bodies[-1]
    assert "logit_bias" not in sent  # ignored: the agent's own model settings decide
    status, _, capabilities = running.request(
        None, path="/v1/capabilities", method="GET", headers={"Authorization": f"Bearer {KEY}"}
    )
    assert status == 200
    assert set(LIBRECHAT_PARAMETERS) <= set(capabilities["features"]["ignored_parameters"])
    assert "user" not in capabilities["features"]["ignored_parameters"]  # used: the user whose memories it sees


def test_a_developer_message_is_system_text(serve: Serve, model: ChatServer) -> None:
    running = serve()
    model.script(completion("Arr"))
    with running.client() as client:
        client.chat.completions.create(
            model="m", messages=[{"role": "developer", "content": "You are a pirate."}, user("Hello")]
        )
    seen = model.completion_bodies[-1]["messages"]
    assert seen[0]["role"] == "system"
    assert seen[0]["content"].endswith("You are a pirate.")
    assert [m["role"] for m in seen[1:]] == ["user"]
