"""The agent the ``agent`` section names: the echo agent, or an OpenAI-compatible endpoint when ``base_url`` is set.

``hermesd`` builds one for its gateway; ``hermesctl chat --local`` builds the same for its in-process gateway.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

import msgspec

from hermes_actors.agents.base import Agent
from hermes_actors.agents.echo import EchoAgent
from hermes_actors.daemon.agent_settings import AgentSettings

__all__ = ["agent_name", "build_agent", "host_agent_factory"]


def build_agent(settings: AgentSettings, environ: Mapping[str, str]) -> Agent:
    """The echo agent, or an OpenAI-compatible client when ``agent.base_url`` is set, with the configured system
    prompt (raises :class:`~hermes_actors.errors.ConfigError` when ``agent.system_prompt_file`` cannot be read)."""
    prompt = settings.read_system_prompt()  # load_settings made a system_prompt_file path absolute
    if settings.uses_echo:
        return EchoAgent(system_prompt=prompt)
    from hermes_actors.agents.openai_chat import OpenAIAgent  # needs the openai extra, so only when asked for

    assert settings.base_url is not None  # checked by AgentSettings
    assert settings.model is not None
    return OpenAIAgent(
        base_url=settings.base_url,
        model=settings.model,
        api_key=environ.get(settings.api_key_env),
        api_key_env=settings.api_key_env,
        timeout_s=settings.timeout_s,
        max_retries=settings.max_retries,
        temperature=settings.temperature,
        vision=settings.vision,
        system_prompt=prompt,
    )


def host_agent_factory(settings: AgentSettings, environ: Mapping[str, str]) -> Callable[[], Agent]:
    """What a cluster's shard hosts build their agent with (in their own processes, maybe on other machines): the
    settings with the system prompt's text read here, and only the agent's key from this environment."""
    frozen = msgspec.structs.replace(settings, system_prompt=settings.read_system_prompt(), system_prompt_file=None)
    key = environ.get(settings.api_key_env)
    return functools.partial(build_agent, frozen, {settings.api_key_env: key} if key is not None else {})


def agent_name(settings: AgentSettings) -> str:
    """How the banner and ``hermesctl status`` name the agent."""
    return "echo" if settings.uses_echo else f"{settings.model} at {settings.base_url}"
