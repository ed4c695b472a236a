"""The ``platforms.bluebubbles`` section: one BlueBubbles server (the Mac relaying iMessage), its password, the
secret token that guards the webhook, and send settings.

The server's REST API takes its password as the ``password`` query parameter; the same password fetches
attachments. BlueBubbles signs nothing it POSTs to a webhook, so the webhook URL carries a secret instead:
``POST /bluebubbles/<webhook_token>``, entered in the server's webhook settings; a request with any other token is
refused. ``server_name`` names the server in session keys (the account), so two servers never share a session.
"""

from __future__ import annotations

import re
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
from platforms.support.secrets import check_secret_source, read_env_secret, secret_origin

__all__ = ["BluebubblesConfig", "ServerKeys", "resolve_keys"]

_SECTION = "platforms.bluebubbles"
_TOKEN = re.compile(r"[A-Za-z0-9_-]{24,128}")
_MessageChars = Annotated[int, Rule(Meta(ge=2, le=20_000), "must be between 2 and 20000")]


class BluebubblesConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``platforms.bluebubbles`` section; the server POSTs to ``http://host:port/bluebubbles/<token>``.

    ``server_url`` is the BlueBubbles server as its REST API is reached (``http://mac.local:1234``). ``method`` is
    how the server sends: ``apple-script`` (works everywhere) or ``private-api`` (needs the server's Private API
    helper; replies then quote the message they answer). ``max_age_s`` is how old a message may be when it
    arrives: an older one (a webhook replayed later, or history the server sends again) is acknowledged and
    skipped.
    """

    enabled: bool = True
    host: ListenHost = "127.0.0.1"
    port: Port = 8663
    server_url: str = ""
    server_name: AccountName = "imessage"
    password: str | None = None
    password_env: str | None = None
    webhook_token: str | None = None
    webhook_token_env: str | None = None
    method: Literal["apple-script", "private-api"] = "apple-script"
    max_age_s: PositiveSeconds = 3600.0
    max_message_chars: _MessageChars = 4000
    messages_per_second: PositiveRate = 1.0
    max_body_bytes: BodyBytes = 1024 * 1024
    http_timeout_s: PositiveSeconds = (
        30.0  # the server answers a send once Messages has taken it, which can take a while
    )

    def __post_init__(self) -> None:
        check_section(self, _SECTION)
        if self.enabled:
            self._check_server()

    def _check_server(self) -> None:
        try:
            parts = urlsplit(self.server_url)
            parts.port  # noqa: B018 - raises ValueError for a port out of range
        except ValueError:
            parts = urlsplit("")
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            raise ConfigError(
                f"{_SECTION}.server_url", "must be the BlueBubbles server's http(s) URL, such as http://mac.local:1234"
            )
        check_secret_source(
            _SECTION,
            "password",
            self.password,
            self.password_env,
            example_env="BLUEBUBBLES_PASSWORD",
            missing="is required: set password_env to a variable holding the server password",
        )
        check_secret_source(
            _SECTION,
            "webhook_token",
            self.webhook_token,
            self.webhook_token_env,
            example_env="BLUEBUBBLES_WEBHOOK_TOKEN",
            missing="is required: BlueBubbles signs nothing, so the webhook URL carries this secret "
            "(24 or more letters, digits, '_' or '-'; python3 -c 'import secrets; print(secrets.token_urlsafe(32))')",
        )
        if self.webhook_token is not None and not _TOKEN.fullmatch(self.webhook_token):
            raise ConfigError(f"{_SECTION}.webhook_token", "must be 24 to 128 letters, digits, '_' or '-'")

    @property
    def server(self) -> str:
        """``server_url`` without a trailing slash."""
        return self.server_url.rstrip("/")


class ServerKeys(msgspec.Struct, frozen=True, kw_only=True):
    """The password and webhook token, read; ``origin`` says where the password came from (for the banner)."""

    password: str
    webhook_token: str
    origin: str


def resolve_keys(config: BluebubblesConfig, environ: Mapping[str, str]) -> ServerKeys:
    """The secrets of ``config``, read from it or from ``environ``; :class:`ConfigError` names a missing variable."""
    password = config.password or ""
    if config.password_env is not None:
        password = read_env_secret(
            f"{_SECTION}.password_env", config.password_env, environ, export="export the server password"
        )
    token = config.webhook_token or ""
    if config.webhook_token_env is not None:
        token = read_env_secret(
            f"{_SECTION}.webhook_token_env",
            config.webhook_token_env,
            environ,
            export="export the webhook token",
            strip=True,
        )
        if not _TOKEN.fullmatch(token):
            raise ConfigError(
                f"{_SECTION}.webhook_token_env", "the token must be 24 to 128 letters, digits, '_' or '-'"
            )
    return ServerKeys(password=password, webhook_token=token, origin=secret_origin("password", config.password_env))
