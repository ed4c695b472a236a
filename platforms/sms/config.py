"""The ``platforms.sms`` section: the webhook server Twilio calls, the Twilio account, and the numbers it answers.

One Twilio account (``account_sid`` and its auth token) and the phone numbers of that account whose incoming
messages this adapter answers; each number is the account in session keys (``agent:main:sms~+15550001111:dm:...``),
so two numbers never share a session. The auth token signs Twilio's requests (``X-Twilio-Signature``), authorises
the REST calls that send replies and, where the account enforces it, the download of MMS media. It may come from an
environment variable (``auth_token_env``), read when the adapter is built.

Twilio signs the URL it calls. Behind a reverse proxy or TLS terminator that URL is not the one this server sees,
so set ``public_url`` to the webhook URL exactly as it is entered on the number (``https://host/path``); the query
string of each request is appended to it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated
from urllib.parse import urlsplit

import msgspec
from msgspec import Meta

from hermes_actors.constraints import (
    BodyBytes,
    ListenHost,
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
    "DEFAULT_API_BASE_URL",
    "MAX_BODY_CHARS",
    "MEDIA_HOSTS",
    "NUMBER",
    "SmsConfig",
    "TwilioKeys",
    "resolve_keys",
]

DEFAULT_API_BASE_URL = "https://api.twilio.com"
MEDIA_HOSTS = (
    "api.twilio.com",  # a MediaUrl names the Media resource on the API...
    "*.twilio.com",
    "*.twiliocdn.com",  # ...which redirects to the bytes: mms.twiliocdn.com with HTTP auth enforced,
    "s3-external-1.amazonaws.com",  # else S3
)
"""The hosts a ``MediaUrl`` and its redirects may name; ``fetch.hosts`` adds to them."""
MAX_BODY_CHARS = 1600  # the Messages API refuses a longer Body (error 21617)
NUMBER = re.compile(r"\+[1-9][0-9]{6,14}|[0-9]{3,8}")  # E.164, or a short code

_SECTION = "platforms.sms"
_ACCOUNT_SID = re.compile(r"AC[0-9a-f]{32}")
_MessageChars = Annotated[
    int,
    Rule(Meta(ge=2, le=MAX_BODY_CHARS), f"must be between 2 and {MAX_BODY_CHARS} (Twilio refuses a longer body)"),
]


class SmsConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``platforms.sms`` section; Twilio calls ``POST http://host:port/sms/twilio`` (or ``public_url``).

    ``numbers`` are the account's phone numbers (E.164 such as ``+15550001111``, or short codes) whose messages are
    answered. ``max_message_chars`` splits longer replies into several messages (Twilio's limit is 1,600; Twilio
    itself cuts a body into 153- or 67-character segments). ``messages_per_second`` paces each number (a US long
    code sends about one segment a second; Twilio queues the rest). ``fetch`` widens where MMS media may be
    downloaded from (:data:`MEDIA_HOSTS`, at public addresses).
    """

    enabled: bool = True
    host: ListenHost = "127.0.0.1"
    port: Port = 8655
    public_url: str | None = None
    api_base_url: str = DEFAULT_API_BASE_URL
    account_sid: str = ""
    auth_token: str | None = None
    auth_token_env: str | None = None
    numbers: list[str] = msgspec.field(default_factory=list)
    max_message_chars: _MessageChars = MAX_BODY_CHARS
    messages_per_second: PositiveRate = 1.0
    max_body_bytes: BodyBytes = 256 * 1024
    http_timeout_s: PositiveSeconds = 15.0
    fetch: FetchSettings = msgspec.field(default_factory=FetchSettings)

    def __post_init__(self) -> None:
        check_section(self, _SECTION)
        if self.public_url is not None:
            _check_url("public_url", self.public_url, "https://hermes.example.com/sms/twilio")
        _check_url("api_base_url", self.api_base_url, DEFAULT_API_BASE_URL)
        self.fetch.check(f"{_SECTION}.fetch")
        if self.enabled:  # a section turned off may leave its account out
            self._check_account()

    def _check_account(self) -> None:
        if not _ACCOUNT_SID.fullmatch(self.account_sid):
            raise ConfigError(
                f"{_SECTION}.account_sid",
                "must be the Account SID from the Twilio Console: AC followed by 32 hexadecimal digits",
            )
        check_secret_source(
            _SECTION,
            "auth_token",
            self.auth_token,
            self.auth_token_env,
            example_env="TWILIO_AUTH_TOKEN",
            missing="is required: set auth_token_env to a variable holding the account's Auth Token",
        )
        if self.auth_token is not None and (not self.auth_token or self.auth_token != self.auth_token.strip()):
            raise ConfigError(f"{_SECTION}.auth_token", "must not be empty or have spaces around it")
        if not self.numbers:
            raise ConfigError(f"{_SECTION}.numbers", "list the account's numbers to answer, such as ['+15550001111']")
        for index, number in enumerate(self.numbers):
            if not NUMBER.fullmatch(number):
                raise ConfigError(
                    f"{_SECTION}.numbers[{index}]",
                    f"{number[:40]!r} is not a phone number in E.164 form (+ and 7 to 15 digits) or a short code",
                )
        if len(set(self.numbers)) != len(self.numbers):
            raise ConfigError(f"{_SECTION}.numbers", "lists a number twice")

    @property
    def api_base(self) -> str:
        """``api_base_url`` without a trailing slash."""
        return self.api_base_url.rstrip("/")

    @property
    def fetch_policy(self) -> FetchPolicy:
        """Where a message's ``MediaUrl``s may be fetched from."""
        return FetchPolicy(self.fetch, platform="Twilio", hosts=MEDIA_HOSTS, setting=f"{_SECTION}.fetch")


def _check_url(field: str, url: str, example: str) -> None:
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        parts = parts._replace(scheme="")
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.fragment or parts.query:
        raise ConfigError(f"{_SECTION}.{field}", f"must be an http(s) URL such as {example} (no query)")


class TwilioKeys(msgspec.Struct, frozen=True, kw_only=True):
    """The account with its auth token read; ``origin`` says where the token came from (for the banner)."""

    account_sid: str
    auth_token: str
    origin: str


def resolve_keys(config: SmsConfig, environ: Mapping[str, str]) -> TwilioKeys:
    """The account of ``config`` with its auth token read from ``environ``; :class:`ConfigError` names a missing one."""
    if config.auth_token_env is None:
        token = config.auth_token or ""
    else:
        token = read_env_secret(
            f"{_SECTION}.auth_token_env", config.auth_token_env, environ, export="export the Auth Token", strip=True
        )
    return TwilioKeys(
        account_sid=config.account_sid,
        auth_token=token,
        origin=secret_origin("auth token", config.auth_token_env),
    )
