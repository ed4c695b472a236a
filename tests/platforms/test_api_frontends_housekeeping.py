"""Open WebUI's and LibreChat's housekeeping requests (titles, tags, follow-ups), as they send them
(``frontend_requests/``), are answered by the model with no session, memory or tools; anything else is a turn.
Real gateway, real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from platforms.api_server import SESSION_HEADER
from platforms.api_server.housekeeping import HOUSEKEEPING_HEADER
from tests.agents.chat_server import ChatServer, completion, failure
from tests.platforms import test_api_contract
from tests.platforms.test_api_contract import Serve
from tests.platforms.test_api_server import KEY, Running

model = test_api_contract.model  # a scripted OpenAI-compatible model on 127.0.0.1
serve = test_api_contract.serve  # a gateway whose agent calls it, behind an API server

REQUESTS = Path(__file__).parent / "frontend_requests"
AUTH = {"Authorization": f"Bearer {KEY}"}
TITLE = "🍞 Sourdough Basics"


def recorded(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((REQUESTS / name).read_text())
    return body


def _sessions(running: Running) -> list[str]:
    with running.gateway.read() as store:
        return [s.id for s in store.list_sessions()]


def _post(running: Running, body: dict[str, Any]) -> tuple[int, dict[str, str], str]:
    connection = running.connection()
    try:
        connection.request(
            "POST", "/v1/chat/completions", body=json.dumps(body), headers={**AUTH, "Content-Type": "application/json"}
        )
        response = connection.getresponse()
        return response.status, dict(response.headers), response.read().decode()
    finally:
        connection.close()


@pytest.mark.parametrize(
    ("name", "task"),
    [
        ("openwebui_title.json", "open-webui:title"),
        ("openwebui_tags.json", "open-webui:tags"),
        ("openwebui_follow_ups.json", "open-webui:follow_ups"),
        ("librechat_title.json", "librechat:title"),
    ],
)
def test_a_frontends_housekeeping_request_is_answered_without_a_session(
    serve: Serve, model: ChatServer, name: str, task: str
) -> None:
    running = serve()
    model.script(completion(TITLE))
    body = recorded(name)
    status, headers, text = _post(running, body)
    assert status == 200, text
    answer = json.loads(text)
    assert answer["choices"][0]["message"]["content"] == TITLE
    assert headers[HOUSEKEEPING_HEADER] == task
    assert SESSION_HEADER not in headers
    assert _sessions(running) == []  # no session, so nothing for memory or search either
    (seen,) = model.completion_bodies
    assert "tools" not in seen  # no session_search, no MCP tools
    prompt = body["messages"][-1]["content"]
    assert [m["content"] for m in seen["messages"] if m["role"] == "user"] == [prompt]


def test_a_streamed_housekeeping_request_streams_its_answer_and_usage_once(serve: Serve, model: ChatServer) -> None:
    running = serve()
    model.script(completion("Sourdough Basics", prompt_tokens=40, completion_tokens=3))
    status, headers, text = _post(running, recorded("librechat_title_structured.json"))
    assert status == 200, text
    assert headers[HOUSEKEEPING_HEADER] == "librechat:title"
    datas = [b.split("data: ", 1)[1] for b in text.split("\n\n") if b.startswith("data: ")]
    assert datas[-1] == "[DONE]"
    chunks = [json.loads(d) for d in datas[:-1]]
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert content == "Sourdough Basics"
    assert [c["usage"] for c in chunks if c.get("usage")] == [
        {"prompt_tokens": 40, "completion_tokens": 3, "total_tokens": 43}
    ]
    assert _sessions(running) == []


def test_a_message_that_only_mentions_a_task_prompt_is_a_turn(serve: Serve, model: ChatServer) -> None:
    running = serve()
    model.script(completion("It is Open WebUI's title prompt."))
    text = "What is this prompt? ### Task: Generate a concise, 3-5 word title with an emoji"
    status, headers, body = _post(running, {"model": "m", "messages": [{"role": "user", "content": text}]})
    assert status == 200, body
    assert HOUSEKEEPING_HEADER not in headers
    assert _sessions(running) == [headers[SESSION_HEADER]]


def test_with_housekeeping_off_a_title_request_is_a_turn(serve: Serve, model: ChatServer) -> None:
    running = serve(housekeeping=False)
    model.script(completion(TITLE))
    status, headers, body = _post(running, recorded("openwebui_title.json"))
    assert status == 200, body
    assert HOUSEKEEPING_HEADER not in headers
    assert _sessions(running) == [headers[SESSION_HEADER]]


def test_a_failed_housekeeping_answer_is_a_502(serve: Serve, model: ChatServer) -> None:
    running = serve()
    model.script(failure(500, "model exploded"))
    status, _, body = _post(running, recorded("openwebui_tags.json"))
    assert status == 502
    assert json.loads(body)["error"]["code"] == "agent_incomplete"
    assert _sessions(running) == []
