"""What every response of the API listener carries, and which browser pages may call it.

Security headers (``Content-Security-Policy: default-src 'none'``, ``X-Content-Type-Options: nosniff``,
``X-Frame-Options: DENY``, ``Referrer-Policy: no-referrer``) go on every response, errors and streams included:
the API serves no page, so nothing it answers may be framed, sniffed into HTML or run as script.

The web console (``/console``, :mod:`platforms.api_server.console`) is the one place that serves pages: its
responses carry :data:`CONSOLE_CSP` instead (scripts, styles and images of this origin only, no framing, forms
posting only here), its media files :data:`MEDIA_CSP` (a sandbox: an image opened on its own runs nothing), and its
own pages' form posts (which carry this server's origin: their ``Referrer-Policy`` is ``same-origin``) pass the
origin check.

CORS: a request with an ``Origin`` header is a browser page calling; unless that origin is in
``platforms.api_server.cors_origins`` it gets 403 in OpenAI's error shape, naming the setting, so a page on another
site cannot drive the agent through a user's browser. An allowed origin gets ``Access-Control-Allow-Origin``
echoed, and its preflight (``OPTIONS`` with ``Access-Control-Request-Method``) is answered here, before the key
check (a browser sends no key on a preflight).

:meth:`Guards.install` puts the middleware first (outermost) on the application, so the headers reach the error
responses of the adapter's own middlewares, and adds an ``on_response_prepare`` hook for responses a handler
prepares itself (a stream). A handler that streams on the shared port (``daemon.http_port``, where the hook does
not travel with the routes) sets :meth:`Guards.stream_headers` itself.
"""

from __future__ import annotations

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler

from platforms.api_server.config import ApiServerConfig
from platforms.api_server.wire import ApiError
from platforms.support.security_headers import SECURITY_HEADERS  # every listener's; the API's are the same

__all__ = ["ALLOWED_HEADERS", "ALLOWED_METHODS", "CONSOLE_CSP", "MEDIA_CSP", "SECURITY_HEADERS", "Guards"]

CONSOLE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
MEDIA_CSP = "default-src 'none'; img-src 'self'; sandbox"
_CONSOLE, _MEDIA = "/console", "/console/media/"
ALLOWED_METHODS = "GET, POST, PATCH, DELETE, OPTIONS"
ALLOWED_HEADERS = "Authorization, Content-Type, X-Hermes-Session-Id, X-Hermes-Session-Key, Idempotency-Key"
_EXPOSED_HEADERS = "X-Hermes-Session-Id, X-Hermes-Session-Key, X-Hermes-Completed, Retry-After"
_PREFLIGHT_MAX_AGE_S = "600"


class Guards:
    """The security headers and the CORS policy of one API server's ``config``."""

    def __init__(self, config: ApiServerConfig) -> None:
        self._origins = frozenset(config.cors_origins)
        self._any = "*" in self._origins

    def install(self, app: web.Application) -> None:
        """Make the guard ``app``'s outermost middleware and hook every prepared response."""
        app.middlewares.insert(0, self.middleware)
        app.on_response_prepare.append(self._on_prepare)

    def allowed(self, origin: str) -> bool:
        """Whether a page of ``origin`` may call the API."""
        return self._any or origin in self._origins

    @staticmethod
    def _console_page(request: web.Request, origin: str) -> bool:
        """Whether ``request`` is the console's own page calling the console (same origin)."""
        return _in_console(request.path) and origin == f"{request.scheme}://{request.host}"

    def stream_headers(self, request: web.Request) -> dict[str, str]:
        """The headers a response to ``request`` carries: the security headers, and CORS for an allowed origin."""
        headers = dict(SECURITY_HEADERS)
        if _in_console(request.path):
            headers["Content-Security-Policy"] = MEDIA_CSP if request.path.startswith(_MEDIA) else CONSOLE_CSP
            headers["Referrer-Policy"] = "same-origin"  # no-referrer makes Chromium post its forms as Origin: null
        origin = request.headers.get(hdrs.ORIGIN)
        if origin is not None and self.allowed(origin):
            headers.update(
                {
                    "Access-Control-Allow-Origin": origin,
                    "Access-Control-Expose-Headers": _EXPOSED_HEADERS,
                    "Vary": "Origin",
                }
            )
        return headers

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Refuse a foreign origin, answer a preflight, and stamp the headers on what the handler returns."""
        origin = request.headers.get(hdrs.ORIGIN)
        if origin is not None and not self.allowed(origin) and not self._console_page(request, origin):
            response: web.StreamResponse = ApiError(
                403,
                f"requests from origin {origin[:200]!r} are not allowed; add it to "
                "platforms.api_server.cors_origins in config.yaml to let pages of that site call the API",
                type="invalid_request_error",
                code="origin_not_allowed",
            ).response()
        elif (
            origin is not None
            and request.method == hdrs.METH_OPTIONS
            and hdrs.ACCESS_CONTROL_REQUEST_METHOD in (request.headers)
        ):
            response = web.Response(
                status=204,
                headers={
                    "Access-Control-Allow-Methods": ALLOWED_METHODS,
                    "Access-Control-Allow-Headers": ALLOWED_HEADERS,
                    "Access-Control-Max-Age": _PREFLIGHT_MAX_AGE_S,
                },
            )
        else:
            response = await handler(request)
        if not response.prepared:
            response.headers.update(self.stream_headers(request))
        return response

    async def _on_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        for name, value in self.stream_headers(request).items():
            response.headers.setdefault(name, value)


def _in_console(path: str) -> bool:
    return path == _CONSOLE or path.startswith(_CONSOLE + "/")
