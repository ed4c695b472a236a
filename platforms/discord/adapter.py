"""The Discord adapter: a gateway websocket per bot in, REST replies out, threads for handoffs.

Built from a :class:`~platforms.discord.config.DiscordConfig`; tokens named by ``token_env`` are read here, so a
missing one is a :class:`ConfigError` before anything starts. ``start`` launches the bots' gateway connections in
the background (a refused token is logged with the fix; the daemon keeps running its other platforms). Messages'
attachments are fetched into ``inbox.media`` before they are accepted (:mod:`platforms.discord.files`).
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import msgspec

from hermes_actors.errors import PlatformError
from platforms.base import Capabilities, ReplySender
from platforms.discord.config import DiscordConfig, check_token
from platforms.discord.events import PLATFORM, ChannelCache
from platforms.discord.rest import RestClient
from platforms.discord.sender import DiscordSender
from platforms.discord.shard import Shard
from platforms.support.connections import Connections
from platforms.support.credentials import fetch_json
from platforms.support.http_client import shown
from platforms.support.secrets import resolve_secret, secret_origin

if TYPE_CHECKING:
    from hermes_actors.ports import ChatInbox

__all__ = ["DiscordAdapter"]

_log = logging.getLogger(__name__)


class _Bot(msgspec.Struct, frozen=True, kw_only=True):
    """A configured bot with its token read."""

    name: str
    token: str
    origin: str  # for the banner: where the token comes from


def _resolve(name: str, config: DiscordConfig, environ: Mapping[str, str]) -> _Bot:
    bot = config.bots[name]
    path = f"platforms.discord.bots.{name}.token"
    token = resolve_secret(
        path, bot.token, bot.token_env, environ, export="export the token", strip=True, check=check_token
    )
    assert token is not None  # DiscordConfig requires token or token_env
    return _Bot(name=name, token=token, origin=secret_origin("token", bot.token_env))


class DiscordAdapter:
    """Every bot of a :class:`DiscordConfig`: its gateway connection and the shared reply sender.

    ``clock`` stamps received messages; ``monotonic`` times rate-limit buckets; ``rng`` jitters heartbeats and
    reconnects.
    """

    platform = PLATFORM

    def __init__(
        self,
        config: DiscordConfig,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        env = os.environ if environ is None else environ
        self._bots = {name: _resolve(name, config, env) for name in config.bots}
        self._clock = clock
        self._rng = rng or random.Random()
        self.capabilities = Capabilities(threads=True, max_message_chars=config.max_message_chars)
        self.cache = ChannelCache()
        self._rest = {
            name: RestClient(
                name,
                bot.token,
                config.api_base,
                timeout_s=config.request_timeout_s,
                requests_per_second=config.requests_per_second,
                clock=monotonic,
            )
            for name, bot in self._bots.items()
        }
        self._sender = DiscordSender(self._rest, self.cache, max_message_chars=config.max_message_chars)
        self._shards = Connections(
            "bot", self._bots, thread="hermes-discord-gateway", label="discord: the gateway", log=_log
        )
        self._started = False

    def check_credentials(self, *, timeout_s: float) -> list[str]:
        """``GET /users/@me`` with every bot's token: one line per bot naming its user; :class:`PlatformError` for
        a token Discord refuses."""
        seen = []
        for name, bot in self._bots.items():
            what = f"discord bot {name!r}: GET /users/@me"
            headers = {"Authorization": f"Bot {bot.token}"}
            status, body = fetch_json(
                self.config.api_base + "/users/@me", what=what, headers=headers, timeout_s=timeout_s
            )
            if status != 200 or not isinstance(body, dict):
                said = body.get("message") if isinstance(body, dict) else None
                raise PlatformError(f"{what} answered HTTP {status} ({said or 'no message'}); check the token")
            seen.append(f"bot {name!r} is {body.get('username')} (id {body.get('id')})")
        return seen

    def senders(self) -> Sequence[ReplySender]:
        """The one sender for every bot's replies (it also opens handoff threads)."""
        return [self._sender]

    def start(self, inbox: ChatInbox) -> None:
        """Connect every bot to the gateway, resuming a stored session where there is one."""
        if not self._bots:
            _log.warning("discord: no bots are configured; add one under platforms.discord.bots")
            return
        shards = [
            Shard(
                bot.name,
                bot.token,
                self._rest[bot.name],
                inbox,
                self.config,
                self.cache,
                self._shards.links,
                clock=self._clock,
                rng=self._rng,
            )
            for bot in self._bots.values()
        ]
        self._started = True
        self._shards.start(shards)

    def stop(self, timeout: float = 10.0) -> None:
        """Close the connections (resumably, so a restart soon after misses nothing)."""
        self._shards.stop(timeout)

    def status(self) -> dict[str, str]:
        """Each bot's connection state: ``starting``, ``connected``, ``reconnecting (...)`` or ``stopped: ...``."""
        return self._shards.states() if self._started else dict.fromkeys(self._bots, "not started")

    def connection_problem(self) -> str | None:
        """Each bot whose gateway connection is down, with its state (``reconnecting (...)`` after a failed or
        dropped connection, ``stopped: ...`` naming the fix); ``None`` while every bot is connected or still in its
        first connect."""
        return self._shards.problem()

    def describe(self) -> list[str]:
        """One banner line per bot: where it connects and how it replies."""
        if not self._bots:
            return [
                "Discord: no bots; add one under platforms.discord.bots in config.yaml "
                "(token_env: DISCORD_BOT_TOKEN holding the token from the Developer Portal's Bot page)"
            ]
        where = shown(self.config.gateway_url) if self.config.gateway_url else "the URL from GET /gateway/bot"
        content = "" if self.config.message_content_intent else " without the Message Content intent"
        return [
            f"Discord bot '{bot.name}' ({bot.origin}): gateway websocket to {where}{content}; replies via "
            f"{shown(self.config.api_base)} in parts of {self.config.max_message_chars} characters; "
            "attachments are downloaded into the media store (a stand-in like [image: name] stays in the text)"
            for bot in self._bots.values()
        ]
