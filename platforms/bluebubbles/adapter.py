"""The BlueBubbles entry point: the server's webhook for new iMessages, acknowledged after the inbox commit.

The server POSTs every event to the webhook URL entered in its settings, ``/bluebubbles/<webhook_token>``. It signs
nothing, so the token in the path is the only proof a request comes from it: any other token is a 403 before the
body is read (compared in constant time). A ``new-message`` event from someone else (not ``isFromMe``, not a
tapback, not older than ``max_age_s``) has its attachments fetched into the media store, is committed to the inbox
and only then answered 200; the same message ``guid`` again (a replayed request) is answered the same way without a
second turn. A message that cannot be stored is answered 503. Other events are acknowledged and skipped; a
malformed body is a 400 naming the field.

The webhook holds no connection to the server, so this adapter reports none (no ``connection_problem``).
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from urllib.parse import urlencode

from aiohttp import web

from hermes_actors.errors import PlatformError
from hermes_actors.messages import InboundMessage
from platforms.base import Capabilities, ReplySender
from platforms.bluebubbles.config import BluebubblesConfig, resolve_keys
from platforms.bluebubbles.events import PLATFORM, AttachmentRef, decode_event, inbound_of, skip_reason
from platforms.bluebubbles.files import attach_files
from platforms.bluebubbles.sender import BluebubblesSender
from platforms.support.credentials import fetch_json
from platforms.support.http_client import open_session, shown
from platforms.support.http_host import HttpAdapter, Refused

__all__ = ["PATH_PREFIX", "BluebubblesAdapter"]

_log = logging.getLogger(__name__)

PATH_PREFIX = "/bluebubbles/"


class BluebubblesAdapter(HttpAdapter[BluebubblesConfig]):
    """The webhook of the BlueBubbles server of a :class:`BluebubblesConfig`, and its sender.

    Secrets named by ``*_env`` are read from ``environ`` (default ``os.environ``) here, so a missing one is a
    :class:`~hermes_actors.errors.ConfigError` before anything starts. ``clock`` is the wall clock message ages are
    measured with (and received messages stamped with).
    """

    platform = PLATFORM
    server_name = "bluebubbles"

    def __init__(
        self,
        config: BluebubblesConfig,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(config)
        self._keys = resolve_keys(config, os.environ if environ is None else environ)
        self._clock = clock
        self.capabilities = Capabilities(max_message_chars=config.max_message_chars)
        self.sender = BluebubblesSender(self._keys, config)

    def senders(self) -> Sequence[ReplySender]:
        """The REST API sender."""
        return [self.sender]

    def check_credentials(self, *, timeout_s: float) -> list[str]:
        """``GET /api/v1/ping`` with the password: one line naming the server; :class:`PlatformError` when the
        server refuses the password or does not answer as BlueBubbles does."""
        what = f"bluebubbles server {self.config.server_name!r}: GET /api/v1/ping"
        url = f"{self.config.server}/api/v1/ping?{urlencode({'password': self._keys.password})}"
        status, body = fetch_json(url, what=what, timeout_s=timeout_s)
        if status != 200 or not isinstance(body, dict):
            said = body.get("message") if isinstance(body, dict) else None
            raise PlatformError(f"{what} answered HTTP {status} ({said or 'no message'}); check the server password")
        return [f"server {self.config.server_name!r} at {shown(self.config.server)} answered the ping"]

    def _add_routes(self, app: web.Application) -> None:
        app.router.add_post(PATH_PREFIX + "{token}", self._receive)

    def describe(self) -> list[str]:
        """One banner line: the webhook to enter on the server (its token elided), and where replies go."""
        return [
            f"iMessage via BlueBubbles server {self.config.server_name}: "
            f"webhook {self.url}{PATH_PREFIX}<webhook token> "
            f"(event: New Messages); replies via {shown(self.config.server)} ({self.config.method}, "
            f"{self._keys.origin})"
        ]

    async def _receive(self, request: web.Request) -> web.Response:
        offered = request.match_info["token"].encode()
        if not hmac.compare_digest(offered, self._keys.webhook_token.encode()):
            _log.info("bluebubbles webhook: refused a request with an unknown token")
            return web.json_response({"error": "unknown webhook token"}, status=403)
        try:
            body = await self._read_body(request)
            kind, message = decode_event(body)
        except Refused as exc:
            _log.info("bluebubbles webhook: refused a request (%d %s)", exc.status, exc.reason)
            return web.json_response({"error": exc.reason}, status=exc.status)
        if message is None:
            _log.debug("bluebubbles webhook: skipped a %s event", kind[:60])
            return web.json_response({"ok": True})
        now = self._clock()
        skipped = skip_reason(message, now=now, max_age_s=self.config.max_age_s)
        if skipped is not None:
            _log.info("bluebubbles webhook: skipped message %s: %s", message.guid, skipped)
            return web.json_response({"ok": True})
        inbound = inbound_of(message, server_name=self.config.server_name, received_at=now)
        if message.attachments:
            inbound = await self._attach(inbound, message.attachments)
        result = await self._accept_inbound(inbound, _log, "bluebubbles server %s: could not store message %s")
        if result is None:
            return web.json_response({"error": "the message could not be stored"}, status=503)
        if result.duplicate:
            _log.info("bluebubbles webhook: message %s was already stored (a replayed request)", message.guid)
        return web.json_response({"ok": True})

    async def _attach(self, inbound: InboundMessage, refs: Sequence[AttachmentRef]) -> InboundMessage:
        inbox = self._inbox
        if inbox is None:  # pragma: no cover - the server runs only after start()
            return inbound
        async with open_session() as session:
            return await attach_files(
                inbound,
                refs,
                server=self.config.server,
                password=self._keys.password,
                media=inbox.media,
                session=session,
                timeout_s=self.config.http_timeout_s,
            )
