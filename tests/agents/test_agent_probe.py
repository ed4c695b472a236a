"""The agent probe health checks run: the OpenAI agent's ``GET {base_url}/models`` once, without retry, against a
real loopback server; a plug-in agent offers one through :class:`~hermes_actors.agents.base.ProbingAgent`."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from hermes_actors.agents.base import AgentError, EchoAgent, probe_call
from hermes_actors.agents.openai_chat import OpenAIAgent
from tests.agents.chat_server import ChatServer, open_chat_server


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with open_chat_server() as opened:
        yield opened


def _status_server(status: int) -> tuple[ThreadingHTTPServer, list[str]]:
    paths: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            paths.append(self.path)
            body = b'{"error": {"message": "nope"}}'
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=http.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    return http, paths


def test_the_openai_agent_probes_its_model_list_and_never_calls_the_model(server: ChatServer) -> None:
    with OpenAIAgent(base_url=server.base_url, model="test-model") as agent:
        probe = probe_call(agent)
        assert probe is not None
        probe(2.0)
    assert [(r.method, r.path) for r in server.requests] == [("GET", "/v1/models")]


def test_a_refused_endpoint_fails_the_probe_naming_it() -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    refused = rf"cannot connect to agent endpoint http://127.0.0.1:{port}/v1"
    with (
        OpenAIAgent(base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=5) as agent,
        pytest.raises(AgentError, match=refused),
    ):
        agent.probe(timeout_s=2.0)


@pytest.mark.parametrize(("status", "fails"), [(401, True), (503, True), (404, False)])
def test_a_refused_key_or_a_failing_server_fails_the_probe_once_but_a_server_without_models_passes(
    status: int, fails: bool
) -> None:
    http, paths = _status_server(status)
    try:
        host, port = http.server_address[:2]
        with OpenAIAgent(base_url=f"http://{host!s}:{port}/v1", model="m", max_retries=5) as agent:
            if fails:
                with pytest.raises(AgentError, match=f"answered HTTP {status}"):
                    agent.probe(timeout_s=2.0)
            else:
                agent.probe(timeout_s=2.0)
    finally:
        http.shutdown()
        http.server_close()
    assert paths == ["/v1/models"]  # once: a probe is never retried


def test_an_agent_without_a_probe_has_none_and_a_plugin_may_offer_one() -> None:
    assert probe_call(EchoAgent()) is None
    asked: list[float] = []

    class Probing(EchoAgent):
        def probe(self, *, timeout_s: float) -> None:
            asked.append(timeout_s)

    probe = probe_call(Probing())
    assert probe is not None
    probe(1.5)
    assert asked == [1.5]
