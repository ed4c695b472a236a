"""MCP tools: the tools of the MCP servers an agent's section names, offered by every session of that agent.

``agent.mcp_servers.<name>`` is ``{command: [argv...], env: {...}}`` for a stdio server or ``{url: ...,
headers_env: {...}}`` for a Streamable HTTP one (:class:`McpServerSettings`); :func:`attach_mcp_tools` (called where
the agent is built) gives the agent an :class:`~hermes_actors.agents.mcp.hub.McpTools` over them. A session lists
the tools when it starts and freezes them with its system message (the same tool bytes for its whole life; a
server's new tools reach new sessions), named ``<server>__<tool>`` and filtered by each server's ``allow`` and
``deny``. Each call is bounded by the server's ``timeout_s``; a server that is down and a tool that fails give the
model an error result, never a failed turn. Servers start with the first session that needs them, once per process,
and a stdio server that dies is started again. Their states are in ``/health/detailed`` and ``hermesctl status``.

The official ``mcp`` SDK (the ``mcp`` extra) runs the clients, on one event loop thread per process
(:mod:`~hermes_actors.agents.mcp.loop`); only :func:`attach_mcp_tools` with servers configured imports it.
"""

from __future__ import annotations

from hermes_actors.agents.mcp.attach import attach_mcp_tools
from hermes_actors.agents.mcp.settings import McpServerSettings

__all__ = ["McpServerSettings", "attach_mcp_tools"]
