"""The ``platforms.mattermost`` section of ``config.yaml``: the server, its bots, and connection timing.

Each bot is an account: its name in ``bots`` is the ``account_id`` of every post it receives, so two bots on one
server never share a session. A bot's token is the access token of a bot account (System Console > Integrations >
Bot Accounts) or a personal access token; it may live in an environment variable named by ``token_env``, read when
the adapter is built.
"""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import urlsplit

import msgspec
from msgspec import Meta

from hermes_actors.constraints import AccountName, PositiveRate, PositiveSeconds, Rule, check_section
from hermes_actors.errors import ConfigError
from hermes_actors.section_parts import SectionParts
from platforms.support.cluster_parts import split_accounts
from platforms.support.secrets import check_secret_source

__all__ = ["MAX_MESSAGE_CHARS", "MattermostBot", "MattermostConfig", "check_token", "cluster_parts"]

MAX_MESSAGE_CHARS = 16383  # a post's message limit since Mattermost 5.0 (older servers: 4,000)

_SECTION = "platforms.mattermost"
_TOKEN = re.compile(r"[A-Za-z0-9]{20,64}")
_MessageChars = Annotated[
    int,
    Rule(
        Meta(ge=100, le=MAX_MESSAGE_CHARS),
        f"must be between 100 and {MAX_MESSAGE_CHARS} (Mattermost refuses longer posts)",
    ),
]
_FrameBytes = Annotated[int, Rule(Meta(ge=64 * 1024), "must be at least 65536 bytes; the default is 8 MiB")]


class MattermostBot(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One bot (``platforms.mattermost.bots.<name>``): its access token, or the environment variable holding it."""

    token: str | None = None
    token_env: str | None = None


class MattermostConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``platforms.mattermost`` section; nothing runs when ``enabled`` is false or there are no bots.

    ``url`` (required once there are bots) is the server's address as users open it (``https://chat.example.com``);
    the websocket is ``/api/v4/websocket`` on it and REST calls go to ``/api/v4``. ``requests_per_second`` paces each
    bot's REST calls (Mattermost's default limit is 10 a second with bursts of 100). ``heartbeat_s`` is how often the
    websocket is pinged (a connection whose pong does not come is made again).
    """

    enabled: bool = True
    url: str = ""
    bots: dict[AccountName, MattermostBot] = msgspec.field(default_factory=dict)
    max_message_chars: _MessageChars = MAX_MESSAGE_CHARS
    request_timeout_s: PositiveSeconds = 15.0
    requests_per_second: PositiveRate = 10.0
    heartbeat_s: PositiveSeconds = 30.0
    reconnect_min_s: PositiveSeconds = 1.0
    reconnect_max_s: float = 60.0
    hello_timeout_s: PositiveSeconds = 20.0
    max_frame_bytes: _FrameBytes = 8 * 1024 * 1024

    def __post_init__(self) -> None:
        check_section(self, _SECTION)
        parts = urlsplit(self.url)
        malformed = parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment
        if (self.url or self.bots) and malformed:
            raise ConfigError(
                f"{_SECTION}.url", "must be the server's http(s) URL such as https://chat.example.com (no query)"
            )
        if self.reconnect_max_s < self.reconnect_min_s:
            raise ConfigError(f"{_SECTION}.reconnect_max_s", "must not be smaller than reconnect_min_s")
        for name, bot in self.bots.items():
            _check_bot(name, bot)

    @property
    def api_base(self) -> str:
        """The REST API's base: ``{url}/api/v4``."""
        return self.url.rstrip("/") + "/api/v4"

    @property
    def websocket_url(self) -> str:
        """The websocket's address: ``ws(s)://host/api/v4/websocket``."""
        base = self.url.rstrip("/")
        scheme = "wss" if base.startswith("https:") else "ws"
        return scheme + base[base.index(":") :] + "/api/v4/websocket"


def check_token(token: str, path: str, what: str = "") -> str:
    """Return ``token`` if it has the shape of a Mattermost access token; else :class:`ConfigError` at ``path``."""
    subject = f"{what} must" if what else "must"
    if token.startswith(("Bearer ", "Token ")):
        raise ConfigError(path, f"{subject} be the bare token, without the {token.split()[0]!r} prefix")
    if not _TOKEN.fullmatch(token):
        raise ConfigError(
            path,
            f"{subject} be a Mattermost access token (letters and digits, as the bot's page shows it once); "
            "create a new one under Integrations > Bot Accounts if it is lost",
        )
    return token


def _check_bot(name: str, bot: MattermostBot) -> None:
    path = f"{_SECTION}.bots.{name}"
    check_secret_source(
        path,
        "token",
        bot.token,
        bot.token_env,
        example_env="MATTERMOST_BOT_TOKEN",
        missing="is required: set token to the bot's access token, or token_env to a variable holding it",
    )
    if bot.token is not None:
        check_token(bot.token, f"{path}.token")


def cluster_parts(config: MattermostConfig) -> SectionParts:
    """How the section runs in cluster mode (:func:`~platforms.support.cluster_parts.split_accounts`).

    Each bot's websocket leased on its own, keyed by its name (the ``account_id`` of its posts).
    """
    return split_accounts(config, "bots")
