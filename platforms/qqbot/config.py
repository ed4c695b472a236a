"""The ``platforms.qqbot`` section of ``config.yaml``: the QQ bots (open-platform apps), where their secrets come
from, the addresses of QQ's token service and OpenAPI, and how old a signed callback may be.

Each bot (``platforms.qqbot.bots.<name>``) is one app of the QQ Bot open platform: its ``app_id`` (AppID) is the
account in session keys, its secret (AppSecret, ``secret`` or the variable named by ``secret_env``) both fetches
access tokens and derives the Ed25519 key pair QQ signs callbacks with. QQ calls ``POST /qqbot/<name>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal
from urllib.parse import urlsplit

import msgspec
from msgspec import Meta

from hermes_actors.constraints import (
    AccountName,
    BodyBytes,
    ListenHost,
    Port,
    PositiveRate,
    PositiveSeconds,
    Rule,
    check_section,
)
from hermes_actors.errors import ConfigError
from hermes_actors.section_parts import SectionParts
from platforms.support.cluster_parts import split_accounts
from platforms.support.fetch_policy import FetchPolicy, FetchSettings
from platforms.support.secrets import check_secret_source, read_env_secret, secret_origin

__all__ = [
    "DEFAULT_API_BASE_URL",
    "DEFAULT_INTENTS",
    "DEFAULT_TOKEN_URL",
    "MEDIA_HOSTS",
    "QqbotBot",
    "QqbotConfig",
    "ResolvedBot",
    "cluster_parts",
    "resolve_bots",
]

DEFAULT_API_BASE_URL = "https://api.sgroup.qq.com"
DEFAULT_TOKEN_URL = "https://bots.qq.com/app/getAppAccessToken"
MEDIA_HOSTS = (
    "*.qq.com.cn",  # multimedia.nt.qq.com.cn: the files of direct and group messages
    "*.qpic.cn",  # gchat.qpic.cn: the pictures of guild messages
    "*.qq.com",
)
"""The hosts an attachment's ``url`` may name; ``fetch.hosts`` adds to them."""
GROUP_AND_C2C_EVENT, PUBLIC_GUILD_MESSAGES = 1 << 25, 1 << 30
DEFAULT_INTENTS = GROUP_AND_C2C_EVENT | PUBLIC_GUILD_MESSAGES
_SECTION = "platforms.qqbot"
_AppId = Annotated[
    str, Rule(Meta(pattern=r"^[0-9]{4,20}\Z"), "must be the bot's AppID: digits, as shown on the QQ open platform")
]
_Intents = Annotated[int, Rule(Meta(gt=0, lt=1 << 31), "must be a positive 31-bit intents mask")]
_MessageChars = Annotated[int, Rule(Meta(ge=2, le=10_000), "must be between 2 and 10000")]


