"""The ``session_search`` tool of ``/mcp`` on a large store: latency per call through the MCP SDK's client.

Builds (or reuses) bench/search.py's database of ``--messages`` messages (default 200,000), copies it, starts a
gateway and an API server on 127.0.0.1 over the copy, and calls ``session_search`` through the SDK's
``ClientSession`` over Streamable HTTP with bench/search.py's discovery queries (rare and common terms of every
query kind), ``--repeats`` times each after a warm-up pass. Two callers: the admin key (every session) and the
client key (the API's sessions of a server without a key: about a sixth of the corpus). For scale, the same
queries run in process (``session_search`` on a read-only store, no HTTP, no MCP). Prints one
``name: value unit`` line per figure: median, p95 and max per call, in milliseconds. A plain script, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

# Run from a checkout without installing: the repository root goes first, so the working tree is measured.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from corpus import DEFAULT_SEED
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from search import COMMON_QUERIES, KINDS, figure, open_or_build, percentile, rare_queries

from hermes_actors.agents.base import EchoAgent
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.search import session_search
from hermes_actors.store import SessionFilter, Store
from platforms.api_server import ApiServer, ApiServerConfig

DEFAULT_MESSAGES = 200_000
ADMIN = "hk-bench-admin"


def queries(path: Path, messages: int, seed: int) -> list[str]:
    """bench/search.py's discovery queries for the database at ``path``: rare and common, every kind."""
    planted = open_or_build(path, messages, seed)
    with Store.open(path, readonly=True) as store:
        rare = rare_queries(store, planted, random.Random(seed ^ 0x5E4C))
    return [q for kind in KINDS for q in (*rare[kind], *COMMON_QUERIES[kind])]


async def time_tool(url: str, key: str | None, chosen: Sequence[str], repeats: int) -> list[float]:
    """Seconds per ``session_search`` call, each query ``repeats`` times after one untimed pass."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    seconds: list[float] = []
    async with (
        httpx.AsyncClient(headers=headers, timeout=60) as client,
        streamable_http_client(url, http_client=client) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        for rounds in range(repeats + 1):
            for query in chosen:
                started = time.perf_counter()
                result = await session.call_tool("session_search", {"query": query})
                elapsed = time.perf_counter() - started
                if result.isError:
                    raise SystemExit(f"session_search {query!r} failed: {result.content}")
                if rounds:
                    seconds.append(elapsed)
    return seconds


def time_in_process(path: Path, chosen: Sequence[str], repeats: int, visible: SessionFilter | None) -> list[float]:
    seconds: list[float] = []
    with Store.open(path, readonly=True) as store:
        for rounds in range(repeats + 1):
            for query in chosen:
                started = time.perf_counter()
                session_search(store, query=query, visible=visible)
                if rounds:
                    seconds.append(time.perf_counter() - started)
    return seconds


def report(name: str, seconds: Sequence[float], note: str = "") -> None:
    figure(f"{name}_median", statistics.median(seconds) * 1e3, "ms", note)
    figure(f"{name}_p95", percentile(seconds, 0.95) * 1e3, "ms")
    figure(f"{name}_max", max(seconds) * 1e3, "ms")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    figure("load_average_start", " ".join(f"{x:.2f}" for x in os.getloadavg()), note="1, 5, 15 min")
    source = Path(args.db or f"/tmp/hermes-bench-search-{args.messages}.db")
    chosen = queries(source, args.messages, args.seed)
    note = f"{len(chosen)} queries x {args.repeats}"
    with tempfile.TemporaryDirectory(prefix="hermes-bench-mcp-") as scratch:
        path = Path(scratch) / "state.db"
        shutil.copyfile(source, path)  # the gateway writes to its store: bench/search.py's stays as it was built
        server = ApiServer(ApiServerConfig(port=0), environ={})
        gateway = Gateway(path, agent=EchoAgent(), senders=server.senders())
        try:
            server.start(GatewayInbox(gateway, admin_key=ADMIN))
            url = server.url + "/mcp"
            admin = asyncio.run(time_tool(url, ADMIN, chosen, args.repeats))
            client = asyncio.run(time_tool(url, None, chosen, args.repeats))
        finally:
            server.stop(10)
            gateway.stop(10)
        local = time_in_process(path, chosen, args.repeats, None)
        scoped = SessionFilter(source="api_server", scope_id=None)
        local_scoped = time_in_process(path, chosen, args.repeats, scoped)
    report("mcp_admin", admin, f"{note}, every session, over Streamable HTTP")
    report("mcp_client_key", client, f"{note}, the key's sessions, over Streamable HTTP")
    report("in_process", local, "session_search on a read-only store, every session")
    report("in_process_scoped", local_scoped, "the client key's scope")
    figure("load_average_end", " ".join(f"{x:.2f}" for x in os.getloadavg()), note="1, 5, 15 min")
    return 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=DEFAULT_MESSAGES, help="corpus size (default 200000)")
    parser.add_argument("--db", help="bench/search.py's database to reuse or build (a copy is served)")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per query (default 3)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="corpus seed (bench/search.py's default)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
