"""The network as a transport: each request on the client loop's aiohttp session, its failures sorted in two.

A failure to connect (refused, DNS, TLS, a connect timeout) is :class:`Unreachable`: nothing left, a retry cannot
duplicate it. Anything after a connection was open for the request, new or kept alive (a reset, a close, a timeout
waiting for the answer, a cut or garbled answer) is :class:`NoAnswer`: the server may have acted on it. A
kept-alive connection the server closed while it idled is not taken once its close has arrived; one that closes as
the request goes out is NoAnswer too, since that cannot be told from a server that read the request and went away.
Requests go out as a blocking client sends them: the URL as given (not re-quoted), no redirects followed unless
asked, no proxy, no cookies, no ``User-Agent`` or ``Accept`` of aiohttp's own, ``Accept-Encoding: identity``
unless the caller names one. Error texts never carry the URL's query.
"""

from __future__ import annotations

import functools

import aiohttp
from yarl import URL

from platforms.support.http_client._errors import NoAnswer, TooLarge, Unreachable
from platforms.support.http_client._exchange import HttpRequest, HttpResult, shown
from platforms.support.http_client._loop import ClientLoop
from platforms.support.http_client._sessions import KEEPALIVE_IDLE_S, MAX_IDLE_PER_HOST, client_session

__all__ = ["NetworkTransport"]

_SKIPPED = frozenset({"User-Agent", "Accept", "Accept-Encoding", "Content-Type"})  # aiohttp's, when not given


class NetworkTransport:
    """Sends each request over the network from ``loop``'s session (made on first use, closed with the loop);
    :meth:`handle` runs on that loop. ``max_idle`` and ``keepalive_s`` bound the kept-alive connections (per host,
    and how long one idles before it is not reused)."""

    def __init__(
        self, loop: ClientLoop, *, max_idle: int = MAX_IDLE_PER_HOST, keepalive_s: float = KEEPALIVE_IDLE_S
    ) -> None:
        self._loop = loop
        self._pool = (max_idle, keepalive_s)
        self._session: aiohttp.ClientSession | None = None
        self._generation = 0

    async def handle(self, request: HttpRequest) -> HttpResult:
        headers = {"accept-encoding": "identity", **request.headers}
        try:
            url = URL(request.url, encoded=True)  # sent as the caller quoted it
            async with self._current().request(
                request.method,
                url,
                data=request.body,
                headers=headers,
                timeout=_timeout(request.timeout),
                allow_redirects=request.follow_redirects,
                skip_auto_headers=_SKIPPED,
            ) as response:
                return await _read(response, request)
        except aiohttp.ConnectionTimeoutError as exc:
            where = _where(request)
            raise Unreachable(f"{where}: cannot be reached (timed out)", reason="timed out", timed_out=True) from exc
        except (aiohttp.ClientConnectorError, aiohttp.InvalidURL, ValueError) as exc:
            cause = _cause(exc, request.url)
            raise Unreachable(f"{_where(request)}: cannot be reached ({cause})", reason=cause) from exc
        except (aiohttp.ClientError, OSError) as exc:  # TimeoutError is an OSError
            cause = _cause(exc, request.url)
            raise NoAnswer(
                f"{_where(request)}: did not answer after the request was sent ({cause})",
                reason=cause,
                timed_out=isinstance(exc, TimeoutError),
            ) from exc

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def _current(self) -> aiohttp.ClientSession:
        """The session on the loop running now: one made on a loop since ended (a fork, a closed client) is dropped."""
        if self._session is None or self._generation != self._loop.generation:
            if self._session is not None:
                self._session.detach()  # its loop is gone; nothing of it can be closed from here
            self._session = client_session(max_idle=self._pool[0], keepalive_s=self._pool[1])
            self._generation = self._loop.generation
            self._loop.at_close(self.aclose)
        return self._session


@functools.lru_cache(maxsize=32)
def _timeout(seconds: float) -> aiohttp.ClientTimeout:
    """Connecting and each wait for bytes bounded by ``seconds``, the whole exchange not (a long poll's own
    timeout is its wait); one object per value, as requests repeat a few values."""
    return aiohttp.ClientTimeout(total=None, sock_connect=seconds, sock_read=seconds)


def _where(request: HttpRequest) -> str:
    """The request for a message: its method and URL without credentials or query (made only for a failure)."""
    return f"{request.method} {shown(request.url)}"


async def _read(response: aiohttp.ClientResponse, request: HttpRequest) -> HttpResult:
    """The whole answer, or :class:`TooLarge` once it passes the request's ``max_bytes`` (by its
    ``Content-Length``, or while read)."""
    limit = request.max_bytes
    encoded = response.headers.get("Content-Encoding", "identity").lower() != "identity"
    declared = None if encoded else response.content_length
    if declared is not None and declared > limit:
        raise _too_large(request, response.status, declared)
    if declared is not None:  # the parser stops at the stated length: at most the limit
        body = await response.read()
    else:
        data = bytearray()
        async for chunk in response.content.iter_any():
            data += chunk
            if len(data) > limit:
                raise _too_large(request, response.status, None)
        body = bytes(data)
    headers = {name.lower(): value for name, value in response.headers.items()}
    return HttpResult(status=response.status, headers=headers, body=body)


def _too_large(request: HttpRequest, status: int, size: int | None) -> TooLarge:
    reason = f"the answer is larger than {request.max_bytes} bytes"
    return TooLarge(f"{_where(request)}: {reason}", reason=reason, status=status, size=size)


def _cause(exc: BaseException, url: str) -> str:
    """What went wrong, for a message: the socket's error where there is one; never the URL's query."""
    if isinstance(exc, TimeoutError):
        text = "timed out"
    elif isinstance(exc, aiohttp.ClientConnectorError):
        text = str(getattr(exc, "os_error", None) or exc)
    elif isinstance(exc, aiohttp.ClientResponseError):
        text = exc.message
    else:
        text = str(exc)
    return (text or type(exc).__name__).replace(url, shown(url))
