"""The listening sockets of an :class:`~platforms.support.http_host.HttpHost`: accepting within
:class:`~hermes_actors.config.HttpLimits`.

asyncio's own server accepts every connection it can and aiohttp keeps one that sends nothing for its keep-alive
timeout (an hour), so idle sockets used to pile up until the process ran out of file descriptors and every entry
point sharing it stopped answering. Here the listener accepts in its own loop and wraps each connection:

- a connection must send its first request line and headers (up to the blank line) within ``header_timeout_s``,
  else it is closed; between requests aiohttp closes it after ``idle_timeout_s`` (its ``keepalive_timeout``);
- at ``max_connections`` a new connection closes the longest idle one (waiting for its first request, or for its
  next one after an answer), so idle sockets cannot keep a real request out; when every open connection is
  answering a request, accepting waits until one is idle or closes, and new connections wait in the kernel's
  listen queue. The first time in an episode it logs one WARNING naming the setting, and one INFO line when the
  listener is back under three quarters of the cap;
- out of file descriptors (``EMFILE``) it does the same, closing the longest idle connection, and logs one WARNING
  per episode instead of asyncio's ERROR line each time it retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from collections.abc import Callable

import msgspec
from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.web_request import BaseRequest

from hermes_actors.config import HttpLimits

__all__ = ["AnswerLog", "HttpListener", "ListenerStatistics"]

_log = logging.getLogger(__name__)

_BACKLOG = 128
_OUT_OF_FILES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_RETRY_ACCEPT_S = 1.0  # out of descriptors: try again after this, or sooner when one of ours closes
_HEAD_ENDS = (b"\r\n\r\n", b"\n\n")


class ListenerStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of a listener: connections open now, how many of them are idle (waiting for a request), and how
    many were closed so far for sending none within the header timeout or to make room at the cap."""

    open: int
    idle: int
    timed_out: int
    evicted: int


class _Connection(asyncio.Protocol):
    """aiohttp's protocol for one connection, watched for whether it is answering a request.

    It is idle (one to close for room) until a request head has arrived (up to its blank line), and again once
    the response to it has been written (:class:`AnswerLog`). The first head must arrive within the header
    timeout; later ones are aiohttp's (``keepalive_timeout``).
    """

    def __init__(self, listener: HttpListener, inner: asyncio.Protocol) -> None:
        self._listener = listener
        self._inner = inner
        self._scanning = True  # for the end of a request head
        self._tail = b""  # the last bytes scanned, for an end split across two reads
        self._deadline: asyncio.TimerHandle | None = None
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        loop = asyncio.get_running_loop()
        self._deadline = loop.call_later(self._listener.limits.header_timeout_s, self._listener.expire, self)
        self._listener.opened(self)
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._scanning:
            seen = self._tail + data
            if any(end in seen for end in _HEAD_ENDS):
                self._scanning, self._tail = False, b""
                self.cancel_deadline()
                self._listener.busy(self)
            else:
                self._tail = seen[-3:]
        self._inner.data_received(data)

    def answered(self) -> None:
        """The response has been written: the connection waits for its next request."""
        if not self._scanning and self.transport is not None:
            self._scanning = True
            self._listener.idle(self)

    def cancel_deadline(self) -> None:
        """Stop the header timeout (the head is in, or the connection is closed)."""
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.cancel_deadline()
        self.transport = None
        self._listener.closed(self)
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


class AnswerLog(AbstractAccessLogger):
    """aiohttp's access log hook (``access_log_class``), called once a response has been written: it logs nothing
    and tells the connection it is idle again."""

    def log(self, request: BaseRequest, response: web.StreamResponse, time: float) -> None:
        transport = request.transport
        connection = transport.get_protocol() if transport is not None else None
        if isinstance(connection, _Connection):
            connection.answered()