class QqbotBot(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One QQ bot: its AppID (digits) and AppSecret, as shown under the app's development settings, and how its
    events arrive: ``callback`` (QQ POSTs them to ``/qqbot/<name>``) or ``websocket`` (the bot connects to QQ's
    gateway; QQ delivers by one or the other, as set on the open platform)."""

    app_id: _AppId
    secret: str | None = None
    secret_env: str | None = None
    mode: Literal["callback", "websocket"] = "callback"


class QqbotConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``platforms.qqbot`` section; QQ POSTs each bot's events to ``http://host:port/qqbot/<bot>``.

    ``token_url`` and ``api_base_url`` are QQ's by default (the sandbox OpenAPI is
    ``https://sandbox.api.sgroup.qq.com``). ``max_skew_s`` is how far ``X-Signature-Timestamp`` may be from this
    host's clock: an older signed request is refused as stale. ``messages_per_second`` paces each chat.
    ``fetch`` widens where attachments may be downloaded from (:data:`MEDIA_HOSTS`, at public addresses).
    """

    enabled: bool = True
    host: ListenHost = "127.0.0.1"
    port: Port = 8662
    intents: _Intents = DEFAULT_INTENTS
    reconnect_min_s: PositiveSeconds = 1.0
    reconnect_max_s: float = 60.0
    hello_timeout_s: PositiveSeconds = 20.0
    token_url: str = DEFAULT_TOKEN_URL
    api_base_url: str = DEFAULT_API_BASE_URL
    max_skew_s: PositiveSeconds = 300.0
    max_message_chars: _MessageChars = 2000
    messages_per_second: PositiveRate = 5.0
    max_body_bytes: BodyBytes = 1024 * 1024
    http_timeout_s: PositiveSeconds = 10.0
    bots: dict[AccountName, QqbotBot] = msgspec.field(default_factory=dict)
    fetch: FetchSettings = msgspec.field(default_factory=FetchSettings)

    def __post_init__(self) -> None:
        check_section(self, _SECTION)
        _check_url("token_url", self.token_url, DEFAULT_TOKEN_URL)
        _check_url("api_base_url", self.api_base_url, DEFAULT_API_BASE_URL)
        self.fetch.check(f"{_SECTION}.fetch")
        if self.reconnect_max_s < self.reconnect_min_s:
            raise ConfigError(f"{_SECTION}.reconnect_max_s", "must be at least reconnect_min_s")
        if self.enabled and not self.bots:
            raise ConfigError(f"{_SECTION}.bots", "name at least one bot, such as bots: {main: {app_id: ...}}")
        seen: set[str] = set()
        for name, bot in self.bots.items():
            path = f"{_SECTION}.bots.{name}"
            if bot.app_id in seen:
                raise ConfigError(f"{path}.app_id", f"app {bot.app_id} is configured twice")
            seen.add(bot.app_id)
            check_secret_source(
                path,
                "secret",
                bot.secret,
                bot.secret_env,
                example_env="QQBOT_SECRET",
                missing="is required: set secret_env to a variable holding the bot's AppSecret",
            )
            if bot.secret is not None and (not bot.secret or bot.secret != bot.secret.strip()):
                raise ConfigError(f"{path}.secret", "must not be empty or have spaces around it")

    @property
    def api_base(self) -> str:
        """``api_base_url`` without a trailing slash."""
        return self.api_base_url.rstrip("/")

    @property
    def fetch_policy(self) -> FetchPolicy:
        """Where the URLs of a message's attachments may be fetched from."""
        return FetchPolicy(self.fetch, platform="QQ", hosts=MEDIA_HOSTS, setting=f"{_SECTION}.fetch")


def _check_url(field: str, url: str, example: str) -> None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        raise ConfigError(f"{_SECTION}.{field}", f"must be an http(s) URL such as {example}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.fragment or parts.query:
        raise ConfigError(f"{_SECTION}.{field}", f"must be an http(s) URL such as {example} (no query)")


class ResolvedBot(msgspec.Struct, frozen=True, kw_only=True):
    """A bot with its secret read; ``origin`` says where the secret came from (for the banner)."""

    name: str
    app_id: str
    secret: str
    origin: str
    mode: str = "callback"


def resolve_bots(config: QqbotConfig, environ: Mapping[str, str]) -> dict[str, ResolvedBot]:
    """Each bot by name with its secret read from the config or ``environ``; :class:`ConfigError` names a missing
    variable."""
    resolved: dict[str, ResolvedBot] = {}
    for name, bot in config.bots.items():
        if bot.secret_env is None:
            secret = bot.secret or ""
        else:
            secret = read_env_secret(
                f"{_SECTION}.bots.{name}.secret_env", bot.secret_env, environ, export="export the AppSecret", strip=True
            )
        resolved[name] = ResolvedBot(
            name=name,
            app_id=bot.app_id,
            secret=secret,
            origin=secret_origin("AppSecret", bot.secret_env),
            mode=bot.mode,
        )
    return resolved


def cluster_parts(config: QqbotConfig) -> SectionParts:
    """How the section runs in cluster mode (:func:`~platforms.support.cluster_parts.split_accounts`).

    Each websocket bot leased on its own, keyed by its app id (the ``account_id`` of its events); the callback
    bots served together by every replica.
    """
    return split_accounts(
        config, "bots", wire_id=lambda name, bot: bot.app_id, served=lambda bot: bot.mode == "callback"
    )
