"""``/mcp``: the sessions as an MCP server (Streamable HTTP) on the API listener.

The MCP SDK's own server answers: its low-level :class:`~mcp.server.lowlevel.Server` dispatches the JSON-RPC
requests and its Streamable HTTP transport (stateless: every POST stands alone, so each carries its key) speaks
the wire, JSON-RPC over POST answered as SSE, reached from aiohttp through :mod:`platforms.api_server.mcp_bridge`.
The tools are :mod:`platforms.api_server.mcp_tools`': ``session_search``, ``sessions_list``, ``session_read``,
``session_send`` (its deltas and tool calls come as MCP progress notifications when the call asks for progress),
``run_status`` and ``run_stop``.

Authorisation is the API's: ``Authorization: Bearer <client key>`` sees this API's sessions made with that key,
``Bearer <admin key>`` every session; a server without a client key lets a caller without a key in as the client.
Anything else is 401. The SDK is the optional ``mcp`` extra: without it ``/mcp`` is 501 naming the extra.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
from aiohttp import web

from platforms.api_server.guards import Guards
from platforms.api_server.mcp_bridge import answer_with_asgi
from platforms.api_server.mcp_tools import (
    Caller,
    ListArguments,
    Progress,
    ReadArguments,
    RunArguments,
    SendArguments,
    SessionTools,
    ToolError,
)
from platforms.api_server.operator_api import Attached
from platforms.api_server.operator_chat import OperatorChat
from platforms.api_server.sessions import key_fingerprint
from platforms.api_server.wire import ApiError

if TYPE_CHECKING:
    from mcp import types
    from mcp.server.lowlevel import Server
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from platforms.api_server.runs import Runs
    from platforms.api_server.service import ApiService

__all__ = ["MCP_PATH", "TOOL_NAMES", "McpEndpoint"]

A = TypeVar("A")

MCP_PATH = "/mcp"
TOOL_NAMES = ("session_search", "sessions_list", "session_read", "session_send", "run_status", "run_stop")
_CALLER = "hermes.mcp.caller"  # the ASGI scope's key for the request's Caller
_CLOSING_S = 5.0

_log = logging.getLogger(__name__)

_SESSION_ID = {"type": "string", "description": "A session id (from sessions_list or session_search)."}
_RUN_ID = {"type": "string", "description": "A run id (POST /v1/runs answers it)."}
_SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
    "sessions_list": (
        "List the conversations this key sees, most recently active first: one row per conversation (a compression "
        "lineage shown by its newest session, with its ids, title, message count and preview).",
        {
            "limit": {"type": "integer", "minimum": 1, "maximum": 200, "description": "Rows (default 20)."},
            "offset": {"type": "integer", "minimum": 0, "description": "Rows to skip (default 0)."},
            "source": {"type": "string", "description": "Only this platform's (telegram, api_server, ...)."},
            "ended": {"type": "boolean", "description": "Only ended (true) or live (false) conversations."},
        },
    ),
    "session_read": (
        "Read a conversation's messages, oldest first, across its compressions (the newest `limit` of them; "
        "`omitted` counts the older ones left out).",
        {
            "session_id": _SESSION_ID,
            "limit": {"type": "integer", "minimum": 1, "maximum": 500, "description": "Messages (default 100)."},
        },
    ),
    "session_send": (
        "Send a message as a new turn in a session this key owns (without session_id: in a new session) and "
        "answer the agent's reply; the reply's text and tool calls arrive as progress notifications meanwhile.",
        {"message": {"type": "string", "description": "The text of the turn."}, "session_id": _SESSION_ID},
    ),
    "run_status": ("What a run of POST /v1/runs is doing: status, session, output or error.", {"run_id": _RUN_ID}),
    "run_stop": ("Stop a run's turn, as /stop does.", {"run_id": _RUN_ID}),
}
_REQUIRED = {
    "session_read": ["session_id"],
    "session_send": ["message"],
    "run_status": ["run_id"],
    "run_stop": ["run_id"],
}
_SEARCH_DESCRIPTION = (
    'Search the conversations this key sees. query -> discovery (FTS5 syntax: words, "exact phrase", prefix*, '
    "AND/OR/NOT; one hit per conversation with a >>>snippet<<< and the messages around the match); session_id + "
    "around_message_id -> the messages around one message; session_id alone -> read that session; no arguments "
    "-> the most recent conversations. Times are unix seconds."
)


class McpEndpoint:
    """``/mcp`` of one API server: ``service`` and ``runs`` are the API's, ``attached`` gives its running inbox and
    host (for the admin key's turns, which go the operator's way)."""

    def __init__(self, service: ApiService, runs: Runs, attached: Attached) -> None:
        self._service = service
        self._guards = Guards(service.config)
        chat = OperatorChat(attached, service.waiters, service.config, self._guards)
        self._tools = SessionTools(service, runs, chat)
        self._manager: StreamableHTTPSessionManager | None = None
        self._starting: asyncio.Lock | None = None
        self._closing: asyncio.Event | None = None
        self._holder: asyncio.Task[None] | None = None

    def add_to(self, app: web.Application) -> None:
        # POST only: a stateless server has no stream of its own to GET and no session to DELETE (405, as the
        # specification allows; the SDK's transport would hold a GET open with nothing to send).
        app.router.add_post(MCP_PATH, self.handle)
        app.on_shutdown.append(self._close)

    # -- the route -------------------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Authorise the request and hand it to the SDK's transport."""
        caller = await self._caller(request)
        manager = await self._running()
        body = await self._service.read_body(request)
        return await answer_with_asgi(
            manager.handle_request,
            request,
            body,
            headers=self._guards.stream_headers(request),
            extra={_CALLER: caller},
        )

    async def _caller(self, request: web.Request) -> Caller:
        """Who the bearer key says the caller is; a 401 for a key that is neither the client's nor the admin's."""
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        given = token.strip() if scheme.lower() == "bearer" else ""
        inbox, _ = self._service.parts()
        admin = inbox.operator.admin_key
        if given and admin is not None and hmac.compare_digest(given.encode(), admin.encode()):
            return Caller(admin=True)
        scope = self._service.scope
        if scope is None or (given and hmac.compare_digest(key_fingerprint(given), scope)):
            return Caller(admin=False, scope=scope, user=self._service.config.user)
        raise ApiError(
            401,
            "missing or incorrect API key; send 'Authorization: Bearer <key>' with the API's key (its sessions) or "
            "the admin key (every session; 'hermesctl admin-key' prints it)",
            code="invalid_api_key",
            headers={"WWW-Authenticate": "Bearer"},
        )

    # -- the SDK's server ------------------------------------------------------------------------------------

    async def _running(self) -> StreamableHTTPSessionManager:
        """The SDK's session manager, started on this loop by the first request (a 501 without the SDK)."""
        if self._manager is not None:
            return self._manager
        self._starting = self._starting or asyncio.Lock()
        async with self._starting:
            if self._manager is None:
                try:
                    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
                except ImportError:
                    raise ApiError(
                        501,
                        "the MCP server needs the MCP SDK: install hermes-actors[mcp] (pip install 'mcp>=1.30,<2') "
                        "and restart hermesd",
                        type="server_error",
                        code="mcp_unavailable",
                    ) from None
                manager = StreamableHTTPSessionManager(
                    self._server(),
                    stateless=True,
                    max_request_body_size=self._service.config.max_body_bytes,
                )
                started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._closing = asyncio.Event()
                self._holder = asyncio.get_running_loop().create_task(self._hold(manager, started), name="mcp")
                await started
                self._manager = manager
        assert self._manager is not None
        return self._manager

    async def _hold(self, manager: StreamableHTTPSessionManager, started: asyncio.Future[None]) -> None:
        """Keep the manager's task group open until the server stops."""
        assert self._closing is not None
        try:
            async with manager.run():
                started.set_result(None)
                await self._closing.wait()
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
            raise

    async def _close(self, app: web.Application) -> None:
        if self._closing is None or self._holder is None:
            return
        self._closing.set()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(self._holder, _CLOSING_S)
        for task in asyncio.all_tasks():
            # sse-starlette's watcher for a uvicorn shutdown, left on the loop by the first SSE answer: the loop
            # closes next, and a task still pending then is logged as destroyed.
            if getattr(task.get_coro(), "__qualname__", "") == "_shutdown_watcher":
                task.cancel()

    def _server(self) -> Server[Any, Any]:
        from mcp import types
        from mcp.server.lowlevel import Server

        server: Server[Any, Any] = Server("hermes-sessions", version="1")

        async def list_tools(_: types.ListToolsRequest | None) -> types.ServerResult:
            return types.ServerResult(types.ListToolsResult(tools=await self._tool_list()))

        async def call_tool(request: types.CallToolRequest) -> types.ServerResult:
            context = server.request_context
            caller = context.request.scope[_CALLER] if context.request is not None else None
            if not isinstance(caller, Caller):
                return _result({"error": "the request carried no key; send one", "code": "invalid_api_key"}, True)
            token = context.meta.progressToken if context.meta is not None else None
            sent = 0

            async def progress(text: str) -> None:
                nonlocal sent
                if token is None:
                    return
                sent += 1
                await context.session.send_progress_notification(
                    token, float(sent), message=text, related_request_id=str(context.request_id)
                )

            arguments = dict(request.params.arguments or {})
            try:
                answer = await self._call(request.params.name, caller, arguments, progress)
            except ToolError as error:
                return _result(error.envelope, True)
            return _result(answer, "error" in answer and request.params.name == "session_search")

        server.request_handlers[types.ListToolsRequest] = list_tools
        server.request_handlers[types.CallToolRequest] = call_tool
        return server

    async def _tool_list(self) -> list[types.Tool]:
        from mcp import types

        search_schema = await self._tools.parameters()
        tools = [types.Tool(name="session_search", description=_SEARCH_DESCRIPTION, inputSchema=search_schema)]
        for name, (description, properties) in _SCHEMAS.items():
            schema = {
                "type": "object",
                "properties": properties,
                "required": _REQUIRED.get(name, []),
                "additionalProperties": False,
            }
            tools.append(types.Tool(name=name, description=description, inputSchema=schema))
        return tools

    async def _call(self, name: str, caller: Caller, arguments: dict[str, Any], progress: Progress) -> dict[str, Any]:
        tools = self._tools
        match name:
            case "session_search":
                return await tools.search(caller, arguments)
            case "sessions_list":
                return await tools.sessions(caller, _arguments(name, ListArguments, arguments))
            case "session_read":
                return await tools.read(caller, _arguments(name, ReadArguments, arguments))
            case "session_send":
                return await tools.send(caller, _arguments(name, SendArguments, arguments), progress)
            case "run_status":
                return await tools.run_status(caller, _arguments(name, RunArguments, arguments))
            case "run_stop":
                return await tools.run_stop(caller, _arguments(name, RunArguments, arguments))
        raise ToolError(f"no tool {name[:100]!r}; the tools are {', '.join(TOOL_NAMES)}", "unknown_tool")


def _arguments(name: str, kind: type[A], arguments: dict[str, Any]) -> A:
    try:
        return msgspec.convert(arguments, kind)
    except msgspec.ValidationError as exc:
        raise ToolError(f"bad arguments for {name}: {exc}; see the tool's input schema", "invalid_arguments") from None


def _result(answer: dict[str, Any], failed: bool) -> types.ServerResult:
    from mcp import types

    text = msgspec.json.encode(answer).decode()
    return types.ServerResult(
        types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], structuredContent=answer, isError=failed
        )
    )
