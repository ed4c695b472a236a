"""Real MCP servers for the tests (``tests/agents/mcp_server.py``, written with the SDK): their settings for a stdio
server, a Streamable HTTP one on 127.0.0.1 in a subprocess that can be stopped and started again on its port, and
the calls each one received."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hermes_actors.agents.mcp.settings import McpServerSettings

__all__ = ["SERVER", "HttpServer", "http_server", "received", "stdio_command", "stdio_server"]

SERVER = Path(__file__).with_name("mcp_server.py")


def stdio_command() -> list[str]:
    """The argv of the test server over stdio."""
    return [sys.executable, str(SERVER), "stdio"]


def stdio_server(calls: Path, *, refuse: Path | None = None, **settings: Any) -> McpServerSettings:
    """The test server over stdio, recording its calls in ``calls`` (and refusing to start while ``refuse``
    exists)."""
    env = {"MCP_CALLS": str(calls)}
    if refuse is not None:
        env["MCP_REFUSE"] = str(refuse)
    return McpServerSettings(command=stdio_command(), env=env, **settings)


def received(calls: Path) -> list[dict[str, Any]]:
    """The calls a test server recorded in ``calls``, oldest first."""
    if not calls.exists():
        return []
    return [json.loads(line) for line in calls.read_text(encoding="utf-8").splitlines() if line.strip()]


class HttpServer:
    """The test server over Streamable HTTP on 127.0.0.1, in a subprocess."""

    def __init__(self, calls: Path) -> None:
        self.calls = calls
        self.port = 0
        self._process: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        """Its MCP endpoint."""
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        """Start serving (on the port it had before, if any); returns once it listens."""
        process = subprocess.Popen(
            [sys.executable, str(SERVER), "http", str(self.port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={"PATH": "/usr/bin:/bin", "MCP_CALLS": str(self.calls)},
        )
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("listening on "):
            process.kill()
            process.communicate(timeout=10)
            raise AssertionError(f"the MCP test server did not start: {line!r}")
        self.port = int(line.split()[-1])
        self._process = process

    def stop(self) -> None:
        """Kill it (as a crash would) and wait until it is gone."""
        if self._process is not None:
            self._process.kill()
            self._process.communicate(timeout=10)
            self._process = None


@contextmanager
def http_server(calls: Path) -> Iterator[HttpServer]:
    """A running :class:`HttpServer`, always stopped at the end."""
    server = HttpServer(calls)
    server.start()
    try:
        yield server
    finally:
        server.stop()
