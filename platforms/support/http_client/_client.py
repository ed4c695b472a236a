"""The client: requests through a transport, awaited on any event loop or waited for from any thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Unpack

from platforms.support.http_client._errors import NoAnswer
from platforms.support.http_client._exchange import HttpResult, Options, Transport, build_request, shown
from platforms.support.http_client._loop import ClientLoop
from platforms.support.http_client._network import NetworkTransport

__all__ = ["HttpClient", "request", "shared_client"]


class HttpClient:
    """Sends requests through ``transport`` (the network when ``None``) on ``loop`` (the shared client loop).

    :meth:`send` is the coroutine, for any event loop; :meth:`request` waits for it from a thread; :meth:`submit`
    starts it and returns a future that another thread may cancel (an abortable long poll). Every answer is a
    :class:`HttpResult`, whatever its status; a failure is :class:`Unreachable` or :class:`NoAnswer`. The
    options are :class:`Options`.
    """

    def __init__(self, transport: Transport | None = None, *, loop: ClientLoop | None = None) -> None:
        self._loop = loop if loop is not None else _LOOP
        self._transport = transport if transport is not None else NetworkTransport(self._loop)

    async def send(self, method: str, url: str, **options: Unpack[Options]) -> HttpResult:
        """Send one request and read the whole answer."""
        built = build_request(method, url, **options)
        if self._loop.is_current():
            return await self._transport.handle(built)
        return await asyncio.wrap_future(self._loop.submit(self._transport.handle(built)))

    def submit(self, method: str, url: str, **options: Unpack[Options]) -> concurrent.futures.Future[HttpResult]:
        """Start one request on the client loop; its future gives what :meth:`send` would, and ``cancel()`` ends it."""
        return self._loop.submit(self._transport.handle(build_request(method, url, **options)))

    def request(self, method: str, url: str, **options: Unpack[Options]) -> HttpResult:
        """:meth:`send`, waited for by this thread (any but the client loop's own, which would wait on itself)."""
        if self._loop.is_current():
            raise RuntimeError("a blocking HTTP request on the client's own loop would wait on itself; await send()")
        pending = self.submit(method, url, **options)
        try:
            return pending.result()
        except concurrent.futures.CancelledError:  # the client loop closed (at exit) while it ran
            reason = "the HTTP client closed before the answer came"
            raise NoAnswer(f"{method} {shown(url)}: {reason}", reason=reason) from None

    def close(self) -> None:
        """Release the transport's connections (a client made for a test; the shared one closes at exit)."""
        self._loop.submit(self._transport.aclose()).result()


_LOOP = ClientLoop()
_SHARED = HttpClient(loop=_LOOP)


def shared_client() -> HttpClient:
    """The client every sender and poller uses: the network, on the one client loop."""
    return _SHARED


def request(method: str, url: str, **options: Unpack[Options]) -> HttpResult:
    """Send one request with the shared client and read the whole answer; raise :class:`Unreachable` or
    :class:`NoAnswer`.

    Any status is a result (the caller decides what 4xx/5xx mean); ``json_body`` is encoded as JSON.
    """
    return _SHARED.request(method, url, **options)
