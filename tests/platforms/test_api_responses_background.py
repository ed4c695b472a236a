"""``background: true`` responses through the official ``openai`` client: queued at once, polled with ``GET``,
cancelled, streamed and resumed from a sequence number, and read back from the inbox row by a restarted server."""

from __future__ import annotations

import openai
import pytest
from openai.types.responses import Response

from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.testing import GatedAgent, poll_until
from platforms.api_server import ApiServer, ApiServerConfig, key_fingerprint
from tests.platforms import test_api_server
from tests.platforms.test_api_server import KEY, Running, Start

start = test_api_server.start  # the same fixtures: a gateway and an API server on 127.0.0.1
running = test_api_server.running


def _poll(client: openai.OpenAI, response_id: str, status: str) -> Response:
    found: list[Response] = []

    def reached() -> bool:
        found.append(client.responses.retrieve(response_id))
        return found[-1].status == status

    poll_until(reached, 10, what=f"response {response_id} {status}")
    return found[-1]


def test_a_background_response_is_queued_then_in_progress_then_completed_and_stored(start: Start) -> None:
    agent = GatedAgent()
    running = start(agent=agent)
    with running.client() as client:
        created = client.responses.create(model="hermes-agent", input="hello", background=True)
        assert created.status == "queued"
        assert created.background is True
        assert agent.started.wait(10)
        _poll(client, created.id, "in_progress")
        agent.release.set()
        done = _poll(client, created.id, "completed")
        items = client.responses.input_items.list(created.id).data
    assert done.output_text == "echo: hello"
    assert done.usage is not None
    assert [item.type for item in items] == ["message"]
    assert running.gateway.wait_idle(10)
    found = GatewayInbox(running.gateway).get_response(created.id, key_fingerprint(KEY))
    assert found is not None
    assert found.status == "completed"


def test_a_cancelled_background_response_stops_its_turn_and_stays_cancelled(start: Start) -> None:
    agent = GatedAgent()
    running = start(agent=agent)
    with running.client() as client:
        created = client.responses.create(model="hermes-agent", input="a long one", background=True)
        assert agent.started.wait(10)
        cancelled = client.responses.cancel(created.id)
        assert cancelled.status == "cancelled"
        assert client.responses.cancel(created.id).status == "cancelled"  # a second cancel answers as it is
        agent.release.set()
        assert running.gateway.wait_idle(10)
        assert client.responses.retrieve(created.id).status == "cancelled"
    found = GatewayInbox(running.gateway).get_response(created.id, key_fingerprint(KEY))
    assert found is not None
    assert found.status == "cancelled"


def test_cancel_is_a_409_once_finished_a_400_for_a_foreground_response_and_a_404_for_another_key(
    running: Running,
) -> None:
    with running.client() as client:
        background = client.responses.create(model="hermes-agent", input="quick", background=True)
        _poll(client, background.id, "completed")
        with pytest.raises(openai.ConflictError):
            client.responses.cancel(background.id)
        foreground = client.responses.create(model="hermes-agent", input="now")
        with pytest.raises(openai.BadRequestError):
            client.responses.cancel(foreground.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.cancel("resp_" + "0" * 32)
    other = ApiServer(ApiServerConfig(port=0, key="sk-other"), environ={})
    other.start(GatewayInbox(running.gateway))
    try:
        with openai.OpenAI(base_url=other.url + "/v1", api_key="sk-other", max_retries=0, timeout=10) as client:
            with pytest.raises(openai.NotFoundError):
                client.responses.retrieve(background.id)
            with pytest.raises(openai.NotFoundError):
                client.responses.cancel(background.id)
    finally:
        other.stop(5)


def test_background_with_store_false_is_a_400(running: Running) -> None:
    with running.client() as client, pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model="hermes-agent", input="hello", background=True, store=False)
    assert raised.value.param == "store"


def test_a_background_stream_resumes_after_a_sequence_number(running: Running) -> None:
    with running.client() as client:
        events = list(client.responses.create(model="hermes-agent", input="hello", background=True, stream=True))
        types = [event.type for event in events]
        assert types[:2] == ["response.created", "response.queued"]
        assert types[-1] == "response.completed"
        assert "response.in_progress" in types
        assert [event.sequence_number for event in events] == list(range(len(events)))
        resumed = list(client.responses.retrieve(events[0].response.id, stream=True, starting_after=2))  # type: ignore[union-attr]
    assert [event.sequence_number for event in resumed] == list(range(3, len(events)))
    assert [event.type for event in resumed] == types[3:]


