"""MCP tools through a real ``hermesd``: its agent (a scripted OpenAI-compatible model on 127.0.0.1) calls the tools
of a stdio server hermesd starts and of a Streamable HTTP server on 127.0.0.1; the calls reach both servers, are
stored as the turn's tool messages, and both servers' states are in ``/health/detailed`` and ``hermesctl status``."""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from click.testing import CliRunner

from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.store import Role, Store
from hermes_actors.testing import poll_until
from tests.agents.chat_server import ChatServer, completion, open_chat_server, tool_call
from tests.agents.mcp_fixtures import SERVER, HttpServer, http_server, received
from tests.daemon.test_daemon import Daemon, start_daemon

pytestmark = pytest.mark.slow


@pytest.fixture
def model() -> Iterator[ChatServer]:
    with open_chat_server() as server:
        yield server


@pytest.fixture
def web(tmp_path: Path) -> Iterator[HttpServer]:
    with http_server(tmp_path / "web-calls.jsonl") as server:
        yield server


def _config(model: ChatServer, web: HttpServer, files_calls: Path) -> str:
    return f"""
daemon:
  drain_timeout_s: 10
platforms:
  api_server:
    port: 0
  webhook:
    port: 0
runtime:
  auto_titles: false
agent:
  base_url: {model.base_url}
  model: test-model
  max_retries: 0
  mcp_servers:
    files:
      command: [{sys.executable}, {SERVER}, stdio]
      env: {{MCP_CALLS: {files_calls}}}
      allow: [add, echo]
    web:
      url: {web.url}
      headers_env: {{Authorization: WEB_TOKEN}}
      deny: [crash, drop_tables]
"""


@pytest.fixture
def daemon(tmp_path: Path, model: ChatServer, web: HttpServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Daemon]:
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.yaml").write_text(_config(model, web, tmp_path / "files-calls.jsonl"))
    monkeypatch.setenv("WEB_TOKEN", "Bearer web-t0ken")
    process = start_daemon(home)
    try:
        yield Daemon(home, process)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)


def _health(daemon: Daemon) -> Any:
    with urllib.request.urlopen(f"{daemon.api}/health/detailed", timeout=10) as response:
        return json.load(response)


def test_hermesd_runs_a_stdio_and_an_http_servers_tools_for_the_model_and_stores_the_calls(
    daemon: Daemon, model: ChatServer, web: HttpServer, tmp_path: Path
) -> None:
    model.script(
        completion(
            None,
            tool_calls=[
                tool_call("c1", "files__add", {"a": 2, "b": 40}),
                tool_call("c2", "web__whoami", {}),
            ],
        ),
        completion("2 + 40 = 42, and the web server knows us."),
    )
    client = openai.OpenAI(base_url=f"{daemon.api}/v1", api_key="unused", max_retries=0)
    answer = client.chat.completions.create(model="test-model", messages=[{"role": "user", "content": "add and ask"}])
    assert answer.choices[0].message.content == "2 + 40 = 42, and the web server knows us."

    offered = [entry["function"]["name"] for entry in model.completion_bodies[0]["tools"]]
    assert offered == [
        "session_search",
        "files__add",
        "files__echo",
        "web__add",
        "web__echo",
        "web__whoami",
        "web__fail",
        "web__slow",
        "web__learn",
    ]
    assert [(c["tool"], c["arguments"]) for c in received(tmp_path / "files-calls.jsonl")] == [
        ("add", {"a": 2, "b": 40})
    ]
    assert [c["tool"] for c in received(web.calls)] == ["whoami"]

    with Store.open(daemon.home / "state.db", readonly=True) as store:
        (session,) = store.list_sessions()
        tools = [
            (m.tool_name, m.tool_call_id, m.content) for m in store.load_transcript(session.id) if m.role == Role.TOOL
        ]
    assert tools[0] == ("files__add", "c1", "42")
    assert tools[1][:2] == ("web__whoami", "c2")
    assert json.loads(tools[1][2] or "{}")["authorization"] == "Bearer web-t0ken"  # headers_env, from hermesd's env

    servers = {s["name"]: s for s in _health(daemon)["checks"]["agent"]["tool_servers"]}
    assert {name: (s["transport"], s["state"], s["tools"], s["calls"]) for name, s in servers.items()} == {
        "files": ("stdio", "up", 2, 1),
        "web": ("http", "up", 6, 1),
    }
    status = CliRunner().invoke(hermesctl, ["status", "--home", str(daemon.home)])
    assert status.exit_code == 0, status.output
    assert "  mcp files (stdio, agent default): up, 2 tools; 1 calls, 0 failed; restarted 0" in status.output
    assert "  mcp web (http, agent default): up, 6 tools; 1 calls, 0 failed; restarted 0" in status.output

    code, _, err = daemon.stop()
    assert code == 0, err
    (files_pid,) = {c["pid"] for c in received(tmp_path / "files-calls.jsonl")}
    poll_until(lambda: not _alive(files_pid), what="the stdio server gone with hermesd")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1]
    except (ProcessLookupError, FileNotFoundError):
        return False
    return state != "Z"  # a zombie has exited
