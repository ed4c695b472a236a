"""The QQ Bot entry point: callback bots are served at ``/qqbot/<bot>``, websocket bots connect to QQ's gateway
(:mod:`platforms.qqbot.gateway`).

A request counts only when ``X-Signature-Ed25519`` is the bot's signature of ``X-Signature-Timestamp`` and the raw
body (:mod:`platforms.qqbot.signature`), the timestamp is within ``max_skew_s`` of this host's clock (an older
signed request, replayed, is refused as stale) and ``X-Bot-Appid``, when sent, is the bot's: anything else is a
403 and nothing more is read. Op 13 (address validation) is answered with ``plain_token`` and its signature. A
message event has its files saved into the media store, is committed to the inbox, and only then is QQ answered
with op 12 (the callback ACK); the same message ``id`` again runs no second turn. A message that cannot be stored
is answered 503, so QQ delivers it again (QQ wants an answer within 3 seconds; one that comes later, after slow
downloads, makes QQ deliver the message again, which the inbox recognises). Other events are acknowledged and
skipped; a malformed payload is a 400 naming what is wrong.

``connection_problem`` names each websocket bot whose gateway connection is down; callback bots hold none.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence

from aiohttp import web

from hermes_actors.errors import PlatformError
from hermes_actors.messages import InboundMessage
from platforms.base import Capabilities, ChatInbox, ReplySender
from platforms.qqbot.config import QqbotConfig, ResolvedBot, resolve_bots
from platforms.qqbot.events import (
    MESSAGE_EVENTS,
    PLATFORM,
    AttachmentRef,
    decode_envelope,
    decode_message,
    decode_validation,
    inbound_of,
    skip_reason,
)
from platforms.qqbot.files import attach_files
from platforms.qqbot.gateway import BotGateway
from platforms.qqbot.sender import QqbotSender
from platforms.qqbot.signature import SIGNATURE_HEADER, TIMESTAMP_HEADER, Signer
from platforms.support.connections import Connections
from platforms.support.credentials import fetch_json
from platforms.support.http_client import shown
from platforms.support.http_host import HttpAdapter, Refused

__all__ = ["ACK", "APPID_HEADER", "PATH_PREFIX", "QqbotAdapter"]

_log = logging.getLogger(__name__)

PATH_PREFIX = "/qqbot/"
APPID_HEADER = "X-Bot-Appid"
ACK = {"op": 12, "d": 0}
_DISPATCH, _VALIDATE = 0, 13


class QqbotAdapter(HttpAdapter[QqbotConfig]):
    """The callback endpoints of the bots of a :class:`QqbotConfig`, and their sender.

    Secrets named by ``secret_env`` are read from ``environ`` (default ``os.environ``) here, so a missing one is a
    :class:`~hermes_actors.errors.ConfigError` before anything starts. ``clock`` is the wall clock timestamps are
    checked against (and received messages stamped with).
    """

    _inbox: ChatInbox | None  # the port it is started with (``start``)
    platform = PLATFORM
    server_name = "qqbot"

    def __init__(
        self, config: QqbotConfig, *, environ: Mapping[str, str] | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__(config)
        self._bots = resolve_bots(config, os.environ if environ is None else environ)
        self._signers = {name: Signer(bot.secret) for name, bot in self._bots.items()}
        self._clock = clock
        self.capabilities = Capabilities(max_message_chars=config.max_message_chars)
        self.sender = QqbotSender(self._bots, config)
        websocket = [name for name, bot in self._bots.items() if bot.mode == "websocket"]
        self._gateways = Connections(
            "bot", websocket, thread="hermes-qqbot-gateway", label="qqbot: the gateway", log=_log
        )

    def senders(self) -> Sequence[ReplySender]:
        """The OpenAPI sender of every bot."""
        return [self.sender]

    def check_credentials(self, *, timeout_s: float) -> list[str]:
        """An access token for every bot: one line per bot; :class:`PlatformError` when QQ refuses its AppID and
        AppSecret."""
        seen = []
        for name, bot in self._bots.items():
            what = f"qqbot bot {name!r}: getAppAccessToken"
            body = {"appId": bot.app_id, "clientSecret": bot.secret}
            status, answer = fetch_json(self.config.token_url, what=what, method="POST", body=body, timeout_s=timeout_s)
            if status != 200 or not isinstance(answer, dict) or not answer.get("access_token"):
                said = answer.get("message") if isinstance(answer, dict) else None
                raise PlatformError(f"{what} answered HTTP {status} ({said or 'no token'}); check app_id and secret")
            seen.append(f"bot {name!r} (app {bot.app_id}) got an access token")
        return seen

    def start(self, inbox: ChatInbox) -> None:
        """Serve the callback bots and connect the websocket bots (in the background)."""
        self._inbox = inbox
        if self._serves_http():
            self._serve(inbox)
        gateways = [
            BotGateway(
                bot,
                self.sender.tokens(bot.app_id),
                inbox,
                self.config,
                self._gateways.links,
                clock=self._clock,
                rng=random.Random(),
            )
            for bot in self._bots.values()
            if bot.mode == "websocket"
        ]
        if gateways:
            self._gateways.start(gateways)

    def stop(self, timeout: float = 10.0) -> None:
        """Close the gateway connections (resumably) and stop serving."""
        self._gateways.stop(timeout)
        super().stop(timeout)

    def connection_problem(self) -> str | None:
        """Each websocket bot whose gateway connection is down, with its last error; ``None`` while all are up (or
        in their first connect), and always for callback bots, which hold no connection."""
        return self._gateways.problem()

    def _serves_http(self) -> bool:
        return any(bot.mode == "callback" for bot in self._bots.values())

    def _add_routes(self, app: web.Application) -> None:
        app.router.add_post(PATH_PREFIX + "{bot}", self._receive)

    def describe(self) -> list[str]:
        """One banner line per bot: its callback URL, or the gateway it connects to."""
        return [
            (
                f"QQ bot {name} (app {bot.app_id}): callback URL {self.url}{PATH_PREFIX}{name} (HTTP callback mode, "
                f"Ed25519 signatures with the {bot.origin})"
                if bot.mode == "callback"
                else f"QQ bot {name} (app {bot.app_id}): websocket gateway of {shown(self.config.api_base)} "
                f"(intents {self.config.intents}, {bot.origin})"
            )
            + f"; replies via {shown(self.config.api_base)}"
            for name, bot in self._bots.items()
        ]

    def _verify(self, request: web.Request, bot: ResolvedBot, body: bytes) -> None:
        signature = request.headers.get(SIGNATURE_HEADER, "")
        stamp = request.headers.get(TIMESTAMP_HEADER, "")
        if not signature or not stamp:
            raise Refused(403, f"unsigned request: {SIGNATURE_HEADER} and {TIMESTAMP_HEADER} are required")
        if not self._signers[bot.name].verify(signature, stamp, body):
            raise Refused(403, f"{SIGNATURE_HEADER} is not the bot's signature of the timestamp and body")
        try:
            age = abs(self._clock() - int(stamp))
        except ValueError:
            raise Refused(403, f"{TIMESTAMP_HEADER} is not a Unix time") from None
        if age > self.config.max_skew_s:
            raise Refused(403, f"a stale request: signed {age:.0f} s from now (platforms.qqbot.max_skew_s)")
        appid = request.headers.get(APPID_HEADER)
        if appid is not None and appid != bot.app_id:
            raise Refused(403, f"{APPID_HEADER} names another app")

    async def _receive(self, request: web.Request) -> web.Response:
        bot = self._bots.get(request.match_info["bot"])
        if bot is None or bot.mode != "callback":
            return web.json_response({"error": "no such bot"}, status=404)
        try:
            body = await self._read_body(request)
            self._verify(request, bot, body)
            envelope = decode_envelope(body)
            if envelope.op == _VALIDATE:
                validation = decode_validation(envelope)
                _log.info("qqbot app %s: answered QQ's address validation", bot.app_id)
                return web.json_response(
                    self._signers[bot.name].validation_answer(validation.plain_token, validation.event_ts)
                )
            if envelope.op != _DISPATCH:
                raise Refused(400, f"op {envelope.op} is not one QQ sends to a callback")
            event = envelope.t or ""
            if event not in MESSAGE_EVENTS:
                _log.info("qqbot app %s: skipped event %s", bot.app_id, event[:60] or "(unnamed)")
                return web.json_response(ACK)
            message = decode_message(envelope)
        except Refused as exc:
            _log.info("qqbot webhook: refused a request (%d %s)", exc.status, exc.reason)
            return web.json_response({"error": exc.reason}, status=exc.status)
        skipped = skip_reason(event, message)
        if skipped is not None:
            _log.info("qqbot app %s: skipped message %s: %s", bot.app_id, message.id, skipped)
            return web.json_response(ACK)
        inbound = inbound_of(event, message, app_id=bot.app_id, received_at=self._clock())
        if message.attachments:
            inbound = await self._attach(inbound, message.attachments)
        result = await self._accept_inbound(inbound, _log, "qqbot app %s: could not store message %s")
        if result is None:
            return web.json_response({"error": "the message could not be stored"}, status=503)
        if result.duplicate:
            _log.info("qqbot app %s: message %s was already stored (a redelivery)", bot.app_id, message.id)
        return web.json_response(ACK)

    async def _attach(self, inbound: InboundMessage, refs: Sequence[AttachmentRef]) -> InboundMessage:
        inbox = self._inbox
        if inbox is None:  # pragma: no cover - the server runs only after start()
            return inbound
        return await attach_files(
            inbound, refs, media=inbox.media, fetch=self.config.fetch_policy, timeout_s=self.config.http_timeout_s
        )
