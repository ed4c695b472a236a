"""What a server's listed tools become for the model: namespaced function tools, filtered by ``allow``/``deny``.

A tool ``read_file`` of the server ``files`` is offered as ``files__read_file``: characters a function name cannot
hold become ``_``, and a name past 64 characters is cut and ends with a short hash of the whole, so it stays unique.
Its description and input schema are the server's (an input schema always says ``type: object``).
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

from mcp import types

from hermes_actors.agents.mcp.settings import NAME_SEPARATOR, McpServerSettings
from hermes_actors.agents.tools import Tool

__all__ = ["MAX_NAME", "is_offered", "offered_tools", "tool_name"]

MAX_NAME = 64  # the longest function name chat-completions endpoints take

_log = logging.getLogger(__name__)
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")

Call = Callable[[str, dict[str, Any]], str]
"""``call(tool, arguments)``: run the server's tool of that (unprefixed) name; the result's text."""


def tool_name(server: str, tool: str) -> str:
    """The name the model calls ``tool`` of ``server`` by."""
    name = f"{server}{NAME_SEPARATOR}{_UNSAFE.sub('_', tool)}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - 9]}_{digest}"


def is_offered(tool: str, settings: McpServerSettings) -> bool:
    """Whether ``settings``' ``allow`` and ``deny`` let the model have the server's tool ``tool``."""
    if settings.allow is not None and not any(fnmatch.fnmatchcase(tool, p) for p in settings.allow):
        return False
    return not any(fnmatch.fnmatchcase(tool, pattern) for pattern in settings.deny)


def offered_tools(
    server: str, settings: McpServerSettings, listed: Sequence[types.Tool], call: Call
) -> tuple[Tool, ...]:
    """The tools of ``listed`` the model is offered, in the server's order, each run through ``call``; a tool whose
    offered name another one took already is left out (logged)."""
    tools: list[Tool] = []
    names: set[str] = set()
    for tool in listed:
        if not is_offered(tool.name, settings):
            continue
        name = tool_name(server, tool.name)
        if name in names:
            _log.warning("MCP server %s: tool %r is offered as %s, like another one; left out", server, tool.name, name)
            continue
        names.add(name)
        description = tool.description or tool.title or f"The {tool.name} tool of the MCP server {server}."
        handler = functools.partial(call, tool.name)
        tools.append(
            Tool(
                name=name,
                description=description,
                parameters=_parameters(tool.inputSchema),
                handler=handler,
                needs_approval=settings.requires_approval(tool.name),
            )
        )
    return tuple(tools)


def _parameters(schema: dict[str, Any]) -> dict[str, Any]:
    """The input schema as a function's parameters: an object, with properties (empty when it names none)."""
    parameters = dict(schema)
    parameters.setdefault("type", "object")
    parameters.setdefault("properties", {})
    return parameters
