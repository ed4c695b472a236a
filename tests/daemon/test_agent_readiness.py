"""Readiness that tells the truth about the agent, against a real ``hermesd`` whose model endpoint refuses
connections: ``/health/detailed`` and ``hermesctl status`` say ``degraded`` with the error, a turn's failure does
too, ``agent.probe.fail_readiness`` makes ``/health/ready`` answer 503, and an endpoint that comes back is
reported recovered."""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from click.testing import CliRunner

from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.testing import poll_until
from tests.daemon.test_daemon import Daemon, start_daemon


def _free_port() -> int:
    """A loopback port nothing listens on (connections to it are refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


class _Model(BaseHTTPRequestHandler):
    """A model endpoint that lists one model and answers every completion ``fine``; counts its requests."""

    calls: ClassVar[dict[str, int]] = {}

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _json(self, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.calls[self.path] = self.calls.get(self.path, 0) + 1
        self._json({"object": "list", "data": [{"id": "m", "object": "model", "created": 0, "owned_by": "t"}]})

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        self.calls[self.path] = self.calls.get(self.path, 0) + 1
        head = {"id": "c", "created": 0, "model": "m"}
        if not request.get("stream"):
            choice = {"index": 0, "message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}
            self._json({**head, "object": "chat.completion", "choices": [choice]})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for delta, finish in (({"role": "assistant", "content": "fine"}, None), ({}, "stop")):
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            chunk = {**head, "object": "chat.completion.chunk", "choices": [choice]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True


@contextmanager
def _model_on(port: int) -> Iterator[dict[str, int]]:
    _Model.calls = {}
    server = ThreadingHTTPServer(("127.0.0.1", port), _Model)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield _Model.calls
    finally:
        server.shutdown()
        server.server_close()


def _config(port: int, *, fail_readiness: bool) -> str:
    return f"""
daemon:
  drain_timeout_s: 10
agent:
  base_url: http://127.0.0.1:{port}/v1
  model: m
  max_retries: 0
  timeout_s: 5
  probe:
    interval_s: 1
    timeout_s: 1
    fail_readiness: {"true" if fail_readiness else "false"}
platforms:
  api_server:
    port: 0
"""


def _get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _chat(api: str, text: str) -> int:
    body = json.dumps({"model": "hermes-agent", "messages": [{"role": "user", "content": text}]}).encode()
    request = urllib.request.Request(
        f"{api}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


@contextmanager
def _daemon(tmp_path: Path, port: int, *, fail_readiness: bool) -> Iterator[Daemon]:
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.yaml").write_text(_config(port, fail_readiness=fail_readiness))
    process = start_daemon(home)
    try:
        yield Daemon(home, process)
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=10)


def _agent(api: str) -> dict[str, Any]:
    agent: dict[str, Any] = _get(f"{api}/health/detailed")[1]["checks"]["agent"]
    return agent


@pytest.mark.slow
def test_a_refused_endpoint_shows_degraded_with_its_error_in_health_and_status_and_recovery_shows_ok(
    tmp_path: Path,
) -> None:
    port = _free_port()
    with _daemon(tmp_path, port, fail_readiness=False) as daemon:
        status, body = _get(f"{daemon.api}/health/detailed")
        agent = body["checks"]["agent"]
        assert (agent["state"], agent["ok"], agent["kind"]) == ("degraded", False, "openai"), body
        assert "Connection refused" in agent["last_error"]
        assert f"127.0.0.1:{port}" in agent["last_error"]
        assert status == 200
        assert body["status"] == "ready"
        ready_status, ready = _get(f"{daemon.api}/health/ready")
        assert (ready_status, ready["reasons"]) == (200, [])
        shown = CliRunner().invoke(hermesctl, ["status", "--home", str(daemon.home)])
        assert shown.exit_code == 0, shown.output
        line = next(line for line in shown.output.splitlines() if line.startswith("  agent state: "))
        assert line.startswith("  agent state: DEGRADED for "), line
        assert "Connection refused" in line, line
        assert "  ready: yes" in shown.output.splitlines()
        with _model_on(port) as calls:
            # The next probe (at most one a second) finds the endpoint answering.
            poll_until(lambda: _agent(daemon.api)["state"] == "ok", timeout=20, interval=0.2, what="recovery")
            for _ in range(5):
                _get(f"{daemon.api}/health/detailed")
            assert calls.get("/v1/models", 0) <= 2  # rate-limited: not a probe per health check
            assert "/v1/chat/completions" not in calls  # and never a model call
            recovered = CliRunner().invoke(hermesctl, ["status", "--home", str(daemon.home)])
            assert "  agent state: ok for " in recovered.output, recovered.output


@pytest.mark.slow
def test_a_failed_turn_marks_the_agent_degraded_and_fail_readiness_makes_ready_answer_503(tmp_path: Path) -> None:
    port = _free_port()
    with _daemon(tmp_path, port, fail_readiness=True) as daemon:
        assert _chat(daemon.api, "hello") == 502
        agent = _agent(daemon.api)
        assert agent["state"] == "degraded", agent
        assert "Connection refused" in agent["last_error"], agent
        status, ready = _get(f"{daemon.api}/health/ready")
        assert (status, ready["status"]) == (503, "not_ready"), ready
        assert any(r.startswith("agent: degraded (") for r in ready["reasons"]), ready["reasons"]
        shown = CliRunner().invoke(hermesctl, ["status", "--home", str(daemon.home)])
        assert shown.exit_code == 1, shown.output
        assert "(fails readiness: agent.probe.fail_readiness)" in shown.output
        assert "Error: hermesd is not ready: agent: degraded (" in shown.output
        with _model_on(port):
            assert _chat(daemon.api, "again") == 200  # the turn's own success marks it ok at once
            status, ready = _get(f"{daemon.api}/health/ready")
            assert (status, ready["reasons"]) == (200, []), ready
            assert _agent(daemon.api)["state"] == "ok"
