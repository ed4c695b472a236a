"""The Feishu/Lark entry point: an HTTP server for every app's event URL, and the sender of their replies.

An event is acknowledged (HTTP 200) only once its message is committed to the inbox, or recognised as a repeat;
Feishu wants the answer within 3 s and retries otherwise, which the durable dedupe on ``event_id`` absorbs. A
request the adapter cannot use gets a small JSON ``{"error": ...}`` saying why: 404 unknown app, 413 too large,
401 unauthenticated (verification token, signature, encryption), 400 malformed; 503 if the message could not be
stored, so Feishu delivers it again later. The images and files a message names are downloaded into the media
store before it is accepted (:mod:`platforms.feishu.files`), with the tenant access token the sender caches.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

from hermes_actors.errors import ConfigError
from hermes_actors.messages import InboundMessage
from platforms.base import Capabilities, ReplySender
from platforms.feishu.config import AppKeys, FeishuConfig, resolve_apps
from platforms.feishu.events import PLATFORM, Challenge, Ignored, Received, Rejected, open_event
from platforms.feishu.files import attach_resources
from platforms.feishu.sender import FeishuSender
from platforms.http_client import shown
from platforms.http_host import HttpHost
from platforms.ratelimit import Rate

if TYPE_CHECKING:
    from hermes_actors.gateway import Gateway

__all__ = ["EXTRA_HINT", "FeishuAdapter"]

_log = logging.getLogger(__name__)

EXTRA_HINT = "pip install 'hermes-actors[feishu]'"


def _require_cryptography(apps: Mapping[str, AppKeys]) -> None:
    """Fail early, naming the extra, when an app has an encrypt key but ``cryptography`` is missing."""
    sealed = [name for name, app in apps.items() if app.aes_key is not None]
    if not sealed:
        return
    try:
        import cryptography.hazmat.primitives.ciphers  # noqa: F401
    except ImportError:
        raise ConfigError(
            f"platforms.feishu.apps.{sealed[0]}.encrypt_key",
            f"decrypting events needs the 'cryptography' package, which is not installed; install it with: "
            f"{EXTRA_HINT}",
        ) from None


def _answer(status: int, body: dict[str, Any]) -> web.Response:
    return web.json_response(body, status=status)


class FeishuAdapter:
    """Serves ``POST /feishu/events/<app>`` for each app of a :class:`FeishuConfig` and sends their replies.

    Secrets named by ``*_env`` fields are read from ``environ`` (default ``os.environ``) here. ``clock`` stamps
    inbound messages and ages tenant access tokens.
    """

    platform = PLATFORM
    capabilities = Capabilities(threads=True)  # the size limit is in bytes (150 KB a request); the sender splits

    def __init__(
        self,
        config: FeishuConfig,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self._apps = resolve_apps(config, os.environ if environ is None else environ)
        _require_cryptography(self._apps)
        self._clock = clock
        self._sender = FeishuSender(
            self._apps,
            clock=clock,
            timeout_s=config.http_timeout_s,
            chat_rate=Rate(per_second=config.chat_messages_per_second, burst=config.chat_messages_per_second),
            app_rate=Rate(per_second=config.app_messages_per_second, burst=config.app_messages_per_second),
        )
        self._gateway: Gateway | None = None
        self._host: HttpHost | None = None

    @property
    def url(self) -> str:
        """``http://host:port`` of the server (the configured address until it has started)."""
        if self._host is not None:
            return self._host.url
        host = f"[{self.config.host}]" if ":" in self.config.host else self.config.host
        return f"http://{host}:{self.config.port}"

    @property
    def sender(self) -> FeishuSender:
        """The reply sender (it also opens threads for handoffs)."""
        return self._sender

    def senders(self) -> Sequence[ReplySender]:
        """The sender of every app's replies."""
        return [self._sender]

    def start(self, gateway: Gateway) -> None:
        """Serve the event URLs; raise :class:`~hermes_actors.errors.PlatformError` if the port cannot be bound."""
        app = web.Application(client_max_size=self.config.max_body_bytes)
        app.router.add_post("/feishu/events/{app}", self._receive)
        host = HttpHost(app, host=self.config.host, port=self.config.port, name="feishu")
        self._gateway, self._host = gateway, host
        host.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server; requests in progress get up to ``timeout`` seconds."""
        if self._host is not None:
            self._host.stop(timeout)

    def describe(self) -> list[str]:
        """One banner line per app: its event URL, how events are checked, and where replies go."""
        if not self._apps:
            return [
                f"Feishu: {self.url} has no apps; add one under platforms.feishu.apps (app_id, app_secret and "
                "verification_token from the developer console)"
            ]
        return [self._describe_app(app) for app in self._apps.values()]

    def _describe_app(self, app: AppKeys) -> str:
        checks = (
            "encrypted and signed with the encrypt key"
            if app.aes_key is not None
            else "verification token only; set encrypt_key for encrypted, signed events"
        )
        return (
            f"Feishu app '{app.name}' ({app.app_id}): events at POST {self.url}/feishu/events/{app.name} ({checks}; "
            f"{app.origins}); replies through {shown(app.base_url)}; images, files, audio and video are downloaded as "
            "attachments (im:message or im:message:readonly)"
        )

    async def _receive(self, request: web.Request) -> web.Response:
        name = request.match_info["app"]
        try:
            app = self._apps.get(name)
            if app is None:
                raise Rejected(404, f"no feishu app {name!r}; add it under platforms.feishu.apps")
            body = await self._read(request)
            opened = open_event(app, request.headers, body, received_at=self._clock())
        except Rejected as exc:
            _log.warning("feishu app %r: refused a request (%d %s)", name, exc.status, exc.reason)
            return _answer(exc.status, {"error": exc.reason})
        if isinstance(opened, Challenge):
            _log.info("feishu app %r: answered the URL verification challenge", name)
            return _answer(200, {"challenge": opened.challenge})
        if isinstance(opened, Ignored):
            _log.debug("feishu app %r: ignored an event (%s)", name, opened.reason)
            return _answer(200, {"ignored": opened.reason})
        return await self._accept(await self._attach(app, opened))

    async def _attach(self, app: AppKeys, received: Received) -> InboundMessage:
        """The message with the files it names downloaded as attachments."""
        gateway, host = self._gateway, self._host
        if not received.resources or gateway is None or host is None:
            return received.inbound

        async def token(refused: str | None) -> str:
            return await host.blocking(lambda: self._sender.tenant_token(app.name, refused))

        async with aiohttp.ClientSession() as session:
            return await attach_resources(
                received.inbound,
                received.resources,
                app=app,
                token=token,
                media=gateway.media,
                session=session,
                timeout_s=self.config.http_timeout_s,
            )

    async def _read(self, request: web.Request) -> bytes:
        limit = self.config.max_body_bytes
        too_large = Rejected(413, f"the body is larger than {limit} bytes (platforms.feishu.max_body_bytes)")
        if request.content_length is not None and request.content_length > limit:
            raise too_large
        try:
            return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise too_large from None

    async def _accept(self, inbound: InboundMessage) -> web.Response:
        gateway, host = self._gateway, self._host
        if gateway is None or host is None:  # pragma: no cover - the server runs only after start()
            return _answer(503, {"error": "the feishu adapter is not started"})
        try:
            result = await host.blocking(lambda: gateway.accept(inbound))
        except Exception:
            # Not stored: answering non-200 makes Feishu deliver the event again later.
            _log.exception("feishu app %r: could not accept event %s", inbound.source.account_id, inbound.message_id)
            return _answer(503, {"error": "the message could not be stored; deliver it again later"})
        return _answer(200, {"accepted": True, "duplicate": result.duplicate, "routing_key": result.routing_key})
