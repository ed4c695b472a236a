"""Where every aiohttp session of the platforms is made, with the house defaults.

The defaults: aiohttp's own timeouts, stated once (five minutes for a request, 30 s to connect; a long poll, a
stream or a download sets its own per request); no proxy variables (``trust_env`` off, so a connection goes to the
address asked for, which is the address the fetch policy checked); and, for a session that fetches URLs a payload
names, a :class:`SessionGuard` (:class:`platforms.support.fetch_policy.FetchPolicy`) whose resolver keeps only the
addresses it allows and whose middleware checks every request, redirects included.

Adapters open theirs with :func:`open_session` (websocket gateways, event streams, downloads); the shared client
runs on :func:`client_session`, which opens one connection per request, as a blocking client does: a request on a
kept-alive connection the server has just closed would fail after it might have left, and could not be told apart
from one that reached the server.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Protocol

import aiohttp
from aiohttp.abc import AbstractResolver

__all__ = ["SESSION_TIMEOUT", "SessionGuard", "client_session", "open_session"]

SESSION_TIMEOUT = aiohttp.ClientTimeout(total=300, sock_connect=30)


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


def client_session() -> aiohttp.ClientSession:
    """The shared client's session: one connection per request, no connection cap (a long poll holds one for
    minutes), no cookies kept between requests."""
    return _session(aiohttp.TCPConnector(limit=0, force_close=True), cookies=False)
