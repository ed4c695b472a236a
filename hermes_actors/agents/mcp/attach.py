"""Giving an agent the tools of its MCP servers, where the agent is built."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from hermes_actors.agents.mcp.settings import McpServerSettings, check_program, headers_of
from hermes_actors.agents.tools import offer_tools
from hermes_actors.errors import ConfigError

if TYPE_CHECKING:
    from hermes_actors.agents.mcp.hub import McpTools

__all__ = ["attach_mcp_tools"]


def attach_mcp_tools(
    agent: object,
    servers: Mapping[str, McpServerSettings],
    environ: Mapping[str, str],
    *,
    where: str = "agent.mcp_servers",
) -> McpTools | None:
    """Have every session of ``agent`` offer the tools of ``servers`` (the section at ``where``); their
    :class:`~hermes_actors.agents.mcp.hub.McpTools`, or ``None`` without servers. Nothing starts here; raises
    :class:`ConfigError` naming the key for a stdio program that cannot be found, a header whose environment
    variable is not set, or a missing ``mcp`` package."""
    if not servers:
        return None
    headers = {}
    for name, server in servers.items():
        check_program(server, f"{where}.{name}")
        headers[name] = headers_of(server, environ, f"{where}.{name}")
    try:
        from hermes_actors.agents.mcp.hub import McpTools  # the mcp SDK: only when servers are configured
    except ImportError as exc:
        raise ConfigError(
            where,
            f"needs the mcp package, which cannot be imported ({exc}); "
            "install it with: pip install 'hermes-actors[mcp]'",
        ) from None
    source = McpTools(servers, headers)
    offer_tools(agent, source)
    return source
