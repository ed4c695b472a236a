"""``hermesctl config check`` refuses exactly what ``hermesd`` refuses at start, with the same line."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.cli.hermesd import main as hermesd
from hermes_actors.daemon.process import Daemon
from hermes_actors.daemon.startup import check_configuration

TOKEN = "123456:" + "A" * 35

# (id, config.yaml, environment, what the refusal line says)
REFUSALS = [
    ("yaml", "agent: [unclosed\n", {}, "is not valid YAML at line 2"),
    ("unknown-section", "agnet: {}\n", {}, "agnet: unknown section"),
    ("field-type", "runtime:\n  max_live_actors: many\n", {}, "runtime.max_live_actors: Expected `int`"),
    ("unknown-field", "platforms:\n  api_server:\n    prot: 1\n", {}, "platforms.api_server.prot: unknown field"),
    ("unknown-platform", "platforms:\n  irc: {}\n", {}, "platforms.irc: unknown platform"),
    ("port", "platforms:\n  api_server:\n    port: 70000\n", {}, "platforms.api_server.port: 70000 is not a TCP port"),
    (
        "prompt-both",
        "agent:\n  system_prompt: hi\n  system_prompt_file: p.md\n",
        {},
        "agent.system_prompt_file: cannot be set together with agent.system_prompt",
    ),
    ("prompt-file-missing", "agent:\n  system_prompt_file: nowhere.md\n", {}, "which does not exist"),
    ("model-missing", "agent:\n  base_url: http://127.0.0.1:9/v1\n", {}, "agent.model: is required"),
    ("context-window", "agent:\n  context_window: 10\n", {}, "agent.context_window: must be at least 1024"),
    ("timezone", "daemon:\n  timezone: Mars/Olympus\n", {}, "daemon.timezone: unknown time zone 'Mars/Olympus'"),
    ("socket-length", "daemon:\n  socket: /" + "s" * 120 + "\n", {}, "daemon.socket: control socket path"),
    ("http-port", "daemon:\n  http_port: 70000\n", {}, "daemon.http_port: 70000 is not a TCP port"),
    (
        "one-port-off-loopback-without-key",
        "daemon:\n  http_port: 8080\n  http_host: 0.0.0.0\n",
        {},
        "platforms.api_server.key: required when host is not loopback ('0.0.0.0'",
    ),
    ("reset-mode", "session_reset:\n  mode: sometimes\n", {}, "session_reset"),
    ("media-describe", "media:\n  describe: no_such_module_x:describe\n", {}, "media.describe: cannot load"),
    (
        "api-off-loopback-without-key",
        "platforms:\n  api_server:\n    host: 0.0.0.0\n",
        {},
        "platforms.api_server.key: required when host is not loopback",
    ),
    (
        "webhook-secret-env",
        "platforms:\n  webhook:\n    routes:\n      r:\n        secret_env: HOOK_SECRET_UNSET\n",
        {},
        "platforms.webhook.routes.r.secret_env: environment variable HOOK_SECRET_UNSET is not set",
    ),
    (
        "telegram-token-env",
        "platforms:\n  telegram:\n    bots:\n      main:\n        token_env: TG_UNSET\n",
        {},
        "environment variable TG_UNSET is not set",
    ),
    (
        "telegram-token-shape",
        "platforms:\n  telegram:\n    bots:\n      main:\n        token_env: TG_BAD\n",
        {"TG_BAD": "not a token"},
        "platforms.telegram.bots.main.token_env: the value of TG_BAD",
    ),
    (
        "slack-secret-env",
        "platforms:\n  slack:\n    apps:\n      main:\n        signing_secret_env: SL_UNSET\n"
        "        bot_token: xoxb-1\n",
        {},
        "platforms.slack.apps.main.signing_secret_env: environment variable SL_UNSET is not set",
    ),
    (
        "discord-token-env",
        "platforms:\n  discord:\n    bots:\n      main:\n        token_env: DC_UNSET\n",
        {},
        "environment variable DC_UNSET is not set",
    ),
    (
        "whatsapp-secret-env",
        "platforms:\n  whatsapp:\n    numbers:\n      '1065':\n        app_secret_env: WA_UNSET\n"
        "        verify_token: v\n        access_token: a\n",
        {},
        "platforms.whatsapp.numbers.1065.app_secret_env: environment variable WA_UNSET is not set",
    ),
    (
        "feishu-secret-env",
        "platforms:\n  feishu:\n    apps:\n      main:\n        app_id: cli_x\n        app_secret_env: FS_UNSET\n"
        "        verification_token: v\n",
        {},
        "platforms.feishu.apps.main.app_secret_env: environment variable FS_UNSET is not set",
    ),
    (
        "matrix-token-env",
        "platforms:\n  matrix:\n    accounts:\n      main:\n        homeserver: https://m.example\n"
        "        access_token_env: MX_UNSET\n",
        {},
        "environment variable MX_UNSET is not set",
    ),
    (
        "wechat-token-env",
        "platforms:\n  wechat:\n    accounts:\n      main:\n        token_env: WC_UNSET\n",
        {},
        "environment variable WC_UNSET is not set",
    ),
]


def _error_line(result: Result) -> str:
    lines = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, result.output
    return lines[0]


def _both(tmp_path: Path, text: str, env: dict[str, str]) -> tuple[Result, Result]:
    home = tmp_path / "home"
    home.mkdir()
    path = home / "config.yaml"
    path.write_text(text)
    runner = CliRunner()
    checked = runner.invoke(hermesctl, ["config", "check", "--home", str(home)], env=env)
    started = runner.invoke(hermesd, ["--home", str(home)], env=env)
    return checked, started


@pytest.mark.parametrize(("text", "env", "says"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
def test_config_check_refuses_what_hermesd_refuses_at_start_with_the_same_line(
    tmp_path: Path, text: str, env: dict[str, str], says: str
) -> None:
    checked, started = _both(tmp_path, text, env)
    assert started.exit_code == 2, started.output
    assert checked.exit_code == 2, checked.output
    assert _error_line(checked) == _error_line(started)
    assert says in _error_line(checked)
    assert not (tmp_path / "home" / "state.db").exists()  # refused before the store was touched


def test_config_check_says_the_agent_needs_the_openai_extra_as_hermesd_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in ("hermes_actors.agents.openai_chat", "hermes_actors.agents.openai_endpoint"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.setitem(sys.modules, "openai", None)
    checked, started = _both(tmp_path, "agent:\n  base_url: http://127.0.0.1:9/v1\n  model: m\n", {})
    assert (checked.exit_code, started.exit_code) == (2, 2), checked.output + started.output
    assert _error_line(checked) == _error_line(started)
    assert "pip install 'hermes-actors[openai]'" in _error_line(checked)


def test_config_check_passes_a_file_hermesd_starts_on(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(
        "platforms:\n  api_server:\n    host: 0.0.0.0\n    key_env: API_KEY_SET\n"
        "  telegram:\n    bots:\n      main:\n        token_env: TG_SET\n"
    )
    result = CliRunner().invoke(
        hermesctl, ["config", "check", "--home", str(home)], env={"API_KEY_SET": "k" * 20, "TG_SET": TOKEN}
    )
    assert result.exit_code == 0, result.output
    assert "ok (agent: echo; entry points: api_server, webhook, telegram)" in result.output


ACCEPTED = [
    ("defaults", "", {}),
    (
        "api-off-loopback-with-a-key",
        "platforms:\n  api_server:\n    host: 0.0.0.0\n    port: 0\n    key_env: API_KEY_SET\n",
        {"API_KEY_SET": "k" * 20},
    ),
    (
        "secrets-from-the-environment",
        "platforms:\n  webhook:\n    port: 0\n    routes:\n      r:\n        secret_env: HOOK_SECRET\n"
        "  slack:\n    port: 0\n    apps:\n      main:\n        signing_secret_env: SL_SECRET\n"
        "        bot_token: xoxb-1\n",
        {"HOOK_SECRET": "whsec_" + "A" * 44, "SL_SECRET": "s3cret"},
    ),
    ("one-port", "daemon:\n  http_port: {free_port}\n", {}),
]


@pytest.mark.parametrize(("text", "env"), [a[1:] for a in ACCEPTED], ids=[a[0] for a in ACCEPTED])
def test_a_file_config_check_passes_is_one_hermesd_starts_on(tmp_path: Path, text: str, env: dict[str, str]) -> None:
    home = tmp_path / "home"
    home.mkdir()
    path = home / "config.yaml"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free_port = probe.getsockname()[1]
    text = text.replace("{free_port}", str(free_port))
    path.write_text(text or "platforms:\n  api_server:\n    port: 0\n  webhook:\n    port: 0\n")
    checked = CliRunner().invoke(hermesctl, ["config", "check", "--home", str(home)], env=env)
    assert checked.exit_code == 0, checked.output
    assert f"{path}: ok" in checked.output
    settings = check_configuration(path, home=home, environ=env)
    daemon = Daemon(home, path, settings, environ=env)
    daemon.start()
    try:
        assert daemon.adapters()
    finally:
        daemon.shutdown(drain_timeout=0)


@pytest.mark.parametrize(
    "section",
    [
        "platforms:\n  api_server:\n    port: {taken}\n  webhook:\n    port: 0\n",
        "platforms:\n  webhook:\n    port: {taken}\n  api_server:\n    port: 0\n",
        "daemon:\n  http_port: {taken}\n",
    ],
    ids=["api_server", "webhook", "one-port"],
)
def test_config_check_names_a_port_another_program_holds_as_hermesd_does(tmp_path: Path, section: str) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        checked, started = _both(tmp_path, section.replace("{taken}", str(holder.getsockname()[1])), {})
    assert (checked.exit_code, started.exit_code) == (1, 1), checked.output + started.output
    assert _error_line(checked) == _error_line(started)
    assert "(Address already in use); choose another port in config.yaml" in _error_line(checked)


def test_config_check_leaves_the_ports_of_a_running_hermesd_alone(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    path = home / "config.yaml"
    path.write_text("platforms:\n  api_server:\n    port: 0\n  webhook:\n    port: 0\n")
    daemon = Daemon(home, path, check_configuration(path, home=home, environ={}), environ={})
    daemon.start()
    try:
        result = CliRunner().invoke(hermesctl, ["config", "check", "--home", str(home)])
    finally:
        daemon.shutdown(drain_timeout=0)
    assert result.exit_code == 0, result.output
    assert f"hermesd runs on {home}: the ports it listens on were not probed" in result.output
    assert f"{path}: ok" in result.output
