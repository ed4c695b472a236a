"""One blocking JSON request for a credential check (``hermesctl config check --online``).

The check runs once, outside the daemon, through the shared HTTP client: it reaches the platform the way the
daemon will (directly, without proxy variables), and follows redirects. A request that gets no answer is a
:class:`PlatformError` with the reason alone: the URL may hold a token (Telegram's does, in its path).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hermes_actors.errors import PlatformError
from platforms.support import http_client

__all__ = ["fetch_json", "get_json"]


def get_json(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    method: str = "GET",
    body: Mapping[str, Any] | None = None,
    timeout_s: float = 10.0,
) -> tuple[int, Any]:
    """``(status, decoded JSON body or None)`` of one request to ``url`` (with ``body`` as JSON when given); a
    request that got no answer is a :class:`PlatformError` whose text is the reason (never ``url``)."""
    sent = {"Accept": "application/json", **(headers or {})}
    try:
        result = http_client.request(
            method, url, json_body=body, headers=sent, timeout=timeout_s, follow_redirects=True
        )
    except http_client.HttpError as exc:
        raise PlatformError(exc.reason) from None
    try:
        return result.status, result.json()
    except http_client.HttpError:
        return result.status, None


def fetch_json(
    url: str,
    *,
    what: str,
    headers: Mapping[str, str] | None = None,
    method: str = "GET",
    body: Mapping[str, Any] | None = None,
    timeout_s: float = 10.0,
) -> tuple[int, Any]:
    """:func:`get_json`, its failure naming ``what`` (never ``url``, which may hold a token)."""
    try:
        return get_json(url, headers=headers, method=method, body=body, timeout_s=timeout_s)
    except PlatformError as exc:
        raise PlatformError(f"{what}: no answer ({exc})") from None
