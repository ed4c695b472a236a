"""One blocking JSON request for an adapter's credential check (``hermesctl config check --online``).

The check runs once, outside the daemon, so it uses the standard library rather than an adapter's event loop.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from hermes_actors.errors import PlatformError

__all__ = ["fetch_json"]


def fetch_json(
    url: str,
    *,
    what: str,
    headers: Mapping[str, str] | None = None,
    method: str = "GET",
    body: Mapping[str, Any] | None = None,
    timeout_s: float = 10.0,
) -> tuple[int, Any]:
    """``(status, decoded JSON body or None)`` of one request to ``url`` (with ``body`` as JSON when given); a
    connection that fails is a :class:`PlatformError` naming ``what`` (never ``url``, which may hold a token)."""
    sent = {"Accept": "application/json", **(headers or {})}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        sent["Content-Type"] = "application/json; charset=utf-8"
    request = urllib.request.Request(url, data=data, method=method, headers=sent)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            status, raw = int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        raise PlatformError(f"{what}: no answer ({getattr(exc, 'reason', exc)})") from None
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, None
