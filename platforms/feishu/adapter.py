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
from typing import Any

from aiohttp import web

from hermes_actors.errors import ConfigError, PlatformError
from hermes_actors.messages import InboundMessage
from platforms.base import Capabilities, ReplySender
from platforms.feishu.config import AppKeys, FeishuConfig, resolve_apps
from platforms.feishu.events import PLATFORM, Challenge, Ignored, Received, open_event
from platforms.feishu.files import attach_resources
from platforms.feishu.sender import TOKEN_PATH, FeishuSender
from platforms.support.credentials import fetch_json
from platforms.support.http_client import open_session, shown
from platforms.support.http_host import HttpAdapter, Refused
from platforms.support.ratelimit import Rate

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


class FeishuAdapter(HttpAdapter[FeishuConfig]):
    """Serves ``POST /feishu/events/<app>`` for each app of a :class:`FeishuConfig` and sends their replies.

    Secrets named by ``*_env`` fields are read from ``environ`` (default ``os.environ``) here. ``clock`` stamps
    inbound messages and ages tenant access tokens.
    """

    platform = PLATFORM
    capabilities = Capabilities(threads=True)  # the size limit is in bytes (150 KB a request); the sender splits
    server_name = "feishu"

    def __init__(
        self,
        config: FeishuConfig,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(config)
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

    def check_credentials(self, *, timeout_s: float) -> list[str]:
        """Ask every app's tenant token (``tenant_access_token/internal``): one line per app; :class:`PlatformError`
        for an app_id and app_secret Feishu refuses."""
        seen = []
        for name, app in self._apps.items():
            what = f"feishu app {name!r}: tenant_access_token"
            keys = {"app_id": app.app_id, "app_secret": app.app_secret}
            url = app.base_url + TOKEN_PATH
            status, body = fetch_json(url, what=what, method="POST", body=keys, timeout_s=timeout_s)
            if status != 200 or not isinstance(body, dict) or body.get("code") != 0:
                said = body.get("msg") if isinstance(body, dict) else None
                raise PlatformError(f"{what} answered HTTP {status} ({said or 'no msg'}); check app_id and app_secret")
            seen.append(f"app {name!r} ({app.app_id}) got a tenant token")
        return seen

    @property
    def sender(self) -> FeishuSender:
        """The reply sender (it also opens threads for handoffs)."""
        return self._sender

    def senders(self) -> Sequence[ReplySender]:
        """The sender of every app's replies."""
        return [self._sender]

    def _add_routes(self, app: web.Application) -> None:
        """Serve the event URLs, ``POST /feishu/events/<app>``."""
        app.router.add_post("/feishu/events/{app}", self._receive)

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
                raise Refused(404, f"no feishu app {name!r}; add it under platforms.feishu.apps")
            body = await self._read_body(request)
            opened = open_event(app, request.headers, body, received_at=self._clock())
        except Refused as exc:
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
        inbox, host = self._inbox, self._host
        if not received.resources or inbox is None or host is None:
            return received.inbound

        async def token(refused: str | None) -> str:
            return await host.blocking(lambda: self._sender.tenant_token(app.name, refused))

        async with open_session() as session:
            return await attach_resources(
                received.inbound,
                received.resources,
                app=app,
                token=token,
                media=inbox.media,
                session=session,
                timeout_s=self.config.http_timeout_s,
            )

    async def _accept(self, inbound: InboundMessage) -> web.Response:
        result = await self._accept_inbound(inbound, _log, "feishu app %r: could not accept event %s")
        if result is None:  # not stored: answering non-200 makes Feishu deliver the event again later
            return _answer(503, {"error": "the message could not be stored; deliver it again later"})
        return _answer(200, {"accepted": True, "duplicate": result.duplicate, "routing_key": result.routing_key})
