"""The API server adapter: routes, authentication, and the durable wait for a turn's reply."""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import time
from collections.abc import Mapping, Sequence

import msgspec
from aiohttp import web
from aiohttp.typedefs import Handler

from hermes_actors.errors import ConfigError, PlatformError
from hermes_actors.waiters import ReplyWaiters
from platforms.api_server.chat import ChatCompletions
from platforms.api_server.config import ApiServerConfig, is_loopback
from platforms.api_server.conversations import ConversationsApi
from platforms.api_server.mcp_server import McpEndpoint
from platforms.api_server.models import model_list
from platforms.api_server.probes import KEYED_PATHS, Probes
from platforms.api_server.responses import ResponsesApi
from platforms.api_server.runs import Runs
from platforms.api_server.service import ApiService
from platforms.api_server.sessions import key_fingerprint
from platforms.api_server.surface import add_surface
from platforms.api_server.wire import (
    HTTP_ERRORS,
    PLATFORM,
    ApiError,
    json_response,
)
from platforms.base import ApiInbox, Capabilities, ReplySender
from platforms.support.http_host import HttpAdapter, HttpHost, unreadable

__all__ = ["ApiServer"]

_log = logging.getLogger(__name__)

_KEEP_ALIVE = b": keep-alive\n\n"
_DONE = b"data: [DONE]\n\n"
_DISCONNECT_POLL_S = 1.0  # how often a non-streaming wait looks whether its client is still connected


