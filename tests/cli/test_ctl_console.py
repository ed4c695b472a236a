"""``hermesctl console``: the console's URL from the configuration (or the running daemon) and where the key is."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.daemon.admin_key import ADMIN_KEY_ENV


def _console(home: Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(hermesctl, ["console", "--home", str(home)], env={ADMIN_KEY_ENV: None})
    return result.exit_code, result.stdout, result.stderr


def test_it_prints_the_configured_url_and_how_to_log_in(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("platforms:\n  api_server:\n    port: 18642\n")
    code, out, err = _console(tmp_path)
    assert code == 0, err
    assert out == "http://127.0.0.1:18642/console\n"
    assert "hermesctl admin-key" in err
    assert str(tmp_path / "admin_key") in err
    assert "hermesd is not running" in err


def test_one_port_mode_gives_the_shared_listener_and_the_configured_key_is_named(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        "daemon:\n  http_port: 8080\n  admin_key: hk-a-configured-admin-key-of-enough-length\n"
        "platforms:\n  api_server: {}\n"
    )
    code, out, err = _console(tmp_path)
    assert (code, out) == (0, "http://127.0.0.1:8080/console\n"), err
    assert "daemon.admin_key in config.yaml" in err


def test_without_the_api_server_it_says_how_to_enable_it(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("platforms:\n  api_server:\n    enabled: false\n")
    code, _, err = _console(tmp_path)
    assert code == 1
    assert "Error: the API server is off" in err
