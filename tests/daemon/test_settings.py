"""config.yaml: defaults, the first-start template, and errors that name the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from hermes_actors.agents.approvals import ApprovalSettings
from hermes_actors.config import BusyConfig, EventKind, EventWebhook, RuntimeConfig
from hermes_actors.daemon.config_file import Settings, decode_settings, load_settings
from hermes_actors.daemon.config_template import default_config_text, write_default_config
from hermes_actors.errors import ConfigError
from hermes_actors.lifecycle.policy import ResetMode
from hermes_actors.lifecycle.schedule import JobsConfig
from platforms import registry

SECRET = "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="


def test_no_file_and_an_empty_file_are_the_defaults(tmp_path: Path) -> None:
    assert load_settings(tmp_path / "absent.yaml") == Settings()
    (tmp_path / "empty.yaml").write_text("")
    assert load_settings(tmp_path / "empty.yaml") == Settings()


def test_the_first_start_template_parses_to_the_defaults_plus_one_webhook_route(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    assert write_default_config(path)
    assert path.stat().st_mode & 0o777 == 0o600  # it holds the webhook secret
    assert not write_default_config(path)  # never overwrites
    settings = load_settings(path)
    assert settings.agent == Settings().agent
    assert settings.runtime == Settings().runtime
    assert settings.platforms["api_server"] == Settings().platforms["api_server"]
    assert list(settings.platforms["webhook"].routes) == ["default"]
    assert settings.platforms["webhook"].routes["default"].secret is not None
    assert settings.platforms["webhook"].routes["default"].secret.startswith("whsec_")


def _uncommented_template() -> dict[str, Any]:
    """The template with every "# key: value" line (nested blocks too) uncommented, as YAML data."""
    lines = []
    for line in default_config_text(SECRET).splitlines():
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        candidate = stripped[2:].split("  #")[0].rstrip() if stripped.startswith("# ") else ""
        key = candidate.strip().split(":", 1)[0]
        if ":" in candidate and (key.isidentifier() or key.strip('"').isdigit()):
            lines.append(indent + candidate)
        else:
            lines.append(line)
    data: dict[str, Any] = yaml.safe_load("\n".join(lines))
    return data


def test_every_commented_default_in_the_template_is_a_valid_setting() -> None:
    # Uncommenting every "# key: value" line must give a valid file: the template documents real fields of real
    # sections.
    data = _uncommented_template()
    data["agent"]["base_url"] = "http://127.0.0.1:8000/v1"  # the example endpoint, with its model
    settings = decode_settings(data)
    assert settings.agent.model == "my-model"
    assert settings.session_reset.mode == ResetMode.NONE
    assert settings.platforms["webhook"].routes["default"].callback_url == "http://127.0.0.1:9000/replies"
    assert set(settings.platforms) == set(registry.PLATFORMS)  # every platform has its commented section


def _fields(struct: type[msgspec.Struct]) -> set[str]:
    return set(struct.__struct_fields__)


def test_the_template_names_every_setting_of_busy_jobs_approvals_and_event_webhooks() -> None:
    # Issue 36: the first-start config.yaml documents every setting of these features, each at its default.
    data = _uncommented_template()
    settings = decode_settings({**data, "agent": {**data["agent"], "base_url": "http://127.0.0.1:8000/v1"}})
    assert set(data["busy"]) == _fields(BusyConfig)
    assert set(data["jobs"]) == _fields(JobsConfig)
    assert set(data["agent"]["approvals"]) == _fields(ApprovalSettings)
    hook = data["events"]["webhooks"]["ops"]
    assert set(hook) | {"secret"} == _fields(EventWebhook)  # secret_env, or secret (named in its comment)
    assert "secret: whsec_" in default_config_text(SECRET)
    assert set(hook["events"]) == {kind.value for kind in EventKind}
    retries = {"outbox_retry_base_s", "outbox_retry_max_s"}  # an event delivery's backoff
    assert retries <= set(data["runtime"])
    assert "require_approval" in default_config_text(SECRET)  # an MCP server's calls held for approval
    assert settings.busy == BusyConfig()  # each at its default
    assert settings.jobs == JobsConfig()
    assert settings.agent.approvals == ApprovalSettings()
    assert (settings.runtime.outbox_retry_base_s, settings.runtime.outbox_retry_max_s) == (
        RuntimeConfig().outbox_retry_base_s,
        RuntimeConfig().outbox_retry_max_s,
    )
    webhook = settings.events.webhooks["ops"]
    assert (webhook.give_up_after_s, webhook.timeout_s) == (86400.0, 10.0)


@pytest.mark.parametrize(
    ("text", "path", "words"),
    [
        ("runtime:\n  max_live_actors: lots\n", "runtime.max_live_actors", "Expected `int`"),
        ("runtime:\n  max_live_actor: 10\n", "runtime.max_live_actor", "unknown field"),
        ("runtime:\n  max_live_actors: 99999\n", "runtime.max_live_actors", "between 1 and 15000"),
        ("runtime:\n  key_policy:\n    namespce: x\n", "runtime.key_policy.namespce", "unknown field"),
        ("agent:\n  base_url: http://127.0.0.1:1/v1\n", "agent.model", "required"),
        ("agent:\n  base_url: ftp://x\n  model: m\n", "agent.base_url", "http"),
        ("platforms:\n  telegrm: {}\n", "platforms.telegrm", "unknown platform"),
        ("platforms:\n  api_server:\n    port: seventy\n", "platforms.api_server.port", "Expected `int`"),
        ("platforms:\n  webhook:\n    routes:\n      ok:\n        secret: nope\n", "platforms.webhook.routes.ok", ""),
        ("session_reset:\n  mode: sometimes\n", "session_reset.mode", "expected one of"),
        ("daemon:\n  timezone: Mars/Olympus\n", "daemon.timezone", "IANA"),
        ("runtim:\n  x: 1\n", "runtim", "unknown section"),
        ("- just\n- a list\n", "config.yaml", "mapping"),
    ],
)
def test_a_bad_field_is_named_with_its_path(tmp_path: Path, text: str, path: str, words: str) -> None:
    file = tmp_path / "config.yaml"
    file.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_settings(file)
    assert error.value.path.startswith(path), str(error.value)
    assert words in str(error.value)


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    file = tmp_path / "config.yaml"
    file.write_text("runtime:\n  passivate_after_s: 3\n  max_live_actors: [1\n")
    with pytest.raises(ConfigError, match=r"not valid YAML at line \d+"):
        load_settings(file)


def test_an_empty_nested_section_means_its_defaults() -> None:
    settings = decode_settings({"platforms": {"api_server": None, "webhook": {"routes": None}}, "agent": None})
    assert settings.platforms["api_server"] == Settings().platforms["api_server"]
    assert settings.platforms["webhook"].routes == {}


def test_the_system_prompt_is_text_or_a_file_relative_to_the_home(tmp_path: Path) -> None:
    from hermes_actors.agents.base import system_prompt_of
    from hermes_actors.daemon.agent import build_agent

    config = tmp_path / "config.yaml"
    config.write_text("agent:\n  system_prompt: You are terse.\n")
    settings = load_settings(config)
    assert settings.agent.read_system_prompt() == "You are terse."
    assert system_prompt_of(build_agent(settings.agent, {})) == "You are terse."
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "main.md").write_text("You are kind.\nAnswer in English.\n", encoding="utf-8")
    config.write_text("agent:\n  system_prompt_file: prompts/main.md\n")
    settings = load_settings(config)
    assert settings.agent.system_prompt_file == str(tmp_path / "prompts" / "main.md")  # made absolute
    assert system_prompt_of(build_agent(settings.agent, {})) == "You are kind.\nAnswer in English."
    with_endpoint = "agent:\n  base_url: http://127.0.0.1:9/v1\n  model: m\n  system_prompt_file: prompts/main.md\n"
    config.write_text(with_endpoint)
    assert system_prompt_of(build_agent(load_settings(config).agent, {})) == "You are kind.\nAnswer in English."


def test_a_missing_system_prompt_file_names_the_key_the_path_and_the_fix(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("agent:\n  system_prompt_file: prompt.md\n")
    with pytest.raises(ConfigError) as info:
        load_settings(config)
    assert info.value.path == "agent.system_prompt_file"
    assert str(tmp_path / "prompt.md") in str(info.value)
    assert "does not exist" in str(info.value)
    assert "agent.system_prompt instead" in str(info.value)
    (tmp_path / "prompt.md").write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(ConfigError, match="cannot be read as UTF-8"):
        load_settings(config)


def test_the_system_prompt_and_its_file_are_not_both_allowed() -> None:
    with pytest.raises(ConfigError) as info:
        decode_settings({"agent": {"system_prompt": "x", "system_prompt_file": "p.md"}})
    assert info.value.path == "agent.system_prompt_file"
    assert "keep one of them" in str(info.value)
