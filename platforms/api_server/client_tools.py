"""What a request's ``tools`` give its turn: the client's own function tools, which the client runs.

They are offered to the model for the request's turn after the session's own tools (the list frozen with the
session when it started: ``session_search``, the agent's MCP tools), in the order the client sent them. The session's
list never changes; the client's come with each request, so a client that sends the same list each time (the SDKs
do) keeps the prompt's bytes the same from one request to the next, and the model's prompt cache with them.
``tool_choice: "none"`` offers none of them; any other choice leaves the call to the model, as ``auto`` does. A call
of a client tool ends the turn with ``finish_reason: "tool_calls"`` (``function_call`` items in a response); the
gateway's own tool runs are never among them. A client tool with the name of one of the session's own tools fails
the turn (the error names it).
"""

from __future__ import annotations

from hermes_actors.messages import ClientTool
from platforms.api_server.tool_wire import ChatTool, ResponsesTool
from platforms.api_server.wire import ApiError

__all__ = ["chat_tools", "responses_tools"]


def _unsupported(kind: str, where: str) -> ApiError:
    return ApiError(
        400,
        f"{where}.type {kind!r} is not supported; this server takes function tools (type 'function'), which the "
        "client runs",
        code="unsupported_tool",
        param=f"{where}.type",
    )


def _offered(tool_choice: object) -> bool:
    return tool_choice != "none"


def chat_tools(tools: list[ChatTool] | None, tool_choice: object) -> tuple[ClientTool, ...]:
    """The client tools of a chat-completions request (none when ``tool_choice`` is ``"none"``); a 400 names a tool
    that is not a function tool."""
    found: list[ClientTool] = []
    for index, tool in enumerate(tools or ()):
        where = f"tools[{index}]"
        if tool.type != "function":
            raise _unsupported(tool.type, where)
        if tool.function is None:
            raise ApiError(400, f"{where} needs a function: {{name, parameters}}", param=f"{where}.function")
        spec = tool.function
        found.append(ClientTool(name=spec.name, description=spec.description or "", parameters=spec.parameters or {}))
    _check_unique(found)
    return tuple(found) if _offered(tool_choice) else ()


def responses_tools(tools: list[ResponsesTool] | None, tool_choice: object) -> tuple[ClientTool, ...]:
    """The client tools of a Responses request (none when ``tool_choice`` is ``"none"``); a 400 names a tool that
    is not a function tool (the hosted tools, web search and the like, are OpenAI's own)."""
    found: list[ClientTool] = []
    for index, tool in enumerate(tools or ()):
        where = f"tools[{index}]"
        if tool.type != "function":
            raise _unsupported(tool.type, where)
        if tool.name is None:
            raise ApiError(400, f"{where} needs a name", param=f"{where}.name")
        found.append(ClientTool(name=tool.name, description=tool.description or "", parameters=tool.parameters or {}))
    _check_unique(found)
    return tuple(found) if _offered(tool_choice) else ()


def _check_unique(tools: list[ClientTool]) -> None:
    seen: set[str] = set()
    for index, tool in enumerate(tools):
        if tool.name in seen:
            raise ApiError(
                400, f"tools[{index}] repeats the name {tool.name!r}; give each tool its own name", param="tools"
            )
        seen.add(tool.name)
