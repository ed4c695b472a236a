"""``config.yaml``'s ``agents`` and ``bindings``: several named agents behind one gateway, and which of them answers
a new session (the rule is :mod:`hermes_actors.runtime.agent_roster`'s).

The ``agent:`` section is the agent named ``default``: it answers what no binding chooses, and every session from
before agents had names. ``agents.<name>`` takes the keys of ``agent:`` (``factory`` or ``base_url`` and ``model``,
the system prompt, MCP servers, ``context_window``); the name is what the API's ``model`` gives to ask for it and
what ``/v1/models`` lists. ``bindings`` is a list of ``{agent, platform, account, chat_type, chat_id}``; a key left
out matches anything, the most specific match wins. A session keeps the agent it started with, so a change here
reaches new sessions only::

    agent:
      system_prompt: You are the front desk.
    agents:
      support:
        base_url: http://127.0.0.1:8000/v1
        model: qwen2.5
    bindings:
      - {agent: support, platform: webhook, account: helpdesk}
      - {agent: support, platform: telegram, chat_type: group}
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from hermes_actors.agents.base import Agent
from hermes_actors.daemon.agent import agent_name, build_agent, host_agent_factory
from hermes_actors.daemon.agent_settings import AgentSettings
from hermes_actors.errors import ConfigError
from hermes_actors.runtime.agent_roster import (
    CHAT_TYPES,
    DEFAULT_AGENT,
    AgentBinding,
    AgentRoster,
    NamedAgent,
    check_bindings,
)
from platforms.registry import PLATFORMS

__all__ = [
    "AGENT_NAME",
    "BINDING_PLATFORMS",
    "build_roster",
    "decode_agents",
    "decode_bindings",
    "host_roster_factory",
    "roster_text",
    "with_prompt_file",
]

AGENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""An agent's name: it is a config key, the API's model name and a column of every session."""

BINDING_PLATFORMS = (*PLATFORMS, "cli")
"""The platforms a binding may name: every adapter's, and ``cli`` for ``hermesctl chat``."""

Decode = Callable[[object, type[Any], str], Any]
"""How ``config_file`` decodes a section into a Struct, naming ``section`` in its errors."""


def renamed(error: ConfigError, section: str) -> ConfigError:
    """``error`` of an ``agent:`` section's checks as the error of ``section`` (``agents.<name>``)."""
    if error.path != "agent" and not error.path.startswith("agent."):
        return error
    message = str(error)[len(error.path) + 2 :].replace("agent.", f"{section}.")
    return ConfigError(section + error.path.removeprefix("agent"), message)


def decode_agents(obj: object, decode: Decode) -> dict[str, AgentSettings]:
    """The ``agents:`` section: each name (checked against :data:`AGENT_NAME`; ``default`` is the ``agent:``
    section's) with its settings, decoded as an ``agent:`` section is and its errors named ``agents.<name>...``."""
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise ConfigError(
            "agents", f"must be a mapping of agent names to sections like agent:, got {type(obj).__name__}"
        )
    decoded: dict[str, AgentSettings] = {}
    for key, section in obj.items():
        name, path = str(key), f"agents.{key}"
        if name == DEFAULT_AGENT:
            raise ConfigError(
                path,
                f"the agent named {DEFAULT_AGENT} is the agent: section; configure it there, or give this one "
                "another name",
            )
        if not AGENT_NAME.fullmatch(name):
            raise ConfigError(
                path,
                "an agent's name is 1 to 64 letters, digits, '_', '-' or '.', starting with a letter or digit "
                "(it is the model name API clients ask for)",
            )
        try:
            decoded[name] = decode(section, AgentSettings, path)
        except ConfigError as exc:
            raise renamed(exc, path) from None
    return decoded


def decode_bindings(obj: object, agents: Collection[str], decode: Decode) -> tuple[AgentBinding, ...]:
    """The ``bindings:`` list, each entry checked: a known platform and chat type, a chat id or account only with
    its platform, no empty value, and an agent that is ``default`` or one of ``agents``."""
    if obj is None:
        return ()
    if not isinstance(obj, list):
        raise ConfigError(
            "bindings",
            f"must be a list of entries such as {{agent: support, platform: webhook, account: helpdesk}}, got "
            f"{type(obj).__name__}",
        )
    bindings = tuple(
        decode(_entry(entry, index), AgentBinding, f"bindings[{index}]") for index, entry in enumerate(obj)
    )
    for index, binding in enumerate(bindings):
        _check_binding(binding, f"bindings[{index}]")
    check_bindings(bindings, (DEFAULT_AGENT, *agents))
    return bindings


def _entry(entry: object, index: int) -> object:
    """A binding entry as YAML gave it, with a numeric chat id or account (``chat_id: -100123``) read as text."""
    if not isinstance(entry, dict):
        return entry
    if "agent" not in entry:
        raise ConfigError(
            f"bindings[{index}].agent", "is required: name the agent that answers the chats this entry matches"
        )
    numeric = ("chat_id", "account")
    return {
        k: str(v) if k in numeric and isinstance(v, int) and not isinstance(v, bool) else v for k, v in entry.items()
    }