class ApiServer(HttpAdapter[ApiServerConfig]):
    """The OpenAI-compatible API as a platform adapter (``platform = "api_server"``).

    Built before the gateway (its :meth:`senders` go to the gateway's outbox), then started with the gateway.
    ``environ`` replaces ``os.environ`` when looking up ``config.key_env``. Raises :class:`ConfigError` when the
    host is not loopback and no key is configured. When it stops, waiting requests are answered 503 (their turns
    continue and are stored).
    """

    _inbox: ApiInbox | None  # the port it is started with (``start``)
    platform = PLATFORM
    capabilities = Capabilities()
    server_name = PLATFORM

    def __init__(self, config: ApiServerConfig, *, environ: Mapping[str, str] | None = None) -> None:
        super().__init__(config)
        env = os.environ if environ is None else environ
        from_env = env.get(config.key_env) if config.key_env else None
        self._key = config.key or from_env or None
        self._key_from_env = config.key is None and self._key is not None
        self._scope = key_fingerprint(self._key) if self._key is not None else None  # sessions made with this key
        if self._key is None and not is_loopback(config.host):
            raise ConfigError(
                "platforms.api_server.key",
                f"required when host is not loopback ({config.host!r} lets other machines in); set "
                f"platforms.api_server.key or the {config.key_env or 'HERMES_API_KEY'} environment variable, "
                "or serve on 127.0.0.1",
            )
        self._waiters = ReplyWaiters(PLATFORM)
        self._started_at = int(time.time())
        self._service = ApiService(config, scope=self._scope, waiters=self._waiters, attached=self._attached)
        self._runs = Runs(self._service)

    # -- Adapter ---------------------------------------------------------------------------------------------

    def senders(self) -> Sequence[ReplySender]:
        """The reply waiters that hand each turn's reply to its waiting request."""
        return [self._waiters]

    @property
    def key_required(self) -> bool:
        """Whether requests to ``/v1/*``, ``/metrics`` and ``/health/detailed`` must carry the bearer key."""
        return self._key is not None

    def start(self, inbox: ApiInbox) -> None:
        """Serve the API on ``inbox``; raise :class:`PlatformError` if the address cannot be bound."""
        if self._host is not None:
            raise PlatformError("api_server: start() was already called; build a new ApiServer to serve again")
        self._serve(inbox)

    def describe(self) -> list[str]:
        """Banner lines: the base URL, a curl example and whether a key is required."""
        base = f"{self.url}/v1"
        example = {"model": self.config.model_name, "messages": [{"role": "user", "content": "hello"}]}
        body = msgspec.json.encode(example).decode()
        auth = ""
        if self._key_from_env:
            auth = f' -H "Authorization: Bearer ${self.config.key_env}"'
        elif self._key is not None:
            auth = " -H 'Authorization: Bearer <platforms.api_server.key>'"
        lines = [
            f"OpenAI-compatible API: {base}  (curl {base}/chat/completions -H 'Content-Type: application/json'"
            f"{auth} -d '{body}')"
        ]
        if self._key_from_env:
            lines.append(f"  requires Authorization: Bearer <key> (the key is in ${self.config.key_env})")
        elif self._key is not None:
            lines.append("  requires Authorization: Bearer <key> (platforms.api_server.key)")
        else:
            lines.append(
                f"  no key required: any local program may use it (set ${self.config.key_env} or "
                "platforms.api_server.key to require one)"
            )
        return lines

    # -- application -----------------------------------------------------------------------------------------

    def _application(self) -> web.Application:
        app = web.Application(
            client_max_size=self.config.max_body_bytes, middlewares=[self._error_middleware, self._auth_middleware]
        )
        self._add_routes(app)
        app.on_startup.append(self._on_startup)
        app.on_shutdown.append(self._on_shutdown)
        return app

    def _add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", ChatCompletions(self._service).handle)
        self._runs.add_to(app)
        ResponsesApi(self._service).add_to(app)
        ConversationsApi(self._service).add_to(app)
        app.router.add_get("/v1/models", self._models)
        Probes(self._attached, self._waiters.waiting).add_to(app)
        add_surface(app, self.config, self._attached, self._waiters)  # guards, /api/sessions, /v1/capabilities
        McpEndpoint(self._service, self._runs, self._attached).add_to(app)  # /mcp: the sessions as MCP tools

    def _attached(self) -> tuple[ApiInbox, HttpHost] | None:
        inbox, host = self._inbox, self._host
        return (inbox, host) if inbox is not None and host is not None else None

    async def _on_startup(self, app: web.Application) -> None:
        self._service.stopping = asyncio.get_running_loop().create_future()

    async def _on_shutdown(self, app: web.Application) -> None:
        # Runs before aiohttp waits for open handlers: waiting requests answer now instead of being cancelled.
        stopping = self._service.stopping
        if stopping is not None and not stopping.done():
            stopping.set_result(None)
        await self._runs.close()  # their turns go on and are stored; GET answers from the store after a restart

    @web.middleware
    async def _error_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as error:
            return error.response()
        except web.HTTPRequestEntityTooLarge:
            return ApiError(
                413,
                f"request body is larger than {self.config.max_body_bytes} bytes; send less history or smaller "
                "images, or raise platforms.api_server.max_body_bytes",
                code="request_too_large",
            ).response()
        except web.RequestPayloadError as exc:
            return ApiError(400, f"request body cannot be read ({unreadable(exc)})", code="invalid_body").response()
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            code, message = HTTP_ERRORS.get(exc.status, (None, exc.reason))
            return ApiError(exc.status, message, code=code).response()
        except Exception:
            _log.exception("api_server: %s %s failed", request.method, request.path)
            return ApiError(
                500, "internal error in the hermes API server; see the daemon log", type="server_error"
            ).response()

    @web.middleware
    async def _auth_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self._key is not None and (request.path.startswith("/v1/") or request.path in KEYED_PATHS):
            given = request.headers.get("Authorization", "")
            scheme, _, token = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), self._key.encode()):
                raise ApiError(
                    401,
                    "missing or incorrect API key; send 'Authorization: Bearer <key>' with the key the server "
                    "was configured with",
                    code="invalid_api_key",
                    headers={"WWW-Authenticate": "Bearer"},
                )
        return await handler(request)

    # -- routes ----------------------------------------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        attached = self._attached()
        agents = attached[0].agents if attached is not None else ()
        return json_response(model_list(self.config.model_name, agents, self._started_at))

    # -- stopping --------------------------------------------------------------------------------------------

    def stop(self, timeout: float = 10.0) -> None:
        """Drain, then stop: new requests get 503 ``gateway_draining`` while those waiting get their replies, for
        up to ``timeout`` seconds; any still waiting then are answered 503 (their turns continue and are stored)."""
        self._service.draining = True
        deadline = time.monotonic() + timeout
        while self._service.running and time.monotonic() < deadline:
            time.sleep(0.02)
        super().stop(max(deadline - time.monotonic(), 1.0))
