"""The tools of an agent's MCP servers, as its sessions take them: a :class:`~hermes_actors.agents.tools.ToolSource`.

:class:`McpTools` holds one :class:`~hermes_actors.agents.mcp.link.ServerLink` per configured server (shared with any
other agent of the process configured with the same server) and answers the runtime's threads: :meth:`McpTools.fresh`
lists every server's tools when a session starts (servers start with the first session; one that is starting is
waited for, within its ``start_timeout_s``), :meth:`McpTools.current` gives the tools as last listed, and
:meth:`McpTools.health` each server's state. A tool's handler runs its call on the MCP loop and waits for it within
the server's ``timeout_s``; whatever goes wrong comes back as an error result, never as an exception.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Hashable, Mapping
from typing import Any

import msgspec
from mcp import types

from hermes_actors.agents.mcp.catalog import Call, offered_tools
from hermes_actors.agents.mcp.link import ServerLink
from hermes_actors.agents.mcp.loop import McpLoop, shared_loop
from hermes_actors.agents.mcp.settings import NAME_SEPARATOR, McpServerSettings
from hermes_actors.agents.tools import Tool, error_json
from hermes_actors.messages import ToolServerHealth, ToolServerState

__all__ = ["McpTools"]

_log = logging.getLogger(__name__)

_GRACE_S = 2.0  # past a call's own bound, before the calling thread stops waiting for the loop


class McpTools:
    """The tools of ``servers`` (by name), each url server sending its ``headers`` (by server name). Thread-safe.

    Nothing starts until tools are first asked for. :meth:`close` ends this agent's use of its servers (a server no
    other agent uses is stopped); the process's exit closes whatever is left.
    """

    def __init__(
        self,
        servers: Mapping[str, McpServerSettings],
        headers: Mapping[str, Mapping[str, str]] | None = None,
        *,
        loop: McpLoop | None = None,
    ) -> None:
        self._loop = loop if loop is not None else shared_loop()
        self._keys: dict[str, Hashable] = {}
        self._links: dict[str, ServerLink] = {}
        for name, settings in servers.items():
            sent = dict((headers or {}).get(name, {}))
            key = (name, msgspec.json.encode(settings), tuple(sorted(sent.items())))
            self._keys[name] = key
            self._links[name] = self._loop.keep(key, functools.partial(ServerLink, name, settings, sent))
        self._lock = threading.Lock()
        self._built: dict[str, tuple[tuple[types.Tool, ...], tuple[Tool, ...]]] = {}

    def __repr__(self) -> str:
        return f"McpTools({', '.join(self._links)})"

    def fresh(self) -> tuple[Tool, ...]:
        """Every server's tools as it lists them now, in configuration order; the last known list of a server that
        is down or does not answer within its ``start_timeout_s``."""
        if not self._links:
            return ()
        bound = max(link.settings.start_timeout_s for link in self._links.values()) + _GRACE_S
        try:
            self._loop.run(self._refresh(), bound)
        except TimeoutError:
            _log.warning("MCP servers did not list their tools within %.0f s; offering what they listed last", bound)
        return self._tools()

    async def _refresh(self) -> None:
        await asyncio.gather(*(link.refresh() for link in self._links.values()))

    def current(self) -> tuple[Tool, ...]:
        """Every server's tools as last listed (a server not started yet is started, without waiting for it)."""
        for link in self._links.values():
            if link.state is ToolServerState.IDLE:
                self._loop.soon(link.start)
        return self._tools()

    def health(self) -> list[ToolServerHealth]:
        """Each server's state, in configuration order."""
        return [
            ToolServerHealth(
                name=name,
                transport=link.settings.transport,
                state=link.state,
                tools=len(self._offered(name, link)),
                restarts=link.restarts,
                calls=link.calls,
                failures=link.failures,
                last_error=link.last_error,
            )
            for name, link in self._links.items()
        ]

    def close(self, timeout: float = 10.0) -> None:
        """End this agent's use of its servers, stopping those no other agent uses (within ``timeout`` seconds)."""
        closing = [link for link in (self._loop.release(key) for key in self._keys.values()) if link is not None]
        self._keys.clear()
        if not closing:
            return

        async def close_all() -> None:
            await asyncio.gather(*(link.aclose() for link in closing), return_exceptions=True)

        try:
            self._loop.run(close_all(), timeout)
        except TimeoutError:
            _log.warning("MCP servers %s not closed within %.0f s", ", ".join(link.name for link in closing), timeout)

    def _tools(self) -> tuple[Tool, ...]:
        return tuple(tool for name, link in self._links.items() for tool in self._offered(name, link))

    def _offered(self, name: str, link: ServerLink) -> tuple[Tool, ...]:
        """The tools ``link`` listed last as offered to the model, built again only when the list changed."""
        listed = link.listed
        with self._lock:
            built = self._built.get(name)
        if built is not None and (built[0] is listed or built[0] == listed):
            if built[0] is not listed:  # listed again, unchanged: the same tools (and frozen bytes) as before
                with self._lock:
                    self._built[name] = (listed, built[1])
            return built[1]
        tools = offered_tools(name, link.settings, listed, self._caller(link))
        with self._lock:
            self._built[name] = (listed, tools)
        return tools

    def _caller(self, link: ServerLink) -> Call:
        def call(tool: str, arguments: dict[str, Any]) -> str:
            bound = link.settings.timeout_s + _GRACE_S
            try:
                return self._loop.run(link.call(tool, arguments), bound)
            except TimeoutError:
                self._loop.soon(link.count_failure)  # the link's counters change on the loop's thread only
                return error_json(
                    f"{link.name}{NAME_SEPARATOR}{tool} gave no result within {bound:g} s; answer without it"
                )

        return call
