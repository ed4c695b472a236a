"""``agent.mcp_servers`` in ``config.yaml``: what is accepted, each mistake named by its key with the fix, what
building the agent checks, and how tools are named and results read (no server runs here)."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
import yaml
from mcp import types

from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.mcp import McpServerSettings, attach_mcp_tools
from hermes_actors.agents.mcp.catalog import MAX_NAME, is_offered, offered_tools, tool_name
from hermes_actors.agents.mcp.results import MAX_RESULT_CHARS, result_text
from hermes_actors.agents.tools import agent_tools, tool_servers
from hermes_actors.daemon.agent import build_agent
from hermes_actors.daemon.config_file import decode_settings
from hermes_actors.errors import ConfigError
from hermes_actors.messages import ToolServerState


def settings_of(text: str) -> Any:
    return decode_settings(yaml.safe_load(text))


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as raised:
        settings_of(text)
    return str(raised.value)


def test_stdio_and_http_servers_are_read_with_their_defaults() -> None:
    settings = settings_of(
        f"""
agent:
  mcp_servers:
    files:
      command: [{sys.executable}, -m, some_server]
      env: {{ROOT: /srv}}
      deny: [delete_*]
    web-search:
      url: http://127.0.0.1:8931/mcp
      headers_env: {{Authorization: SEARCH_TOKEN}}
      allow: [search]
      timeout_s: 5
