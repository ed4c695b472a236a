"""``/v1/runs``: a run is a turn of a session, submitted at once (202) and watched by the server; its status is
polled, its events streamed (late subscribers get what was buffered), it can be stopped, and it outlives a
restart in the store. Real gateway, real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from hermes_actors.agents.base import AgentReply, EchoAgent, TurnInput
from hermes_actors.agents.turn import AgentError, AgentMessage
from hermes_actors.messages import InboundMessage, encode
from hermes_actors.routing import SessionSource, build_session_key
from hermes_actors.store import Role, Store
from hermes_actors.testing import GatedAgent, poll_until
from platforms.api_server import SESSION_HEADER, key_fingerprint, runs
from tests.platforms import test_api_server
from tests.platforms.test_api_server import KEY, Running, Start

start = test_api_server.start  # a gateway and an API server on 127.0.0.1
AUTH = {"Authorization": f"Bearer {KEY}"}
FINAL = {"completed", "failed", "cancelled"}


class ScriptedAgent(GatedAgent):
    """Echoes; ``wait ...`` blocks until ``release``; ``fail`` raises :class:`AgentError`; ``history`` answers
    with the user messages its turn saw before it, ``system`` with its system prompt; ``two parts`` streams a
    first part, sets ``halfway`` and streams the second after ``release``; ``hold ...`` blocks until ``hold``."""

    def __init__(self) -> None:
        super().__init__()
        self.halfway = threading.Event()
        self.hold = threading.Event()

    def _two_parts(self, turn: TurnInput) -> AgentReply:
        assert turn.events is not None
        turn.events.text("part one, ")
        self.halfway.set()
        self.release.wait(10)
        turn.events.text("part two")
        text = "part one, part two"
        return AgentReply(messages=(AgentMessage(role=Role.ASSISTANT, content=text),), text=text, output_tokens=4)

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        if turn.user_text == "fail":
            raise AgentError("the model endpoint answered 500")
        if turn.user_text == "history":
            seen = [m.content for m in turn.history if m.role == "user"]
            return EchoAgent.run_turn(self, msgspec.structs.replace(turn, user_text=f"saw {seen}"), timeout_s=timeout_s)
        if turn.user_text == "system":
            asked = msgspec.structs.replace(turn, user_text=str(turn.system_prompt))
            return EchoAgent.run_turn(self, asked, timeout_s=timeout_s)
        if turn.user_text == "two parts":
            return self._two_parts(turn)
        if turn.user_text.startswith("wait"):
            return super().run_turn(turn, timeout_s=timeout_s)
        if turn.user_text.startswith("hold"):
            self.hold.wait(10)
        return EchoAgent.run_turn(self, turn, timeout_s=timeout_s)


@pytest.fixture
def agent() -> ScriptedAgent:
    return ScriptedAgent()


@pytest.fixture
def running(start: Start, agent: ScriptedAgent) -> Iterator[Running]:
    running = start(agent=agent)
    yield running
    agent.release.set()  # before the fixture stops the server: no run holds up its drain
    agent.hold.set()


def post_run(running: Running, body: dict[str, Any], **headers: str) -> tuple[int, Any]:
    status, _, payload = running.request(body, path="/v1/runs", headers={**AUTH, **headers})
    return status, payload


def get_run(running: Running, run_id: str, key: str = KEY) -> tuple[int, Any]:
    status, _, payload = running.request(
        None, path=f"/v1/runs/{run_id}", method="GET", headers={"Authorization": f"Bearer {key}"}
    )
    return status, payload


def stop_run(running: Running, run_id: str) -> tuple[int, Any]:
    status, _, payload = running.request(None, path=f"/v1/runs/{run_id}/stop", headers=AUTH)
    return status, payload


def wait_final(running: Running, run_id: str) -> Any:
    """Poll the run until it has finished; return its last view."""

    def finished() -> Any:
        status, view = get_run(running, run_id)
        assert status == 200, view
        return view if view["status"] in FINAL else None

    return poll_until(finished, 10, what=f"the end of run {run_id}")


class EventStream:
    """An open ``GET /v1/runs/{id}/events``, read event by event."""

    def __init__(self, running: Running, run_id: str) -> None:
        self.connection = running.connection()
        self.connection.request("GET", f"/v1/runs/{run_id}/events", headers=AUTH)
        self.response = self.connection.getresponse()

    def next(self) -> tuple[str, Any]:
        name, data = "", ""
        while True:
            line = self.response.readline().decode()
            assert line, "the stream ended before its terminal event"
            if line == "\n" and name:
                return name, json.loads(data)
            if line.startswith("event: "):
                name = line[7:].strip()
            elif line.startswith("data: "):
                data = line[6:].strip()

    def until_final(self) -> list[tuple[str, Any]]:
        events = [self.next()]
        while not events[-1][0].startswith("run."):
            events.append(self.next())
        return events

    def close(self) -> None:
        self.connection.close()


def read_events(running: Running, run_id: str) -> list[tuple[str, Any]]:
    stream = EventStream(running, run_id)
    try:
        assert stream.response.status == 200
        assert stream.response.headers["Content-Type"].startswith("text/event-stream")
        return stream.until_final()
    finally:
        stream.close()


# -- submitting and polling -------------------------------------------------------------------------------------


def test_a_run_is_accepted_at_once_and_polls_to_completed_with_output_and_usage(running: Running) -> None:
    status, accepted = post_run(running, {"input": "hello runs", "model": "hermes-agent"})
    assert status == 202
    assert accepted["status"] == "queued"
    run_id = accepted["run_id"]
    assert run_id.startswith("run_")
    view = wait_final(running, run_id)
    assert view["status"] == "completed"
    assert view["run_id"] == run_id
    assert view["output"] == "echo: hello runs"
    assert view["usage"]["total_tokens"] == view["usage"]["prompt_tokens"] + view["usage"]["completion_tokens"] > 0
    assert "error" not in view
    assert running.transcript(view["session_id"]) == [("user", "hello runs"), ("assistant", "echo: hello runs")]


def test_a_run_without_input_or_with_a_bad_body_gets_a_400_naming_the_field(running: Running) -> None:
    status, payload = post_run(running, {"input": "  "})
    assert (status, payload["error"]["param"]) == (400, "input")
    status, payload = post_run(running, {"input": 3})
    assert (status, payload["error"]["param"]) == (400, "input")
    status, payload = post_run(running, {"input": "x", "session_id": "a/b"})
    assert (status, payload["error"]["param"]) == (400, "session_id")


def test_runs_in_one_session_run_in_order_and_the_second_sees_the_first(running: Running, agent: ScriptedAgent) -> None:
    status, first = post_run(running, {"input": "wait for me", "session_id": "ordered"})
    assert status == 202
    assert agent.started.wait(10)
    status, second = post_run(running, {"input": "history"}, **{SESSION_HEADER: "ordered"})
    assert status == 202
    assert get_run(running, second["run_id"])[1]["status"] == "queued"
    agent.release.set()
    one, two = wait_final(running, first["run_id"]), wait_final(running, second["run_id"])
    assert (one["status"], two["status"]) == ("completed", "completed")
    assert two["output"] == "echo: saw ['wait for me']"
    assert one["session_id"] == two["session_id"]


def test_a_run_continues_a_stored_session_it_names(running: Running) -> None:
    _, first = post_run(running, {"input": "one"})
    session_id = wait_final(running, first["run_id"])["session_id"]
    status, second = post_run(running, {"input": "history", "session_id": session_id})
    assert status == 202
    assert second["session_id"] == session_id
    assert wait_final(running, second["run_id"])["output"] == "echo: saw ['one']"


def test_a_run_naming_a_session_it_may_not_continue_gets_the_unknown_session_404(running: Running) -> None:
    status, payload = post_run(running, {"input": "hi", "session_id": "20990101_000000_0badf00d"})
    assert (status, payload["error"]["code"]) == (404, "session_not_found")
    assert running.server._service.running == 0


def test_instructions_reach_the_model_of_a_run_that_starts_a_session(running: Running) -> None:
    _, accepted = post_run(running, {"input": "system", "instructions": "Answer like a pirate."})
    assert wait_final(running, accepted["run_id"])["output"].endswith("Answer like a pirate.")
    status, payload = post_run(running, {"input": "x", "instructions": "Arr.", "session_id": "mine"})
    assert (status, payload["error"]["param"]) == (400, "instructions")


def test_an_agent_failure_fails_the_run_with_the_reason(running: Running) -> None:
    _, accepted = post_run(running, {"input": "fail"})
    view = wait_final(running, accepted["run_id"])
    assert view["status"] == "failed"
    assert "the model endpoint answered 500" in view["error"]["message"]
    assert view["error"]["code"] == "agent_incomplete"
    assert "output" not in view
    assert read_events(running, accepted["run_id"])[-1][0] == "run.failed"


# -- events -----------------------------------------------------------------------------------------------------


def test_events_stream_the_deltas_then_run_completed(running: Running, agent: ScriptedAgent) -> None:
    _, accepted = post_run(running, {"input": "wait and stream these words"})
    stream = EventStream(running, accepted["run_id"])
    try:
        assert agent.started.wait(10)
        agent.release.set()
        events = stream.until_final()
    finally:
        stream.close()
    names = [name for name, _ in events]
    assert set(names[:-1]) == {"message.delta"}
    assert len(names) > 3  # word by word
    assert "".join(data["delta"] for _, data in events[:-1]) == "echo: wait and stream these words"
    name, data = events[-1]
    assert name == "run.completed"
    assert data["output"] == "echo: wait and stream these words"
    assert data["usage"]["completion_tokens"] > 0


def test_a_tool_call_streams_tool_started_and_tool_completed(running: Running) -> None:
    _, accepted = post_run(running, {"input": "tool weather Paris"})
    wait_final(running, accepted["run_id"])
    events = read_events(running, accepted["run_id"])  # after the end: the buffered events, then the terminal one
    names = [name for name, _ in events]
    assert names[:2] == ["tool.started", "tool.completed"]
    assert events[0][1] == {"tool": "weather", "call_id": events[1][1]["call_id"]}
    assert events[1][1]["call_id"]
    assert names[-1] == "run.completed"
    assert "weather" in events[-1][1]["output"]


def test_a_late_subscriber_gets_the_buffered_events_then_the_live_ones(running: Running, agent: ScriptedAgent) -> None:
    _, accepted = post_run(running, {"input": "wait then talk"})
    run_id = accepted["run_id"]
    early = EventStream(running, run_id)
    try:
        assert agent.started.wait(10)
        agent.release.set()
        first = early.next()  # the run has begun streaming
        late = [read_events(running, run_id) for _ in range(2)]  # two more subscribers, one after the other
        rest = [first, *early.until_final()]
    finally:
        early.close()
    assert late[0] == late[1] == rest
    assert rest[-1][0] == "run.completed"


def test_a_subscriber_between_two_parts_gets_the_first_from_the_buffer_and_the_second_live(
    running: Running, agent: ScriptedAgent
) -> None:
    _, accepted = post_run(running, {"input": "two parts"})
    assert agent.halfway.wait(10)
    poll_until(lambda: get_run(running, accepted["run_id"])[1]["status"] == "running", 10, what="the first part")
    stream = EventStream(running, accepted["run_id"])
    try:
        assert stream.next() == ("message.delta", {"delta": "part one, "})
        agent.release.set()
        assert stream.next() == ("message.delta", {"delta": "part two"})
        name, data = stream.next()
    finally:
        stream.close()
    assert (name, data["output"]) == ("run.completed", "part one, part two")


def test_a_quiet_run_sends_keep_alive_comments(start: Start, agent: ScriptedAgent) -> None:
    running = start(agent=agent, keepalive_s=0.05)
    try:
        _, accepted = post_run(running, {"input": "wait quietly"})
        stream = EventStream(running, accepted["run_id"])
        try:
            assert stream.response.readline() == b": keepalive\n"
            agent.release.set()
            assert stream.until_final()[-1][0] == "run.completed"
        finally:
            stream.close()
    finally:
        agent.release.set()


def test_events_of_a_finished_run_end_with_its_terminal_event_at_once(running: Running) -> None:
    _, accepted = post_run(running, {"input": "done"})
    wait_final(running, accepted["run_id"])
    events = read_events(running, accepted["run_id"])
    assert events[-1] == ("run.completed", {"output": "echo: done", "usage": events[-1][1]["usage"]})


def test_several_subscribers_at_once_see_the_same_events(running: Running, agent: ScriptedAgent) -> None:
    _, accepted = post_run(running, {"input": "wait for all of you"})
    streams = [EventStream(running, accepted["run_id"]) for _ in range(3)]
    seen: list[list[tuple[str, Any]]] = []
    try:
        readers = [threading.Thread(target=lambda s=s: seen.append(s.until_final())) for s in streams]
        for reader in readers:
            reader.start()
        assert agent.started.wait(10)
        agent.release.set()
        for reader in readers:
            reader.join(10)
    finally:
        for stream in streams:
            stream.close()
    assert len(seen) == 3
    assert seen[0] == seen[1] == seen[2]
    assert seen[0][-1][0] == "run.completed"


# -- stopping ---------------------------------------------------------------------------------------------------


def test_stopping_a_held_run_cancels_it(running: Running, agent: ScriptedAgent) -> None:
    _, accepted = post_run(running, {"input": "wait forever"})
    run_id = accepted["run_id"]
    stream = EventStream(running, run_id)
    try:
        assert agent.started.wait(10)
        status, view = stop_run(running, run_id)
        assert (status, view["status"]) == (200, "stopping")
        assert stop_run(running, run_id)[1]["status"] in ("stopping", "cancelled")  # stopping twice is no error
        final = wait_final(running, run_id)
        events = stream.until_final()
    finally:
        stream.close()
    assert final["status"] == "cancelled"
    assert events[-1][0] == "run.cancelled"
    assert running.transcript(final["session_id"]) == [("user", "wait forever")]


def test_a_run_stopped_while_queued_behind_another_is_stopped_when_its_turn_begins(
    running: Running, agent: ScriptedAgent
) -> None:
    _, ahead = post_run(running, {"input": "wait ahead", "session_id": "shared"})
    assert agent.started.wait(10)
    assert get_run(running, ahead["run_id"])[1]["status"] == "running"
    _, behind = post_run(running, {"input": "hold behind", "session_id": "shared"})
    assert get_run(running, behind["run_id"])[1]["status"] == "queued"
    assert stop_run(running, behind["run_id"])[1]["status"] == "stopping"
    agent.release.set()  # the turn ahead was not stopped: it finishes, then the stopped run's turn begins
    assert wait_final(running, ahead["run_id"])["output"] == "echo: wait ahead"
    final = wait_final(running, behind["run_id"])
    assert final["status"] == "cancelled"
    assert running.transcript(final["session_id"])[-1] == ("user", "hold behind")


def test_a_slash_stop_from_elsewhere_cancels_the_run_whose_turn_it_stopped(
    running: Running, agent: ScriptedAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runs, "_STORE_CHECK_S", 0.05)  # how soon a run sees its turn ended without a reply to it
    _, accepted = post_run(running, {"input": "wait for a stop", "session_id": "elsewhere"})
    assert agent.started.wait(10)
    status, _, body = running.request(
        {"messages": [{"role": "user", "content": "/stop"}]}, headers={**AUTH, SESSION_HEADER: "elsewhere"}
    )
    assert status == 200, body
    assert wait_final(running, accepted["run_id"])["status"] == "cancelled"


def test_stopping_a_finished_run_is_a_409(running: Running) -> None:
    _, accepted = post_run(running, {"input": "quick"})
    wait_final(running, accepted["run_id"])
    status, payload = stop_run(running, accepted["run_id"])
    assert status == 409
    assert payload["error"]["code"] == "run_finished"


# -- who sees a run, and for how long -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/runs/{}", "/v1/runs/{}/events", "/v1/runs/{}/stop"])
def test_an_unknown_run_is_a_404(running: Running, path: str) -> None:
    method = "POST" if path.endswith("stop") else "GET"
    for run_id in ("run_" + "0" * 32, "nope", "api-123"):
        status, _, payload = running.request(None, path=path.format(run_id), method=method, headers=AUTH)
        assert (status, payload["error"]["code"]) == (404, "run_not_found")


def test_a_chat_message_id_is_not_a_run(running: Running) -> None:
    status, headers, _ = running.request(
        {"messages": [{"role": "user", "content": "hi"}]}, headers={**AUTH, "Idempotency-Key": "k1"}
    )
    assert status == 200
    with running.gateway.read() as store:
        ids = [m.platform_message_id for m in store.load_transcript(headers[SESSION_HEADER]) if m.platform_message_id]
    assert ids
    assert get_run(running, ids[0])[0] == 404


def test_after_a_restart_a_run_is_answered_from_the_store_and_not_to_another_key(
    start: Start, agent: ScriptedAgent
) -> None:
    first = start(agent=agent)
    _, accepted = post_run(first, {"input": "remember me"})
    run_id = accepted["run_id"]
    before = wait_final(first, run_id)
    first.server.stop(10)
    first.gateway.stop(10)
    again = start(agent=agent)
    status, view = get_run(again, run_id)
    assert status == 200
    assert view == {**before, "usage": view["usage"]}
    assert view["status"] == "completed"
    assert view["output"] == "echo: remember me"
    events = read_events(again, run_id)
    assert events == [("run.completed", {"output": "echo: remember me", "usage": view["usage"]})]
    assert stop_run(again, run_id)[0] == 409
    again.server.stop(10)
    again.gateway.stop(10)
    other = start(agent=agent, key="sk-another-key")
    status, payload = get_run(other, run_id, key="sk-another-key")
    assert (status, payload["error"]["code"]) == (404, "run_not_found")


def test_a_run_a_crash_left_pending_is_run_again_and_watched_by_the_next_server(
    start: Start, agent: ScriptedAgent, tmp_path: Path
) -> None:
    run_id = "run_" + "ab" * 16
    source = SessionSource(platform="api_server", scope_id=key_fingerprint(KEY), chat_id=run_id, user_id=run_id)
    with Store.open(tmp_path / "state.db") as store:  # as the process that crashed left it
        store.inbox.add(
            platform="api_server",
            account_id="",
            platform_message_id=run_id,
            routing_key=build_session_key(source),
            payload=encode(InboundMessage(source=source, text="wait for the replay", message_id=run_id)),
        )
    running = start(agent=agent)
    assert agent.started.wait(10)  # the replayed turn is held
    status, view = get_run(running, run_id)
    assert (status, view["status"]) == (200, "queued")
    stream = EventStream(running, run_id)
    try:
        agent.release.set()
        events = stream.until_final()
    finally:
        stream.close()
    assert events[-1] == ("run.completed", {"output": "echo: wait for the replay", "usage": events[-1][1]["usage"]})
    # No deltas: the turn began before anyone watched it (a watch applies to turns that start after it).
    assert wait_final(running, run_id)["output"] == "echo: wait for the replay"


def test_finished_runs_past_the_newest_kept_are_forgotten_and_then_answered_from_the_store(running: Running) -> None:
    runs = running.server._runs
    runs._keep = 1
    first, second = (post_run(running, {"input": text})[1]["run_id"] for text in ("one", "two"))
    wait_final(running, first)
    wait_final(running, second)
    poll_until(lambda: first not in runs._runs, 10, what="the older run forgotten")
    assert second in runs._runs
    view = wait_final(running, first)  # read back from the store
    assert (view["status"], view["output"]) == ("completed", "echo: one")


def test_a_draining_server_refuses_new_runs_and_lets_a_running_one_finish(
    running: Running, agent: ScriptedAgent
) -> None:
    _, held = post_run(running, {"input": "wait through the drain"})
    assert agent.started.wait(10)
    stream = EventStream(running, held["run_id"])
    stopping = threading.Thread(target=running.server.stop, args=(10,))
    try:
        stopping.start()
        poll_until(lambda: running.server._service.draining, 5, what="the drain")
        status, payload = post_run(running, {"input": "too late"})
        assert (status, payload["error"]["code"]) == (503, "gateway_draining")
        agent.release.set()
        events = stream.until_final()
    finally:
        stream.close()
        agent.release.set()
        stopping.join(15)
    assert events[-1][0] == "run.completed"
    assert not stopping.is_alive()


def test_a_stopped_gateway_refuses_a_run_with_a_503_and_keeps_no_place(running: Running) -> None:
    running.gateway.stop(10)
    status, payload = post_run(running, {"input": "anyone?"})
    assert (status, payload["error"]["code"]) == (503, "service_unavailable")
    assert running.server._service.running == 0


def test_the_concurrency_cap_counts_runs_until_they_finish(start: Start, agent: ScriptedAgent) -> None:
    running = start(agent=agent, max_concurrent_runs=1)
    try:
        _, held = post_run(running, {"input": "wait a moment"})
        assert agent.started.wait(10)
        status, payload = post_run(running, {"input": "too many"})
        assert (status, payload["error"]["code"]) == (429, "rate_limit_exceeded")
        agent.release.set()
        wait_final(running, held["run_id"])
        poll_until(lambda: running.server._service.running == 0, 10, what="the run's place given back")
        status, accepted = post_run(running, {"input": "now"})
        assert status == 202
        assert wait_final(running, accepted["run_id"])["output"] == "echo: now"
    finally:
        agent.release.set()
