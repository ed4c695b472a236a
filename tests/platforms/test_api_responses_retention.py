"""Stored responses are not capped (the reference keeps the newest 100): every one stays until its session goes."""

from __future__ import annotations

from tests.platforms import test_api_server
from tests.platforms.test_api_server import Running

start = test_api_server.start  # the same fixtures: a gateway and an API server on 127.0.0.1
running = test_api_server.running

_MANY = 120  # past the reference's 100


def test_the_first_of_more_than_a_hundred_responses_is_still_retrieved_and_continued(running: Running) -> None:
    with running.client() as client:
        ids = [client.responses.create(model="hermes-agent", input=f"turn {n}").id for n in range(_MANY)]
        first = client.responses.retrieve(ids[0])
        items = client.responses.input_items.list(ids[0]).data
        chained = client.responses.create(model="hermes-agent", input="again", previous_response_id=ids[0])
    assert first.output_text == "echo: turn 0"
    assert [item.type for item in items] == ["message"]
    assert chained.previous_response_id == ids[0]
    assert chained.output_text == "echo: again"
