"""The ``platforms.discord`` section of ``config.yaml``: the bots, where Discord lives, and connection timing.

Each bot is an account: its name in ``bots`` is the ``account_id`` of every message it receives, so two bots in
the same guild never share a session. Tokens can live in environment variables named here; the adapter reads them
when it is built. ``api_base_url`` and ``gateway_url`` point elsewhere only for tests (a local fake of Discord).
"""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import urlsplit

import msgspec
from msgspec import Meta

from hermes_actors.constraints import AccountName, NonNegativeSeconds, PositiveSeconds, Rule, check_section
from hermes_actors.errors import ConfigError
from hermes_actors.section_parts import SectionParts
from platforms.support.cluster_parts import split_accounts
from platforms.support.fetch_policy import FetchPolicy, FetchSettings
from platforms.support.secrets import check_secret_source

__all__ = [
    "CDN_HOSTS",
    "DEFAULT_API_BASE_URL",
    "MAX_MESSAGE_CHARS",
    "DiscordBot",
    "DiscordConfig",
    "check_token",
    "cluster_parts",
]

DEFAULT_API_BASE_URL = "https://discord.com/api/v10"
MAX_MESSAGE_CHARS = 2000  # a message's content limit
CDN_HOSTS = ("*.discordapp.com", "*.discordapp.net")  # cdn.discordapp.com, media.discordapp.net
"""The hosts an attachment's ``url`` may name; ``fetch.hosts`` adds to them."""

_SECTION = "platforms.discord"
_TOKEN = re.compile(r"[A-Za-z0-9_-]{10,100}\.[A-Za-z0-9_-]{4,100}\.[A-Za-z0-9_-]{10,200}")
_MessageChars = Annotated[
    int,
    Rule(
        Meta(ge=100, le=MAX_MESSAGE_CHARS),
        f"must be between 100 and {MAX_MESSAGE_CHARS} (Discord refuses longer messages)",
    ),
]
_Rate = Annotated[float, Rule(Meta(gt=0), "must be a positive rate; Discord allows 50")]
_FrameBytes = Annotated[int, Rule(Meta(ge=64 * 1024), "must be at least 65536 bytes; the default is 32 MiB")]


class DiscordBot(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One bot (``platforms.discord.bots.<name>``): its token, or the environment variable holding it.

    The token is the one on the application's Bot page in the Discord Developer Portal, without a ``Bot `` prefix.
    """

    token: str | None = None
    token_env: str | None = None


class DiscordConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``platforms.discord`` section; nothing runs when ``enabled`` is false or there are no bots.

    ``gateway_url`` unset asks ``GET {api_base_url}/gateway/bot`` for it at each new session. The
    ``message_content_intent`` is privileged: enable "Message Content Intent" on the Bot page, or set it false
    (guild messages then arrive without text unless they mention the bot). ``reconnect_*`` bound the backoff
    between failed connection attempts; ``identify_wait_*`` is the random wait before a new session after Discord
    invalidated the old one (its docs ask for 1 to 5 s). ``fetch`` widens where attachments may be downloaded from
    (:data:`CDN_HOSTS`, at public addresses).
    """

    enabled: bool = True
    api_base_url: str = DEFAULT_API_BASE_URL
    gateway_url: str | None = None
    bots: dict[AccountName, DiscordBot] = msgspec.field(default_factory=dict)
    message_content_intent: bool = True
    max_message_chars: _MessageChars = MAX_MESSAGE_CHARS
    request_timeout_s: PositiveSeconds = 15.0
    requests_per_second: _Rate = 50.0  # per bot, Discord's global REST limit
    reconnect_min_s: PositiveSeconds = 1.0
    reconnect_max_s: float = 60.0
    identify_wait_min_s: NonNegativeSeconds = 1.0
    identify_wait_max_s: PositiveSeconds = 5.0
    hello_timeout_s: PositiveSeconds = 20.0
    max_frame_bytes: _FrameBytes = 32 * 1024 * 1024
    fetch: FetchSettings = msgspec.field(default_factory=FetchSettings)

    def __post_init__(self) -> None:
        check_section(self, _SECTION)
        parts = urlsplit(self.api_base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            raise ConfigError(
                f"{_SECTION}.api_base_url", f"must be an http(s) URL such as {DEFAULT_API_BASE_URL} (no query)"
            )
        if self.gateway_url is not None:
            gateway = urlsplit(self.gateway_url)
            if gateway.scheme not in ("ws", "wss") or not gateway.hostname:
                raise ConfigError(
                    f"{_SECTION}.gateway_url",
                    "must be a ws(s):// URL such as wss://gateway.discord.gg, or left out to ask Discord for it",
                )
        if self.reconnect_max_s < self.reconnect_min_s:
            raise ConfigError(f"{_SECTION}.reconnect_max_s", "must not be smaller than reconnect_min_s")
        if self.identify_wait_max_s < self.identify_wait_min_s:
            raise ConfigError(f"{_SECTION}.identify_wait_max_s", "must not be smaller than identify_wait_min_s")
        self.fetch.check(f"{_SECTION}.fetch")
        for name, bot in self.bots.items():
            _check_bot(name, bot)

    @property
    def api_base(self) -> str:
        """``api_base_url`` without a trailing slash."""
        return self.api_base_url.rstrip("/")

    @property
    def fetch_policy(self) -> FetchPolicy:
        """Where the URLs of a message's attachments may be fetched from."""
        return FetchPolicy(self.fetch, platform="Discord", hosts=CDN_HOSTS, setting=f"{_SECTION}.fetch")


def check_token(token: str, path: str, what: str = "") -> str:
    """Return ``token`` if it has the shape of a bot token; else :class:`ConfigError` at ``path``."""
    subject = f"{what} must" if what else "must"
    if token.startswith(("Bot ", "Bearer ")):
        raise ConfigError(path, f"{subject} be the bare token, without the {token.split()[0]!r} prefix")
    if not _TOKEN.fullmatch(token):
        raise ConfigError(
            path,
            f"{subject} be a bot token as the Developer Portal shows it (three dot-separated parts of letters, "
            "digits, '_' or '-'); reset it on the application's Bot page if it is lost",
        )
    return token


def _check_bot(name: str, bot: DiscordBot) -> None:
    path = f"{_SECTION}.bots.{name}"
    check_secret_source(
        path,
        "token",
        bot.token,
        bot.token_env,
        example_env="DISCORD_BOT_TOKEN",
        missing="is required: set token to the bot token, or token_env to a variable holding it",
    )
    if bot.token is not None:
        check_token(bot.token, f"{path}.token")


def cluster_parts(config: DiscordConfig) -> SectionParts:
    """How the section runs in cluster mode (:func:`~platforms.support.cluster_parts.split_accounts`).

    Each bot's gateway leased on its own, keyed by its name (the ``account_id`` of its messages).
    """
    return split_accounts(config, "bots")
