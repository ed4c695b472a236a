"""The Teams adapter: one messaging endpoint per bot, the Bot Connector's token checked, the activity committed
before it is answered 200."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiohttp import web

from hermes_actors.messages import InboundMessage
from platforms.base import Capabilities, ChatInbox, ReplySender
from platforms.support.http_client import shown
from platforms.support.http_host import HttpAdapter, Refused, committed
from platforms.teams.activity import PLATFORM, Address, Skipped, TeamsAttachment, decode_activity, to_inbound
from platforms.teams.addresses import Addresses
from platforms.teams.auth import Bound, KeysUnavailable, SigningKeys, TokenRefused, bearer, check_claims, verify_token
from platforms.teams.config import ResolvedBot, TeamsConfig, resolve_bot
from platforms.teams.connector import Connector
from platforms.teams.files import attach_files
from platforms.teams.sender import TeamsSender

__all__ = ["TeamsAdapter"]

_log = logging.getLogger(__name__)


def _answer(status: int, body: Mapping[str, Any]) -> web.Response:
    return web.json_response(dict(body), status=status)


class TeamsAdapter(HttpAdapter[TeamsConfig]):
    """The Bot Framework entry point for the bots of a :class:`TeamsConfig`, and their sender.

    Passwords named by ``app_password_env`` are read from ``environ`` (default ``os.environ``) here, so a missing
    one is a :class:`~hermes_actors.errors.ConfigError` before anything starts. ``clock`` stamps received
    messages; ``monotonic`` times the key and token caches.
    """

    _inbox: ChatInbox | None  # the port it is started with (``start``)
    platform = PLATFORM
    server_name = "teams"

    def __init__(
        self,
        config: TeamsConfig,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(config)
        env = os.environ if environ is None else environ
        self._bots = {name: resolve_bot(name, bot, env) for name, bot in config.bots.items()}
        self._clock = clock
        self.keys = SigningKeys(
            config.openid_metadata_url,
            min_refresh_s=config.keys_min_refresh_s,
            max_age_s=config.keys_max_age_s,
            timeout_s=config.http_timeout_s,
            monotonic=monotonic,
        )
        self._connectors = {
            name: Connector(bot, config.login_url, timeout_s=config.http_timeout_s, monotonic=monotonic)
            for name, bot in self._bots.items()
        }
        self._addresses = Addresses()
        self.capabilities = Capabilities(threads=True, max_message_chars=config.max_message_chars)
        self.sender = TeamsSender(self._connectors, self._addresses, config)

    def senders(self) -> Sequence[ReplySender]:
        """The Bot Connector sender (it also opens channel threads for handoffs)."""
        return [self.sender]

    def start(self, inbox: ChatInbox) -> None:
        """Serve the messaging endpoints; replies find stored conversation addresses through ``inbox``."""
        self._addresses.attach(inbox)
        self._serve(inbox)

    def _add_routes(self, app: web.Application) -> None:
        """Serve ``POST /teams/messages/<bot>``."""
        app.router.add_post("/teams/messages/{bot}", self._receive)

    def describe(self) -> list[str]:
        """One banner line per bot: its messaging endpoint, where its password comes from, where replies go."""
        if not self._bots:
            return [
                f"Teams: {self.url} has no bots; add one under platforms.teams.bots in config.yaml (app_id and "
                "app_password_env from the Azure Bot registration)"
            ]
        return [
            f"Teams bot '{bot.name}' (app {bot.app_id}, {bot.origin}): messaging endpoint POST "
            f"{self.url}/teams/messages/{bot.name} (Bot Connector JWT checked against "
            f"{shown(self.config.openid_metadata_url)}); replies via the conversation's serviceUrl with tokens from "
            f"{shown(self.config.login_url)}/{bot.login_tenant}"
            for bot in self._bots.values()
        ]

    async def _receive(self, request: web.Request) -> web.Response:
        name = request.match_info["bot"]
        try:
            bot = self._bots.get(name)
            if bot is None:
                raise Refused(404, f"no Teams bot {name!r}; add it under platforms.teams.bots")
            read = await self._read_activity(bot, request)
        except TokenRefused as exc:
            _log.info("teams bot %r: refused a request (%d %s)", name, exc.status, exc.reason)
            return _answer(exc.status, {"error": exc.reason})
        except KeysUnavailable as exc:
            _log.warning("teams bot %r: could not check a request's token: %s", name, exc)
            return _answer(503, {"error": "the Bot Connector's signing keys are unavailable; try again"})
        except Refused as exc:
            _log.info("teams bot %r: refused a request (%d %s)", name, exc.status, exc.reason)
            return _answer(exc.status, {"error": exc.reason})
        if isinstance(read, Skipped):
            level = logging.DEBUG if read.quiet else logging.INFO
            _log.log(level, "teams bot %r: skipped an activity: %s", name, read.reason)
            return _answer(200, {"ok": True, "ignored": read.reason})
        inbound, address, files = read
        if files and self._inbox is not None:
            connector = self._connectors[bot.name]
            inbound = await attach_files(
                inbound,
                files,
                service_url=address.service_url,
                token=connector.token,
                media=self._inbox.media,
                fetch=self.config.fetch_policy,
                timeout_s=self.config.http_timeout_s,
                where=f"teams bot '{bot.name}'",
            )
        return await self._accept(bot, inbound, address)

    async def _read_activity(
        self, bot: ResolvedBot, request: web.Request
    ) -> tuple[InboundMessage, Address, list[TeamsAttachment]] | Skipped:
        token = bearer(request.headers)
        claims, endorsements = await verify_token(
            token, self.keys, app_id=bot.app_id, leeway_s=self.config.clock_skew_s
        )
        activity = decode_activity(await self._read_body(request))
        check_claims(
            claims, endorsements, Bound(service_url=activity.serviceUrl or "", channel_id=activity.channelId or "")
        )
        read = to_inbound(activity, bot_name=bot.name, bot_app_id=bot.app_id, received_at=self._clock())
        if not isinstance(read, Skipped) and bot.tenant_id is not None:
            tenant = read[0].source.scope_id
            if tenant != bot.tenant_id:
                raise Refused(403, f"bot {bot.name!r} serves tenant {bot.tenant_id} only, not {str(tenant)[:60]}")
        return read

    async def _accept(self, bot: ResolvedBot, inbound: InboundMessage, address: Address) -> web.Response:
        """Commit ``inbound`` with the conversation's address in one transaction, then answer."""
        inbox = self._inbox
        cursor = Addresses.to_commit(bot.name, inbound.source.chat_id or "", address)
        try:
            if inbox is None:  # pragma: no cover - the server runs only after start()
                raise RuntimeError("the adapter is not started")
            (result,) = await committed(inbox.submit_many([inbound], cursor=cursor), inbox.ask_timeout_s)
        except Exception:
            _log.exception("teams bot %r: could not accept message %s", bot.name, inbound.message_id)
            return _answer(503, {"error": "the activity could not be stored; deliver it again"})
        if result.duplicate:
            _log.info("teams bot %r: message %s was already stored", bot.name, inbound.message_id)
        return _answer(200, {"ok": True, "duplicate": result.duplicate, "routing_key": result.routing_key})