def _check_binding(binding: AgentBinding, path: str) -> None:
    for key in ("agent", "platform", "account", "chat_type", "chat_id"):
        value = getattr(binding, key)
        if value is not None and not value.strip():
            raise ConfigError(f"{path}.{key}", "must not be empty; leave the key out to match any")
    if binding.platform is not None and binding.platform not in BINDING_PLATFORMS:
        raise ConfigError(
            f"{path}.platform", f"{binding.platform!r} is not a platform; use one of: {', '.join(BINDING_PLATFORMS)}"
        )
    if binding.chat_type is not None and binding.chat_type not in CHAT_TYPES:
        raise ConfigError(
            f"{path}.chat_type", f"{binding.chat_type!r} is not a chat type; use one of: {', '.join(CHAT_TYPES)}"
        )
    for key in ("account", "chat_id"):
        if getattr(binding, key) is not None and binding.platform is None:
            raise ConfigError(
                f"{path}.{key}",
                f"needs platform: {'an account' if key == 'account' else 'a chat id'} means something on one "
                "platform only; add platform: <name> to the entry",
            )


def with_prompt_file(settings: AgentSettings, home: Path, section: str) -> AgentSettings:
    """``settings`` (the section ``section``) with ``system_prompt_file`` checked readable and made absolute
    (relative paths start at ``home``)."""
    if settings.system_prompt_file is None:
        return settings
    try:
        settings.read_system_prompt(home)
    except ConfigError as exc:
        raise renamed(exc, section) from None
    absolute = Path(settings.system_prompt_file).expanduser()
    if not absolute.is_absolute():
        absolute = (home / absolute).absolute()
    return msgspec.structs.replace(settings, system_prompt_file=str(absolute))


def _sections(agent: AgentSettings, agents: Mapping[str, AgentSettings]) -> list[tuple[str, str, AgentSettings]]:
    """(name, config section, settings) of every agent, the default first."""
    return [(DEFAULT_AGENT, "agent", agent), *((name, f"agents.{name}", s) for name, s in agents.items())]


def _built(settings: AgentSettings, environ: Mapping[str, str], section: str) -> Agent:
    try:
        return build_agent(settings, environ, section=section)
    except ConfigError as exc:
        raise renamed(exc, section) from None
    except ImportError:
        raise ConfigError(
            f"{section}.base_url",
            "needs the openai package, which is not installed; install it with: pip install 'hermes-actors[openai]'",
        ) from None


def build_roster(
    agent: AgentSettings,
    agents: Mapping[str, AgentSettings],
    bindings: tuple[AgentBinding, ...],
    environ: Mapping[str, str],
) -> AgentRoster:
    """Build every agent (``agent`` as ``default``, then ``agents`` in order) and the roster of them with
    ``bindings``; raises the :class:`ConfigError` of the first that cannot be built, naming its section (the ones
    built before it are closed)."""
    built: list[NamedAgent] = []
    try:
        for name, section, settings in _sections(agent, agents):
            entry = NamedAgent(
                name=name, agent=_built(settings, environ, section), context_window=settings.context_window
            )
            built.append(entry)
        return AgentRoster(built, bindings)
    except BaseException:
        for entry in built:
            close = getattr(entry.agent, "close", None)
            if close is not None:
                close()
        raise


def roster_text(agent: AgentSettings, agents: Mapping[str, AgentSettings]) -> str:
    """How the banner and ``hermesctl status`` name the agents: the default's name alone, or each ``name: what``."""
    if not agents:
        return agent_name(agent)
    return "; ".join(f"{name}: {agent_name(settings)}" for name, _, settings in _sections(agent, agents))


@dataclass(frozen=True)
class _HostRoster:
    """Builds the roster on a shard host: pickled with each agent's factory and the bindings, never with agents."""

    factories: tuple[tuple[str, Callable[[], Agent], int | None], ...]
    bindings: tuple[AgentBinding, ...]

    def __call__(self) -> AgentRoster:
        entries = [NamedAgent(name=n, agent=make(), context_window=window) for n, make, window in self.factories]
        return AgentRoster(entries, self.bindings)


def host_roster_factory(
    agent: AgentSettings,
    agents: Mapping[str, AgentSettings],
    bindings: tuple[AgentBinding, ...],
    environ: Mapping[str, str],
) -> Callable[[], AgentRoster]:
    """What a cluster's shard hosts build their roster with: each agent as :func:`host_agent_factory` builds it."""
    factories = tuple(
        (name, host_agent_factory(settings, environ, section=section), settings.context_window)
        for name, section, settings in _sections(agent, agents)
    )
    return _HostRoster(factories, bindings)
