"""``GET /v1/responses/{id}/input_items`` through the official ``openai`` client: the items a response's request
sent, with ids, in either order, a page at a time, within the API key's scope."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from hermes_actors.runtime.inbox_port import GatewayInbox
from platforms.api_server import ApiServer, ApiServerConfig, key_fingerprint
from tests.platforms import test_api_server
from tests.platforms.test_api_server import KEY, Running

start = test_api_server.start  # the same fixtures: a gateway and an API server on 127.0.0.1
running = test_api_server.running

_INPUT = [
    {"role": "system", "content": "Answer in French."},
    {"role": "user", "content": "first"},
    {"role": "assistant", "content": [{"type": "output_text", "text": "premier"}]},
    {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"q": "x"}'},
    {"type": "function_call_output", "call_id": "c1", "output": "found x"},
    {"id": "msg_mine", "role": "user", "content": [{"type": "input_text", "text": "second"}]},
]


def test_a_string_input_is_listed_as_one_user_message(running: Running) -> None:
    with running.client() as client:
        response = client.responses.create(model="hermes-agent", input="hello")
        page = client.responses.input_items.list(response.id)
        raw = client.responses.input_items.with_raw_response.list(response.id).http_response.json()
    (item,) = page.data
    assert item.type == "message"
    assert item.id.startswith("msg_")
    assert item.role == "user"
    assert item.status == "completed"
    assert [(part.type, getattr(part, "text", None)) for part in item.content] == [("input_text", "hello")]
    assert page.has_more is False
    assert raw["object"] == "list"
    assert raw["first_id"] == raw["last_id"] == item.id


def test_the_items_are_listed_newest_first_by_default_and_in_the_order_sent_with_asc(running: Running) -> None:
    with running.client() as client:
        response = client.responses.create(model="hermes-agent", input=_INPUT)  # type: ignore[arg-type]
        newest_first = client.responses.input_items.list(response.id).data
        in_order = client.responses.input_items.list(response.id, order="asc").data
    assert [item.type for item in in_order] == [
        "message",
        "message",
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert [item.id for item in newest_first] == [item.id for item in reversed(in_order)]
    assert len({item.id for item in in_order}) == 6
    assert in_order[-1].id == "msg_mine"  # an id the client gave is kept
    call, output = in_order[3], in_order[4]
    assert call.type == "function_call"
    assert output.type == "function_call_output"
    assert (call.call_id, call.name, call.arguments) == ("c1", "lookup", '{"q": "x"}')
    assert (output.call_id, output.output) == ("c1", "found x")
    assert in_order[2].type == "message"
    assert in_order[2].role == "assistant"


def test_pages_follow_the_after_cursor_until_has_more_is_false(running: Running) -> None:
    with running.client() as client:
        response = client.responses.create(model="hermes-agent", input=_INPUT)  # type: ignore[arg-type]
        every = [item.id for item in client.responses.input_items.list(response.id, order="asc").data]
        first = client.responses.input_items.list(response.id, order="asc", limit=4)
        second = client.responses.input_items.list(response.id, order="asc", limit=4, after=first.data[-1].id)
        walked = [item.id for item in client.responses.input_items.list(response.id, limit=2)]  # auto-paging
    assert [item.id for item in first.data] == every[:4]
    assert first.has_more is True
    assert [item.id for item in second.data] == every[4:]
    assert second.has_more is False
    assert walked == every[::-1]


def test_retrieve_leaves_the_input_items_out_of_the_response(running: Running) -> None:
    with running.client() as client:
        response = client.responses.create(model="hermes-agent", input="hello")
    answer = httpx.get(
        f"{running.server.url}/v1/responses/{response.id}", headers={"Authorization": f"Bearer {KEY}"}, timeout=10
    )
    assert answer.status_code == 200
    body = answer.json()
    assert body["id"] == response.id
    assert "input_items" not in body
    found = GatewayInbox(running.gateway).get_response(response.id, key_fingerprint(KEY))
    assert found is not None
    assert [item["role"] for item in json.loads(found.body)["input_items"]] == ["user"]


def test_an_unknown_or_another_keys_response_has_no_input_items(running: Running) -> None:
    with running.client() as client:
        response = client.responses.create(model="hermes-agent", input="secret")
        with pytest.raises(openai.NotFoundError):
            client.responses.input_items.list("resp_nothing")
    other = ApiServer(ApiServerConfig(port=0, key="sk-other"), environ={})
    other.start(GatewayInbox(running.gateway))
    try:
        with (
            openai.OpenAI(base_url=other.url + "/v1", api_key="sk-other", max_retries=0, timeout=10) as client,
            pytest.raises(openai.NotFoundError),
        ):
            client.responses.input_items.list(response.id)
    finally:
        other.stop(5)


@pytest.mark.parametrize(
    ("query", "param"),
    [({"limit": 0}, "limit"), ({"limit": 101}, "limit"), ({"order": "up"}, "order"), ({"after": "msg_x"}, "after")],
)
def test_a_bad_page_query_is_a_400_naming_the_parameter(running: Running, query: dict[str, object], param: str) -> None:
    with running.client() as client:
        response = client.responses.create(model="hermes-agent", input="hello")
        with pytest.raises(openai.BadRequestError) as raised:
            client.responses.input_items.list(response.id, **query)  # type: ignore[arg-type]
    assert raised.value.param == param
