"""The ``platforms.teams`` section of ``config.yaml``: the bots (Azure Bot registrations), where their keys and
tokens come from, and send rates."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated
from urllib.parse import urlsplit

import msgspec
from msgspec import Meta

from hermes_actors.constraints import (
    AccountName,
    BodyBytes,
    ListenHost,
    NonNegativeSeconds,
    Port,
    PositiveRate,
    PositiveSeconds,
    Rule,
    check_section,
)
from hermes_actors.errors import ConfigError
from platforms.support.fetch_policy import FetchPolicy, FetchSettings
from platforms.support.secrets import check_secret_source, read_env_secret, secret_origin

__all__ = [
    "DEFAULT_LOGIN_URL",
    "DEFAULT_OPENID_METADATA_URL",
    "FILE_HOSTS",
    "MAX_TEXT_CHARS",
    "ResolvedBot",
    "TeamsBot",
    "TeamsConfig",
    "resolve_bot",
]

DEFAULT_OPENID_METADATA_URL = "https://login.botframework.com/v1/.well-known/openidconfiguration"
DEFAULT_LOGIN_URL = "https://login.microsoftonline.com"
FILE_HOSTS = (
    "smba.trafficmanager.net",  # the Bot Connector of Teams: pasted images
    "*.botframework.com",  # Web Chat, Direct Line and the other channels' connectors
    "*.teams.microsoft.com",  # the Bot Connector of GCC, Teams' media service
    "*.teams.microsoft.us",  # the Bot Connector of GCC High and DoD
    "*.asm.skype.com",  # Teams' media service: inline images
    "*.sharepoint.com",  # files sent in a personal chat (file.download.info's downloadUrl)
)
"""The hosts a Teams attachment's ``contentUrl`` or ``downloadUrl`` may name; ``fetch.hosts`` adds to them."""
MAX_TEXT_CHARS = 28_000  # Teams refuses a message over about 28 KB; characters are a safe measure below that
_SECTION = "platforms.teams"
_AppId = Annotated[
    str,
    Rule(
        Meta(pattern=r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z"),
        "must be the bot's Microsoft App ID, a GUID such as 8a2e5c1f-0b6d-4e2a-9c31-5f7d8e9a0b1c",
    ),
]
_TenantId = Annotated[  # a tenant GUID, or a domain such as botframework.com
    str, Rule(Meta(pattern=r"^[A-Za-z0-9.-]{1,128}\Z"), "must be a Microsoft Entra tenant id (a GUID)")
]
_ClockSkew = Annotated[float, Rule(Meta(ge=0, le=600), "must be 0..600 seconds; the default is 60")]
_MessageChars = Annotated[
    int,
    Rule(
        Meta(ge=100, le=MAX_TEXT_CHARS),
        f"must be between 100 and {MAX_TEXT_CHARS} (Teams refuses messages over about 28 KB)",
    ),
]


class TeamsBot(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One bot (``platforms.teams.bots.<name>``); the name is the account in session keys.

    ``app_id`` is the Microsoft App ID of the Azure Bot registration; ``app_password`` (or the variable named by
    ``app_password_env``) its client secret. ``tenant_id`` is set for a single-tenant app: its tokens come from
    that tenant and activities from any other tenant are refused.
    """

    app_id: _AppId
    app_password: str | None = None
    app_password_env: str | None = None
    tenant_id: _TenantId | None = None


class TeamsConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``platforms.teams`` section; the Bot Connector POSTs to ``http://host:port/teams/messages/<bot>``.

    ``openid_metadata_url`` is where the Bot Connector's signing keys are announced; ``login_url`` where the
    client-credentials tokens for replies come from (``{login_url}/{tenant}/oauth2/v2.0/token``). Both are
    Microsoft's by default and only change for tests or sovereign clouds. ``clock_skew_s`` is how far a token's
    ``exp`` and ``nbf`` may be off; ``keys_min_refresh_s`` how often an unknown key id may make the keys be fetched
    again (a forged token cannot make us fetch them on every request). ``fetch`` widens where attachments may be
    downloaded from (:data:`FILE_HOSTS`, at public addresses, by default).
    """

    enabled: bool = True
    host: ListenHost = "127.0.0.1"
    port: Port = 3978
    openid_metadata_url: str = DEFAULT_OPENID_METADATA_URL
    login_url: str = DEFAULT_LOGIN_URL
    clock_skew_s: _ClockSkew = 60.0
    keys_min_refresh_s: NonNegativeSeconds = 60.0
    keys_max_age_s: NonNegativeSeconds = 86_400.0
    max_message_chars: _MessageChars = 4_000
    messages_per_second: PositiveRate = 1.0  # per conversation; Teams allows about 7 a second, 60 in 30 s
    max_body_bytes: BodyBytes = 1024 * 1024
    http_timeout_s: PositiveSeconds = 10.0
    bots: dict[AccountName, TeamsBot] = msgspec.field(default_factory=dict)
    fetch: FetchSettings = msgspec.field(default_factory=FetchSettings)

    def __post_init__(self) -> None:
        check_section(self, _SECTION)
        for field, example in (
            ("openid_metadata_url", DEFAULT_OPENID_METADATA_URL),
            ("login_url", DEFAULT_LOGIN_URL),
        ):
            parts = urlsplit(getattr(self, field))
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ConfigError(f"{_SECTION}.{field}", f"must be an http(s) URL such as {example}")
        self.fetch.check(f"{_SECTION}.fetch")
        for name, bot in self.bots.items():
            _check_bot(name, bot)

    @property
    def fetch_policy(self) -> FetchPolicy:
        """Where the URLs of an activity's attachments may be fetched from."""
        return FetchPolicy(self.fetch, platform="Teams", hosts=FILE_HOSTS, setting=f"{_SECTION}.fetch")


def _check_bot(name: str, bot: TeamsBot) -> None:
    path = f"{_SECTION}.bots.{name}"
    missing = (
        "is required; create a client secret under the Azure Bot's Configuration > Manage Password, or name an "
        "environment variable holding it in app_password_env"
    )
    check_secret_source(
        path, "app_password", bot.app_password, bot.app_password_env, example_env="TEAMS_APP_PASSWORD", missing=missing
    )
    if bot.app_password is not None and (not bot.app_password or bot.app_password != bot.app_password.strip()):
        raise ConfigError(f"{path}.app_password", "must not be empty or have spaces around it")


class ResolvedBot(msgspec.Struct, frozen=True, kw_only=True):
    """A bot with its secret read."""

    name: str
    app_id: str
    password: str
    tenant_id: str | None  # single-tenant: the only tenant it serves
    origin: str  # for the banner: where the password comes from

    @property
    def login_tenant(self) -> str:
        """The tenant its tokens come from: its own, or ``botframework.com`` for a multi-tenant app."""
        return self.tenant_id or "botframework.com"


def resolve_bot(name: str, bot: TeamsBot, environ: Mapping[str, str]) -> ResolvedBot:
    """``bot`` with its password read (from ``environ`` when ``app_password_env`` names a variable)."""
    password = bot.app_password or ""
    if bot.app_password_env is not None:
        path = f"{_SECTION}.bots.{name}.app_password_env"
        password = read_env_secret(path, bot.app_password_env, environ, export="export the bot's client secret")
    return ResolvedBot(
        name=name,
        app_id=bot.app_id,
        password=password,
        tenant_id=bot.tenant_id,
        origin=secret_origin("app password", bot.app_password_env),
    )