class HttpListener:
    """Accept connections for ``serve`` (aiohttp's protocol factory, ``runner.server``) within ``limits``;
    ``name`` starts its log lines."""

    def __init__(self, name: str, limits: HttpLimits, serve: Callable[[], asyncio.Protocol]) -> None:
        self.name = name
        self.limits = limits
        self._serve = serve
        self._sockets: list[socket.socket] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._open: set[_Connection] = set()
        self._idle: dict[_Connection, None] = {}  # answering no request, longest idle first
        self._room = asyncio.Event()  # set when a connection closes or becomes idle
        self._full = False  # in an episode at the cap (logged once)
        self._starved_at = 0  # connections open when an episode out of file descriptors began (0: none; logged once)
        self._timed_out = 0
        self._evicted = 0

    async def open(self, host: str, port: int) -> int:
        """Bind ``host:port`` (every address ``host`` names, on one port; port 0 picks a free one) and start
        accepting; return the port. An :class:`OSError` (the address is in use) leaves nothing bound."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        try:
            for family, kind, proto, _, address in dict.fromkeys(infos):
                if self._sockets:  # the first one picked the port (port 0); the others bind the same
                    address = (address[0], port, *address[2:])
                listening = socket.socket(family, kind, proto)
                self._sockets.append(listening)
                listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    listening.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                listening.bind(address)
                listening.listen(_BACKLOG)
                listening.setblocking(False)
                port = int(listening.getsockname()[1])
        except BaseException:
            self._close_sockets()
            raise
        self._tasks = [loop.create_task(self._accept(listening)) for listening in self._sockets]
        return port

    async def close(self) -> None:
        """Stop accepting and close the listening sockets; open connections stay with aiohttp's shutdown."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        self._close_sockets()

    def statistics(self) -> ListenerStatistics:
        """A snapshot of the open connections and of those closed so far by the limits."""
        return ListenerStatistics(
            open=len(self._open),
            idle=len(self._idle),
            timed_out=self._timed_out,
            evicted=self._evicted,
        )

    def _close_sockets(self) -> None:
        for listening in self._sockets:
            listening.close()
        self._sockets = []

    async def _accept(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                client, _ = await loop.sock_accept(listening)
            except OSError as exc:
                if exc.errno in _OUT_OF_FILES:
                    await self._wait_for_files(exc)
                continue  # anything else (ECONNABORTED: the client gave up in the queue) concerns that client only
            try:
                await self._make_room()
                await loop.connect_accepted_socket(lambda: _Connection(self, self._serve()), client)
            except OSError as exc:  # the client left before it was set up
                _log.debug("%s: a connection closed before it was served (%s)", self.name, exc)
                client.close()
            except BaseException:  # closing: the one accepted while the listener was full goes too
                client.close()
                raise

    async def _make_room(self) -> None:
        """Return once a new connection fits under the cap: at once if an idle one can be closed."""
        while len(self._open) >= self.limits.max_connections:
            self._report_full()
            if self._idle:
                self._evicted += 1
                self._drop(next(iter(self._idle)))
                return
            self._room.clear()
            await self._room.wait()

    async def _wait_for_files(self, exc: OSError) -> None:
        """Out of file descriptors: close the longest idle connection (if any) and wait for a close, at most
        :data:`_RETRY_ACCEPT_S` (the descriptors may be held elsewhere in the process)."""
        if not self._starved_at:
            self._starved_at = max(len(self._open), 1)
            _log.warning(
                "%s: cannot accept a connection (%s) with %d open: the process is out of file descriptors; idle "
                "connections are closed to make room; raise its limit (LimitNOFILE= in the systemd unit, ulimit -n) "
                "or lower daemon.http_max_connections",
                self.name,
                exc.strerror or exc,
                len(self._open),
            )
        self._room.clear()
        if self._idle:
            self._evicted += 1
            self._drop(next(iter(self._idle)))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._room.wait(), _RETRY_ACCEPT_S)

    def _report_full(self) -> None:
        if not self._full:
            self._full = True
            _log.warning(
                "%s: %d connections open, the limit (daemon.http_max_connections); each new one closes the longest "
                "idle one, or waits while every one is answering a request; raise daemon.http_max_connections if "
                "this is real traffic",
                self.name,
                len(self._open),
            )

    def _drop(self, connection: _Connection) -> None:
        """Close ``connection`` now and stop counting it (its ``connection_lost`` comes on a later turn)."""
        self._open.discard(connection)
        self._idle.pop(connection, None)
        connection.cancel_deadline()
        if connection.transport is not None:
            connection.transport.close()

    # -- called by _Connection -----------------------------------------------------------------------------------

    def opened(self, connection: _Connection) -> None:
        """Count a connection that has just been made (idle until its first request head is in)."""
        self._open.add(connection)
        self._idle[connection] = None

    def busy(self, connection: _Connection) -> None:
        """``connection`` has sent a request head: not one to close for room until it has been answered."""
        self._idle.pop(connection, None)

    def idle(self, connection: _Connection) -> None:
        """``connection`` has been answered and waits for its next request."""
        if connection in self._open:
            self._idle[connection] = None
            self._room.set()  # a full listener waiting for a busy connection to close can close this one instead

    def expire(self, connection: _Connection) -> None:
        """Close ``connection``: it sent no full request head within the header timeout."""
        self._timed_out += 1
        _log.debug("%s: closed a connection that sent no request within %g s", self.name, self.limits.header_timeout_s)
        self._drop(connection)

    def closed(self, connection: _Connection) -> None:
        """Forget ``connection``, and end an episode at the cap (or out of descriptors) once well below it."""
        self._open.discard(connection)
        self._idle.pop(connection, None)
        self._room.set()
        if self._starved_at and len(self._open) <= self._starved_at * 3 // 4:
            self._starved_at = 0
            _log.info(
                "%s: %d connections open, accepting without running out of file descriptors", self.name, len(self._open)
            )
        if self._full and len(self._open) <= self.limits.max_connections * 3 // 4:
            self._full = False
            _log.info(
                "%s: %d connections open, below daemon.http_max_connections again (%d idle closed for room so far)",
                self.name,
                len(self._open),
                self._evicted,
            )
