"""config.yaml's ``agents`` and ``bindings``: named agents with the keys of ``agent:``, bindings checked when the file
is read, and every mistake named by its key with the fix; ``hermesctl config check`` names the agents."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from hermes_actors.agents.base import system_prompt_of
from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.daemon.agent_bindings import build_roster, host_roster_factory, roster_text
from hermes_actors.daemon.config_file import decode_settings, load_settings
from hermes_actors.errors import ConfigError
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.agent_roster import AgentBinding

CONFIG = """
agent:
  system_prompt: You are the front desk.
agents:
  support:
    system_prompt: You answer support questions.
    context_window: 32000
  sales.eu:
    base_url: http://127.0.0.1:9/v1
    model: sales-model
bindings:
  - {agent: support, platform: webhook, account: helpdesk}
  - {agent: sales.eu, platform: telegram, chat_type: group}
  - {agent: default, platform: telegram, chat_id: -100123}
"""


def test_agents_and_bindings_are_read_with_the_keys_of_the_agent_section() -> None:
    settings = decode_settings(yaml.safe_load(CONFIG))
    assert list(settings.agents) == ["support", "sales.eu"]
    assert settings.agents["support"].context_window == 32000
    assert settings.agents["sales.eu"].model == "sales-model"
    assert settings.bindings == (
        AgentBinding(agent="support", platform="webhook", account="helpdesk"),
        AgentBinding(agent="sales.eu", platform="telegram", chat_type="group"),
        AgentBinding(agent="default", platform="telegram", chat_id="-100123"),  # a numeric id read as text
    )
    assert decode_settings(None).agents == {}
    assert decode_settings(None).bindings == ()


def test_the_roster_holds_the_agent_section_as_default_and_each_named_agent() -> None:
    settings = decode_settings(yaml.safe_load(CONFIG))
    roster = build_roster(settings.agent, settings.agents, settings.bindings, {})
    try:
        assert roster.names == ("default", "support", "sales.eu")
        assert system_prompt_of(roster.default.agent) == "You are the front desk."
        support = roster.get("support")
        assert support is not None
        assert system_prompt_of(support.agent) == "You answer support questions."
        assert support.context_window == 32000
        helpdesk = SessionSource(platform="webhook", account_id="helpdesk", chat_id="c1")
        assert roster.bound(helpdesk).name == "support"
        group = SessionSource(platform="telegram", chat_type="group", chat_id="-100123")
        assert roster.bound(group).name == "default"  # the chat id is more specific than the chat type
        assert roster.bound(SessionSource(platform="telegram", chat_type="group", chat_id="9")).name == "sales.eu"
    finally:
        for named in roster.agents:
            close = getattr(named.agent, "close", None)
            if close is not None:
                close()
    text = roster_text(settings.agent, settings.agents)
    assert text == "default: echo; support: echo; sales.eu: sales-model at http://127.0.0.1:9/v1"
    assert roster_text(settings.agent, {}) == "echo"


def test_a_shard_host_builds_the_same_roster_from_a_picklable_factory() -> None:
    import pickle

    settings = decode_settings(yaml.safe_load(CONFIG))
    factory = pickle.loads(pickle.dumps(host_roster_factory(settings.agent, {}, settings.bindings[:1], {})))
    with pytest.raises(ConfigError, match=r"bindings\[0\]\.agent: names 'support'"):
        factory()  # a binding to an agent the host was not given
    factory = pickle.loads(pickle.dumps(host_roster_factory(settings.agent, settings.agents, settings.bindings, {})))
    roster = factory()
    assert roster.names == ("default", "support", "sales.eu")
    assert roster.bound(SessionSource(platform="webhook", account_id="helpdesk")).name == "support"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "agents:\n  support: {}\nbindings:\n  - {agent: suport, platform: webhook}\n",
            "bindings[0].agent: names 'suport', which is not an agent; use one of: default, support "
            "(or add it under agents:)",
        ),
        (
            "bindings:\n  - {agent: default, chat_type: groups}\n",
            "bindings[0].chat_type: 'groups' is not a chat type; use one of: dm, group, channel, thread",
        ),
        ("bindings:\n  - {agent: default, platform: telegrm}\n", "bindings[0].platform: 'telegrm' is not a platform"),
        (
            "bindings:\n  - {agent: default, chat_id: 42}\n",
            "bindings[0].chat_id: needs platform: a chat id means something on one platform only; add platform: "
            "<name> to the entry",
        ),
        ("bindings:\n  - {agent: default, account: ''}\n", "bindings[0].account: must not be empty"),
        ("bindings:\n  - {platform: webhook}\n", "bindings[0].agent: is required"),
        ("bindings:\n  - {agent: default, platfrom: webhook}\n", "bindings[0].platfrom: unknown field"),
        ("bindings:\n  agent: default\n", "bindings: must be a list of entries"),
        ("agents: [support]\n", "agents: must be a mapping of agent names"),
        ("agents:\n  default: {}\n", "agents.default: the agent named default is the agent: section"),
        ("agents:\n  'two words': {}\n", "agents.two words: an agent's name is 1 to 64 letters"),
        (
            "agents:\n  support:\n    base_url: http://127.0.0.1:1/v1\n",
            "agents.support.model: is required with agents.support.base_url",
        ),
        ("agents:\n  support:\n    modle: m\n", "agents.support.modle: unknown field"),
        ("agents:\n  support:\n    mcp_servers:\n      files: {}\n", "agents.support.mcp_servers.files: needs either"),
        (
            "agents:\n  support:\n    system_prompt: a\n    system_prompt_file: b.md\n",
            "agents.support.system_prompt_file: cannot be set together with agents.support.system_prompt",
        ),
    ],
)
def test_a_mistake_names_its_key_and_the_fix(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        decode_settings(yaml.safe_load(text))
    assert str(error.value).startswith(message)


def test_each_agents_prompt_file_is_read_from_the_home_and_a_missing_one_is_named(tmp_path: Path) -> None:
    (tmp_path / "support.md").write_text("Help with orders.\n", encoding="utf-8")
    config = tmp_path / "config.yaml"
    config.write_text("agents:\n  support:\n    system_prompt_file: support.md\n", encoding="utf-8")
    settings = load_settings(config)
    assert settings.agents["support"].system_prompt_file == str(tmp_path / "support.md")
    roster = build_roster(settings.agent, settings.agents, settings.bindings, {})
    support = roster.get("support")
    assert support is not None
    assert system_prompt_of(support.agent) == "Help with orders."
    config.write_text("agents:\n  support:\n    system_prompt_file: gone.md\n", encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        load_settings(config)
    assert error.value.path == "agents.support.system_prompt_file"
    assert "gone.md, which does not exist" in str(error.value)
    assert "or put the text in agents.support.system_prompt instead" in str(error.value)


def test_config_check_names_the_agents_and_refuses_a_binding_to_an_unknown_one(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "platforms:\n  api_server: {port: 0}\n  webhook: {enabled: false}\n"
        "agents:\n  support: {system_prompt: Help.}\nbindings:\n  - {agent: support, platform: api_server}\n",
        encoding="utf-8",
    )
    runner = CliRunner()
    checked = runner.invoke(hermesctl, ["config", "check", "--home", str(tmp_path)])
    assert checked.exit_code == 0, checked.output
    assert "(agents: default: echo; support: echo; entry points: api_server)" in checked.output
    config.write_text("bindings:\n  - {agent: support}\n", encoding="utf-8")
    refused = runner.invoke(hermesctl, ["config", "check", "--home", str(tmp_path)])
    assert refused.exit_code == 2
    assert "bindings[0].agent: names 'support', which is not an agent; use one of: default" in refused.output


def test_the_online_check_tries_each_named_agents_endpoint(tmp_path: Path) -> None:
    from hermes_actors.daemon.online import online_checks
    from tests.agents.chat_server import open_chat_server

    with open_chat_server(model="support-model") as server:
        text = (
            "platforms:\n  api_server: {enabled: false}\n  webhook: {enabled: false}\n"
            f"agents:\n  support: {{base_url: '{server.base_url}', model: support-model}}\n"
            "  gone: {base_url: 'http://127.0.0.1:9/v1', model: m}\n"
        )
        settings = decode_settings(yaml.safe_load(text))
        checks = list(online_checks(settings, home=tmp_path, environ={}, timeout_s=5))
    assert [(c.subject, c.ok) for c in checks] == [("agent", True), ("agents.support", True), ("agents.gone", False)]
    assert checks[1].outcome == f"ok: {server.base_url}/models lists support-model"
    assert "is the endpoint running?" in checks[2].outcome
