"""The agent the ``agent`` section names: the echo agent, an OpenAI-compatible endpoint when ``base_url`` is set,
or a plug-in agent when ``factory`` is (:mod:`hermes_actors.agents.factory`).

``hermesd`` builds one for its gateway; ``hermesctl chat --local`` builds the same for its in-process gateway, and
a cluster's shard hosts build theirs from the same settings (:func:`host_agent_factory`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import msgspec

from hermes_actors.agents.approvals import require_approvals
from hermes_actors.agents.base import Agent
from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.factory import AgentContext, build_plugin_agent
from hermes_actors.agents.mcp import attach_mcp_tools
from hermes_actors.daemon.agent_settings import AgentSettings

__all__ = ["agent_name", "build_agent", "host_agent_factory"]


def build_agent(settings: AgentSettings, environ: Mapping[str, str], *, section: str = "agent") -> Agent:
    """The agent ``settings`` (the config section ``section``) names, with the configured system prompt: the echo
    agent, an OpenAI-compatible client when ``base_url`` is set, or what ``factory`` builds from an
    :class:`AgentContext` holding ``environ``; its sessions offer the tools of its ``mcp_servers`` and hold the calls
    ``approvals`` names for a person's decision. Raises
    :class:`~hermes_actors.errors.ConfigError` when ``system_prompt_file`` cannot be read, the factory cannot be
    loaded or built, or an MCP server cannot be set up (:func:`~hermes_actors.agents.mcp.attach_mcp_tools`)."""
    agent = _built(settings, environ, section)
    attach_mcp_tools(agent, settings.mcp_servers, environ, where=f"{section}.mcp_servers")
    require_approvals(agent, settings.approvals)
    return agent


def _built(settings: AgentSettings, environ: Mapping[str, str], section: str) -> Agent:
    prompt = settings.read_system_prompt()  # load_settings made a system_prompt_file path absolute
    if settings.factory is not None:
        context = AgentContext(
            system_prompt=prompt,
            model=settings.model,
            options=settings.options,
            context_window=settings.context_window,
            environ=environ,
            section=section,
        )
        return build_plugin_agent(settings.factory, context)
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


@dataclass(frozen=True)
class _HostAgent:
    """Builds the agent on a shard host: pickled with the settings, never with an agent."""

    settings: AgentSettings
    carried: Mapping[str, str]  # what of the daemon's environment the agent needs (the endpoint's key)
    section: str

    def __call__(self) -> Agent:
        # A plug-in reads its secrets from the environment of the process it runs in: the host's (with what was
        # carried from the daemon, its MCP servers' header values).
        environ = {**os.environ, **self.carried} if self.settings.factory is not None else self.carried
        return build_agent(self.settings, environ, section=self.section)


def host_agent_factory(
    settings: AgentSettings, environ: Mapping[str, str], *, section: str = "agent"
) -> Callable[[], Agent]:
    """What a cluster's shard hosts build their agent with (in their own processes, maybe on other machines): the
    settings with the system prompt's text read here, and only the endpoint's key from this environment (a
    plug-in agent's factory, which must be importable on the hosts, gets the host's environment)."""
    frozen = msgspec.structs.replace(settings, system_prompt=settings.read_system_prompt(), system_prompt_file=None)
    key = environ.get(settings.api_key_env) if settings.factory is None else None
    carried = {settings.api_key_env: key} if key is not None else {}
    headers = {name for server in settings.mcp_servers.values() for name in server.headers_env.values()}
    carried |= {name: environ[name] for name in headers if name in environ}  # the MCP servers' header values
    return _HostAgent(frozen, carried, section)


def agent_name(settings: AgentSettings) -> str:
    """How the banner and ``hermesctl status`` name the agent."""
    if settings.factory is not None:
        return f"{settings.factory} (plug-in{f', model {settings.model}' if settings.model else ''})"
    return "echo" if settings.uses_echo else f"{settings.model} at {settings.base_url}"
