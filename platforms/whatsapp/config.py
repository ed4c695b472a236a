"""The ``platforms.whatsapp`` section: the webhook server, the Graph API address, and one entry per business number.

Each number is keyed by its ``phone_number_id`` (the id Meta puts in ``metadata.phone_number_id`` of every
webhook, not the phone number itself); that id is the account in session keys. A number needs the secret of the
Meta app its webhooks come from (``X-Hub-Signature-256``), the verify token typed into the app's webhook settings
(the ``GET`` handshake) and an access token allowed to send from it. Any of them may come from an environment
variable instead (``<name>_env``), read when the adapter is built, so a missing one is a
:class:`~hermes_actors.errors.ConfigError` before anything starts.
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
    Burst,
    ListenHost,
    Port,
    PositiveRate,
    PositiveSeconds,
    Rule,
    check_section,
)
from hermes_actors.errors import ConfigError
from platforms.support.fetch_policy import FetchPolicy, FetchSettings
from platforms.support.secrets import check_secret_source, read_env_secret

__all__ = [
    "DEFAULT_GRAPH_BASE_URL",
    "DEFAULT_GRAPH_VERSION",
    "MAX_TEXT_CHARS",
    "MEDIA_HOSTS",
    "NumberKeys",
    "WhatsappConfig",
    "WhatsappNumber",
    "resolve_numbers",
]

DEFAULT_GRAPH_BASE_URL = "https://graph.facebook.com"
DEFAULT_GRAPH_VERSION = "v21.0"
MAX_TEXT_CHARS = 4096  # the Cloud API refuses a longer text body

_SECTION = "platforms.whatsapp"
MEDIA_HOSTS = ("*.fbsbx.com", "*.fbcdn.net", "*.whatsapp.net", "graph.facebook.com")  # lookaside.fbsbx.com
"""The hosts a media lookup's ``url`` may name; ``fetch.hosts`` adds to them."""
_PHONE_NUMBER_ID = re.compile(r"[0-9]{1,24}")
_Version = Annotated[
    str,
    Rule(Meta(pattern=r"^v[0-9]{1,3}\.[0-9]{1,3}\Z"), f"must be a Graph API version such as {DEFAULT_GRAPH_VERSION}"),
]
_MessageChars = Annotated[
    int,
    Rule(
        Meta(ge=100, le=MAX_TEXT_CHARS), f"must be between 100 and {MAX_TEXT_CHARS} (the Cloud API refuses longer text)"
    ),
]
_NumberRate = Annotated[float, Rule(Meta(gt=0), "must be a positive rate (Meta's default is 80)")]
_APP_PAGE = "the Meta app's WhatsApp settings at developers.facebook.com/apps"
_SECRETS = (
    ("app_secret", "WHATSAPP_APP_SECRET", "the App Secret (App settings > Basic)"),
    ("verify_token", "WHATSAPP_VERIFY_TOKEN", "the Verify token you typed into the app's webhook settings"),
    ("access_token", "WHATSAPP_ACCESS_TOKEN", "a (system user) access token with whatsapp_business_messaging"),
)


