"""The ``mcp_servers`` of an agent's section: the MCP servers whose tools its sessions offer.

``agent.mcp_servers.<name>`` is one server: ``{command: [argv...], env: {...}}`` for a server this process starts and
talks to over stdio, or ``{url: ..., headers_env: {...}}`` for a Streamable HTTP server. Its tools reach the model as
``<name>__<tool>``, so a name is letters, digits, ``-`` and single ``_`` (at most 32 characters).
"""

from __future__ import annotations

import fnmatch
import re
import shutil
from collections.abc import Mapping
from typing import Annotated

import msgspec

from hermes_actors.errors import ConfigError

__all__ = ["NAME_SEPARATOR", "McpServerSettings", "check_program", "check_servers", "headers_of"]

NAME_SEPARATOR = "__"  # between a server's name and its tool's: files__read_file

_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_)){0,31}$")
_HEADER = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP token
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

Seconds = Annotated[float, msgspec.Meta(gt=0)]


class McpServerSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One MCP server: ``command`` or ``url``, never both.

    ``command`` is the argv of a stdio server, started once per process (with the first session that needs its
    tools) and started again when it dies; ``env`` adds variables to the few it inherits (``HOME``, ``PATH``,
    ``USER`` ...) and ``cwd`` is its working directory. ``url`` is a Streamable HTTP endpoint; ``headers_env`` maps a
    request header to the environment variable holding its value (``Authorization: MCP_TOKEN``), read when the agent
    is built. ``allow`` and ``deny`` hold tool names or shell patterns (``read_*``): with ``allow`` only the tools it
    matches are offered, and never a tool ``deny`` matches. ``timeout_s`` bounds each tool call; ``start_timeout_s``
    bounds a start (connect, initialise, list the tools) and each listing when a session starts.
    ``require_approval`` makes calls wait for a person's decision before they run: ``true`` for every tool of the
    server, or a list of tool names or shell patterns (``delete_*``).
    """

    command: list[str] | None = None
    env: dict[str, str] = {}
    cwd: str | None = None
    url: str | None = None
    headers_env: dict[str, str] = {}
    allow: list[str] | None = None
    deny: list[str] = []
    timeout_s: Seconds = 30.0
    start_timeout_s: Seconds = 10.0
    require_approval: bool | list[str] = False

    def requires_approval(self, tool: str) -> bool:
        """Whether calls of the server's tool ``tool`` wait for a person's approval (``require_approval``)."""
        if isinstance(self.require_approval, bool):
            return self.require_approval
        return any(fnmatch.fnmatchcase(tool, pattern) for pattern in self.require_approval)

    @property
    def transport(self) -> str:
        """``stdio`` or ``http``."""
        return "stdio" if self.command is not None else "http"

    @property
    def target(self) -> str:
        """What it runs or reaches, for log lines: the command line, or the URL."""
        return " ".join(self.command) if self.command is not None else str(self.url)


def check_servers(servers: Mapping[str, McpServerSettings], where: str = "agent.mcp_servers") -> None:
    """Raise :class:`ConfigError` naming the key (under ``where``) of the first server that cannot work: a name that
    cannot prefix tool names, neither or both of ``command`` and ``url``, an empty command, a URL that is not
    http(s), a header or variable name that is not one, a key of the other transport."""
    for name, server in servers.items():
        key = f"{where}.{name}"
        if not _NAME.match(name):
            raise ConfigError(
                key,
                "is not a usable server name: it prefixes its tools' names (<server>__<tool>), so use letters, "
                "digits, '-' and single '_', at most 32 characters, such as 'files' or 'web-search'",
            )
        if (server.command is None) == (server.url is None):
            raise ConfigError(
                key,
                "needs either command (the argv of a stdio server, such as [npx, -y, some-mcp-server]) or url "
                "(a Streamable HTTP endpoint such as http://127.0.0.1:8931/mcp), not both and not neither",
            )
        if server.command is not None:
            _check_stdio(server, key)
        else:
            _check_http(server, key)


def _check_stdio(server: McpServerSettings, key: str) -> None:
    assert server.command is not None
    if not server.command or not server.command[0].strip():
        raise ConfigError(f"{key}.command", "must name the program to start, such as [uvx, mcp-server-fetch]")
    if server.headers_env:
        raise ConfigError(f"{key}.headers_env", "applies to url servers only; a stdio server takes env")
    for variable in server.env:
        if not _VARIABLE.match(variable):
            raise ConfigError(f"{key}.env.{variable}", "is not an environment variable name (letters, digits, _)")


def _check_http(server: McpServerSettings, key: str) -> None:
    assert server.url is not None
    if not re.match(r"^https?://[^/\s]+", server.url):
        raise ConfigError(f"{key}.url", "must be an http:// or https:// URL such as http://127.0.0.1:8931/mcp")
    if server.env or server.cwd is not None:
        raise ConfigError(f"{key}.env", "env and cwd apply to command servers only; a url server takes headers_env")
    for header, variable in server.headers_env.items():
        if not _HEADER.match(header):
            raise ConfigError(f"{key}.headers_env.{header}", "is not an HTTP header name")
        if not _VARIABLE.match(variable):
            raise ConfigError(
                f"{key}.headers_env.{header}",
                f"must name the environment variable holding the header's value, not {variable!r}",
            )


def check_program(server: McpServerSettings, key: str) -> None:
    """Raise :class:`ConfigError` naming the key when a stdio server's program is neither an executable file nor
    on ``PATH`` (its own ``env.PATH`` when it sets one), as the process would start it."""
    if server.command is None:
        return
    program = server.command[0]
    if shutil.which(program, path=server.env.get("PATH")) is None:
        raise ConfigError(
            f"{key}.command",
            f"names {program!r}, which is not an executable file or on PATH; install it or give its absolute path",
        )


def headers_of(server: McpServerSettings, environ: Mapping[str, str], key: str) -> dict[str, str]:
    """The request headers of a url server, their values read from ``environ``; raise :class:`ConfigError` naming the
    key for a variable that is not set."""
    headers: dict[str, str] = {}
    for header, variable in server.headers_env.items():
        value = environ.get(variable)
        if not value:
            raise ConfigError(
                f"{key}.headers_env.{header}",
                f"reads the environment variable {variable}, which is not set; export it for hermesd, or remove the "
                "header",
            )
        headers[header] = value
    return headers
