"""``hermesctl status`` without a daemon and ``hermesctl config check``."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.messages import InboundMessage, encode
from hermes_actors.routing import SessionSource
from hermes_actors.store import Store


def test_status_without_a_daemon_exits_3_and_reports_what_waits_in_the_store(tmp_path: Path) -> None:
    result = CliRunner().invoke(hermesctl, ["status", "--home", str(tmp_path)])
    assert result.exit_code == 3
    assert f"hermesd is not running on {tmp_path}; start it with: hermesd --home {tmp_path}" in result.output
    with Store.open(tmp_path / "state.db") as store:
        message = InboundMessage(source=SessionSource(platform="cli", chat_id="t"), text="hi", message_id="m1")
        store.inbox.add(
            platform="cli", account_id="", platform_message_id="m1", routing_key="k", payload=encode(message)
        )
    result = CliRunner().invoke(hermesctl, ["status", "--home", str(tmp_path), "--json"])
    assert result.exit_code == 3
    assert json.loads(result.output) == {
        "running": False,
        "home": str(tmp_path),
        "inbox_depth": 1,
        "outbox_backlog": 0,
    }


def test_config_check_accepts_a_good_file_and_names_the_field_of_a_bad_one(tmp_path: Path) -> None:
    runner = CliRunner()
    absent = runner.invoke(hermesctl, ["config", "check", "--home", str(tmp_path)])
    assert absent.exit_code == 0
    assert "does not exist" in absent.output
    (tmp_path / "config.yaml").write_text("agent:\n  base_url: http://127.0.0.1:9/v1\n  model: m\n")
    good = runner.invoke(hermesctl, ["config", "check", "--home", str(tmp_path)])
    assert good.exit_code == 0, good.output
    assert "ok (agent: m at http://127.0.0.1:9/v1; entry points: api_server, webhook)" in good.output
    other = tmp_path / "other.yaml"
    other.write_text("session_reset:\n  idle_minutes: soon\n")
    bad = runner.invoke(hermesctl, ["config", "check", "--config", str(other)])
    assert bad.exit_code == 2
    assert "session_reset.idle_minutes" in bad.output


def test_status_and_chat_refuse_a_broken_config_with_the_command_that_explains_it(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("daemon: {socket: 7, extra: 1}\n")
    for args in (["status"], ["chat"]):
        result = CliRunner().invoke(hermesctl, [*args, "--home", str(tmp_path)], input="")
        assert result.exit_code == 1
        assert "hermesctl config check" in result.output


def test_config_check_names_a_file_once_and_refuses_a_config_option_naming_no_file(tmp_path: Path) -> None:
    runner = CliRunner()
    broken = tmp_path / "badyaml.yaml"
    broken.write_text("agent: [unclosed\n")
    result = runner.invoke(hermesctl, ["config", "check", "--config", str(broken)])
    assert result.exit_code == 2
    assert result.output.count(str(broken)) == 1, result.output
    assert "is not valid YAML at line 2" in result.output
    missing = runner.invoke(hermesctl, ["config", "check", "--config", str(tmp_path / "missing.yaml")])
    assert missing.exit_code == 2, missing.output  # asked to check that file: there is nothing to pass
    assert f"{tmp_path / 'missing.yaml'} does not exist" in missing.output


def test_hermesd_names_a_broken_configuration_file_once(tmp_path: Path) -> None:
    from hermes_actors.cli.hermesd import main as hermesd

    (tmp_path / "config.yaml").write_text("agent: [unclosed\n")
    result = CliRunner().invoke(hermesd, ["--home", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output.count(str(tmp_path / "config.yaml")) == 1, result.output
    assert "is not valid YAML at line 2" in result.output
