"""``agent.factory``: a plug-in agent built from a module outside the project or an entry point, and every way
that can fail as a ConfigError naming the key, the reference and the exception."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hermes_actors.agents import AgentContext, TurnInput
from hermes_actors.agents.base import model_of, system_prompt_of
from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.factory import build_plugin_agent, load_factory
from hermes_actors.daemon.agent import agent_name, build_agent, host_agent_factory
from hermes_actors.daemon.agent_settings import AgentSettings
from hermes_actors.daemon.config_file import decode_settings
from hermes_actors.errors import ConfigError

PLUGIN = """
from hermes_actors.agents import AgentMessage, AgentReply, Role


class OptionAgent:
    runs_inline = True

    def __init__(self, context):
        self.context = context
        self.system_prompt = context.system_prompt
        self.model = context.model or "plugin-model"

    def run_turn(self, turn, *, timeout_s):
        secret = self.context.environ.get("PLUGIN_SECRET", "-")
        text = f"{self.context.options.get('greeting', 'hi')} {turn.user_text} (secret {secret})"
        return AgentReply(messages=(AgentMessage(role=Role.ASSISTANT, content=text),), text=text)

    def summarize(self, history, *, timeout_s):
        return "summary"

    def save_memories(self, history, *, timeout_s):
        return []


def build(context):
    return OptionAgent(context)


class Factories:
    @staticmethod
    def build(context):
        return OptionAgent(context)


def not_an_agent(context):
    return "a string"


def raises(context):
    raise ValueError("options.greeting is required")


def refuses(context):
    from hermes_actors.errors import ConfigError

    raise ConfigError(f"{context.section}.options.greeting", "must be a short word")


class Promptless:
    def run_turn(self, turn, *, timeout_s): ...
    def summarize(self, history, *, timeout_s): ...
    def save_memories(self, history, *, timeout_s): ...


def promptless(context):
    return Promptless()


