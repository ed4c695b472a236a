"""The ``platforms.slack`` section of ``config.yaml``: the apps, their signing secrets and bot tokens."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated
from urllib.parse import urlsplit

import msgspec
from msgspec import Meta

from hermes_actors.constraints import (
    AccountName,
    BodyBytes,
    ListenHost,
    Port,
    PositiveSeconds,
    Rule,
    check_section,
)
from hermes_actors.errors import ConfigError
from platforms.support.fetch_policy import FetchPolicy, FetchSettings
from platforms.support.secrets import check_secret_source, read_env_secret, secret_origin

__all__ = ["FILE_HOSTS", "MAX_TEXT_CHARS", "SLACK_ID", "ResolvedApp", "SlackApp", "SlackConfig", "resolve_app"]

FILE_HOSTS = ("slack.com", "*.slack.com")  # files.slack.com
"""The hosts a file's ``url_private_download`` may name; ``fetch.hosts`` adds to them."""

MAX_TEXT_CHARS = 40_000  # Slack truncates longer message text
SLACK_ID = re.compile(r"[A-Z0-9]{1,32}")  # team, channel and user ids: T0123, C0123, U0123, W0123
_SECTION = "platforms.slack"
_MessageChars = Annotated[
    int,
    Rule(Meta(ge=100, le=MAX_TEXT_CHARS), f"must be between 100 and {MAX_TEXT_CHARS} (Slack truncates longer text)"),
]
_Rate = Annotated[float, Rule(Meta(gt=0), "must be a positive rate; Slack allows about 1")]


class SlackApp(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One Slack app (``platforms.slack.apps.<name>``); the name is the account in session keys.

    ``signing_secret`` and ``bot_token`` (``xoxb-...``) come from the app's settings page, or from the
    environment variables named by ``signing_secret_env`` and ``bot_token_env``. ``team_id`` limits the app to one
    workspace: events from any other are refused, since its bot token could not answer them.
    """

    signing_secret: str | None = None
    signing_secret_env: str | None = None
    bot_token: str | None = None
    bot_token_env: str | None = None
    team_id: str | None = None


class SlackConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``platforms.slack`` section; Slack posts events to ``http://host:port/slack/events/<app>``.

    ``fetch`` widens where files may be downloaded from (:data:`FILE_HOSTS`, at public addresses).
    """

    enabled: bool = True
    host: ListenHost = "127.0.0.1"
    port: Port = 8647
    api_base_url: str = "https://slack.com/api"
    reply_in_thread: bool = True
    max_message_chars: _MessageChars = 3_900
    messages_per_second: _Rate = 1.0  # per channel; Slack allows about one, with short bursts
    max_body_bytes: BodyBytes = 1024 * 1024
    http_timeout_s: PositiveSeconds = 10.0
    apps: dict[AccountName, SlackApp] = msgspec.field(default_factory=dict)
    fetch: FetchSettings = msgspec.field(default_factory=FetchSettings)

    def __post_init__(self) -> None:
        check_section(self, _SECTION)
        parts = urlsplit(self.api_base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"{_SECTION}.api_base_url", "must be an http(s) URL such as https://slack.com/api")
        self.fetch.check(f"{_SECTION}.fetch")
        for name, app in self.apps.items():
            _check_app(name, app)

    @property
    def fetch_policy(self) -> FetchPolicy:
        """Where the URLs of an event's files may be fetched from."""
        return FetchPolicy(self.fetch, platform="Slack", hosts=FILE_HOSTS, setting=f"{_SECTION}.fetch")


def _check_app(name: str, app: SlackApp) -> None:
    path = f"{_SECTION}.apps.{name}"
    for what, value, env in (
        ("signing_secret", app.signing_secret, app.signing_secret_env),
        ("bot_token", app.bot_token, app.bot_token_env),
    ):
        missing = (
            f"is required; copy it from the app's settings at api.slack.com/apps, or name an environment "
            f"variable holding it in {what}_env"
        )
        check_secret_source(path, what, value, env, example_env="SLACK_BOT_TOKEN", missing=missing)
        if value is not None and (not value or value != value.strip()):
            raise ConfigError(f"{path}.{what}", "must not be empty or have spaces around it")
    if app.team_id is not None and not SLACK_ID.fullmatch(app.team_id):
        raise ConfigError(f"{path}.team_id", "must be a Slack workspace id such as T0123ABCD")


class ResolvedApp(msgspec.Struct, frozen=True, kw_only=True):
    """An app with its secrets read."""

    name: str
    signing_key: bytes
    bot_token: str
    team_id: str | None
    origin: str  # for the banner: where the secrets come from


def _secret(name: str, what: str, value: str | None, env: str | None, environ: Mapping[str, str]) -> str:
    if env is None:
        return value or ""
    return read_env_secret(f"{_SECTION}.apps.{name}.{what}_env", env, environ, strip=True)


def resolve_app(name: str, app: SlackApp, environ: Mapping[str, str]) -> ResolvedApp:
    secret = _secret(name, "signing_secret", app.signing_secret, app.signing_secret_env, environ)
    token = _secret(name, "bot_token", app.bot_token, app.bot_token_env, environ)
    origin = ", ".join(
        secret_origin(what, env)
        for what, env in (("signing secret", app.signing_secret_env), ("bot token", app.bot_token_env))
    )
    return ResolvedApp(name=name, signing_key=secret.encode(), bot_token=token, team_id=app.team_id, origin=origin)
