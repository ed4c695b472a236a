"""The webhook adapter: ``POST /webhooks/<route>``, verified, committed, answered 202."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiohttp import web

from hermes_actors.messages import InboundMessage
from platforms.base import Capabilities, ReplySender
from platforms.support.http_client import shown
from platforms.support.http_host import HttpAdapter, Refused
from platforms.support.standard_webhooks import NEW_SECRET_HINT, verify
from platforms.webhook.config import ResolvedRoute, WebhookConfig, resolve_route
from platforms.webhook.payload import PLATFORM, to_inbound
from platforms.webhook.sender import CallbackSender

__all__ = ["WebhookAdapter"]

_log = logging.getLogger(__name__)

_EXCERPT_BYTES = 200


def _answer(status: int, body: dict[str, Any]) -> web.Response:
    return web.json_response(body, status=status)


class WebhookAdapter(HttpAdapter[WebhookConfig]):
    """The webhook entry point: an HTTP server for the routes of a :class:`WebhookConfig` and their callbacks.

    Secrets named by ``secret_env`` are read from ``environ`` (default ``os.environ``) here, so a missing one is a
    :class:`ConfigError` before anything starts. ``clock`` checks webhook timestamps and stamps callbacks.
    """

    platform = PLATFORM
    capabilities = Capabilities()
    server_name = "webhook"

    def __init__(
        self,
        config: WebhookConfig,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        http_timeout_s: float = 10.0,
    ) -> None:
        super().__init__(config)
        env = os.environ if environ is None else environ
        self._routes = {name: resolve_route(name, route, env) for name, route in config.routes.items()}
        self._clock = clock
        self._sender = CallbackSender(self._routes, clock=clock, timeout_s=http_timeout_s)

    def senders(self) -> Sequence[ReplySender]:
        """The callback sender for replies to webhook sessions."""
        return [self._sender]

    def _add_routes(self, app: web.Application) -> None:
        """Serve ``POST /webhooks/<route>``."""
        app.router.add_post("/webhooks/{route}", self._receive)

    def describe(self) -> list[str]:
        """One banner line per route: its URL, how requests are signed and where replies go."""
        if not self._routes:
            return [
                f"Webhooks: {self.url} has no routes; add one under platforms.webhook.routes in config.yaml "
                f"(each needs a secret; {NEW_SECRET_HINT})"
            ]
        return [self._describe_route(route) for route in self._routes.values()]

    def _describe_route(self, route: ResolvedRoute) -> str:
        line = f"Webhook route '{route.name}': POST {self.url}/webhooks/{route.name} "
        line += f"(Standard Webhooks signature, {route.secret_origin})"
        if route.callback is None:
            return line + "; replies stay in the transcript (no callback_url)"
        return line + f"; replies POSTed to {shown(route.callback)}"

    async def _receive(self, request: web.Request) -> web.Response:
        name = request.match_info["route"]
        try:
            route = self._routes.get(name)
            if route is None:
                raise Refused(404, f"no webhook route {name!r}; add it under platforms.webhook.routes")
            body = await self._read_body(request)
            webhook_id = verify(route.key, request.headers, body, self._clock())
            inbound = to_inbound(route, webhook_id, body, self._clock())
        except Refused as exc:
            _log.info("webhook %r: refused a request (%d %s)", name, exc.status, exc.reason)
            return _answer(exc.status, {"error": exc.reason})
        return await self._accept(inbound)

    async def _accept(self, inbound: InboundMessage) -> web.Response:
        result = await self._accept_inbound(inbound, _log, "webhook %r: could not accept message %s")
        if result is None:  # not stored: the sender should deliver it again later
            return _answer(503, {"error": "the message could not be stored; deliver it again later"})
        return _answer(202, {"accepted": True, "duplicate": result.duplicate, "routing_key": result.routing_key})
