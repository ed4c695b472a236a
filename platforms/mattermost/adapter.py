"""The Mattermost adapter: a websocket per bot in, REST posts out, threads for handoffs.

Built from a :class:`~platforms.mattermost.config.MattermostConfig`; tokens named by ``token_env`` are read here, so
a missing one is a :class:`ConfigError` before anything starts. ``start`` launches the bots' connections in the
background (a refused token is logged with the fix; the daemon keeps running its other platforms).
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import msgspec

from platforms.base import Capabilities, ReplySender
from platforms.mattermost.config import MattermostConfig, check_token
from platforms.mattermost.connection import BotConnection
from platforms.mattermost.events import PLATFORM
from platforms.mattermost.rest import RestClient
from platforms.mattermost.sender import MattermostSender
from platforms.support.connections import Connections
from platforms.support.http_client import shown
from platforms.support.secrets import resolve_secret, secret_origin

if TYPE_CHECKING:
    from hermes_actors.ports import ChatInbox

__all__ = ["MattermostAdapter"]

_log = logging.getLogger(__name__)


class _Bot(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    token: str
    origin: str  # for the banner: where the token comes from


def _resolve(name: str, config: MattermostConfig, environ: Mapping[str, str]) -> _Bot:
    bot = config.bots[name]
    path = f"platforms.mattermost.bots.{name}.token"
    token = resolve_secret(
        path, bot.token, bot.token_env, environ, export="export the token", strip=True, check=check_token
    )
    assert token is not None  # MattermostConfig requires token or token_env
    return _Bot(name=name, token=token, origin=secret_origin("token", bot.token_env))


class MattermostAdapter:
    """Every bot of a :class:`MattermostConfig`: its websocket and the shared reply sender.

    ``clock`` stamps received posts (and the first read position); ``monotonic`` paces REST calls; ``rng`` jitters
    reconnects.
    """

    platform = PLATFORM

    def __init__(
        self,
        config: MattermostConfig,
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
        self._sender = MattermostSender(self._rest, max_message_chars=config.max_message_chars)
        self._connections = Connections(
            "bot", self._bots, thread="hermes-mattermost", label="mattermost: the websocket", log=_log
        )
        self._started = False

    def senders(self) -> Sequence[ReplySender]:
        """The one sender for every bot's replies (it also opens handoff threads)."""
        return [self._sender]

    def start(self, inbox: ChatInbox) -> None:
        """Connect every bot, catching up on what was posted since its stored read position."""
        if not self._bots:
            _log.warning("mattermost: no bots are configured; add one under platforms.mattermost.bots")
            return
        links = self._connections.links
        self._started = True
        self._connections.start(
            [
                BotConnection(name, self._rest[name], inbox, self.config, links, clock=self._clock, rng=self._rng)
                for name in self._bots
            ]
        )

    def stop(self, timeout: float = 10.0) -> None:
        """Close the connections; the next start catches up on what was posted meanwhile."""
        self._connections.stop(timeout)

    def status(self) -> dict[str, str]:
        """Each bot's state: ``starting``, ``connected``, ``reconnecting (...)`` or ``stopped: ...``."""
        return self._connections.states() if self._started else dict.fromkeys(self._bots, "not started")

    def connection_problem(self) -> str | None:
        """Each bot whose websocket is down, with its state (``reconnecting (...)`` after a failed or dropped
        connection, ``stopped: ...`` naming the fix); ``None`` while every bot is connected or still in its first
        connect."""
        return self._connections.problem()

    def describe(self) -> list[str]:
        """One banner line per bot: where it connects and how it replies."""
        if not self._bots:
            return [
                "Mattermost: no bots; add one under platforms.mattermost.bots in config.yaml "
                "(token_env: MATTERMOST_BOT_TOKEN holding a bot account's access token)"
            ]
        return [
            f"Mattermost bot '{bot.name}' ({bot.origin}): websocket {shown(self.config.websocket_url)}, catching up "
            f"over REST after each reconnect; replies via {shown(self.config.api_base + '/posts')} in parts of "
            f"{self.config.max_message_chars} characters; files are downloaded into the media store"
            for bot in self._bots.values()
        ]
