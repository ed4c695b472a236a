"""A plug-in agent from a module outside the project (the example's module, copied to a temporary directory on
PYTHONPATH) answers through a real ``hermesd``: on the OpenAI-compatible API and on a webhook route; a factory
that cannot be imported stops ``hermesd`` and ``hermesctl config check`` with the same line, exit 2."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import openai
import pytest
from click.testing import CliRunner

from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.store import Store
from tests.daemon.test_daemon import SECRET, Daemon, _script, _signed

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "calculator-agent" / "calculator_agent.py"


def _config(factory: str, callback: str = "http://127.0.0.1:9/replies") -> str:
    return f"""
daemon:
  drain_timeout_s: 10
agent:
  factory: {factory}
  system_prompt: Be exact.
  options:
    greeting: Ahoy!
platforms:
  api_server:
    port: 0
  webhook:
    port: 0
    routes:
      default:
        secret: {SECRET}
        callback_url: {callback}
"""


class Receiver:
    """The webhook route's callback on loopback: each POSTed JSON body, in a queue."""

    def __init__(self) -> None:
        self.bodies: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        bodies = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                bodies.put(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/replies"
        self._thread = threading.Thread(target=self._server.serve_forever, name="receiver", daemon=True)

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def plugins(tmp_path: Path) -> Path:
    """A directory outside the project with the example agent's module in it."""
    directory = tmp_path / "plugins"
    directory.mkdir()
    shutil.copy(EXAMPLE, directory / "calculator_agent.py")
    return directory


def _start(home: Path, plugins: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "HERMES_HOME": str(home), "PYTHONPATH": str(plugins)}
    env.pop("HERMES_API_KEY", None)
    return subprocess.Popen(
        [*_script("hermesd"), "--home", str(home)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def _transcript(home: Path, source: str) -> list[tuple[str, str | None, str | None]]:
    """(role, content, tool name) of every message of ``source``'s sessions, in order."""
    with Store.open(home / "state.db", readonly=True) as store:
        rows = store._connection.execute(
            "SELECT m.role, m.content, m.tool_name FROM messages m JOIN sessions s ON s.ref = m.session_ref "
            "WHERE s.source = ? ORDER BY m.id",
            (source,),
        ).fetchall()
    return [(str(role), _text(content), _text(name)) for role, content, name in rows]


def _sessions(home: Path) -> list[tuple[str, str | None, str | None]]:
    with Store.open(home / "state.db", readonly=True) as store:
        rows = store._connection.execute("SELECT source, model, system_prompt FROM sessions ORDER BY ref").fetchall()
    return [(str(source), _text(model), _text(prompt)) for source, model, prompt in rows]


def _text(value: object) -> str | None:
    return None if value is None else str(value)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


@pytest.mark.slow
def test_a_plugin_agent_from_outside_the_project_answers_on_the_api_and_a_webhook_through_hermesd(
    tmp_path: Path, plugins: Path, receiver: Receiver
) -> None:
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.yaml").write_text(_config("calculator_agent:build", receiver.url))
    daemon = Daemon(home, _start(home, plugins))
    try:
        assert daemon.status.agent == "calculator_agent:build (plug-in)"
        client = openai.OpenAI(base_url=daemon.api + "/v1", api_key="unused", max_retries=0)
        answer = client.chat.completions.create(
            model="hermes-agent", messages=[{"role": "user", "content": "what is 6 * 7?"}]
        )
        assert answer.choices[0].message.content == "6 * 7 = 42"
        chunks = client.chat.completions.create(
            model="hermes-agent", messages=[{"role": "user", "content": "and 1.5 + 2?"}], stream=True
        )
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "1.5 + 2 = 3.5"

        payload = {"text": "hello by webhook", "chat_id": "c1", "user_id": "u1"}
        assert _signed(daemon.webhook + "/webhooks/default", payload, "msg_1") == 202
        reply = receiver.bodies.get(timeout=30)
        assert reply["text"] == "Ahoy! Ask me to calculate something, such as 6 * 7."
        code, _, err = daemon.stop()
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.communicate(timeout=10)
    assert code == 0, err
    api = _transcript(home, "api_server")
    assert api[:4] == [
        ("user", "what is 6 * 7?", None),
        ("assistant", None, None),  # the tool call
        ("tool", '{"value": 42.0}', "calculate"),
        ("assistant", "6 * 7 = 42", None),
    ]
    assert _transcript(home, "webhook") == [
        ("user", "hello by webhook", None),
        ("assistant", "Ahoy! Ask me to calculate something, such as 6 * 7.", None),
    ]
    assert {(source, model, prompt) for source, model, prompt in _sessions(home)} == {
        ("api_server", "calculator", "Be exact."),
        ("webhook", "calculator", "Be exact."),
    }


@pytest.mark.slow
def test_a_factory_that_cannot_be_imported_stops_hermesd_and_config_check_with_the_same_line(
    tmp_path: Path, plugins: Path
) -> None:
    home = tmp_path / "h"
    home.mkdir()
    config = home / "config.yaml"
    config.write_text(_config("calculator_agnet:build"))
    expected = (
        f"Error: configuration {config}: agent.factory: cannot import calculator_agnet for calculator_agnet:build "
        "(ModuleNotFoundError: No module named 'calculator_agnet'); install it or put its directory on hermesd's "
        "PYTHONPATH"
    )
    process = _start(home, plugins)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 2, err
    assert expected in err.splitlines()
    checked = CliRunner().invoke(hermesctl, ["config", "check", "--home", str(home)])
    assert checked.exit_code == 2, checked.output
    assert expected in checked.output.splitlines()


def test_config_check_names_the_plugin_agent(tmp_path: Path, plugins: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(plugins))
    monkeypatch.delitem(sys.modules, "calculator_agent", raising=False)
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.yaml").write_text(_config("calculator_agent:build"))
    checked = CliRunner().invoke(hermesctl, ["config", "check", "--home", str(home)])
    assert checked.exit_code == 0, checked.output
    assert "(agent: calculator_agent:build (plug-in); entry points: api_server, webhook)" in checked.output