class WhatsappNumber(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One business phone number (``platforms.whatsapp.numbers.<phone_number_id>``).

    ``app_secret``, ``verify_token`` and ``access_token`` are required, inline or through ``*_env``.
    ``messages_per_second`` overrides the section's rate for a number Meta allows more (up to 1,000).
    """

    app_secret: str | None = None
    app_secret_env: str | None = None
    verify_token: str | None = None
    verify_token_env: str | None = None
    access_token: str | None = None
    access_token_env: str | None = None
    messages_per_second: _NumberRate | None = None


class WhatsappConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``platforms.whatsapp`` section; Meta calls ``http://host:port/whatsapp/webhook`` (GET and POST).

    ``graph_base_url`` and ``graph_version`` say where replies go:
    ``{graph_base_url}/{graph_version}/{phone_number_id}/messages``. ``messages_per_second`` paces each number
    (Meta's default throughput is 80); ``recipient_interval_s`` and ``recipient_burst`` pace one number's
    messages to one user (Meta allows about one every 6 s, after a burst). ``numbers`` keys may be written
    unquoted in YAML; they are read as strings. ``fetch`` widens where media may be downloaded from
    (:data:`MEDIA_HOSTS`, at public addresses).
    """

    enabled: bool = True
    host: ListenHost = "127.0.0.1"
    port: Port = 8648
    graph_base_url: str = DEFAULT_GRAPH_BASE_URL
    graph_version: _Version = DEFAULT_GRAPH_VERSION
    max_message_chars: _MessageChars = MAX_TEXT_CHARS
    messages_per_second: PositiveRate = 80.0
    recipient_interval_s: PositiveSeconds = 6.0
    recipient_burst: Burst = 45
    max_body_bytes: BodyBytes = 3 * 1024 * 1024
    http_timeout_s: PositiveSeconds = 10.0
    numbers: dict[str | int, WhatsappNumber] = msgspec.field(default_factory=dict)
    fetch: FetchSettings = msgspec.field(default_factory=FetchSettings)

    def __post_init__(self) -> None:
        check_section(self, _SECTION)
        _check_url(self.graph_base_url)
        self.fetch.check(f"{_SECTION}.fetch")
        seen: set[str] = set()
        for key, number in self.numbers.items():
            name = str(key)
            if name in seen:
                raise ConfigError(f"{_SECTION}.numbers.{name}", "is configured twice; keep one entry per number")
            seen.add(name)
            _check_number(name, number)

    @property
    def graph_base(self) -> str:
        """``graph_base_url`` without a trailing slash."""
        return self.graph_base_url.rstrip("/")

    @property
    def fetch_policy(self) -> FetchPolicy:
        """Where the media URLs the Graph API names may be fetched from."""
        return FetchPolicy(self.fetch, platform="WhatsApp", hosts=MEDIA_HOSTS, setting=f"{_SECTION}.fetch")


def _check_url(url: str) -> None:
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        parts = parts._replace(scheme="")
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ConfigError(
            f"{_SECTION}.graph_base_url", f"must be an http(s) URL such as {DEFAULT_GRAPH_BASE_URL} (no query)"
        )


def _check_number(name: str, number: WhatsappNumber) -> None:
    path = f"{_SECTION}.numbers.{name}"
    if not _PHONE_NUMBER_ID.fullmatch(name):
        raise ConfigError(
            path,
            "a number is keyed by its phone_number_id (digits, from WhatsApp > API Setup in the Meta app), "
            "not by the phone number itself",
        )
    for field, example_env, what in _SECRETS:
        value, env = getattr(number, field), getattr(number, f"{field}_env")
        missing = f"is required; set {field} to {what} from {_APP_PAGE}, or {field}_env to a variable holding it"
        check_secret_source(path, field, value, env, example_env=example_env, missing=missing)
        if value is not None and (not value or value != value.strip()):
            raise ConfigError(f"{path}.{field}", "must not be empty or have spaces around it")


class NumberKeys(msgspec.Struct, frozen=True, kw_only=True):
    """A number with its secrets read; ``phone_number_id`` is the account id."""

    phone_number_id: str
    app_secret: bytes
    verify_token: str
    access_token: str
    messages_per_second: float
    origins: str  # for the banner: where the secrets come from


def _secret(path: str, field: str, value: str | None, env: str | None, environ: Mapping[str, str]) -> str:
    if env is None:
        return value or ""
    return read_env_secret(f"{path}.{field}_env", env, environ, export=f"export the number's {field}", strip=True)


def resolve_numbers(config: WhatsappConfig, environ: Mapping[str, str]) -> dict[str, NumberKeys]:
    """Every number of ``config`` with its secrets read from ``environ``; :class:`ConfigError` names a missing one."""
    numbers: dict[str, NumberKeys] = {}
    for key, number in config.numbers.items():
        name = str(key)
        path = f"{_SECTION}.numbers.{name}"
        values = {
            field: _secret(path, field, getattr(number, field), getattr(number, f"{field}_env"), environ)
            for field, _, _ in _SECRETS
        }
        envs = [f"${env}" for field, _, _ in _SECRETS if (env := getattr(number, f"{field}_env"))]
        inline = any(getattr(number, field) is not None for field, _, _ in _SECRETS)
        origins = ", ".join([*envs, "config.yaml"] if inline else envs) if envs else "config.yaml"
        numbers[name] = NumberKeys(
            phone_number_id=name,
            app_secret=values["app_secret"].encode(),
            verify_token=values["verify_token"],
            access_token=values["access_token"],
            messages_per_second=number.messages_per_second or config.messages_per_second,
            origins=f"secrets from {origins}",
        )
    return numbers
