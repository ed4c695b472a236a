"""An MCP server for the tests, written with the SDK's FastMCP: ``python mcp_server.py stdio`` or
``python mcp_server.py http [PORT]`` (Streamable HTTP on 127.0.0.1, printing ``listening on PORT`` once it does).

Every call is appended as a JSON line (tool, arguments, pid) to the file ``$MCP_CALLS`` names, so a test sees what
the server itself received. A stdio server refuses to start (exit 3) while the file ``$MCP_REFUSE`` names exists.
Tools: ``add``, ``echo``, ``whoami`` (pid and the Authorization header of an HTTP call), ``fail`` (raises), ``crash``
(the process exits mid-call), ``slow`` (sleeps), ``learn`` (adds a tool named by its argument) and ``drop_tables``
(for deny lists).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from mcp.server.fastmcp import Context, FastMCP

server = FastMCP("hermes-test", log_level="WARNING")


def _record(tool: str, **arguments: Any) -> None:
    calls = os.environ.get("MCP_CALLS")
    if calls:
        line = json.dumps({"tool": tool, "arguments": arguments, "pid": os.getpid(), "at": time.time()})
        with Path(calls).open("a", encoding="utf-8") as file:
            file.write(line + "\n")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    _record("add", a=a, b=b)
    return a + b


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    _record("echo", text=text)
    return text


@server.tool()
def whoami(ctx: Context[Any, Any, Any]) -> str:
    """The server's process id and the Authorization header the call came with."""
    _record("whoami")
    request = ctx.request_context.request
    authorization = request.headers.get("authorization") if request is not None else None
    return json.dumps({"pid": os.getpid(), "authorization": authorization})


@server.tool()
def fail(reason: str) -> str:
    """Fail with the reason."""
    _record("fail", reason=reason)
    raise ValueError(reason)


@server.tool()
def crash() -> str:
    """Exit the process in the middle of the call."""
    _record("crash")
    os._exit(7)


@server.tool()
async def slow(seconds: float) -> str:
    """Answer after some seconds."""
    _record("slow", seconds=seconds)
    await anyio.sleep(seconds)
    return "slept"


@server.tool()
def learn(name: str) -> str:
    """Offer a new tool called ``name`` from now on."""
    _record("learn", name=name)

    def learned() -> str:
        _record(name)
        return f"{name} ran"

    server.add_tool(learned, name=name, description=f"The learned tool {name}.")
    return f"learned {name}"


@server.tool()
def drop_tables() -> str:
    """Something an operator denies."""
    _record("drop_tables")
    return "dropped"


def _serve_http(port: int) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning", lifespan="on")
    http = uvicorn.Server(config)
    print(f"listening on {sock.getsockname()[1]}", flush=True)
    http.run(sockets=[sock])


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "http":
        _serve_http(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
        return
    refuse = os.environ.get("MCP_REFUSE")
    if refuse and Path(refuse).exists():
        print("refusing to start: the refuse file exists", file=sys.stderr)
        sys.exit(3)
    server.run("stdio")


if __name__ == "__main__":
    main()
