"""The WeCom entry point: an HTTP server for every app's callback URL, and the sender of their replies.

A message push is answered (HTTP 200, empty body: no passive reply) only once its message is committed to the
inbox, or recognised as a repeat of a ``MsgId`` already stored; WeCom waits 5 s and retries three times, which
the durable dedupe absorbs. A file the message carries is downloaded first (``media/get``), so a slow download
may cost a retry, which is then recognised. A request the adapter cannot use gets a plain-text reason: 404
unknown app, 413 too large, 401 unsigned, badly signed or outside the replay window, 400 malformed or sealed for
another corp; 503 if the message could not be stored, so WeCom delivers it again.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from urllib.parse import urlencode

from aiohttp import web

from hermes_actors.errors import ConfigError, PlatformError
from hermes_actors.messages import InboundMessage
from platforms.base import Capabilities, ReplySender
from platforms.support.credentials import fetch_json
from platforms.support.http_client import open_session, shown
from platforms.support.http_host import HttpAdapter, Refused
from platforms.support.ratelimit import Rate
from platforms.wecom.callback import PLATFORM, Ignored, Received, open_echo, open_message
from platforms.wecom.config import AppKeys, WecomConfig, resolve_apps
from platforms.wecom.media import attach_media
from platforms.wecom.sender import TOKEN_PATH, WecomSender

__all__ = ["EXTRA_HINT", "WecomAdapter"]

_log = logging.getLogger(__name__)

EXTRA_HINT = "pip install 'hermes-actors[feishu]'"  # the extra that brings the 'cryptography' package


def _require_cryptography(apps: Mapping[str, AppKeys]) -> None:
    if not apps:
        return
    try:
        import cryptography.hazmat.primitives.ciphers  # noqa: F401
    except ImportError:
        name = next(iter(apps))
        raise ConfigError(
            f"platforms.wecom.apps.{name}.encoding_aes_key",
            f"decrypting callbacks needs the 'cryptography' package, which is not installed; install it with: "
            f"{EXTRA_HINT}",
        ) from None


def _text(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text, content_type="text/plain")


class WecomAdapter(HttpAdapter[WecomConfig]):
    """Serves ``GET`` and ``POST /wecom/callback/<name>`` for each app of a :class:`WecomConfig`; sends replies.

    Secrets named by ``*_env`` fields are read from ``environ`` (default ``os.environ``) here. ``clock`` stamps
    inbound messages, bounds the callbacks' timestamps and ages access tokens.
    """

    platform = PLATFORM
    capabilities = Capabilities()  # the 2,048-byte limit is in bytes; the sender splits
    server_name = "wecom"

    def __init__(
        self,
        config: WecomConfig,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(config)
        self._apps = resolve_apps(config, os.environ if environ is None else environ)
        _require_cryptography(self._apps)
        self._clock = clock
        rate = config.user_messages_per_second
        self._sender = WecomSender(
            self._apps,
            api_base_url=config.api_base_url,
            clock=clock,
            timeout_s=config.http_timeout_s,
            user_rate=Rate(per_second=rate, burst=rate),
        )

    @property
    def sender(self) -> WecomSender:
        """The reply sender."""
        return self._sender

    def senders(self) -> Sequence[ReplySender]:
        """The sender of every app's replies."""
        return [self._sender]

    def check_credentials(self, *, timeout_s: float) -> list[str]:
        """Ask every app's access token (``gettoken``): one line per app; :class:`PlatformError` for a refusal."""
        seen = []
        for name, app in self._apps.items():
            what = f"wecom app {name!r}: gettoken"
            url = f"{self._sender.base_url}{TOKEN_PATH}?{urlencode({'corpid': app.corp_id, 'corpsecret': app.secret})}"
            status, body = fetch_json(url, what=what, timeout_s=timeout_s)
            if status != 200 or not isinstance(body, dict) or body.get("errcode") != 0:
                said = body.get("errmsg") if isinstance(body, dict) else None
                raise PlatformError(f"{what} answered HTTP {status} ({said or 'no errmsg'}); check corp_id and secret")
            seen.append(f"app {name!r} ({app.corp_id}, agent {app.agent_id}) got an access token")
        return seen

    def _add_routes(self, app: web.Application) -> None:
        """Serve the callback URLs, ``GET`` (URL check) and ``POST`` (messages) ``/wecom/callback/<name>``."""
        app.router.add_get("/wecom/callback/{app}", self._verify)
        app.router.add_post("/wecom/callback/{app}", self._receive)

    def describe(self) -> list[str]:
        """One banner line per app: its callback URL and where replies go."""
        if not self._apps:
            return [f"WeCom: {self.url} has no apps; add one under platforms.wecom.apps (corp_id, agent_id, ...)"]
        return [
            f"WeCom app '{app.name}' (corp {app.corp_id}, agent {app.agent_id}): callbacks at "
            f"{self.url}/wecom/callback/{app.name} (msg_signature and AES with the token and EncodingAESKey, "
            f"{app.origins}); replies through "
            f"{shown(self._sender.base_url)}/cgi-bin/message/send; images, voice, video and files are downloaded"
            for app in self._apps.values()
        ]

    def _app(self, name: str) -> AppKeys:
        app = self._apps.get(name)
        if app is None:
            raise Refused(404, f"no wecom app {name!r}; add it under platforms.wecom.apps")
        return app

    async def _verify(self, request: web.Request) -> web.Response:
        name = request.match_info["app"]
        try:
            echo = open_echo(self._app(name), request.query, now=self._clock())
        except Refused as exc:
            _log.warning("wecom app %r: refused a URL check (%d %s)", name, exc.status, exc.reason)
            return _text(exc.status, exc.reason)
        _log.info("wecom app %r: answered the URL check", name)
        return _text(200, echo)

    async def _receive(self, request: web.Request) -> web.Response:
        name = request.match_info["app"]
        try:
            app = self._app(name)
            body = await self._read_body(request)
            opened = open_message(app, request.query, body, now=self._clock())
        except Refused as exc:
            _log.warning("wecom app %r: refused a request (%d %s)", name, exc.status, exc.reason)
            return _text(exc.status, exc.reason)
        if isinstance(opened, Ignored):
            _log.debug("wecom app %r: ignored a push (%s)", name, opened.reason)
            return _text(200, "")
        result = await self._accept_inbound(
            await self._attach(app, opened), _log, "wecom app %r: could not accept message %s"
        )
        if result is None:
            return _text(503, "the message could not be stored; deliver it again later")
        return _text(200, "")

    async def _attach(self, app: AppKeys, received: Received) -> InboundMessage:
        inbox, host = self._inbox, self._host
        if received.media is None or inbox is None or host is None:
            return received.inbound

        async def token(refused: str | None) -> str:
            return await host.blocking(lambda: self._sender.token(app.name, refused))

        async with open_session() as session:
            return await attach_media(
                received.inbound,
                received.media,
                base_url=self._sender.base_url,
                token=token,
                store=inbox.media,
                session=session,
                timeout_s=self.config.http_timeout_s,
            )
