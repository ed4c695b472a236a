"""The operator API's key: generated 0600 into the home at the first start, reused afterwards, printed by
``hermesctl admin-key``; ``daemon.admin_key`` and ``$HERMES_ADMIN_KEY`` take its place."""

from __future__ import annotations

import json
import os
import stat
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.daemon.admin_key import ADMIN_KEY_ENV, admin_key, refuse_shared_key
from hermes_actors.daemon.config_file import DaemonSettings, Settings
from hermes_actors.daemon.process import Daemon
from hermes_actors.daemon.startup import check_configuration
from hermes_actors.errors import ConfigError
from platforms.api_server import ApiServer

CONFIG = "platforms:\n  api_server:\n    port: 0\n  webhook:\n    port: 0\n"


def _daemon(home: Path) -> Daemon:
    path = home / "config.yaml"
    daemon = Daemon(home, path, check_configuration(path, home=home, environ={}), environ={})
    daemon.start()
    return daemon


def _sessions(daemon: Daemon, key: str) -> int:
    (api,) = [a for a in daemon.adapters() if isinstance(a, ApiServer)]
    request = urllib.request.Request(api.url + "/api/sessions", headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.loads(response.read())["object"] == "list"
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


def _printed(home: Path) -> tuple[str, str]:
    result = CliRunner().invoke(hermesctl, ["admin-key", "--home", str(home)], env={ADMIN_KEY_ENV: None})
    assert result.exit_code == 0, result.output
    return result.stdout.strip(), result.stderr


def test_the_first_start_generates_a_private_key_that_restarts_reuse_and_hermesctl_prints(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(CONFIG)
    key_file = home / "admin_key"
    daemon = _daemon(home)
    try:
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        key = key_file.read_text().strip()
        assert len(key) >= 40
        assert _sessions(daemon, key) == 200
        assert _sessions(daemon, key + "x") == 401
        printed, said = _printed(home)
        assert printed == key
        assert str(key_file) in said
        assert "hermesctl admin-key" in daemon.banner()
    finally:
        daemon.shutdown(drain_timeout=0)
    daemon = _daemon(home)
    try:
        assert key_file.read_text().strip() == key
        assert _sessions(daemon, key) == 200
    finally:
        daemon.shutdown(drain_timeout=0)
    assert [p.name for p in home.iterdir() if p.name.startswith(".admin_key")] == []  # no temporary left


def test_the_configured_key_wins_over_the_environment_which_wins_over_the_file(tmp_path: Path) -> None:
    configured = Settings(daemon=DaemonSettings(admin_key="k" * 20))
    assert admin_key(tmp_path, configured, {ADMIN_KEY_ENV: "from-the-env"}).key == "k" * 20
    found = admin_key(tmp_path, Settings(), {ADMIN_KEY_ENV: " from-the-env "})
    assert (found.key, found.origin) == ("from-the-env", "environment")
    assert not (tmp_path / "admin_key").exists()  # nothing generated while a key is set
    generated = admin_key(tmp_path, Settings(), {})
    assert (generated.origin, generated.path) == ("file", str(tmp_path / "admin_key"))
    assert admin_key(tmp_path, Settings(), {}).key == generated.key


def test_a_key_file_others_can_read_is_made_private_and_an_empty_one_is_refused(tmp_path: Path) -> None:
    key_file = tmp_path / "admin_key"
    key_file.write_text("hk-admin-handmade\n")
    os.chmod(key_file, 0o644)
    assert admin_key(tmp_path, Settings(), {}).key == "hk-admin-handmade"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key_file.write_text("\n")
    with pytest.raises(ConfigError, match="admin_key is empty; delete it"):
        admin_key(tmp_path, Settings(), {})


def test_a_short_configured_admin_key_names_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"daemon.admin_key.*at least 16 characters"):
        DaemonSettings(admin_key="short")


def test_hermesd_refuses_an_admin_key_that_is_also_the_client_key(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    shared = "the-same-key-for-both-of-them"
    (home / "config.yaml").write_text(
        f"daemon:\n  admin_key: {shared}\nplatforms:\n  api_server:\n    port: 0\n    key: {shared}\n"
    )
    with pytest.raises(ConfigError, match="also the API's client key"):
        _daemon(home)
    checked = CliRunner().invoke(hermesctl, ["config", "check", "--home", str(home)], env={ADMIN_KEY_ENV: None})
    assert checked.exit_code == 2
    assert "also the API's client key" in checked.output
    settings = Settings(daemon=DaemonSettings(admin_key=shared))
    found = admin_key(home, settings, {})
    refuse_shared_key(found, settings, {})  # the default API section has no client key
    with pytest.raises(ConfigError, match=r"daemon.admin_key.*key of its own"):
        refuse_shared_key(found, settings, {"HERMES_API_KEY": shared})  # the client key from its variable
