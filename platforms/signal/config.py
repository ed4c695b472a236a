"""The ``platforms.signal`` section: where signal-cli's HTTP daemon listens, which accounts to serve, and pacing.

Each account is a Signal account registered or linked in signal-cli, named as signal-cli names it: its phone
number in E.164 form (``+15550001``), or its ACI (a UUID) for an account without a number. That string is the
``account`` param of every JSON-RPC call, the ``account`` query of its event stream, and the account segment of
every session key it opens, so two accounts never share a conversation.
"""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import urlsplit

import msgspec
from msgspec import Meta

from hermes_actors.constraints import Burst, PositiveRate, PositiveSeconds, Rule, check_section
from hermes_actors.errors import ConfigError
from hermes_actors.section_parts import SectionParts
from platforms.support.cluster_parts import split_accounts

__all__ = ["DEFAULT_URL", "SignalConfig", "cluster_parts", "is_account", "is_uuid"]

DEFAULT_URL = "http://127.0.0.1:8080"  # signal-cli daemon --http binds localhost:8080 by default

_SECTION = "platforms.signal"
_NUMBER_TEXT = r"\+[1-9][0-9]{6,14}"  # E.164
_UUID_TEXT = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_NUMBER, _UUID = re.compile(_NUMBER_TEXT), re.compile(_UUID_TEXT)
_Account = Annotated[
    str,
    Rule(
        Meta(pattern=rf"^(?:{_NUMBER_TEXT}|{_UUID_TEXT})\Z"),
        "{value!r:.42} is not a Signal account as signal-cli names it: a phone number in E.164 form such as "
        "+15550001, or the ACI (a UUID) of an account without a number",
    ),
]
_MessageChars = Annotated[int, Rule(Meta(ge=16, le=64_000), "must be between 16 and 64000; the default is 2000")]
_EventBytes = Annotated[int, Rule(Meta(ge=4096), "must be at least 4096 bytes; the default is 1 MiB")]


def is_uuid(text: str) -> bool:
    """Whether ``text`` is a UUID as Signal writes service ids (ACI ``sourceUuid``, numberless accounts)."""
    return _UUID.fullmatch(text) is not None


def is_account(text: str) -> bool:
    """Whether signal-cli can name an account ``text``: an E.164 number, or an ACI for a numberless account."""
    return _NUMBER.fullmatch(text) is not None or is_uuid(text)


class SignalConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``platforms.signal`` section of ``config.yaml``; nothing runs when ``enabled`` is false or no accounts.

    ``url`` is signal-cli's ``daemon --http`` address: events arrive from ``GET {url}/api/v1/events`` and replies
    leave through ``POST {url}/api/v1/rpc``. ``accounts`` lists the Signal accounts to serve (one event stream
    each). ``max_message_chars``: longer replies are split. ``messages_per_second`` paces replies per chat
    (``burst`` may leave at once: the parts of one split reply). A stream that goes ``idle_timeout_s`` without a
    byte (signal-cli sends a keep-alive every 15 s) counts as dropped; reconnects back off from
    ``reconnect_base_s`` to ``reconnect_max_s``. ``rate_limit_backoff_s`` is how long a reply waits after signal-cli
    reports a Signal rate limit without saying for how long. ``max_event_bytes`` bounds one event of the stream.
    """

    enabled: bool = True
    url: str = DEFAULT_URL
    accounts: list[_Account] = msgspec.field(default_factory=list)
    max_message_chars: _MessageChars = 2000
    messages_per_second: PositiveRate = 1.0
    burst: Burst = 3
    request_timeout_s: PositiveSeconds = 30.0
    connect_timeout_s: PositiveSeconds = 10.0
    idle_timeout_s: PositiveSeconds = 60.0
    reconnect_base_s: PositiveSeconds = 1.0
    reconnect_max_s: PositiveSeconds = 60.0
    rate_limit_backoff_s: PositiveSeconds = 60.0
    max_event_bytes: _EventBytes = 1024 * 1024

    def __post_init__(self) -> None:
        check_section(self, _SECTION)
        if not _is_base_url(self.url):
            raise ConfigError(
                f"{_SECTION}.url",
                f"must be the http:// address of signal-cli's daemon --http (no path, query or fragment), "
                f"such as {DEFAULT_URL}",
            )
        seen: set[str] = set()
        for index, account in enumerate(self.accounts):
            if account in seen:
                raise ConfigError(f"{_SECTION}.accounts[{index}]", f"{account} is listed twice; list each account once")
            seen.add(account)
        if self.reconnect_max_s < self.reconnect_base_s:
            raise ConfigError(f"{_SECTION}.reconnect_max_s", "must be at least reconnect_base_s")

    @property
    def base(self) -> str:
        """``url`` without a trailing slash."""
        return self.url.rstrip("/")

    @property
    def loopback(self) -> bool:
        """Whether the daemon is on this machine: its HTTP endpoint has no authentication of its own."""
        host = urlsplit(self.url).hostname or ""
        return host in ("localhost", "::1") or host.startswith("127.")


def _is_base_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        return False
    return (
        parts.scheme in ("http", "https")
        and bool(parts.hostname)
        and parts.path in ("", "/")
        and not parts.query
        and not parts.fragment
    )


def cluster_parts(config: SignalConfig) -> SectionParts:
    """How the section runs in cluster mode (:func:`~platforms.support.cluster_parts.split_accounts`).

    Each account's event stream leased on its own, keyed by the account (its number or ACI, the
    ``account_id`` of its messages).
    """
    return split_accounts(config, "accounts")
