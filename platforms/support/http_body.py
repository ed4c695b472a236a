"""Reading a request body within a limit, and awaiting its commit, for the HTTP adapters
(:class:`~platforms.support.http_host.HttpAdapter` and the API server's handlers)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import TypeVar

from aiohttp import web

from platforms.support.content_encoding import decode_content

__all__ = ["Refused", "committed", "read_body", "read_decoded", "unreadable"]

T = TypeVar("T")


async def committed(future: concurrent.futures.Future[T], timeout_s: float) -> T:
    """Await a writer future (``inbox.submit``) on the running loop, for at most ``timeout_s``.

    On a timeout the write may still commit later; the platform's redelivery is then recognised as a duplicate.
    """
    try:
        return await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)
    except TimeoutError:
        raise TimeoutError(f"the store did not commit the message within {timeout_s:g} s") from None


class Refused(Exception):
    """A request an adapter refuses: the HTTP status and the reason sent back."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


async def read_body(request: web.Request, limit: int, setting: str) -> bytes:
    """The body of ``request``; :class:`Refused` (413, naming ``setting``) if it is longer than ``limit`` bytes.

    A ``Content-Length`` over the limit is refused before reading; a body without one is cut off by aiohttp's
    ``client_max_size`` (the same limit), which is refused alike. A body that cannot be read as it says it is
    sent (a ``Content-Encoding`` it is not in, a broken chunk) is :class:`Refused` 400.
    """
    too_large = Refused(413, f"the body is larger than {limit} bytes ({setting})")
    if request.content_length is not None and request.content_length > limit:
        raise too_large
    try:
        return await read_decoded(request, limit)
    except web.HTTPRequestEntityTooLarge:
        raise too_large from None
    except web.RequestPayloadError as exc:
        raise Refused(400, f"the body cannot be read ({unreadable(exc)})") from None
    except ConnectionResetError:
        # The client went away before its body was complete: nothing to answer, and no fault of ours.
        raise Refused(400, "the client closed the connection before its body was complete") from None


async def read_decoded(request: web.Request, limit: int) -> bytes:
    """The body of ``request`` as sent, decoded from its ``Content-Encoding`` (gzip or deflate).

    It raises what ``request.read()`` would with aiohttp decoding: :class:`web.HTTPRequestEntityTooLarge` past
    ``limit`` bytes (encoded or decoded), :class:`web.RequestPayloadError` for a body not in its encoding.

    :class:`HttpHost` serves with aiohttp's own decoding off because that one can leave a request unanswered: when
    a deflate body that does not end its stream arrives after the headers (in another read of the socket), the
    parser raises at the end of the body inside ``data_received``, aiohttp queues a 400 for it behind the request
    already handed to the handler, and that request's body never ends, so the handler waits on ``read()`` until
    the client gives up (whether the body comes in the same read as the headers is timing, hence intermittent).
    """
    raw = await request.read()
    if len(raw) > limit:  # a port shared by several adapters reads up to the largest limit (shared_http)
        raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=len(raw))
    encoding = request.headers.get("Content-Encoding", "")
    return decode_content(raw, encoding.lower() if encoding.isascii() else encoding, limit)


def unreadable(exc: web.RequestPayloadError) -> str:
    """Why aiohttp could not read a request body, on one line."""
    return " ".join(str(exc).split())[:200]
