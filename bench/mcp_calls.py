"""What one MCP tool call costs a turn: the median per call, over stdio and over Streamable HTTP.

The test suite's MCP server (``tests/agents/mcp_server.py``, FastMCP) is started over stdio and over HTTP on
127.0.0.1. For each transport three medians are printed, in microseconds per call, measured in alternating blocks
of 100 calls so that a change of the machine's load hits them alike:

- ``*_tool_run_us``: what the agent pays, ``Tool.run`` from a plain thread as the OpenAI agent's tool loop calls it
  (the hop onto the MCP loop thread, the request, the server, the hop back, the result as text);
- ``*_on_loop_us``: the same call awaited on the MCP loop itself (no thread hop);
- ``*_sdk_call_tool_us``: the SDK's own ``ClientSession.call_tool`` on the loop, for comparison (it also checks a
  result's structured content against the tool's output schema, which the link skips).

``local_tool_run_us`` is an in-process tool (no server) for scale, ``loop_round_trip_us`` the thread bridge alone
(a thread hands the loop a coroutine that does nothing and waits for it: what ``run`` adds to ``on_loop``, without
a server's noise), and ``session_start_list_us`` the median of a fresh listing of both servers, which every new
session of an agent with MCP servers waits for. Calls are ``echo`` with a short text (``--tool add`` for ``add``).
The load average at the start and end says how busy the machine was. Prints one ``name: value unit`` line per
figure. A plain script, not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

# Run from a checkout without installing: the repository root goes first, so the working tree is measured.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mcp import ClientSession

from hermes_actors.agents.mcp.hub import McpTools
from hermes_actors.agents.mcp.link import ServerLink
from hermes_actors.agents.mcp.loop import shared_loop
from hermes_actors.agents.mcp.settings import McpServerSettings
from hermes_actors.agents.tools import Tool, find_tool

SERVER = Path(__file__).resolve().parent.parent / "tests" / "agents" / "mcp_server.py"


def figure(name: str, value: float | int | str, unit: str = "", note: str = "") -> None:
    """Print one figure as ``name: value unit (note)``."""
    text = (f"{value:.0f}" if value >= 100 else f"{value:.1f}") if isinstance(value, float) else str(value)
    print(f"{name}: {text}" + (f" {unit}" if unit else "") + (f" ({note})" if note else ""), flush=True)


def timed(call: Callable[[], object], count: int) -> list[float]:
    """Seconds per call of ``call``, ``count`` times, from this thread."""
    samples = []
    for _ in range(count):
        began = time.perf_counter()
        call()
        samples.append(time.perf_counter() - began)
    return samples


def on_loop(call: Callable[[], Coroutine[Any, Any, object]], count: int) -> list[float]:
    """Seconds per awaited ``call()`` on the MCP loop itself (no thread hop), ``count`` times."""

    async def measure() -> list[float]:
        samples = []
        for _ in range(count):
            began = time.perf_counter()
            await call()
            samples.append(time.perf_counter() - began)
        return samples

    return shared_loop().run(measure(), 600)


def measures(
    tool: Tool, link: ServerLink, session: ClientSession, name: str, arguments: dict[str, Any]
) -> dict[str, Callable[[int], list[float]]]:
    """The three ways one call is measured: ``Tool.run`` from this thread, the link's call on the loop, and the
    SDK's ``call_tool`` on the loop."""

    def run(count: int) -> list[float]:
        return timed(lambda: tool.run(arguments), count)

    def loop(count: int) -> list[float]:
        return on_loop(lambda: link.call(name, arguments), count)

    def sdk(count: int) -> list[float]:
        return on_loop(lambda: session.call_tool(name, arguments), count)

    return {"run": run, "loop": loop, "sdk": sdk}


def interleaved(measures: dict[str, Callable[[int], list[float]]], count: int, block: int = 100) -> dict[str, float]:
    """The median of each measure in microseconds, taken in alternating blocks so load changes hit all alike."""
    samples: dict[str, list[float]] = {name: [] for name in measures}
    for measure in measures.values():
        measure(min(20, count))  # warm-up, unmeasured
    done = 0
    while done < count:
        size = min(block, count - done)
        for name, measure in measures.items():
            samples[name].extend(measure(size))
        done += size
    return {name: statistics.median(values) * 1e6 for name, values in samples.items()}


async def _nothing() -> None:
    return None


def start_http() -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "http", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert process.stdout is not None
    port = int(process.stdout.readline().split()[-1])
    return process, f"http://127.0.0.1:{port}/mcp"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls measured per figure")
    parser.add_argument("--tool", choices=["echo", "add"], default="echo")
    options = parser.parse_args(argv)
    arguments: dict[str, Any] = {"text": "hello"} if options.tool == "echo" else {"a": 2, "b": 3}
    figure("load_average_start", f"{os.getloadavg()[0]:.2f}")
    http, url = start_http()
    with tempfile.TemporaryDirectory() as scratch:
        calls = str(Path(scratch) / "calls.jsonl")  # the server records each call, as in the tests
        servers = {
            "stdio": McpServerSettings(command=[sys.executable, str(SERVER), "stdio"], env={"MCP_CALLS": calls}),
            "http": McpServerSettings(url=url),
        }
        hub = McpTools(servers)
        try:
            tools = hub.fresh()
            local = Tool(name="local", description="", parameters={}, handler=lambda args: str(args))
            figure(
                "local_tool_run_us",
                interleaved({"local": lambda n: timed(lambda: local.run(arguments), n)}, options.calls)["local"],
                "us",
            )
            noop = interleaved({"hop": lambda n: timed(lambda: shared_loop().run(_nothing(), 10), n)}, options.calls)
            figure(
                "loop_round_trip_us", noop["hop"], "us", "a thread handing the MCP loop a coroutine that does nothing"
            )
            for name in servers:
                found = find_tool(tools, f"{name}__{options.tool}")
                assert found is not None
                link = hub._links[name]
                session = link._session
                assert session is not None, f"{name} is not up"
                medians = interleaved(measures(found, link, session, options.tool, arguments), options.calls)
                figure(f"{name}_tool_run_us", medians["run"], "us", f"median of {options.calls}")
                figure(f"{name}_on_loop_us", medians["loop"], "us")
                figure(f"{name}_sdk_call_tool_us", medians["sdk"], "us", "the SDK's call_tool, output schema checked")
            listing = interleaved({"fresh": lambda n: timed(hub.fresh, n)}, max(50, options.calls // 20))["fresh"]
            figure("session_start_list_us", listing, "us", "both servers")
        finally:
            hub.close()
            http.kill()
            http.communicate(timeout=10)
    figure("load_average_end", f"{os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