def test_a_restarted_server_reads_a_background_response_back_from_its_inbox_row(start: Start) -> None:
    agent = GatedAgent()
    running = start(agent=agent)
    with running.client() as client:
        pending = client.responses.create(model="hermes-agent", input="first", background=True)
        assert agent.started.wait(10)
    running.server.stop(0.5)  # the drain gives up on the running turn, which goes on in the gateway, unwatched
    restarted = ApiServer(ApiServerConfig(port=0, key=KEY), environ={})
    restarted.start(GatewayInbox(running.gateway))
    try:
        with openai.OpenAI(base_url=restarted.url + "/v1", api_key=KEY, max_retries=0, timeout=10) as client:
            assert client.responses.retrieve(pending.id).status == "in_progress"  # watched again from now on
            agent.release.set()
            done = _poll(client, pending.id, "completed")
            assert done.output_text == "echo: first"
    finally:
        restarted.stop(10)


def test_a_background_turn_that_ended_while_no_server_watched_is_answered_and_stored_from_the_store(
    start: Start,
) -> None:
    agent = GatedAgent()
    running = start(agent=agent)
    with running.client() as client:
        pending = client.responses.create(model="hermes-agent", input="second", background=True)
        assert agent.started.wait(10)
    running.server.stop(0.5)
    agent.release.set()
    assert running.gateway.wait_idle(10)
    inbox = GatewayInbox(running.gateway)
    assert inbox.get_response(pending.id, key_fingerprint(KEY)) is None  # no server stored it
    restarted = ApiServer(ApiServerConfig(port=0, key=KEY), environ={})
    restarted.start(inbox)
    try:
        with openai.OpenAI(base_url=restarted.url + "/v1", api_key=KEY, max_retries=0, timeout=10) as client:
            done = client.responses.retrieve(pending.id)
    finally:
        restarted.stop(10)
    assert done.status == "completed"
    assert done.output_text == "echo: second"
    stored = inbox.get_response(pending.id, key_fingerprint(KEY))
    assert stored is not None
    assert stored.status == "completed"


def test_a_restarted_server_keeps_a_cancelled_response_cancelled_and_does_not_stream_a_stored_one(
    start: Start,
) -> None:
    agent = GatedAgent()
    running = start(agent=agent)
    with running.client() as client:
        created = client.responses.create(model="hermes-agent", input="stop me", background=True)
        assert agent.started.wait(10)
        assert client.responses.cancel(created.id).status == "cancelled"
        agent.release.set()
        assert running.gateway.wait_idle(10)
    running.server.stop(10)
    inbox = GatewayInbox(running.gateway)
    poll_until(lambda: inbox.get_response(created.id, key_fingerprint(KEY)) is not None, 10, what="the stored one")
    restarted = ApiServer(ApiServerConfig(port=0, key=KEY), environ={})
    restarted.start(inbox)
    try:
        with openai.OpenAI(base_url=restarted.url + "/v1", api_key=KEY, max_retries=0, timeout=10) as client:
            with pytest.raises(openai.ConflictError):
                client.responses.cancel(created.id)
            with pytest.raises(openai.BadRequestError) as raised:
                list(client.responses.retrieve(created.id, stream=True))
            assert raised.value.param == "stream"
            assert client.responses.retrieve(created.id).status == "cancelled"
    finally:
        restarted.stop(10)


def test_a_restarted_servers_stream_starts_over_from_0_and_resumes_after_a_sequence_number(start: Start) -> None:
    agent = GatedAgent()
    running = start(agent=agent)
    with running.client() as client:
        pending = client.responses.create(model="hermes-agent", input="third", background=True)
        assert agent.started.wait(10)
    running.server.stop(0.5)
    restarted = ApiServer(ApiServerConfig(port=0, key=KEY), environ={})
    restarted.start(GatewayInbox(running.gateway))
    try:
        with openai.OpenAI(base_url=restarted.url + "/v1", api_key=KEY, max_retries=0, timeout=10) as client:
            with client.responses.retrieve(pending.id, stream=True) as events:
                head = []
                for event in events:
                    head.append(event)
                    if event.type == "response.in_progress":
                        break
            assert [(e.sequence_number, e.type) for e in head] == [
                (0, "response.created"),
                (1, "response.queued"),
                (2, "response.in_progress"),
            ]
            resumed = client.responses.retrieve(pending.id, stream=True, starting_after=1)
            agent.release.set()
            rest = list(resumed)
    finally:
        restarted.stop(10)
    assert [e.sequence_number for e in rest] == list(range(2, 2 + len(rest)))
    assert rest[0].type == "response.in_progress"
    assert rest[-1].type == "response.completed"
