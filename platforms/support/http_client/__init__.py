"""The platforms' one HTTP client: REST calls and long polls, from threads and coroutines, over aiohttp.

Why aiohttp and not httpx: the adapters already stand on aiohttp (their HTTP servers, and ``ws_connect`` for the
Discord, Mattermost, QQ and DingTalk gateways; httpx has no websockets), and the outbound-fetch policy
(:mod:`platforms.support.fetch_policy`) guards downloads through aiohttp's resolver and client middlewares. One
library then carries every outbound byte. aiohttp has no blocking API, so the blocking one is a facade: every
request runs as a task on one client event loop on its own thread (:class:`ClientLoop`), which a sender's thread
waits on (:func:`request`) and a coroutine on another loop awaits (:meth:`HttpClient.send`).

What matters to a sender is telling apart a request that never left (safe to retry) from one that left and got no
answer (a retry may duplicate it): :class:`Unreachable` vs :class:`NoAnswer`, which :func:`send_error` maps to
``SendError(outcome_unknown=...)``. The shared client keeps connections alive (at most
:data:`MAX_IDLE_PER_HOST` idle per host, each reused only within :data:`KEEPALIVE_IDLE_S`) and never sends a
request twice on its own: a request that failed on a reused connection after it was written is NoAnswer, since a
server closing the connection just as it arrived cannot be told from one that read it and went away. It follows no
redirects and reads no proxy variables: a platform API answers directly.

A client takes a :class:`Transport`: the network (:class:`NetworkTransport`) unless a test hands it a
:class:`MockTransport`, a function from :class:`HttpRequest` to :class:`HttpResult`. Sessions for what is not a
single request (websockets, event streams, downloads) come from :func:`open_session`, the one place a session is
made, with the house defaults and, for payload-named URLs, the fetch policy's guard.
"""

from __future__ import annotations

from platforms.support.http_client._client import HttpClient, request, shared_client
from platforms.support.http_client._errors import HttpError, NoAnswer, TooLarge, Unreachable
from platforms.support.http_client._exchange import (
    EXCERPT_BYTES,
    MAX_BYTES,
    HttpRequest,
    HttpResult,
    MockTransport,
    Options,
    Transport,
    shown,
)
from platforms.support.http_client._loop import ClientLoop
from platforms.support.http_client._network import NetworkTransport
from platforms.support.http_client._send_errors import (
    MAX_RETRY_AFTER_S,
    retry_after_seconds,
    send_error,
    status_error,
)
from platforms.support.http_client._sessions import (
    KEEPALIVE_IDLE_S,
    MAX_IDLE_PER_HOST,
    SESSION_TIMEOUT,
    SessionGuard,
    open_session,
)

__all__ = [
    "EXCERPT_BYTES",
    "KEEPALIVE_IDLE_S",
    "MAX_BYTES",
    "MAX_IDLE_PER_HOST",
    "MAX_RETRY_AFTER_S",
    "SESSION_TIMEOUT",
    "ClientLoop",
    "HttpClient",
    "HttpError",
    "HttpRequest",
    "HttpResult",
    "MockTransport",
    "NetworkTransport",
    "NoAnswer",
    "Options",
    "SessionGuard",
    "TooLarge",
    "Transport",
    "Unreachable",
    "open_session",
    "request",
    "retry_after_seconds",
    "send_error",
    "shared_client",
    "shown",
    "status_error",
]
