"""Which session webhooks a reply may be posted to: DingTalk's own, never whatever a callback's body names.

A callback's ``sessionWebhook`` sits in its body, which DingTalk's ``sign`` does not cover, so the adapter posts
replies only to :data:`SESSION_WEBHOOK_URL` (``https://oapi.dingtalk.com/robot/sendBySession``, the session in the
query, where DingTalk's callbacks point) or to the origin of the configured ``api_base_url`` (the operator chose
it: a gateway of their own, a test's fake). Any other URL is dropped with a warning, the conversation's stored
route is kept, and a reply without a usable webhook goes through the robot API.
"""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit

__all__ = ["SESSION_WEBHOOK_URL", "webhook_problem"]

SESSION_WEBHOOK_URL = "https://oapi.dingtalk.com/robot/sendBySession"

_DINGTALK = urlsplit(SESSION_WEBHOOK_URL)
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(parts: SplitResult) -> tuple[str, str | None, int | None]:
    """(scheme, host, port), the port spelled out; :class:`ValueError` for a port out of range."""
    return parts.scheme, parts.hostname, parts.port or _DEFAULT_PORTS.get(parts.scheme)


def webhook_problem(url: str, api_base_url: str) -> str | None:
    """Why a reply may not be posted to the session webhook ``url`` (a short reason for the log), or ``None``."""
    try:
        parts = urlsplit(url)
        origin = _origin(parts)
    except ValueError:
        return "it is not a URL"
    if parts.username is not None or parts.password is not None:
        return "it carries a user name"
    if origin[0] in _DEFAULT_PORTS and origin[1] and origin == _origin(urlsplit(api_base_url)):
        return None
    if origin == _origin(_DINGTALK) and parts.path == _DINGTALK.path:
        return None
    return f"it is not DingTalk's session webhook ({SESSION_WEBHOOK_URL}) nor on the configured api_base_url"
