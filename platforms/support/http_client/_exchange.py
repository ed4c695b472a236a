"""One exchange: the request a transport is handed, the result it gives back, and the transport protocol itself.

A :class:`Transport` turns an :class:`HttpRequest` into an :class:`HttpResult` or raises
:class:`~platforms.support.http_client.Unreachable` / :class:`~platforms.support.http_client.NoAnswer`. The network
is one transport; :class:`MockTransport` is another, a function standing in for the network in tests (httpx's
``MockTransport`` idea).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypedDict, Unpack
from urllib.parse import SplitResult, urlsplit

import msgspec

from platforms.support.http_client._errors import HttpError, Unreachable

__all__ = [
    "EXCERPT_BYTES",
    "MAX_BYTES",
    "HttpRequest",
    "HttpResult",
    "MockTransport",
    "Options",
    "Transport",
    "build_request",
    "shown",
]

EXCERPT_BYTES = 300
MAX_BYTES = 16 * 1024 * 1024


class HttpRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What to send: ``headers`` with lower-cased names; ``timeout`` bounds connecting and each wait for bytes;
    an answer over ``max_bytes`` is :class:`~platforms.support.http_client.TooLarge`."""

    method: str
    url: str
    headers: dict[str, str]
    body: bytes | None = None
    timeout: float = 10.0
    max_bytes: int = MAX_BYTES
    follow_redirects: bool = False


class HttpResult(msgspec.Struct, frozen=True, kw_only=True):
    """A complete response."""

    status: int
    headers: dict[str, str]  # lower-cased names
    body: bytes

    def json(self) -> Any:
        """The body as JSON; :class:`HttpError` when it is not."""
        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise HttpError(f"expected JSON, got {self.body[:EXCERPT_BYTES]!r} (HTTP {self.status})") from exc

    def excerpt(self) -> str:
        """The start of the body, for messages and logs."""
        return self.body[:EXCERPT_BYTES].decode("utf-8", "replace")


class Transport(Protocol):
    """Carries requests: the network, or a stand-in for it."""

    async def handle(self, request: HttpRequest) -> HttpResult:
        """The complete answer to ``request``; :class:`Unreachable` or :class:`NoAnswer` when there is none."""
        ...

    async def aclose(self) -> None:
        """Release what the transport holds (connections); it is not used again."""
        ...


Handler = Callable[[HttpRequest], HttpResult | Awaitable[HttpResult]]


class MockTransport:
    """A transport that answers every request with ``handler`` (a function, plain or async) instead of the network;
    the handler raises :class:`Unreachable` or :class:`NoAnswer` to stand for a failure. ``requests`` keeps what
    was handled, in order."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self.requests: list[HttpRequest] = []

    async def handle(self, request: HttpRequest) -> HttpResult:
        self.requests.append(request)
        answer = self._handler(request)
        if isinstance(answer, HttpResult):
            return answer
        return await answer

    async def aclose(self) -> None:
        return None


def shown(url: str | SplitResult) -> str:
    """``url`` for logs: scheme, host, port and path; no credentials, no query (tokens live there)."""
    parts = urlsplit(url) if isinstance(url, str) else url
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}{parts.path}"


class Options(TypedDict, total=False):
    """A request's options beside its method and URL: ``body`` bytes or ``json_body`` (encoded as JSON, with a
    JSON ``content-type`` unless ``headers`` name one), ``timeout`` (default 10 s) for connecting and for each wait
    for bytes, ``max_bytes`` of answer (default 16 MiB), ``follow_redirects`` (default no)."""

    body: bytes | None
    json_body: object
    headers: dict[str, str] | None
    timeout: float
    max_bytes: int
    follow_redirects: bool


def build_request(method: str, url: str, **options: Unpack[Options]) -> HttpRequest:
    """The :class:`HttpRequest` of a call; :class:`Unreachable` for a URL that is not http(s), which cannot leave."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Unreachable(f"not an http(s) URL: {shown(parts)!r}", reason="not an http(s) URL")
    headers = {name.lower(): value for name, value in (options.get("headers") or {}).items()}
    body = options.get("body")
    json_body = options.get("json_body")
    if json_body is not None:
        body = msgspec.json.encode(json_body)
        headers.setdefault("content-type", "application/json; charset=utf-8")
    return HttpRequest(
        method=method,
        url=url,
        headers=headers,
        body=body,
        timeout=options.get("timeout", 10.0),
        max_bytes=options.get("max_bytes", MAX_BYTES),
        follow_redirects=options.get("follow_redirects", False),
    )
