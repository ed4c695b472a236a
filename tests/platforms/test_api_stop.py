"""A turn stopped by another request (``/stop``, ``/new`` in its session) is told to its caller the moment it
happens, through the official ``openai`` client: chat completions (409 ``turn_stopped``, or ``finish_reason:
cancelled`` and the error in a stream), Responses (``incomplete``, reason ``stopped``) and runs (``cancelled``).
Nothing the stopped turn writes afterwards reaches a client, and a request that stops waiting is never promised a
reply that will not come. Real gateway, real HTTP on 127.0.0.1."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest
from openai.types.responses import ResponseIncompleteEvent

from hermes_actors.agents.base import AgentReply, EchoAgent, TurnInput
from hermes_actors.agents.turn import AgentMessage
from hermes_actors.runtime.turn_watch import TurnWatch
from hermes_actors.store import Role
from platforms.api_server import SESSION_HEADER, runs
from tests.platforms import test_api_server
from tests.platforms.test_api_runs import EventStream, post_run, wait_final
from tests.platforms.test_api_server import KEY, Running, Start, chat

start = test_api_server.start  # a gateway and an API server on 127.0.0.1
AUTH = {"Authorization": f"Bearer {KEY}"}
BEFORE, AFTER = "before the stop, ", "after the stop"


class TalkingAgent(EchoAgent):
    """Echoes, except a turn starting with ``talk``: it streams :data:`BEFORE`, sets ``halfway``, waits for
    ``resume``, streams :data:`AFTER` (a model that goes on writing after its turn was stopped), sets ``done`` and
    answers both. Every turn's text is kept in ``turns``."""

    runs_inline = False  # it blocks: in the agent pool, where a stop leaves it

    def __init__(self) -> None:
        self.halfway = threading.Event()
        self.resume = threading.Event()
        self.done = threading.Event()
        self.turns: list[str] = []

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        self.turns.append(turn.user_text)
        if not turn.user_text.startswith("talk"):
            return EchoAgent.run_turn(self, turn, timeout_s=timeout_s)
        assert turn.events is not None
        turn.events.text(BEFORE)
        self.halfway.set()
        self.resume.wait(10)
        turn.events.text(AFTER)
        self.done.set()
        text = BEFORE + AFTER
        return AgentReply(messages=(AgentMessage(role=Role.ASSISTANT, content=text),), text=text)


@pytest.fixture
def agent() -> Iterator[TalkingAgent]:
    agent = TalkingAgent()
    yield agent
    agent.resume.set()


def send(running: Running, text: str, session: str) -> tuple[int, Any]:
    """``text`` as a chat message in ``session`` (``/stop``, ``/new``), answered as the API answers it."""
    status, _, body = running.request({"messages": chat(text)}, headers={**AUTH, SESSION_HEADER: session})
    return status, body


def let_the_stopped_turn_write_on(running: Running, agent: TalkingAgent) -> None:
    """Let the stopped turn's agent write :data:`AFTER` and finish; return once the gateway is idle."""
    agent.resume.set()
    assert agent.done.wait(10)
    assert running.gateway.wait_idle()


def retrying_client(running: Running) -> openai.OpenAI:
    """The client as applications use it: it retries a 409 or a 5xx twice unless told not to."""
    return openai.OpenAI(base_url=running.server.url + "/v1", api_key=KEY, timeout=10)


# -- chat completions -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["/stop", "/new"])
def test_a_completion_whose_turn_another_request_stops_gets_a_409_at_once_and_is_not_retried(
    start: Start, agent: TalkingAgent, command: str
) -> None:
    running = start(agent=agent)  # request_timeout_s stays 300: only the stop can answer within the wait below
    with retrying_client(running) as client, ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(
            client.chat.completions.with_raw_response.create,
            model="hermes-agent",
            messages=chat("talk to me"),
            extra_headers={SESSION_HEADER: "stopped-chat"},
        )
        assert agent.halfway.wait(10)
        assert send(running, command, "stopped-chat")[0] == 200
        with pytest.raises(openai.ConflictError) as stopped:
            waiting.result(timeout=5)
    error = stopped.value
    assert error.code == "turn_stopped"
    assert "stopped before it answered" in error.message
    assert "no reply will come" in error.message
    assert error.response.headers["x-should-retry"] == "false"
    assert error.response.headers["X-Hermes-Completed"] == "false"
    session_id = error.response.headers[SESSION_HEADER]
    assert running.transcript(session_id) == [("user", "talk to me")]  # stored so when the caller hears of it
    let_the_stopped_turn_write_on(running, agent)
    assert agent.turns == ["talk to me"]  # the client did not send it again
    assert running.transcript(session_id) == [("user", "talk to me")]  # and its late answer is not stored


