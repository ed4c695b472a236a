"""One aiohttp request answered by an ASGI application: how ``/mcp`` hands a request to the MCP SDK's Streamable
HTTP transport, which is written for ASGI, on the API listener's own loop.

The body is read first (bounded and decoded as every API body is) and given to the application in one
``http.request`` message; after it, ``receive`` waits until the answer is complete or the client has gone
(``http.disconnect``), which is how an SSE answer learns that nobody listens any more. The application's
``http.response.start`` prepares an aiohttp :class:`~aiohttp.web.StreamResponse` with its status and headers, each
``http.response.body`` is written as it comes, and the last one ends the answer; one sent after the client left
is dropped, as ASGI servers drop it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

__all__ = ["Asgi", "answer_with_asgi"]

Message = MutableMapping[str, Any]
Asgi = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]
]
"""An ASGI 3 application (``scope``, ``receive``, ``send``)."""

_CLIENT_LOOK_S = 1.0  # how often a waiting ``receive`` looks whether the client is still connected


def _scope(request: web.Request, extra: Mapping[str, Any]) -> dict[str, Any]:
    peer = request.transport.get_extra_info("peername") if request.transport is not None else None
    client = (peer[0], peer[1]) if isinstance(peer, tuple) and len(peer) >= 2 else None
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.raw_path.split("?", 1)[0].encode("latin-1", "replace"),
        "query_string": request.query_string.encode("latin-1", "replace"),
        "root_path": "",
        "headers": [(name.lower(), value) for name, value in request.raw_headers],
        "client": client,
        "server": None,
        **extra,
    }


async def answer_with_asgi(
    app: Asgi, request: web.Request, body: bytes, *, headers: Mapping[str, str], extra: Mapping[str, Any]
) -> web.StreamResponse:
    """Answer ``request`` (whose ``body`` was read already) with ``app``; ``headers`` are added to its answer and
    ``extra`` to its ASGI scope. An application that ends without answering is a 500."""
    finished = asyncio.Event()
    delivered = False
    gone = False  # the client closed the connection
    response: web.StreamResponse | None = None

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        while not finished.is_set():
            if request.transport is None or request.transport.is_closing():
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(finished.wait(), _CLIENT_LOOK_S)
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal response, gone
        kind = message["type"]
        if kind == "http.response.start":
            answer_headers: CIMultiDict[str] = CIMultiDict()
            for name, value in message.get("headers", ()):
                answer_headers.add(name.decode("latin-1"), value.decode("latin-1"))
            for name, value in headers.items():
                answer_headers.setdefault(name, value)
            response = web.StreamResponse(status=int(message["status"]), headers=answer_headers)
            await response.prepare(request)
        elif kind == "http.response.body":
            if response is None:
                raise RuntimeError("the ASGI application sent a body before http.response.start")
            if gone:
                return  # as ASGI servers do: what is sent after the client left goes nowhere, quietly
            chunk = message.get("body", b"")
            try:
                if chunk:
                    await response.write(chunk)
                if not message.get("more_body", False):
                    await response.write_eof()
                    finished.set()
            except ConnectionError:  # the SDK's client leaves once it has its answer, before the stream ends
                gone = True
                finished.set()

    try:
        await app(_scope(request, extra), receive, send)
    finally:
        finished.set()
    if response is None:
        raise web.HTTPInternalServerError(reason="the MCP transport ended without an answer")
    return response
