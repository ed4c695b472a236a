"""The real ``hermesd`` as a subprocess on a temporary home, driven the ways a user would drive it."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

import openai
import pytest
from click.testing import CliRunner

from hermes_actors.cli import hermesd as hermesd_cli
from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.daemon.config_file import Settings
from hermes_actors.daemon.control import StatusReply, connect
from hermes_actors.store import Store
from hermes_actors.testing import poll_until

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()


def config(extra_routes: str = "") -> str:
    return f"""
daemon:
  drain_timeout_s: 10
platforms:
  api_server:
    port: 0
  webhook:
    port: 0
    routes:
      default:
        secret: {SECRET}
{extra_routes}"""


CONFIG = config()


def _script(name: str) -> list[str]:
    installed = Path(sys.executable).parent / name
    if installed.exists():
        return [str(installed)]
    return [sys.executable, "-m", f"hermes_actors.cli.{name}"]


class Daemon:
    """A running ``hermesd`` subprocess and what it reported."""

    def __init__(self, home: Path, process: subprocess.Popen[str]) -> None:
        self.home = home
        self.process = process
        self.status = self.wait_ready()
        self.api = self.url("api_server")
        self.webhook = self.url("webhook")

    def url(self, platform: str) -> str:
        """The base URL an entry point reports in its status lines."""
        return next(u for p in self.status.platforms if p.name == platform for u in _urls(p.detail))

    def wait_ready(self, timeout: float = 30.0) -> StatusReply:
        return poll_until(self._status, timeout=timeout, what="hermesd did not open its control socket")

    def _status(self) -> StatusReply | None:
        if self.process.poll() is not None:
            stderr = self.process.stderr.read() if self.process.stderr is not None else ""
            raise AssertionError(f"hermesd exited with {self.process.returncode}: {stderr}")
        client = connect(self.home / "hermesd.sock")
        if client is None:
            return None
        with client:
            return client.status()

    def stop(self, timeout: float = 30.0) -> tuple[int, str, str]:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        out, err = self.process.communicate(timeout=timeout)
        return self.process.returncode, out, err


def _urls(lines: list[str]) -> Iterator[str]:
    for line in lines:
        yield from re.findall(r"http://127\.0\.0\.1:\d+", line)


def start_daemon(home: Path, *extra: str, home_option: bool = True) -> subprocess.Popen[str]:
    env = {**os.environ, "HERMES_HOME": str(home)}
    env.pop("HERMES_API_KEY", None)
    return subprocess.Popen(
        [*_script("hermesd"), *(["--home", str(home)] if home_option else []), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _signed(url: str, payload: Mapping[str, object], webhook_id: str, secret: str = SECRET) -> int:
    body = json.dumps(payload).encode()
    stamp = str(int(time.time()))
    key = base64.b64decode(secret.removeprefix("whsec_"))
    digest = hmac.new(key, f"{webhook_id}.{stamp}.".encode() + body, hashlib.sha256).digest()
    request = urllib.request.Request(
        url,
        data=body,
        headers={
            "Content-Type": "application/json",
            "webhook-id": webhook_id,
            "webhook-timestamp": stamp,
            "webhook-signature": "v1," + base64.b64encode(digest).decode(),
        },
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(response.status)


def _user_messages(home: Path) -> list[tuple[str, str]]:
    with Store.open(home / "state.db", readonly=True) as store:
        rows = store._connection.execute(
            "SELECT s.source, m.content FROM messages m JOIN sessions s ON s.ref = m.session_ref "
            "WHERE m.role = 'user' ORDER BY m.id"
        ).fetchall()
    return [(str(source), str(content)) for source, content in rows]


@pytest.mark.slow
def test_the_daemon_serves_api_webhooks_and_hermesctl_then_stops_on_sigterm_with_everything_stored(
    daemon: Daemon, home: Path
) -> None:
    client = openai.OpenAI(base_url=daemon.api + "/v1", api_key="unused", max_retries=0)
    answer = client.chat.completions.create(
        model="hermes-agent",
        messages=[{"role": "user", "content": "hello over http"}],
        extra_headers={"X-Hermes-Session-Id": "daemon-test"},
    )
    assert answer.choices[0].message.content == "echo: hello over http"
    chunks = client.chat.completions.create(
        model="hermes-agent",
        messages=[{"role": "user", "content": "streamed"}],
        extra_headers={"X-Hermes-Session-Id": "daemon-test"},
        stream=True,
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "echo: streamed"

    hook = daemon.webhook + "/webhooks/default"
    payload = {"text": "hello by webhook", "chat_id": "c1", "user_id": "u1"}
    assert _signed(hook, payload, "msg_1") == 202
    assert _signed(hook, payload, "msg_1") == 202  # a redelivery: accepted, not run twice
    with pytest.raises(urllib.error.HTTPError) as unsigned:
        urllib.request.urlopen(urllib.request.Request(hook, data=b"{}", method="POST"), timeout=10)
    assert unsigned.value.code == 401
    unsigned.value.close()

    runner = CliRunner()
    chatted = runner.invoke(hermesctl, ["chat", "--home", str(home)], input="hello from the terminal\n")
    assert chatted.exit_code == 0, chatted.output
    assert "echo: hello from the terminal" in chatted.output
    assert "hermesctl chat --resume" in chatted.output

    script = subprocess.run(
        [*_script("hermesctl"), "status", "--home", str(home), "--json"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert script.returncode == 0, script.stderr
    state = json.loads(script.stdout)
    assert state["running"] is True
    assert {p["name"]: p["state"] for p in state["platforms"]} == {"api_server": "running", "webhook": "running"}

    poll_until(lambda: ("webhook", "hello by webhook") in _user_messages(home))
    code, out, err = daemon.stop()
    assert code == 0, err
    assert "hermesd" in out
    assert "control socket" in out
    assert "stopped" in err
    assert not (home / "hermesd.sock").exists()
    assert not (home / "hermesd.pid").exists()
    wal = home / "state.db-wal"  # folded back at the clean exit: state.db alone is the whole database
    assert not wal.exists() or wal.stat().st_size == 0, f"{wal.stat().st_size} bytes left in {wal}"
    stored = _user_messages(home)
    assert stored.count(("api_server", "hello over http")) == 1
    assert stored.count(("api_server", "streamed")) == 1
    assert stored.count(("webhook", "hello by webhook")) == 1
    assert stored.count(("cli", "hello from the terminal")) == 1


@pytest.mark.slow
def test_a_second_daemon_on_the_same_home_is_refused_and_the_socket_is_private(daemon: Daemon, home: Path) -> None:
    assert (home / "hermesd.sock").stat().st_mode & 0o777 == 0o600
    second = start_daemon(home)
    _out, err = second.communicate(timeout=30)
    assert second.returncode == 1
    assert f"another hermesd (pid {daemon.process.pid}) is running" in err
    assert daemon.process.poll() is None  # the first one is untouched
    assert daemon.stop()[0] == 0


@pytest.mark.slow
def test_sighup_reloads_the_configuration_without_dropping_sessions(daemon: Daemon, home: Path) -> None:
    runner = CliRunner()
    first = runner.invoke(hermesctl, ["chat", "--home", str(home)], input="before reload\n")
    session = re.search(r"--resume (\S+)", first.output)
    assert session is not None, first.output
    other = "whsec_" + base64.b64encode(b"another secret, 32 bytes long!!").decode()
    (home / "config.yaml").write_text(config(f"      second:\n        secret: {other}\n"))
    daemon.process.send_signal(signal.SIGHUP)

    def second_route_listed() -> bool:
        client = connect(home / "hermesd.sock")
        assert client is not None
        with client:
            lines = [line for p in client.status().platforms for line in p.detail]
        return any("'second'" in line for line in lines)

    poll_until(second_route_listed)
    daemon.status = daemon.wait_ready()  # a restarted webhook server on port 0 has a new port
    payload = {"text": "via the new route", "chat_id": "c9", "user_id": "u9"}
    assert _signed(daemon.url("webhook") + "/webhooks/second", payload, "msg_after_reload", other) == 202
    resumed = runner.invoke(hermesctl, ["chat", "--home", str(home), "-r", session[1]], input="after reload\n")
    assert resumed.exit_code == 0, resumed.output
    assert "you: before reload" in resumed.output  # the recap
    assert "echo: after reload" in resumed.output
    (home / "config.yaml").write_text("runtime: [not, a, mapping]\n")
    daemon.process.send_signal(signal.SIGHUP)
    time.sleep(0.5)  # the daemon polls for a pending reload every 0.5 s; nothing to wait on from outside
    assert daemon.wait_ready().pid == daemon.process.pid  # a bad file leaves it running as it was
    code, _, err = daemon.stop()
    assert code == 0
    assert "reload refused" in err
    assert "runtime" in err
    with Store.open(home / "state.db", readonly=True) as store:
        contents = [m.content for m in store.load_transcript(session[1])]
    assert contents == ["before reload", "echo: before reload", "after reload", "echo: after reload"]
    assert ("webhook", "via the new route") in _user_messages(home)


@pytest.mark.slow
def test_a_bad_configuration_exits_2_naming_the_field(tmp_path: Path) -> None:
    home = tmp_path / "bad"
    home.mkdir()
    (home / "config.yaml").write_text("runtime:\n  max_live_actors: lots\n")
    process = start_daemon(home)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 2
    assert "runtime.max_live_actors" in err
    (home / "config.yaml").write_text("runtime:\n  max_live_actors: [1\n")
    process = start_daemon(home)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 2
    assert "not valid YAML at line" in err


@pytest.mark.slow
def test_hermes_home_chooses_the_home_when_no_option_is_given(home: Path) -> None:
    process = start_daemon(home, home_option=False)
    try:
        running = Daemon(home, process)
        assert running.status.home == str(home)
        assert running.status.database == str(home / "state.db")
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert f"home:     {home}" in out
    assert "agent:    echo" in out


def test_a_first_start_writes_the_commented_default_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Settings] = []

    class Recorder:
        def __init__(self, home: Path, config_path: Path, settings: Settings, **_: object) -> None:
            seen.append(settings)

        def run(self) -> int:
            return 0

    monkeypatch.setattr(hermesd_cli, "Daemon", Recorder)
    result = CliRunner().invoke(hermesd_cli.main, ["--home", str(tmp_path / "new")])
    assert result.exit_code == 0, result.output
    config_file = tmp_path / "new" / "config.yaml"
    assert "wrote the default configuration" in result.output
    assert config_file.stat().st_mode & 0o777 == 0o600
    assert "# base_url: http://127.0.0.1:8000/v1" in config_file.read_text()
    assert list(seen[0].platforms["webhook"].routes) == ["default"]
