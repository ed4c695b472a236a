"""A request's own busy policy over the API (``X-Hermes-Busy``, ``hermes_busy``, ``metadata.hermes_busy``): a
message refused as busy is a 409 ``session_busy`` with ``Retry-After`` for openai-python, a failed run for
``/v1/runs``; collected requests are answered by one turn; a value that is no policy is a 400 naming where it was."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import openai
import pytest

from hermes_actors.config import BusyConfig
from hermes_actors.messages import BusyPolicy
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.testing import GatedAgent, poll_until
from platforms.api_server import ApiServer, ApiServerConfig
from tests.platforms.test_api_server import KEY, Running

CHAT = "busy-chat"  # a conversation of the client's own naming (not shaped like a session id)


@pytest.fixture
def agent() -> Iterator[GatedAgent]:
    gated = GatedAgent()
    yield gated
    gated.release.set()


@pytest.fixture
def running(tmp_path: Path, agent: GatedAgent) -> Iterator[Running]:
    with ExitStack() as stack:
        server = ApiServer(ApiServerConfig(port=0, key=KEY), environ={})
        busy = BusyConfig(mode=BusyPolicy.QUEUE, retry_after_s=7)
        gateway = Gateway(tmp_path / "state.db", agent=agent, senders=server.senders(), busy=busy)
        stack.callback(gateway.stop, 10)
        stack.callback(agent.release.set)  # first: no turn holds up the gateway's stop
        server.start(GatewayInbox(gateway))
        stack.callback(server.stop, 10)
        yield Running(server=server, gateway=gateway)


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4) as executor:
        yield executor


def _ask(running: Running, text: str, **options: Any) -> str:
    with running.client() as client:
        completion = client.chat.completions.create(
            model="hermes-agent",
            messages=[{"role": "user", "content": text}],
            extra_headers={"X-Hermes-Session-Id": CHAT, **options.pop("headers", {})},
            **options,
        )
    return completion.choices[0].message.content or ""


def _busy_turn(running: Running, agent: GatedAgent, pool: ThreadPoolExecutor) -> Future[str]:
    """A first request whose turn runs (its agent held) while the test sends more."""
    first = pool.submit(_ask, running, "first")
    assert agent.started.wait(10)
    return first


def _queued(running: Running) -> int:
    return running.gateway.statistics().queued_messages


def _users(running: Running) -> list[str | None]:
    with running.gateway.read() as store:
        (session,) = store.list_sessions()
        return [m.content for m in store.load_transcript(session.id) if m.role == "user"]


@pytest.mark.parametrize(
    "asks",
    [
        {"headers": {"X-Hermes-Busy": "reject"}},
        {"extra_body": {"hermes_busy": "Reject"}},
        {"metadata": {"hermes_busy": "reject"}},
    ],
    ids=["header", "field", "metadata"],
)
def test_a_request_that_asks_to_be_rejected_while_busy_is_a_409_session_busy_with_retry_after(
    running: Running, agent: GatedAgent, pool: ThreadPoolExecutor, asks: dict[str, Any]
) -> None:
    first = _busy_turn(running, agent, pool)
    with pytest.raises(openai.ConflictError) as refused:
        _ask(running, "second", **asks)
    assert refused.value.status_code == 409
    assert refused.value.response.headers["Retry-After"] == "7"
    assert refused.value.code == "session_busy"
    assert "busy answering an earlier message" in refused.value.message
    agent.release.set()
    assert first.result(timeout=10) == "echo: first"
    assert _users(running) == ["first"]  # the refused message was not run


def test_requests_collected_during_a_turn_are_answered_by_one_turn(
    running: Running, agent: GatedAgent, pool: ThreadPoolExecutor
) -> None:
    first = _busy_turn(running, agent, pool)
    collect = {"X-Hermes-Busy": "collect"}
    later = []
    for count, text in enumerate(("second", "third"), start=1):
        later.append(pool.submit(_ask, running, text, headers=collect))
        poll_until(lambda: _queued(running) == count, what=f"{text} queued")  # noqa: B023 - polled now
    agent.release.set()
    assert first.result(timeout=10) == "echo: first"
    assert [f.result(timeout=10) for f in later] == ["echo: second\nthird"] * 2


def test_a_run_refused_as_busy_fails_with_session_busy(
    running: Running, agent: GatedAgent, pool: ThreadPoolExecutor
) -> None:
    first = _busy_turn(running, agent, pool)
    status, _, created = running.request(
        {"input": "a run", "session_id": CHAT}, path="/v1/runs", headers={"Authorization": f"Bearer {KEY}"} | _reject()
    )
    assert status == 202

    def failed() -> dict[str, Any] | None:
        _, _, run = running.request(
            None, path=f"/v1/runs/{created['run_id']}", method="GET", headers={"Authorization": f"Bearer {KEY}"}
        )
        return run if run["status"] == "failed" else None

    run = poll_until(failed, what="the run failed")
    assert run["error"]["code"] == "session_busy"
    agent.release.set()
    assert first.result(timeout=10) == "echo: first"


def _reject() -> dict[str, str]:
    return {"X-Hermes-Busy": "reject"}


@pytest.mark.parametrize(
    ("send", "param"),
    [
        (lambda body, headers: (body, headers | {"X-Hermes-Busy": "later"}), "X-Hermes-Busy"),
        (lambda body, headers: (body | {"hermes_busy": "later"}, headers), "hermes_busy"),
        (lambda body, headers: (body | {"metadata": {"hermes_busy": 3}}, headers), "metadata.hermes_busy"),
    ],
    ids=["header", "field", "metadata"],
)
def test_a_busy_policy_that_is_none_is_a_400_naming_where_it_was(
    running: Running,
    send: Callable[[dict[str, Any], dict[str, str]], tuple[dict[str, Any], dict[str, str]]],
    param: str,
) -> None:
    body, headers = send(
        {"model": "hermes-agent", "messages": [{"role": "user", "content": "hi"}]}, {"Authorization": f"Bearer {KEY}"}
    )
    status, _, answer = running.request(json.dumps(body).encode(), headers=headers)
    assert status == 400
    assert answer["error"]["param"] == param
    assert "must be one of queue, collect, interrupt, reject, steer" in answer["error"]["message"]