"""
    )
    files, web = settings.agent.mcp_servers["files"], settings.agent.mcp_servers["web-search"]
    assert (files.transport, files.command, files.env, files.deny, files.allow) == (
        "stdio",
        [sys.executable, "-m", "some_server"],
        {"ROOT": "/srv"},
        ["delete_*"],
        None,
    )
    assert (files.timeout_s, files.start_timeout_s) == (30.0, 10.0)
    assert (web.transport, web.url, web.headers_env, web.timeout_s) == (
        "http",
        "http://127.0.0.1:8931/mcp",
        {"Authorization": "SEARCH_TOKEN"},
        5.0,
    )


@pytest.mark.parametrize(
    ("server", "problem"),
    [
        (
            "a__b: {command: [ls]}",
            "agent.mcp_servers.a__b: is not a usable server name: it prefixes its tools' names (<server>__<tool>)",
        ),
        ("files: {}", "agent.mcp_servers.files: needs either command"),
        ("files: {command: [ls], url: 'http://x/mcp'}", "agent.mcp_servers.files: needs either command"),
        ("files: {command: []}", "agent.mcp_servers.files.command: must name the program to start"),
        ("web: {url: 'ftp://x/mcp'}", "agent.mcp_servers.web.url: must be an http:// or https:// URL"),
        ("web: {url: 'http://x/mcp', env: {A: b}}", "agent.mcp_servers.web.env: env and cwd apply to command"),
        ("files: {command: [ls], headers_env: {A: B}}", "agent.mcp_servers.files.headers_env: applies to url"),
        ("web: {url: 'http://x/mcp', headers_env: {'Bad Header': X}}", "agent.mcp_servers.web.headers_env.Bad Header"),
        ("files: {command: [ls], commands: [ls]}", "agent.mcp_servers.files.commands: unknown field (expected one of:"),
        ("files: {command: [ls], timeout_s: 0}", "agent.mcp_servers.files.timeout_s: Expected `float` > 0"),
    ],
)
def test_a_mistake_is_named_by_its_key(server: str, problem: str) -> None:
    assert error_of(f"agent:\n  mcp_servers:\n    {server}\n").startswith(problem)


def test_a_named_agents_server_mistake_names_that_agents_section() -> None:
    text = "agents:\n  research:\n    mcp_servers:\n      files: {}\n"
    assert error_of(text).startswith("agents.research.mcp_servers.files: needs either command")


def test_building_the_agent_checks_the_program_and_the_header_variables() -> None:
    missing = settings_of("agent:\n  mcp_servers:\n    files: {command: [no-such-mcp-server-here]}\n")
    with pytest.raises(ConfigError) as raised:
        build_agent(missing.agent, {})
    assert str(raised.value).startswith(
        "agent.mcp_servers.files.command: names 'no-such-mcp-server-here', which is not an executable file or on PATH"
    )
    keyed = settings_of("agent:\n  mcp_servers:\n    web: {url: 'http://127.0.0.1:1/mcp', headers_env: {X-Key: K}}\n")
    with pytest.raises(ConfigError) as raised:
        build_agent(keyed.agent, {})
    assert str(raised.value).startswith(
        "agent.mcp_servers.web.headers_env.X-Key: reads the environment variable K, which is not set"
    )


def test_a_built_agent_reports_its_servers_idle_and_starts_nothing_until_a_session_asks() -> None:
    settings = settings_of(
        "agent:\n  mcp_servers:\n    web: {url: 'http://127.0.0.1:1/mcp', headers_env: {X-Key: K}}\n"
    )
    agent = build_agent(settings.agent, {"K": "secret"})
    (health,) = tool_servers(agent)
    assert (health.name, health.transport, health.state, health.tools) == ("web", "http", ToolServerState.IDLE, 0)
    assert tool_servers(EchoAgent()) == []
    assert agent_tools(EchoAgent(), fresh=True) == ()


def test_an_agent_that_cannot_be_weakly_referenced_is_given_its_tools_too() -> None:
    class Slotted:
        __slots__ = ()

    agent = Slotted()
    source = attach_mcp_tools(agent, {"web": McpServerSettings(url="http://127.0.0.1:1/mcp")}, {})
    assert source is not None
    assert [h.name for h in tool_servers(agent)] == ["web"]
    assert tool_servers(Slotted()) == []


def test_tool_names_are_namespaced_made_safe_and_kept_within_64_characters() -> None:
    assert tool_name("files", "read_file") == "files__read_file"
    assert tool_name("files", "read.file v2") == "files__read_file_v2"
    long = tool_name("files", "x" * 80)
    assert len(long) == MAX_NAME
    assert long != tool_name("files", "x" * 81)  # cut names stay apart


def test_allow_and_deny_take_names_and_patterns() -> None:
    server = McpServerSettings(command=["x"], allow=["read_*", "list"], deny=["read_secret*"])
    assert [t for t in ("read_file", "read_secrets", "list", "write") if is_offered(t, server)] == ["read_file", "list"]
    assert is_offered("anything", McpServerSettings(command=["x"]))


def test_a_listed_tool_becomes_a_function_whose_calls_go_to_the_server_by_its_own_name() -> None:
    listed = [
        types.Tool(name="read.file", description="Read a file.", inputSchema={"type": "object"}),
        types.Tool(name="read_file", inputSchema={"type": "object", "properties": {"p": {"type": "string"}}}),
    ]
    seen: list[tuple[str, dict[str, Any]]] = []

    def call(tool: str, arguments: dict[str, Any]) -> str:
        seen.append((tool, arguments))
        return "ok"

    (tool,) = offered_tools("files", McpServerSettings(command=["x"]), listed, call)  # the second name clashes
    assert tool.openai_spec()["function"] == {
        "name": "files__read_file",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {}},
    }
    assert tool.run({"p": 1}) == "ok"
    assert seen == [("read.file", {"p": 1})]


def test_results_become_text_the_model_can_read() -> None:
    text = types.TextContent(type="text", text="hello")
    image = types.ImageContent(type="image", data="aGVsbG8h", mimeType="image/png")
    assert result_text(types.CallToolResult(content=[text, image])) == (
        "hello\n[image image/png, 6 bytes, not shown]",
        False,
    )
    structured = types.CallToolResult(content=[], structuredContent={"answer": 42})
    assert json.loads(result_text(structured)[0]) == {"answer": 42}
    assert result_text(types.CallToolResult(content=[], isError=True)) == ("(the tool returned nothing)", True)
    big = result_text(types.CallToolResult(content=[types.TextContent(type="text", text="x" * (MAX_RESULT_CHARS + 5))]))
    assert big[0].endswith("\n[cut: 5 more characters left out]")
