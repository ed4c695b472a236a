"""Where every aiohttp session of the platforms is made, with the house defaults.

The defaults: aiohttp's own timeouts, stated once (five minutes for a request, 30 s to connect; a long poll, a
stream or a download sets its own per request); no proxy variables (``trust_env`` off, so a connection goes to the
address asked for, which is the address the fetch policy checked); and, for a session that fetches URLs a payload
names, a :class:`SessionGuard` (:class:`platforms.support.fetch_policy.FetchPolicy`) whose resolver keeps only the
addresses it allows and whose middleware checks every request, redirects included.

Adapters open theirs with :func:`open_session` (websocket gateways, event streams, downloads); the shared client
runs on :func:`client_session`, which keeps connections alive: at most :data:`MAX_IDLE_PER_HOST` idle ones per host,
none reused after :data:`KEEPALIVE_IDLE_S` idle (before the usual servers close theirs), and none a request failed
on. aiohttp's own second try of an idempotent request on a reused connection is off: whether to send again is the
caller's (the outbox's) choice, and a failure after the request was written is
:class:`~platforms.support.http_client.NoAnswer` (see ``_network``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Protocol

import aiohttp
from aiohttp.abc import AbstractResolver
from aiohttp.client_proto import ResponseHandler
from aiohttp.client_reqrep import ConnectionKey

__all__ = [
    "KEEPALIVE_IDLE_S",
    "MAX_IDLE_PER_HOST",
    "SESSION_TIMEOUT",
    "SessionGuard",
    "client_session",
    "open_session",
]

SESSION_TIMEOUT = aiohttp.ClientTimeout(total=300, sock_connect=30)
KEEPALIVE_IDLE_S = 1.5  # below the idle timeouts of common servers (gunicorn 2 s; Node, uvicorn, Apache 5 s)
MAX_IDLE_PER_HOST = 16  # an outbox's lanes for one platform


class SessionGuard(Protocol):
    """What a session that fetches payload-named URLs is guarded by (the fetch policy)."""

    def resolver(self) -> AbstractResolver:
        """A resolver that keeps only the addresses a connection may go to; the session closes it at its end."""
        ...

    async def middleware(
        self, request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        """Checks each request before it is sent, redirects included."""
        ...


def _session(
    connector: aiohttp.BaseConnector | None = None,
    *,
    middlewares: Sequence[aiohttp.ClientMiddlewareType] = (),
    cookies: bool = True,
) -> aiohttp.ClientSession:
    """A session with the house defaults (the one place one is made); call it on the loop it will run on."""
    return aiohttp.ClientSession(
        connector=connector,
        timeout=SESSION_TIMEOUT,
        trust_env=False,
        middlewares=tuple(middlewares),
        cookie_jar=None if cookies else aiohttp.DummyCookieJar(),
    )


@contextlib.asynccontextmanager
async def open_session(guard: SessionGuard | None = None) -> AsyncIterator[aiohttp.ClientSession]:
    """A session with the house defaults, closed on exit; with ``guard``, every request of it (redirects included)
    is checked and connects only to the addresses the guard allows."""
    if guard is None:
        async with _session() as session:
            yield session
        return
    resolver = guard.resolver()
    try:
        async with _session(aiohttp.TCPConnector(resolver=resolver), middlewares=(guard.middleware,)) as session:
            yield session
    finally:
        await resolver.close()


class _Pool(aiohttp.TCPConnector):
    """aiohttp's connector keeping at most ``max_idle`` idle connections per host (its own keeps every one that
    was released until it has been idle for the keep-alive time); the oldest idle ones go first."""

    def __init__(self, *, max_idle: int, keepalive_timeout: float) -> None:
        super().__init__(limit=0, keepalive_timeout=keepalive_timeout)
        self._max_idle = max_idle

    def _release(self, key: ConnectionKey, protocol: ResponseHandler, *, should_close: bool = False) -> None:
        super()._release(key, protocol, should_close=should_close)
        idle = self._conns.get(key)
        while idle is not None and len(idle) > self._max_idle:
            oldest, _ = idle.popleft()
            oldest.close()


def client_session(
    *, max_idle: int = MAX_IDLE_PER_HOST, keepalive_s: float = KEEPALIVE_IDLE_S
) -> aiohttp.ClientSession:
    """The shared client's session: kept-alive connections (``max_idle`` idle per host at most, each reused only
    within ``keepalive_s`` of its last answer), no cap on connections in use (a long poll holds one for minutes),
    no second try behind the caller's back, no cookies kept between requests."""
    session = _session(_Pool(max_idle=max_idle, keepalive_timeout=keepalive_s), cookies=False)
    # aiohttp sends a GET, PUT or DELETE again when a reused connection fails; the outbox decides about retries,
    # and a request tried twice could not be sorted into Unreachable or NoAnswer.
    session._retry_connection = False
    return session
