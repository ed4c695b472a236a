"""``/mcp`` of a real ``hermesd`` (the echo agent), driven with the MCP SDK's client: a turn sent over MCP streams
as progress and is found by the search tool with the client key; the admin key (``$HERMES_HOME/admin_key``) sees
the session too."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client

from tests.daemon.test_daemon import Daemon, config, start_daemon

pytestmark = pytest.mark.slow

KEY = "sk-mcp-daemon-key"


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    home = tmp_path / "h"
    home.mkdir()
    keyed = config().replace("  api_server:\n    port: 0\n", f"  api_server:\n    port: 0\n    key: {KEY}\n", 1)
    assert KEY in keyed
    (home / "config.yaml").write_text(keyed + "runtime:\n  auto_titles: false\n")
    process = start_daemon(home)
    try:
        yield Daemon(home, process)
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=10)


async def _calls(url: str, key: str, calls: list[tuple[str, dict[str, Any]]], told: list[str]) -> list[Any]:
    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        told.append(message or "")

    answers: list[Any] = []
    async with (
        httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as client,
        streamable_http_client(url, http_client=client) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        for name, arguments in calls:
            result = await session.call_tool(name, arguments, progress_callback=on_progress)
            assert not result.isError, (name, result.content)
            assert isinstance(result.content[0], types.TextContent)
            answers.append(result.structuredContent)
    return answers


def test_a_turn_over_mcp_is_streamed_searched_and_seen_by_the_admin(daemon: Daemon) -> None:
    url = daemon.api + "/mcp"
    told: list[str] = []
    sent, found = asyncio.run(
        _calls(
            url,
            KEY,
            [("session_send", {"message": "the quokka report"}), ("session_search", {"query": "quokka"})],
            told,
        )
    )
    assert sent["reply"] == "echo: the quokka report"
    assert "".join(told) == "echo: the quokka report"
    assert [hit["session_id"] for hit in found["hits"]] == [sent["session_id"]]
    admin = (daemon.home / "admin_key").read_text().strip()
    (listed,) = asyncio.run(_calls(url, admin, [("sessions_list", {})], []))
    assert sent["session_id"] in [row["tip"]["id"] for row in listed["data"]]
    code, _, err = daemon.stop()
    assert code == 0, err
    assert "Traceback" not in err
