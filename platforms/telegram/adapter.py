"""The Telegram adapter: polls or serves webhooks for every configured bot and sends their replies.

Webhook bots share one HTTP server: Telegram POSTs each update to ``/telegram/<bot>`` with the bot's secret in
``X-Telegram-Bot-Api-Secret-Token``. The answer is 200 once the message is committed to the inbox (or the update
starts no turn); Telegram retries anything else, and the inbox recognises the retry. A request the adapter cannot
use gets ``{"error": ...}``: 404 unknown bot, 401 missing or wrong secret, 413 too large, 400 not an update,
503 when the message could not be stored (so Telegram delivers it again). Photos and documents are downloaded
into the media store before the message is accepted, in either mode (:mod:`platforms.telegram.files`).
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec
from aiohttp import web

from hermes_actors.errors import PlatformError
from hermes_actors.messages import InboundMessage
from platforms.base import Capabilities, ChatInbox, ReplySender
from platforms.support.connections import Connections
from platforms.support.credentials import fetch_json
from platforms.support.http_client import open_session, shown
from platforms.support.http_host import HttpAdapter, Refused
from platforms.support.secrets import resolve_secret, secret_origin
from platforms.telegram.api import BotApi, BotApiError
from platforms.telegram.config import TelegramBot, TelegramConfig, check_secret_token, check_token
from platforms.telegram.files import attach_files
from platforms.telegram.polling import BotPoll
from platforms.telegram.sender import MAX_MESSAGE_UTF16, TelegramSender
from platforms.telegram.updates import (
    ALLOWED_UPDATES,
    PLATFORM,
    TelegramFile,
    UpdateError,
    callback_query_id,
    decode_update,
    files_of,
    inbound_from_update,
)

__all__ = ["SECRET_HEADER", "TelegramAdapter"]

_log = logging.getLogger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"


class _Bot(msgspec.Struct, frozen=True, kw_only=True):
    """A configured bot with its secrets read."""

    name: str
    config: TelegramBot
    api: BotApi
    secret: bytes | None  # the webhook secret_token
    origin: str  # for the banner: where the token comes from


def _resolve(name: str, bot: TelegramBot, config: TelegramConfig, env: Mapping[str, str]) -> _Bot:
    path = f"platforms.telegram.bots.{name}"
    export = "export the bot token from @BotFather in it"
    token = resolve_secret(f"{path}.token", bot.token, bot.token_env, env, export=export, check=check_token)
    assert token is not None  # TelegramConfig requires token or token_env
    secret = resolve_secret(
        f"{path}.secret_token",
        bot.secret_token,
        bot.secret_token_env,
        env,
        export="export the webhook secret in it",
        check=check_secret_token,
    )
    origin = secret_origin("token", bot.token_env)
    api = BotApi(name, token, config.api_base, timeout_s=config.request_timeout_s)
    return _Bot(name=name, config=bot, api=api, secret=None if secret is None else secret.encode(), origin=origin)


def _answer(status: int, body: dict[str, Any]) -> web.Response:
    return web.json_response(body, status=status)


class TelegramAdapter(HttpAdapter[TelegramConfig]):
    """Every bot of a :class:`TelegramConfig`: long polls, the webhook server, and the reply sender.

    Tokens and secrets named by ``*_env`` fields are read from ``environ`` (default ``os.environ``) here, so a
    missing one is a :class:`ConfigError` before anything starts. ``clock`` stamps received messages;
    ``monotonic`` paces replies.
    """

    platform = PLATFORM
    capabilities = Capabilities(threads=True, max_message_chars=MAX_MESSAGE_UTF16)
    server_name = "telegram"

    def __init__(
        self,
        config: TelegramConfig,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(config)
        env = os.environ if environ is None else environ
        self._bots = {name: _resolve(name, bot, config, env) for name, bot in config.bots.items()}
        self._clock = clock
        apis = {name: bot.api for name, bot in self._bots.items()}
        self._sender = TelegramSender(apis, config, clock=monotonic)
        polled = [name for name, bot in self._bots.items() if bot.config.mode == "polling"]
        self._polls = Connections("bot", polled, thread="hermes-telegram-poll", label="telegram: the poll", log=_log)

    def senders(self) -> Sequence[ReplySender]:
        """The one sender for every bot's replies (it also opens forum topics for handoffs)."""
        return [self._sender]

    def start(self, inbox: ChatInbox) -> None:
        """Serve the webhook bots, register their ``webhook_url``s, and start polling the others."""
        self._inbox = inbox
        hooked = [bot for bot in self._bots.values() if bot.config.mode == "webhook"]
        polled = [bot.api for bot in self._bots.values() if bot.config.mode == "polling"]
        if hooked:
            self._serve(inbox)
            for bot in hooked:
                self._register(bot)
        if polled:
            links = self._polls.links
            self._polls.start([BotPoll(api, inbox, self.config, links, clock=self._clock) for api in polled])

    def stop(self, timeout: float = 10.0) -> None:
        """Stop polling and serving; a batch being committed finishes first."""
        self._polls.stop(timeout)
        super().stop(timeout)

    def connection_problem(self) -> str | None:
        """The polling bots whose last ``getUpdates`` failed, with its error (``None`` while every poll is
        answered, or still in its first attempt); webhook bots hold no connection of their own."""
        return self._polls.problem()

    def _serves_http(self) -> bool:
        return any(bot.config.mode == "webhook" for bot in self._bots.values())

    def check_credentials(self, *, timeout_s: float) -> list[str]:
        """``getMe`` for every bot: one line per bot naming its username; :class:`PlatformError` for a token the
        Bot API refuses."""
        seen = []
        for name, bot in self._bots.items():
            what = f"telegram bot {name!r}: getMe"
            status, body = fetch_json(bot.api.url("getMe"), what=what, timeout_s=timeout_s)
            result = body.get("result") if isinstance(body, dict) and body.get("ok") is True else None
            if status != 200 or not isinstance(result, dict):
                said = body.get("description") if isinstance(body, dict) else None
                raise PlatformError(f"{what} answered HTTP {status} ({said or 'no description'}); check the token")
            seen.append(f"bot {name!r} is @{result.get('username')}")
        return seen

    def _add_routes(self, app: web.Application) -> None:
        """Serve the webhook bots, ``POST /telegram/<bot>``."""
        app.router.add_post("/telegram/{bot}", self._receive)

    def describe(self) -> list[str]:
        """One banner line per bot: how updates arrive and how replies leave."""
        if not self._bots:
            return [
                "Telegram: no bots; add one under platforms.telegram.bots in config.yaml "
                "(token_env: TELEGRAM_BOT_TOKEN holding the token from @BotFather)"
            ]
        return [self._describe(bot) for bot in self._bots.values()]

    def _describe(self, bot: _Bot) -> str:
        line = f"Telegram bot '{bot.name}' ({bot.origin}): "
        if bot.config.mode == "webhook":
            line += f"webhook POST {self.url}/telegram/{bot.name} (checks {SECRET_HEADER})"
            if bot.config.webhook_url is not None:
                line += f", registered as {shown(bot.config.webhook_url)}"
        else:
            line += f"long-polls {shown(self.config.api_base)} getUpdates"
        return line + (
            "; replies by sendMessage in parts of 4096 UTF-16 units; photos and documents are saved as attachments, "
            "other media arrive as stand-ins like [voice message]"
        )

    def _register(self, bot: _Bot) -> None:
        """``setWebhook`` with the bot's URL and secret; a failure is logged (the webhook may be set already)."""
        url = bot.config.webhook_url
        if url is None or bot.secret is None:
            return
        params = {"url": url, "secret_token": bot.secret.decode(), "allowed_updates": list(ALLOWED_UPDATES)}
        try:
            bot.api.call("setWebhook", params)
        except BotApiError as exc:
            _log.error("telegram bot %r: could not register its webhook %s (%s)", bot.name, shown(url), exc)
        else:
            _log.info("telegram bot %r: webhook registered as %s", bot.name, shown(url))

    async def _receive(self, request: web.Request) -> web.Response:
        name = request.match_info["bot"]
        try:
            read = await self._read_update(name, request)
        except Refused as exc:
            _log.info("telegram bot %r: refused a webhook request (%d %s)", name, exc.status, exc.reason)
            return _answer(exc.status, {"error": exc.reason})
        if read is None:
            return _answer(200, {"ok": True, "accepted": False})
        inbound, files = read
        if files and self._inbox is not None:
            async with open_session() as session:
                inbound = await attach_files(
                    inbound,
                    files,
                    bot=self._bots[name].api,
                    media=self._inbox.media,
                    session=session,
                    timeout_s=self.config.request_timeout_s,
                )
        return await self._accept(inbound)

    async def _read_update(self, name: str, request: web.Request) -> tuple[InboundMessage, list[TelegramFile]] | None:
        bot = self._bots.get(name)
        if bot is None or bot.config.mode != "webhook" or bot.secret is None:
            raise Refused(404, f"no webhook bot {name!r}; add it under platforms.telegram.bots with mode: webhook")
        offered = request.headers.get(SECRET_HEADER)
        if offered is None:
            raise Refused(401, f"the {SECRET_HEADER} header is missing")
        if not hmac.compare_digest(offered.encode("utf-8", "replace"), bot.secret):
            raise Refused(401, f"the {SECRET_HEADER} header does not match the bot's secret_token")
        body = await self._read_body(request)
        try:
            update = decode_update(body)
            inbound = inbound_from_update(update, name, received_at=self._clock())
        except UpdateError as exc:
            raise Refused(400, str(exc)) from None
        return None if inbound is None else (inbound, files_of(update))

    async def _accept(self, inbound: InboundMessage) -> web.Response:
        result = await self._accept_inbound(inbound, _log, "telegram bot %r: could not accept message %s")
        if result is None:
            return _answer(503, {"error": "the message could not be stored; Telegram will deliver it again"})
        answer: dict[str, Any] = {"ok": True, "accepted": True, "duplicate": result.duplicate}
        query = callback_query_id(inbound)
        if query is not None:  # a button press, stored: Telegram runs this call with the answer (the button stops)
            answer |= {"method": "answerCallbackQuery", "callback_query_id": query}
        return _answer(200, answer)
