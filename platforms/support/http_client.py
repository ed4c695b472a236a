"""A small blocking HTTP client for platform REST calls and long polls, and its mapping to send errors.

Adapters send from outbox threads and poll from their own threads, so a blocking client fits; ``http.client``
does the work (no proxy variables, no redirects followed: a platform API answers directly). Each call opens one
connection: the rates here are per chat and per second, not thousands per second. What matters is telling apart
a request that never left (safe to retry) from one that left and got no answer (a retry may duplicate it):
:class:`Unreachable` vs :class:`NoAnswer`, which :func:`send_error` maps to ``SendError(outcome_unknown=...)``.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import SplitResult, urlsplit

import msgspec

from hermes_actors.errors import PlatformError
from hermes_actors.ports import SendError

__all__ = [
    "HttpError",
    "HttpResult",
    "NoAnswer",
    "Unreachable",
    "request",
    "retry_after_seconds",
    "send_error",
    "shown",
    "status_error",
]

MAX_RETRY_AFTER_S = 3600.0  # a server asking for longer is tried again after an hour anyway
EXCERPT_BYTES = 300


class HttpError(PlatformError):
    """An HTTP exchange failed; ``where`` names the endpoint (without credentials)."""


class Unreachable(HttpError):
    """The request did not leave: connection refused, DNS, TLS. Retrying cannot duplicate it."""


class NoAnswer(HttpError):
    """The request left but no complete answer came back (timeout, reset): the server may have acted on it."""


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


def shown(url: str | SplitResult) -> str:
    """``url`` for logs: scheme, host, port and path; no credentials, no query (tokens live there)."""
    parts = urlsplit(url) if isinstance(url, str) else url
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}{parts.path}"


def request(
    method: str,
    url: str,
    *,
    body: bytes | None = None,
    json_body: object = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
    max_bytes: int = 16 * 1024 * 1024,
) -> HttpResult:
    """Send one request and read the whole response; raise :class:`Unreachable` or :class:`NoAnswer`.

    Any status is a result (the caller decides what 4xx/5xx mean); ``json_body`` is encoded as JSON.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Unreachable(f"not an http(s) URL: {shown(parts)!r}")
    send_headers = {k.lower(): v for k, v in (headers or {}).items()}
    if json_body is not None:
        body = msgspec.json.encode(json_body)
        send_headers.setdefault("content-type", "application/json; charset=utf-8")
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        connection = http.client.HTTPSConnection(
            parts.hostname, parts.port, timeout=timeout, context=ssl.create_default_context()
        )
    else:
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    where = f"{method} {shown(parts)}"
    try:
        try:
            connection.request(method, path, body=body, headers=send_headers)
        except (OSError, http.client.HTTPException) as exc:
            raise Unreachable(f"{where}: cannot be reached ({exc or type(exc).__name__})") from exc
        try:
            response = connection.getresponse()
            data = response.read(max_bytes + 1)
        except (OSError, http.client.HTTPException) as exc:
            raise NoAnswer(f"{where}: did not answer after the request was sent ({exc or type(exc).__name__})") from exc
        if len(data) > max_bytes:
            raise NoAnswer(f"{where}: the answer is larger than {max_bytes} bytes")
        return HttpResult(status=response.status, headers={k.lower(): v for k, v in response.getheaders()}, body=data)
    finally:
        connection.close()


def retry_after_seconds(value: str | float | int | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (seconds, or an HTTP date), capped at an hour."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return min(max(float(value), 0.0), MAX_RETRY_AFTER_S)
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - (time.time() if now is None else now)
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def send_error(error: HttpError, what: str) -> SendError:
    """The :class:`SendError` for a failed exchange while sending ``what`` (a reply, a message to chat X)."""
    if isinstance(error, NoAnswer):
        return SendError(
            f"{what}: {error}; it will be retried and flagged as a possible duplicate", outcome_unknown=True
        )
    return SendError(f"{what}: {error}; it will be retried")


def status_error(result: HttpResult, what: str, *, now: float | None = None) -> SendError:
    """The :class:`SendError` for a non-2xx answer: 429 carries ``Retry-After``, 5xx and 4xx are retried."""
    if result.status == 429:
        wait = retry_after_seconds(result.headers.get("retry-after"), now)
        return SendError(f"{what}: asked to slow down (HTTP 429); it will be retried", retry_after_s=wait)
    if result.status >= 500:
        return SendError(f"{what}: failed with HTTP {result.status}: {result.excerpt()!r}; it will be retried")
    return SendError(
        f"{what}: refused the request with HTTP {result.status}: {result.excerpt()!r} (it will be retried with backoff)"
    )
