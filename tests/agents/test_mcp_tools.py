"""The tools of real MCP servers (stdio and Streamable HTTP on 127.0.0.1, written with the SDK) through
:class:`McpTools`: listing, namespacing, allow and deny, calls seen by the server, failures as error results, a
server that dies and is started again, timeouts, and the servers' states."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from hermes_actors.agents.mcp.hub import McpTools
from hermes_actors.agents.mcp.settings import McpServerSettings
from hermes_actors.agents.tools import Tool, find_tool
from hermes_actors.messages import ToolServerState
from hermes_actors.testing import poll_until
from tests.agents.mcp_fixtures import http_server, received, stdio_server

pytestmark = pytest.mark.slow  # each test starts MCP server processes

TOOLS = ["add", "echo", "whoami", "fail", "crash", "slow", "learn", "drop_tables"]


@pytest.fixture
def calls(tmp_path: Path) -> Path:
    return tmp_path / "calls.jsonl"


@pytest.fixture
def open_tools() -> Iterator[list[McpTools]]:
    """Hubs made by a test, closed at its end (their servers stop)."""
    made: list[McpTools] = []
    yield made
    for hub in made:
        hub.close()


def hub_of(made: list[McpTools], servers: Mapping[str, McpServerSettings], **headers: dict[str, str]) -> McpTools:
    hub = McpTools(servers, headers)
    made.append(hub)
    return hub


def tool(tools: tuple[Tool, ...], name: str) -> Tool:
    found = find_tool(tools, name)
    assert found is not None, f"{name} not in {[t.name for t in tools]}"
    return found


def state(hub: McpTools, server: str) -> ToolServerState:
    return next(h.state for h in hub.health() if h.name == server)


def test_a_stdio_servers_tools_are_offered_namespaced_and_a_call_reaches_the_server(
    calls: Path, open_tools: list[McpTools]
) -> None:
    hub = hub_of(open_tools, {"calc": stdio_server(calls)})
    assert [h.state for h in hub.health()] == [ToolServerState.IDLE]  # nothing starts before a session asks
    tools = hub.fresh()
    assert [t.name for t in tools] == [f"calc__{name}" for name in TOOLS]
    add = tool(tools, "calc__add")
    assert add.description == "Add two integers."
    assert add.parameters["properties"].keys() == {"a", "b"}
    assert add.run({"a": 2, "b": 3}) == "5"
    assert [(c["tool"], c["arguments"]) for c in received(calls)] == [("add", {"a": 2, "b": 3})]
    (health,) = hub.health()
    assert (health.state, health.transport, health.tools, health.calls, health.failures) == (
        ToolServerState.UP,
        "stdio",
        len(TOOLS),
        1,
        0,
    )


def test_allow_and_deny_choose_the_tools_offered(calls: Path, open_tools: list[McpTools]) -> None:
    server = stdio_server(calls, allow=["add", "echo", "drop_*"], deny=["drop_*"])
    hub = hub_of(open_tools, {"calc": server})
    assert [t.name for t in hub.fresh()] == ["calc__add", "calc__echo"]
    assert hub.health()[0].tools == 2


def test_a_failing_tool_and_a_bad_argument_give_error_results(calls: Path, open_tools: list[McpTools]) -> None:
    tools = hub_of(open_tools, {"calc": stdio_server(calls)}).fresh()
    failed = json.loads(tool(tools, "calc__fail").run({"reason": "the disk is full"}))
    assert failed["error"].startswith("calc__fail failed: ")
    assert "the disk is full" in failed["error"]
    wrong = json.loads(tool(tools, "calc__add").run({"a": "two"}))
    assert wrong["error"].startswith("calc__add failed: ")
    assert [c["tool"] for c in received(calls)] == ["fail"]  # the bad arguments never reached the tool


def test_a_stdio_server_that_dies_mid_call_gives_an_error_result_and_is_started_again(
    calls: Path, open_tools: list[McpTools]
) -> None:
    hub = hub_of(open_tools, {"calc": stdio_server(calls)})
    tools = hub.fresh()
    first = json.loads(tool(tools, "calc__whoami").run({}))["pid"]
    died = json.loads(tool(tools, "calc__crash").run({}))
    assert died == {"error": "the MCP server calc went away during the call; it is started again: retry"}
    # The next call waits for the new process: the same tool object works again.
    again = json.loads(tool(tools, "calc__whoami").run({}))["pid"]
    assert again != first
    (health,) = hub.health()
    assert (health.state, health.restarts, health.failures) == (ToolServerState.UP, 1, 1)
    assert health.last_error == "the server closed the connection (a stdio server's process exited)"
    assert [c["pid"] for c in received(calls) if c["tool"] == "whoami"] == [first, again]


def test_a_server_that_stays_down_answers_with_an_error_until_it_can_start_again(
    tmp_path: Path, calls: Path, open_tools: list[McpTools]
) -> None:
    refuse = tmp_path / "refuse"
    hub = hub_of(open_tools, {"calc": stdio_server(calls, refuse=refuse)})
    tools = hub.fresh()
    refuse.touch()  # from now on the server exits as it starts
    tool(tools, "calc__crash").run({})
    poll_until(lambda: state(hub, "calc") is ToolServerState.DOWN, what="the server reported down")
    down = json.loads(tool(tools, "calc__add").run({"a": 1, "b": 1}))
    assert down["error"].startswith("the MCP server calc is down (")
    assert down["error"].endswith("it is started again shortly: answer without it for now")
    assert hub.fresh() == tools  # a session starting meanwhile gets the tools it listed last
    refuse.unlink()
    assert poll_until(lambda: tool(tools, "calc__add").run({"a": 1, "b": 1}) == "2", what="the server answering")
    assert state(hub, "calc") is ToolServerState.UP


def test_a_call_past_the_servers_timeout_gives_an_error_and_the_server_keeps_working(
    calls: Path, open_tools: list[McpTools]
) -> None:
    tools = hub_of(open_tools, {"calc": stdio_server(calls, timeout_s=0.3)}).fresh()
    late = json.loads(tool(tools, "calc__slow").run({"seconds": 5}))
    assert late == {"error": "calc__slow gave no result within 0.3 s; try again later or answer without it"}
    assert tool(tools, "calc__echo").run({"text": "still here"}) == "still here"


def test_a_tool_the_server_adds_is_listed_by_the_next_fresh_listing(calls: Path, open_tools: list[McpTools]) -> None:
    hub = hub_of(open_tools, {"calc": stdio_server(calls)})
    before = hub.fresh()
    assert tool(before, "calc__learn").run({"name": "weather"}) == "learned weather"
    assert hub.current() == before  # without a listing, the tools as listed last
    after = hub.fresh()
    assert [t.name for t in after] == [t.name for t in before] + ["calc__weather"]
    assert tool(after, "calc__weather").run({}) == "weather ran"
    unchanged = hub.fresh()
    assert unchanged == after
    assert unchanged[0] is after[0]


def test_an_http_server_gets_its_headers_and_a_restarted_one_works_again(
    calls: Path, open_tools: list[McpTools]
) -> None:
    with http_server(calls) as server:
        settings = McpServerSettings(url=server.url, headers_env={"Authorization": "WEB_TOKEN"})
        hub = hub_of(open_tools, {"web": settings}, web={"Authorization": "Bearer s3cret"})
        tools = hub.fresh()
        assert [t.name for t in tools] == [f"web__{name}" for name in TOOLS]
        assert json.loads(tool(tools, "web__whoami").run({}))["authorization"] == "Bearer s3cret"
        assert tool(tools, "web__add").run({"a": 20, "b": 22}) == "42"
        assert hub.health()[0].transport == "http"
        server.stop()
        gone = json.loads(tool(tools, "web__add").run({"a": 1, "b": 2}))
        assert gone["error"].startswith("the MCP server web ")
        server.start()  # on the same port
        assert poll_until(lambda: tool(tools, "web__add").run({"a": 1, "b": 2}) == "3", what="the server answering")
    assert [c["tool"] for c in received(calls)] == ["whoami", "add", "add"]


def test_servers_are_listed_together_in_configuration_order(calls: Path, open_tools: list[McpTools]) -> None:
    with http_server(calls) as server:
        servers = {
            "web": McpServerSettings(url=server.url, allow=["echo"]),
            "calc": stdio_server(calls, allow=["add"]),
        }
        hub = hub_of(open_tools, servers)
        assert [t.name for t in hub.fresh()] == ["web__echo", "calc__add"]
        assert [(h.name, h.transport, h.state) for h in hub.health()] == [
            ("web", "http", ToolServerState.UP),
            ("calc", "stdio", ToolServerState.UP),
        ]


def test_agents_configured_with_the_same_server_share_its_process(calls: Path, open_tools: list[McpTools]) -> None:
    one = hub_of(open_tools, {"calc": stdio_server(calls)})
    two = hub_of(open_tools, {"calc": stdio_server(calls)})
    pid = json.loads(tool(one.fresh(), "calc__whoami").run({}))["pid"]
    assert json.loads(tool(two.fresh(), "calc__whoami").run({}))["pid"] == pid
    one.close()  # the other agent still uses it
    assert json.loads(tool(two.current(), "calc__whoami").run({}))["pid"] == pid


def test_a_closed_servers_tools_answer_that_it_stopped(calls: Path, open_tools: list[McpTools]) -> None:
    hub = hub_of(open_tools, {"calc": stdio_server(calls)})
    tools = hub.fresh()
    hub.close()
    assert state(hub, "calc") is ToolServerState.STOPPED
    stopped = json.loads(tool(tools, "calc__add").run({"a": 1, "b": 1}))
    assert stopped == {"error": "the MCP server calc is stopped (the gateway is stopping); answer without it"}