NUMBER = 7
"""


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory outside the project holding the module ``tmp_plugin`` (and ``tmp_broken``), on sys.path."""
    directory = tmp_path / "plugins"
    directory.mkdir()
    (directory / "tmp_plugin.py").write_text(PLUGIN)
    (directory / "tmp_broken.py").write_text("raise RuntimeError('the plug-in cannot start without its model file')\n")
    monkeypatch.syspath_prepend(str(directory))
    for name in ("tmp_plugin", "tmp_broken"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return directory


def _turn(text: str) -> TurnInput:
    return TurnInput(session_id="s1", history=(), user_text=text)


def test_a_factory_from_a_module_outside_the_project_builds_the_agent_from_its_context(plugin_dir: Path) -> None:
    settings = decode_settings(
        {
            "agent": {
                "factory": "tmp_plugin:build",
                "model": "m-1",
                "system_prompt": "Be brief.",
                "context_window": 32_000,
                "options": {"greeting": "ahoy", "nested": {"list": [1, 2]}},
            }
        }
    ).agent
    agent = build_agent(settings, {"PLUGIN_SECRET": "s3"})
    assert agent.run_turn(_turn("there"), timeout_s=5).text == "ahoy there (secret s3)"
    assert system_prompt_of(agent) == "Be brief."
    assert model_of(agent) == "m-1"
    context = agent.context  # type: ignore[attr-defined]
    assert context == AgentContext(
        system_prompt="Be brief.",
        model="m-1",
        options={"greeting": "ahoy", "nested": {"list": [1, 2]}},
        context_window=32_000,
        environ={"PLUGIN_SECRET": "s3"},
        section="agent",
    )
    assert agent_name(settings) == "tmp_plugin:build (plug-in, model m-1)"
    assert not settings.uses_echo


def test_an_attribute_path_names_a_factory_inside_a_class(plugin_dir: Path) -> None:
    agent = build_plugin_agent("tmp_plugin:Factories.build", AgentContext(options={"greeting": "yo"}))
    assert agent.run_turn(_turn("x"), timeout_s=5).text == "yo x (secret -)"


def test_an_entry_point_name_builds_the_agent_it_names() -> None:
    agent = build_agent(AgentSettings(factory="echo", system_prompt="Echo kindly."), {})
    assert isinstance(agent, EchoAgent)
    assert agent.system_prompt == "Echo kindly."


def test_an_entry_point_of_another_installed_distribution_is_found(
    plugin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = plugin_dir / "tmp_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tmp-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[hermes_actors.agents]\ntmp-option = tmp_plugin:build\n")
    agent = build_plugin_agent("tmp-option", AgentContext(options={"greeting": "from an entry point:"}))
    assert agent.run_turn(_turn("hi"), timeout_s=5).text == "from an entry point: hi (secret -)"


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        (
            "tmp_missing_module:build",
            "agent.factory: cannot import tmp_missing_module for tmp_missing_module:build "
            "(ModuleNotFoundError: No module named 'tmp_missing_module'); install it or put its directory on "
            "hermesd's PYTHONPATH",
        ),
        (
            "tmp_broken:build",
            "agent.factory: cannot import tmp_broken for tmp_broken:build (RuntimeError: the plug-in cannot start "
            "without its model file)",
        ),
        ("tmp_plugin:nothing", "agent.factory: cannot load tmp_plugin:nothing: tmp_plugin has no nothing"),
        ("tmp_plugin:NUMBER", "agent.factory: tmp_plugin:NUMBER is not callable (int 7); name a function or class"),
        (
            "tmp_plugin:raises",
            "agent.factory: tmp_plugin:raises raised ValueError: options.greeting is required; fix the factory or "
            "agent.options",
        ),
        (
            "tmp_plugin:not_an_agent",
            "agent.factory: tmp_plugin:not_an_agent returned str 'a string', which is not an agent: it lacks run_turn, "
            "summarize, save_memories",
        ),
        ("tmp_plugin:refuses", "agent.options.greeting: must be a short word"),
        ("no-such-agent", "agent.factory: no entry point 'no-such-agent' in the hermes_actors.agents group"),
    ],
)
def test_a_factory_that_cannot_be_loaded_or_built_is_a_config_error_naming_key_reference_and_exception(
    plugin_dir: Path, reference: str, message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        build_agent(AgentSettings(factory=reference), {})
    assert str(raised.value).startswith(message), str(raised.value)


def test_unknown_entry_points_are_listed_with_the_installed_ones() -> None:
    with pytest.raises(ConfigError, match=r"\(installed: [^)]*\becho\b"):
        load_factory("no-such-agent")


def test_a_configured_prompt_the_agent_would_not_carry_into_sessions_is_refused(plugin_dir: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        build_agent(AgentSettings(factory="tmp_plugin:promptless", system_prompt="Be brief."), {})
    assert str(raised.value).startswith(
        "agent.system_prompt: is set, but the Promptless that tmp_plugin:promptless built has no system_prompt "
        "attribute, so sessions would never see it; keep it there (self.system_prompt = context.system_prompt)"
    )
    build_agent(AgentSettings(factory="tmp_plugin:promptless"), {})  # without one it is fine


def test_a_named_agents_section_names_its_own_keys(plugin_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"^agents\.support\.factory: tmp_plugin:raises raised ValueError"):
        build_agent(AgentSettings(factory="tmp_plugin:raises"), {}, section="agents.support")
    with pytest.raises(ConfigError, match=r"^agents\.support\.options\.greeting: must be a short word"):
        build_agent(AgentSettings(factory="tmp_plugin:refuses"), {}, section="agents.support")


@pytest.mark.parametrize(
    ("section", "path", "words"),
    [
        ({"options": {"a": 1}}, "agent.options", "only a plug-in agent takes options; set agent.factory"),
        ({"factory": "not a reference"}, "agent.factory", "use package.module:callable"),
        ({"factory": "m:f", "base_url": "http://127.0.0.1:1/v1", "model": "x"}, "agent.factory", "keep one of them"),
        ({"factory": "m:f", "temperature": 0.2}, "agent.temperature", "give the plug-in its settings under"),
        ({"factory": "m:f", "api_key_env": "KEY"}, "agent.api_key_env", "a setting of the OpenAI-compatible agent"),
        ({"factory": "m:f", "vision": True}, "agent.vision", "agent.options"),
    ],
)
def test_the_factory_keys_are_checked_when_the_file_is_read(section: dict[str, object], path: str, words: str) -> None:
    with pytest.raises(ConfigError) as raised:
        decode_settings({"agent": section})
    assert raised.value.path == path
    assert words in str(raised.value)


@pytest.mark.slow
def test_shard_hosts_get_the_pickled_settings_and_build_the_plugin_in_their_own_process(
    tmp_path: Path, plugin_dir: Path
) -> None:
    settings = AgentSettings(factory="tmp_plugin:build", options={"greeting": "host says"}, system_prompt="P")
    build = host_agent_factory(settings, {"PLUGIN_SECRET": "daemon-secret", "OPENAI_API_KEY": "daemon-key"})
    pickled = pickle.dumps(build)
    assert b"daemon-secret" not in pickled  # the daemon's environment stays here
    assert b"daemon-key" not in pickled
    assert b"OptionAgent" not in pickled  # the settings travel, never an agent
    script = textwrap.dedent(
        """
        import pickle, sys
        from hermes_actors.agents import TurnInput
        agent = pickle.loads(sys.stdin.buffer.read())()
        reply = agent.run_turn(TurnInput(session_id="s", history=(), user_text="hello"), timeout_s=5)
        print(reply.text, "|", agent.system_prompt)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(plugin_dir), "PLUGIN_SECRET": "host-secret"}
    host = subprocess.run(
        [sys.executable, "-c", script], input=pickled, capture_output=True, env=env, timeout=60, check=False
    )
    assert host.returncode == 0, host.stderr.decode()
    assert host.stdout.decode().strip() == "host says hello (secret host-secret) | P"


def test_shard_hosts_of_the_openai_agent_still_get_only_its_key_from_the_daemon() -> None:
    build = host_agent_factory(AgentSettings(base_url="http://127.0.0.1:9/v1", model="m"), {"OPENAI_API_KEY": "k"})
    assert build.carried == {"OPENAI_API_KEY": "k"}  # type: ignore[attr-defined]
