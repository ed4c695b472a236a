"""The ``platforms.telegram`` section of ``config.yaml``: the Bot API address, the bots, and send rates.

Each bot is an account: its name in ``bots`` is the ``account_id`` of every message it receives, so it is part of
the session key (two bots that see the same chat id never share a session). Tokens and webhook secrets can live in
environment variables named here; the adapter reads them when it is built.
"""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import urlsplit

import msgspec
from msgspec import Meta

from hermes_actors.constraints import (
    AccountName,
    BodyBytes,
    Burst,
    ListenHost,
    Port,
    PositiveSeconds,
    Rule,
    check_section,
)
from hermes_actors.errors import ConfigError
from hermes_actors.section_parts import SectionParts
from platforms.support.cluster_parts import split_accounts
from platforms.support.secrets import check_secret_source

__all__ = [
    "DEFAULT_BASE_URL",
    "MODES",
    "TelegramBot",
    "TelegramConfig",
    "check_secret_token",
    "check_token",
    "cluster_parts",
]

DEFAULT_BASE_URL = "https://api.telegram.org"
MODES = ("polling", "webhook")

_TOKEN = re.compile(r"[0-9]{1,20}:[A-Za-z0-9_-]{1,128}")  # <bot id>:<secret>, as @BotFather hands it out
_SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")  # what setWebhook accepts as secret_token
_MAX_POLL_TIMEOUT_S = 50  # the Bot API holds a long poll for at most about this long
_SECTION = "platforms.telegram"
_Rate = Annotated[float, Rule(Meta(gt=0), "must be a positive rate")]
_PollTimeout = Annotated[
    int,
    Rule(
        Meta(ge=1, le=_MAX_POLL_TIMEOUT_S),
        f"must be 1..{_MAX_POLL_TIMEOUT_S} seconds: how long Telegram holds a long poll open",
    ),
]


class TelegramBot(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One bot (``platforms.telegram.bots.<name>``).

    ``token`` (or the environment variable named by ``token_env``) is the token from @BotFather. ``mode`` is
    ``polling`` (``getUpdates``) or ``webhook`` (Telegram POSTs updates to ``/telegram/<name>``, each carrying
    ``secret_token`` in the ``X-Telegram-Bot-Api-Secret-Token`` header). With ``webhook_url`` set the adapter
    registers that public URL with ``setWebhook`` at start; without it, register it yourself.
    """

    token: str | None = None
    token_env: str | None = None
    mode: str = "polling"
    secret_token: str | None = None
    secret_token_env: str | None = None
    webhook_url: str | None = None


class TelegramConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``platforms.telegram`` section; nothing runs when ``enabled`` is false or there are no bots.

    ``base_url`` is where the Bot API lives (calls go to ``{base_url}/bot{token}/{method}``). ``host``/``port``
    serve the webhook bots. The rates pace replies below Telegram's flood limits: per chat, per group chat (per
    minute) and per bot; ``chat_burst`` messages may leave at once (the parts of one split reply).
    """

    enabled: bool = True
    base_url: str = DEFAULT_BASE_URL
    bots: dict[AccountName, TelegramBot] = msgspec.field(default_factory=dict)
    host: ListenHost = "127.0.0.1"
    port: Port = 8645
    max_body_bytes: BodyBytes = 1024 * 1024
    poll_timeout_s: _PollTimeout = 30
    poll_retry_s: PositiveSeconds = 1.0
    poll_retry_max_s: PositiveSeconds = 60.0
    request_timeout_s: PositiveSeconds = 15.0
    chat_messages_per_second: _Rate = 1.0
    chat_burst: Burst = 3
    group_messages_per_minute: _Rate = 20.0
    bot_messages_per_second: _Rate = 30.0

    def __post_init__(self) -> None:
        check_section(self, _SECTION)
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            raise ConfigError(
                f"{_SECTION}.base_url", f"must be an http(s) URL such as {DEFAULT_BASE_URL} (no query or fragment)"
            )
        if self.poll_retry_max_s < self.poll_retry_s:
            raise ConfigError(f"{_SECTION}.poll_retry_max_s", "must not be smaller than poll_retry_s")
        for name, bot in self.bots.items():
            _check_bot(name, bot)

    @property
    def api_base(self) -> str:
        """``base_url`` without a trailing slash."""
        return self.base_url.rstrip("/")


def check_token(token: str, path: str, what: str = "") -> str:
    """Return ``token`` if it has the shape of a bot token; else :class:`ConfigError` at ``path``."""
    if not _TOKEN.fullmatch(token):
        subject = f"{what} must" if what else "must"
        raise ConfigError(
            path, f"{subject} be a bot token as @BotFather gives it: '<digits>:<letters, digits, _ or ->'"
        )
    return token


def check_secret_token(secret: str, path: str, what: str = "") -> str:
    """Return ``secret`` if ``setWebhook`` accepts it as ``secret_token``; else :class:`ConfigError` at ``path``."""
    if not _SECRET_TOKEN.fullmatch(secret):
        subject = f"{what} must" if what else "must"
        raise ConfigError(
            path,
            f"{subject} be 1 to 256 letters, digits, '_' or '-' (what Telegram accepts as a webhook secret_token); "
            'generate one with: python -c "import secrets;print(secrets.token_urlsafe(32))"',
        )
    return secret


def _check_bot(name: str, bot: TelegramBot) -> None:
    path = f"{_SECTION}.bots.{name}"
    _check_either(path, "token", bot.token, bot.token_env, "TELEGRAM_BOT_TOKEN", "the token from @BotFather")
    if bot.token is not None:
        check_token(bot.token, f"{path}.token")
    if bot.mode not in MODES:
        raise ConfigError(f"{path}.mode", f"must be one of {', '.join(MODES)}")
    if bot.mode == "webhook" or bot.secret_token is not None or bot.secret_token_env is not None:
        _check_either(
            path, "secret_token", bot.secret_token, bot.secret_token_env, "TELEGRAM_WEBHOOK_SECRET", "a webhook secret"
        )
    if bot.secret_token is not None:
        check_secret_token(bot.secret_token, f"{path}.secret_token")
    if bot.webhook_url is not None:
        if bot.mode != "webhook":
            raise ConfigError(f"{path}.webhook_url", "is only used with mode: webhook; remove it or set the mode")
        parts = urlsplit(bot.webhook_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(
                f"{path}.webhook_url",
                f"must be the public https:// URL Telegram should POST to (it reaches /telegram/{name} here)",
            )


def _check_either(path: str, field: str, value: str | None, env: str | None, example_env: str, what: str) -> None:
    missing = f"is required: set {field} to {what}, or {field}_env to a variable holding it"
    check_secret_source(path, field, value, env, example_env=example_env, missing=missing)


def cluster_parts(config: TelegramConfig) -> SectionParts:
    """How the section runs in cluster mode (:func:`~platforms.support.cluster_parts.split_accounts`).

    Each polling bot leased on its own (keyed by its name, the ``account_id`` of its updates); the webhook bots
    served together by every replica.
    """
    return split_accounts(config, "bots", served=lambda bot: bot.mode == "webhook")