def test_a_stream_whose_turn_is_stopped_ends_with_finish_reason_cancelled_and_the_error_and_nothing_after(
    start: Start, agent: TalkingAgent
) -> None:
    running = start(agent=agent)
    with running.client() as client:
        stream = client.chat.completions.create(
            model="hermes-agent",
            messages=chat("talk and stream"),
            stream=True,
            extra_headers={SESSION_HEADER: "stopped-stream"},
        )
        chunks = iter(stream)
        seen = []
        for chunk in chunks:
            seen.append(chunk)
            if chunk.choices and chunk.choices[0].delta.content:
                break
        status, body = send(running, "/stop", "stopped-stream")
        assert (status, body["choices"][0]["message"]["content"]) == (200, "Stopped.")
        let_the_stopped_turn_write_on(running, agent)  # AFTER is written now, once the turn was stopped
        with pytest.raises(openai.APIError) as stopped:
            seen.extend(chunks)
    assert stopped.value.code == "turn_stopped"
    text = "".join(c.choices[0].delta.content or "" for c in seen if c.choices)
    assert text == BEFORE
    finishes = [str(c.choices[0].finish_reason) for c in seen if c.choices]
    assert finishes[-1] == "cancelled"  # not one of OpenAI's reasons


# -- Responses --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_a_response_whose_turn_is_stopped_is_incomplete_with_reason_stopped_and_stored_so(
    start: Start, agent: TalkingAgent, stream: bool
) -> None:
    running = start(agent=agent)
    with running.client() as client, ThreadPoolExecutor(1) as pool:
        first = client.responses.with_raw_response.create(model="hermes-agent", input="hello")
        session_id = first.headers[SESSION_HEADER]

        def held() -> tuple[Any, list[Any]]:
            if not stream:
                return client.responses.create(
                    model="hermes-agent", input="talk on", previous_response_id=first.parse().id
                ), []
            events = list(
                client.responses.create(
                    model="hermes-agent", input="talk on", previous_response_id=first.parse().id, stream=True
                )
            )
            last = events[-1]
            assert isinstance(last, ResponseIncompleteEvent)
            return last.response, events

        waiting = pool.submit(held)
        assert agent.halfway.wait(10)
        assert send(running, "/stop", session_id)[0] == 200
        response, events = waiting.result(timeout=5)
        let_the_stopped_turn_write_on(running, agent)
        stored = client.responses.retrieve(response.id)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert str(response.incomplete_details.reason) == "stopped"  # not one of OpenAI's reasons
    assert response.output_text == BEFORE
    if stream:
        deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
        assert deltas == [BEFORE]
    assert (stored.status, stored.output_text) == ("incomplete", BEFORE)
    assert running.transcript(session_id)[-1] == ("user", "talk on")


# -- runs -------------------------------------------------------------------------------------------------------------


def test_a_run_whose_turn_another_request_stops_is_cancelled_at_once_and_publishes_nothing_after(
    start: Start, agent: TalkingAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runs, "_STORE_CHECK_S", 600.0)  # the store is not read again in time: only the stop tells
    running = start(agent=agent)
    _, accepted = post_run(running, {"input": "talk in a run", "session_id": "stopped-run"})
    run_id = accepted["run_id"]
    subscriber = EventStream(running, run_id)
    try:
        assert subscriber.next() == ("message.delta", {"delta": BEFORE})
        assert send(running, "/stop", "stopped-run")[0] == 200
        final = wait_final(running, run_id)
        assert final["status"] == "cancelled"
        assert running.transcript(final["session_id"]) == [("user", "talk in a run")]
        let_the_stopped_turn_write_on(running, agent)
        assert subscriber.until_final() == [("run.cancelled", {})]
    finally:
        subscriber.close()


# -- a request that stops waiting -------------------------------------------------------------------------------------


def test_a_request_that_times_out_is_told_its_turn_goes_on_not_that_a_reply_will_come(
    start: Start, agent: TalkingAgent
) -> None:
    running = start(agent=agent, request_timeout_s=1)
    with running.client() as client, pytest.raises(openai.InternalServerError) as late:
        client.chat.completions.create(
            model="hermes-agent", messages=chat("talk slowly"), extra_headers={SESSION_HEADER: "slow"}
        )
    error = late.value
    assert (error.status_code, error.code) == (504, "timeout")
    assert "its turn is not stopped" in error.message
    assert "an answer it gives is stored there" in error.message
    assert "will be" not in error.message
    assert error.response.headers["x-should-retry"] == "false"  # a retry would run the message twice


def test_a_request_that_times_out_after_its_turn_ended_unseen_is_told_it_ended(
    start: Start, agent: TalkingAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(TurnWatch, "stopped", lambda watch, message_ids: None)  # as when a relay is lost
    running = start(agent=agent, request_timeout_s=3)
    with running.client() as client, ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(
            client.chat.completions.create,
            model="hermes-agent",
            messages=chat("talk unseen"),
            extra_headers={SESSION_HEADER: "unseen"},
        )
        assert agent.halfway.wait(10)
        assert send(running, "/stop", "unseen")[0] == 200  # answered once the stopped turn has committed
        with pytest.raises(openai.InternalServerError) as late:
            waiting.result(timeout=10)
    error = late.value
    assert (error.status_code, error.code) == (504, "turn_ended")
    assert "it ended without an answer" in error.message
    assert "will be" not in error.message
