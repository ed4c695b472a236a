"""The security headers every response of an HTTP listener carries (:class:`~platforms.support.http_host.HttpHost`).

None of the entry points serves a page but the API server's console, which sets its own policy, so by default a
response may not be framed, sniffed into HTML or run as script: ``Content-Security-Policy: default-src 'none'``,
``X-Content-Type-Options: nosniff``, ``X-Frame-Options: DENY``, ``Referrer-Policy: no-referrer``. They are added
when a response is prepared, to what the handler and the adapter's middlewares did not set themselves: the 404 of
an unknown path, a webhook's 405, an adapter's own errors, on its own port and on the shared one alike.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web

__all__ = ["SECURITY_HEADERS", "stamp_security_headers"]

SECURITY_HEADERS: Mapping[str, str] = {
    "Content-Security-Policy": "default-src 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


async def _stamp(request: web.Request, response: web.StreamResponse) -> None:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)


def stamp_security_headers(app: web.Application) -> None:
    """Give every response ``app`` (and the sub-applications mounted on it) prepares the headers it lacks of
    :data:`SECURITY_HEADERS`."""
    app.on_response_prepare.append(_stamp)
