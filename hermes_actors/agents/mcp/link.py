"""One MCP server's connection, kept on the process's MCP loop: started once, started again when it dies.

A :class:`ServerLink` runs one task for its whole life that connects (a stdio server's process is started; a
Streamable HTTP endpoint is reached), initialises the MCP session, lists the tools and then waits for the connection
to end: a stdio server whose output ends has died. It then connects again: at once after a connection that lasted,
else after a pause that doubles from half a second up to thirty (``down`` meanwhile). A call waits for a server that
is starting, within its timeout; a call to a server that is down tries it again at once when its last attempt was a
second or more ago, else gets an error result at once. Everything here runs on the loop's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import AsyncIterator, Mapping
from typing import Any, TextIO

import anyio
import httpx
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import ClientSession, McpError, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from hermes_actors.agents.mcp.results import call_problem, result_text
from hermes_actors.agents.mcp.settings import NAME_SEPARATOR, McpServerSettings
from hermes_actors.agents.tools import error_json
from hermes_actors.cpu_affinity import unconfined_command
from hermes_actors.messages import ToolServerState

__all__ = ["ServerLink"]

_log = logging.getLogger(__name__)

_LASTED_S = 10.0  # a connection that lasted this long died of something new: start it again at once
_FIRST_PAUSE_S = 0.5
_LONGEST_PAUSE_S = 30.0
_NUDGE_S = 1.0  # a call to a server down at least this long since its last attempt tries it again at once
_CLOSING_S = 5.0  # how long aclose() waits for a connection to end before it cancels it
_CLIENT = types.Implementation(name="hermes-actors", version="1")

Streams = tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]


class ServerLink:
    """The connection to the server ``name``, its state and counters and the tools it listed last (unfiltered)."""

    def __init__(self, name: str, settings: McpServerSettings, headers: Mapping[str, str]) -> None:
        self.name = name
        self.settings = settings
        self.state = ToolServerState.IDLE
        self.listed: tuple[types.Tool, ...] = ()
        self.restarts = 0
        self.calls = 0
        self.failures = 0
        self.last_error: str | None = None
        self._headers = dict(headers)
        self._session: ClientSession | None = None
        self._runner: asyncio.Task[None] | None = None
        self._listing: asyncio.Task[tuple[types.Tool, ...]] | None = None
        self._settled = asyncio.Event()  # set while the state is not STARTING
        self._end = asyncio.Event()  # ends the current connection (it died, or is dropped or closed)
        self._gone: asyncio.Future[None] | None = None  # resolved when the current session is lost
        self._closed = asyncio.Event()  # set by aclose(): no more connections
        self._wake = asyncio.Event()  # cuts a pause between connections short (aclose, or a call)
        self._attempted = 0.0  # the loop's time of the last connection attempt
        self._offers_tools = True  # what the server said of its tools capability when it was last initialised

    # -- life ----------------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start connecting, unless started already (on the loop's thread)."""
        if self._runner is None and not self._closed.is_set():
            self._enter(ToolServerState.STARTING)
            self._runner = asyncio.get_running_loop().create_task(self._run(), name=f"mcp-{self.name}")

    async def aclose(self) -> None:
        """End the connection for good (a stdio server's input is closed; it is killed if it does not exit)."""
        self._closed.set()
        self._wake.set()
        self._end.set()
        runner = self._runner
        if runner is not None:
            try:
                await asyncio.wait_for(asyncio.shield(runner), _CLOSING_S)
            except TimeoutError:  # still starting: stop waiting for it
                runner.cancel()
                await asyncio.gather(runner, return_exceptions=True)
        self._enter(ToolServerState.STOPPED)

    def count_failure(self) -> None:
        """Count a call that failed where the link could not see it (the calling thread stopped waiting)."""
        self.failures += 1

    def drop(self, why: str) -> None:
        """End the current connection and connect again (a server that stopped answering)."""
        if self._session is not None:
            _log.warning("MCP server %s: %s; connecting again", self.name, why)
            self.last_error = why
            self._end.set()

    def _lose(self) -> None:
        """The session is gone: its calls in flight fail at once, and a call from now on waits for the next session
        (or fails, once the server is down)."""
        self._session = None
        if self._gone is not None and not self._gone.done():
            self._gone.set_result(None)
        if self.state is ToolServerState.UP:
            self._enter(ToolServerState.STARTING)

    def _enter(self, state: ToolServerState) -> None:
        self.state = state
        if state is ToolServerState.STARTING:
            self._settled.clear()
        else:
            self._settled.set()

    async def _run(self) -> None:
        streak = 0  # connections in a row that did not last
        while not self._closed.is_set():
            began = self._attempted = asyncio.get_running_loop().time()
            try:
                await self._connect()
            except Exception as exc:
                self.last_error = _describe(exc)
                _log.warning("MCP server %s (%s): %s", self.name, self.settings.target, self.last_error)
            finally:
                self._lose()
            if self._closed.is_set():
                break
            lasted = asyncio.get_running_loop().time() - began >= _LASTED_S
            streak = 1 if lasted else streak + 1
            pause = 0.0 if streak <= 1 else min(_LONGEST_PAUSE_S, _FIRST_PAUSE_S * 2 ** (streak - 2))
            if pause:
                self._enter(ToolServerState.DOWN)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), pause)
                self._wake.clear()
                if self._closed.is_set():
                    break
            self.restarts += 1
            self._enter(ToolServerState.STARTING)
        self._enter(ToolServerState.STOPPED)

    async def _connect(self) -> None:
        """One connection, from start to end: returns when it ended, raises when it could not be made or broke."""
        self._end = asyncio.Event()
        async with self._transport() as (read, write):
            inner_write, inner_read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
            async with anyio.create_task_group() as pumps:
                pumps.start_soon(self._pump, read, inner_write)
                try:
                    async with ClientSession(inner_read, write, client_info=_CLIENT) as session:
                        with anyio.fail_after(self.settings.start_timeout_s):
                            started = await session.initialize()
                            self._offers_tools = started.capabilities.tools is not None
                            self.listed = await _list_tools(session) if self._offers_tools else ()
                        self._session = session
                        self._gone = asyncio.get_running_loop().create_future()
                        self._enter(ToolServerState.UP)
                        _log.info("MCP server %s is up with %d tools", self.name, len(self.listed))
                        await self._end.wait()
                finally:
                    self._lose()
                    pumps.cancel_scope.cancel()
                    for stream in (read, inner_write, inner_read):  # those not closed by who read them yet
                        stream.close()

    async def _pump(
        self,
        source: MemoryObjectReceiveStream[SessionMessage | Exception],
        sink: MemoryObjectSendStream[SessionMessage | Exception],
    ) -> None:
        """Pass the server's messages on to the session; when they end, the server has gone: say so before the
        session hears it (its calls in flight then fail), and end the connection."""
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            async with sink:
                async for message in source:
                    await sink.send(message)
                if not self._end.is_set():
                    self.last_error = "the server closed the connection (a stdio server's process exited)"
                    _log.warning("MCP server %s: %s", self.name, self.last_error)
                    self._lose()
        self._end.set()

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[Streams]:
        settings = self.settings
        if settings.command is not None:
            program, args = unconfined_command(settings.command[0], settings.command[1:])  # its own CPUs
            parameters = StdioServerParameters(command=program, args=args, env=dict(settings.env), cwd=settings.cwd)
            async with stdio_client(parameters, errlog=_errlog()) as streams:
                yield streams
            return
        assert settings.url is not None
        timeout = httpx.Timeout(settings.start_timeout_s, read=max(300.0, settings.timeout_s))
        async with (
            httpx.AsyncClient(headers=self._headers, timeout=timeout) as client,
            streamable_http_client(settings.url, http_client=client) as (read, write, _),
        ):
            yield read, write

    # -- use -----------------------------------------------------------------------------------------------------

    async def _ready(self, *, nudge: bool = False) -> ClientSession | None:
        """The session, once a starting server is up; ``None`` for a server that is down or closed. With ``nudge``,
        a server down for a second or more since its last attempt is tried again at once, and waited for."""
        self.start()
        if (
            nudge
            and self.state is ToolServerState.DOWN
            and asyncio.get_running_loop().time() - self._attempted >= _NUDGE_S
        ):
            self._wake.set()  # a call tries a server that is down now, rather than after the rest of its pause
            self._enter(ToolServerState.STARTING)
        while self._session is None and self.state is ToolServerState.STARTING:
            await self._settled.wait()
        return self._session

    async def refresh(self) -> tuple[types.Tool, ...]:
        """The tools the server lists now, within ``start_timeout_s`` (a server starting is waited for); the last
        known list when it cannot answer (a server that stopped answering is connected again)."""
        if self._listing is None or self._listing.done():
            self._listing = asyncio.get_running_loop().create_task(self._relist())
        return await asyncio.shield(self._listing)

    async def _relist(self) -> tuple[types.Tool, ...]:
        bound = self.settings.start_timeout_s
        try:
            with anyio.fail_after(bound):
                session = await self._ready()
                if session is not None and self._offers_tools:
                    self.listed = await _list_tools(session)
        except TimeoutError:
            self.drop(f"did not list its tools within {bound:g} s (start_timeout_s)")
        except Exception as exc:
            _log.warning("MCP server %s did not list its tools: %s", self.name, _describe(exc))
        return self.listed

    async def call(self, tool: str, arguments: dict[str, Any]) -> str:
        """Call ``tool``; the text the model gets back, an ``{"error": ...}`` one when the call failed (it never
        raises). Bounded by ``timeout_s``, the wait for a starting server included."""
        self.calls += 1
        name = f"{self.name}{NAME_SEPARATOR}{tool}"
        try:
            with anyio.fail_after(self.settings.timeout_s):
                session = await self._ready(nudge=True)
                if session is None:
                    self.failures += 1
                    return error_json(self._down())
                result = await self._request(session, tool, arguments)
        except TimeoutError:
            self.failures += 1
            return error_json(
                f"{name} gave no result within {self.settings.timeout_s:g} s; try again later or answer without it"
            )
        except McpError as exc:
            self.failures += 1
            if exc.error.code == types.CONNECTION_CLOSED:
                return error_json(f"the MCP server {self.name} went away during the call; it is started again: retry")
            if exc.error.message == "Session terminated":  # an HTTP server that restarted forgot our session
                self.drop("the server no longer knows our session (it restarted)")
                return error_json(f"the MCP server {self.name} restarted during the call; retry")
            return error_json(call_problem(name, exc.error.message))
        except (_Gone, anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
            self.failures += 1
            return error_json(f"the MCP server {self.name} went away during the call; it is started again: retry")
        except Exception as exc:
            self.failures += 1
            _log.warning("MCP call %s failed: %s", name, _describe(exc))
            return error_json(call_problem(name, _describe(exc)))
        text, failed = result_text(result)
        if failed:
            self.failures += 1
            return error_json(call_problem(name, text))
        return text

    async def _request(self, session: ClientSession, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """``tools/call`` on ``session``; raises :class:`_Gone` when the session is lost first (the SDK would leave
        the call waiting for an answer that cannot come). The result's structured content is not checked against
        the tool's output schema (the SDK's ``call_tool`` does): the model gets the text blocks."""
        params = types.CallToolRequestParams(name=tool, arguments=arguments)
        request = types.ClientRequest(types.CallToolRequest(params=params))
        sent = asyncio.ensure_future(session.send_request(request, types.CallToolResult))
        gone = self._gone
        try:
            if gone is not None:
                await asyncio.wait((sent, gone), return_when=asyncio.FIRST_COMPLETED)
                if not sent.done():
                    raise _Gone
            return await sent
        finally:
            if not sent.done():
                sent.cancel()

    def _down(self) -> str:
        if self.state is ToolServerState.STOPPED:
            return f"the MCP server {self.name} is stopped (the gateway is stopping); answer without it"
        cause = f" ({self.last_error})" if self.last_error else ""
        return f"the MCP server {self.name} is down{cause}; it is started again shortly: answer without it for now"


class _Gone(Exception):
    """The session was lost while a call waited for its answer."""


async def _list_tools(session: ClientSession) -> tuple[types.Tool, ...]:
    """Every tool the server lists, following its pages."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    while True:
        page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools.extend(page.tools)
        cursor = page.nextCursor
        if not cursor:
            return tuple(tools)


def _describe(exc: BaseException) -> str:
    """An exception for a log line or a health check: the innermost of a group, with its type."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in exc.exceptions)
    text = str(exc) or "no detail"
    return f"{type(exc).__name__}: {text}"[:300]


_devnull: list[TextIO] = []


def _errlog() -> TextIO:
    """Where a stdio server's stderr goes: this process's, when it is a real file, else nowhere."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        if not _devnull:
            _devnull.append(open(os.devnull, "w"))  # noqa: SIM115 - kept open for the process's life
        return _devnull[0]
    return sys.stderr
