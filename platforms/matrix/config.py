"""The ``platforms.matrix`` section of ``config.yaml``: the bot accounts, how they sync, and how replies are paced.

Each account is one Matrix user with an access token on its homeserver. Its name in ``accounts`` is the
``account_id`` of every message it receives, so two bot accounts that share a room never share a session. The
homeserver belongs to the account (it is where the account lives), so it needs no key segment of its own.
"""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import urlsplit

import msgspec
from msgspec import Meta

from hermes_actors.constraints import AccountName, Burst, PositiveRate, PositiveSeconds, Rule, check_section
from hermes_actors.errors import ConfigError
from hermes_actors.section_parts import SectionParts
from platforms.support.cluster_parts import split_accounts
from platforms.support.secrets import check_secret_source

__all__ = ["MatrixAccount", "MatrixConfig", "cluster_parts", "is_access_token"]

_SECTION = "platforms.matrix"
_TOKEN = re.compile(r"[\x21-\x7e]{1,4096}")  # it travels in an Authorization header
_MAX_POLL_TIMEOUT_S = 120
_MAX_EVENT_BYTES = 60_000  # an event is at most 65,536 bytes with its envelope and signatures
_PollTimeout = Annotated[
    int,
    Rule(
        Meta(ge=1, le=_MAX_POLL_TIMEOUT_S),
        f"must be 1..{_MAX_POLL_TIMEOUT_S} seconds: how long the homeserver holds a /sync open",
    ),
]
_TimelineLimit = Annotated[int, Rule(Meta(ge=1, le=1000), "must be 1..1000 events per room and sync")]
_BackfillLimit = Annotated[
    int, Rule(Meta(ge=0, le=100_000), "must be 0..100000 events (0 only reports a gap, fetching nothing)")
]
_MessageBytes = Annotated[
    int,
    Rule(
        Meta(ge=1024, le=_MAX_EVENT_BYTES),
        f"must be 1024..{_MAX_EVENT_BYTES} bytes: a Matrix event is at most 64 KiB with its envelope",
    ),
]


class MatrixAccount(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One bot user (``platforms.matrix.accounts.<name>``).

    ``homeserver`` is the base URL of its client-server API (``https://matrix.example.org``; requests go to
    ``{homeserver}/_matrix/client/v3/...``). ``access_token`` (or the environment variable named by
    ``access_token_env``) is the token of a logged-in device of the bot. With ``auto_join`` the bot joins every
    room it is invited to.
    """

    homeserver: str = ""
    access_token: str | None = None
    access_token_env: str | None = None
    auto_join: bool = True


class MatrixConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``platforms.matrix`` section; nothing runs when ``enabled`` is false or there are no accounts.

    ``poll_timeout_s``: how long the homeserver holds a ``/sync`` open. ``timeline_limit``: events per room in
    one sync; more make the timeline ``limited`` (a gap), which is closed by fetching up to ``backfill_limit``
    missed events (0: only report gaps). ``answer_history``: on an account's first sync (nothing stored yet),
    answer the messages already in its rooms instead of starting from now. ``max_message_bytes``: longer replies
    are split (counted as the UTF-8 bytes of the JSON-escaped text). Replies are paced per room at
    ``room_messages_per_second`` with bursts of ``room_burst`` (the parts of one reply).
    """

    enabled: bool = True
    accounts: dict[AccountName, MatrixAccount] = msgspec.field(default_factory=dict)
    poll_timeout_s: _PollTimeout = 30
    poll_retry_s: PositiveSeconds = 1.0
    poll_retry_max_s: PositiveSeconds = 60.0
    request_timeout_s: PositiveSeconds = 15.0
    timeline_limit: _TimelineLimit = 50
    backfill_limit: _BackfillLimit = 500
    answer_history: bool = False
    max_message_bytes: _MessageBytes = 32_000
    room_messages_per_second: PositiveRate = 1.0
    room_burst: Burst = 3

    def __post_init__(self) -> None:
        check_section(self, _SECTION)
        if self.poll_retry_max_s < self.poll_retry_s:
            raise ConfigError(f"{_SECTION}.poll_retry_max_s", "must not be smaller than poll_retry_s")
        for name, account in self.accounts.items():
            _check_account(name, account)


def is_access_token(text: str) -> bool:
    """Whether ``text`` can be an access token: printable ASCII without spaces (it goes in a header)."""
    return _TOKEN.fullmatch(text) is not None


def _check_account(name: str, account: MatrixAccount) -> None:
    path = f"{_SECTION}.accounts.{name}"
    if not account.homeserver:
        raise ConfigError(
            f"{path}.homeserver",
            "is required: the client-server API base URL of the bot's homeserver, such as https://matrix.example.org",
        )
    try:
        parts = urlsplit(account.homeserver)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ConfigError(
            f"{path}.homeserver", "must be an http(s) URL such as https://matrix.example.org (no query or fragment)"
        )
    check_secret_source(
        path,
        "access_token",
        account.access_token,
        account.access_token_env,
        example_env="MATRIX_ACCESS_TOKEN",
        missing="is required: set access_token to the bot device's token, or access_token_env to a variable holding it",
    )
    if account.access_token is not None and not is_access_token(account.access_token):
        raise ConfigError(f"{path}.access_token", "must be an access token (printable ASCII without spaces)")


def cluster_parts(config: MatrixConfig) -> SectionParts:
    """How the section runs in cluster mode (:func:`~platforms.support.cluster_parts.split_accounts`).

    Each account's sync leased on its own, keyed by its name (the ``account_id`` of its messages).
    """
    return split_accounts(config, "accounts")
