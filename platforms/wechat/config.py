"""The ``platforms.wechat`` section: the bot accounts to poll and how messages are batched, deduped and sent.

Each account is one iLink bot (one QR login): its name is the account segment of every session key it opens, so
two bots never share a conversation even when the same person writes to both.
"""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import urlsplit

import msgspec
from msgspec import Meta

from hermes_actors.constraints import NonNegativeSeconds, PositiveRate, PositiveSeconds, Rule, check_section
from hermes_actors.errors import ConfigError
from hermes_actors.section_parts import SectionParts
from platforms.support.cluster_parts import split_accounts
from platforms.support.secrets import check_secret_source

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_CDN_BASE_URL", "WechatAccount", "WechatConfig", "cluster_parts", "is_bot_token"]

DEFAULT_BASE_URL = "https://ilinkai.weixin.qq.com"
DEFAULT_CDN_BASE_URL = "https://novac2c.cdn.weixin.qq.com/c2c"  # where iLink media is downloaded

_SECTION = "platforms.wechat"
_TOKEN = re.compile(r"[\x21-\x7e]{1,4096}")
_AccountName = Annotated[  # the bot id: its ilink_bot_id
    str,
    Rule(
        Meta(pattern=r"^[A-Za-z0-9_@.\-]{1,128}\Z"),
        "an account name is 1 to 128 letters, digits, '_', '-', '.' or '@' (the bot id, such as abc@im.bot)",
    ),
]
_ChunkChars = Annotated[int, Rule(Meta(ge=1), "must be a positive number of characters")]
_MessageChars = Annotated[int, Rule(Meta(ge=16), "must be at least 16; the default is 2000")]


class WechatAccount(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One bot (``platforms.wechat.accounts.<name>``): its bot token, or the environment variable holding it,
    and the API base URL the QR login returned (``baseurl``)."""

    token: str | None = None
    token_env: str | None = None
    base_url: str = DEFAULT_BASE_URL


class WechatConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``platforms.wechat`` section of ``config.yaml``.

    ``batch_window_s``: messages from one sender in one chat this close together become one turn;
    ``long_chunk_wait_s`` replaces it after a message of at least ``long_chunk_chars`` characters (WeChat splits a
    long paste into such chunks). ``dedupe_window_s``: the same text from the same sender in the same chat within
    it is a resend and is dropped. ``max_message_chars``: longer replies are split. ``poll_timeout_s``: the long
    poll's wait until the server suggests its own. Failed polls back off from ``retry_base_s`` to
    ``retry_max_s``; an expired session waits ``session_expired_backoff_s``, a rate limit
    ``rate_limit_backoff_s``. ``sends_per_second_per_chat`` paces replies to one chat. Images, voice, files and
    video are downloaded from ``cdn_base_url`` (``{cdn_base_url}/download?encrypted_query_param=...``), each
    within ``download_timeout_s``.
    """

    enabled: bool = True
    accounts: dict[_AccountName, WechatAccount] = msgspec.field(default_factory=dict)
    batch_window_s: NonNegativeSeconds = 3.0
    long_chunk_chars: _ChunkChars = 1800
    long_chunk_wait_s: float = 8.0
    dedupe_window_s: NonNegativeSeconds = 300.0
    max_message_chars: _MessageChars = 2000
    poll_timeout_s: PositiveSeconds = 35.0
    send_timeout_s: PositiveSeconds = 15.0
    retry_base_s: PositiveSeconds = 2.0
    retry_max_s: PositiveSeconds = 30.0
    session_expired_backoff_s: PositiveSeconds = 600.0
    rate_limit_backoff_s: PositiveSeconds = 30.0
    sends_per_second_per_chat: PositiveRate = 1.0
    cdn_base_url: str = DEFAULT_CDN_BASE_URL
    download_timeout_s: PositiveSeconds = 30.0

    def __post_init__(self) -> None:
        check_section(self, _SECTION)
        for name, account in self.accounts.items():
            _check_account(name, account)
        if not _is_base_url(self.cdn_base_url):
            raise ConfigError(
                f"{_SECTION}.cdn_base_url",
                f"must be an http:// or https:// URL with a host, such as {DEFAULT_CDN_BASE_URL}",
            )
        if self.long_chunk_wait_s < self.batch_window_s:
            raise ConfigError(
                f"{_SECTION}.long_chunk_wait_s", "must be at least batch_window_s (it is the longer wait after a chunk)"
            )
        if self.retry_max_s < self.retry_base_s:
            raise ConfigError(f"{_SECTION}.retry_max_s", "must be at least retry_base_s")


def _check_account(name: str, account: WechatAccount) -> None:
    path = f"{_SECTION}.accounts.{name}"
    check_secret_source(
        path,
        "token",
        account.token,
        account.token_env,
        example_env="HERMES_WECHAT_TOKEN",
        missing=(
            "every account needs its bot token (bot_token from the iLink QR login); set token, or name an "
            "environment variable holding it in token_env"
        ),
    )
    if account.token is not None and not is_bot_token(account.token):
        raise ConfigError(f"{path}.token", "must be the bot token as printed by the QR login (printable ASCII)")
    if not _is_base_url(account.base_url):
        raise ConfigError(
            f"{path}.base_url", f"must be an http:// or https:// URL with a host, such as {DEFAULT_BASE_URL}"
        )


def is_bot_token(text: str) -> bool:
    """Whether ``text`` can be a bot token: it travels in an HTTP header, so printable ASCII without spaces."""
    return _TOKEN.fullmatch(text) is not None


def _is_base_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and not parts.query and not parts.fragment


def cluster_parts(config: WechatConfig) -> SectionParts:
    """How the section runs in cluster mode (:func:`~platforms.support.cluster_parts.split_accounts`).

    Each account leased on its own, keyed by its name (the ``account_id`` of its messages).
    """
    return split_accounts(config, "accounts")
