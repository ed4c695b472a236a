"""The ``platforms.api_server`` section of ``config.yaml``."""

from __future__ import annotations

import ipaddress
import typing
from typing import Annotated

import msgspec
from msgspec import Meta

from hermes_actors.constraints import BodyBytes, ListenHost, Port, PositiveSeconds, Rule, check_section
from hermes_actors.errors import ConfigError

__all__ = ["ApiServerConfig", "ConsoleConfig", "is_loopback"]

_SECTION = "platforms.api_server"
_Key = Annotated[str, Rule(Meta(pattern=r"\S"), "is empty; remove it or set a non-empty key")]
_ModelName = Annotated[str, Rule(Meta(pattern=r"\S"), "must not be empty; the default is 'hermes-agent'")]
_User = Annotated[str, Rule(Meta(pattern=r"\S"), "is empty; remove it or name the user this key speaks for")]
_Runs = Annotated[int, Rule(Meta(ge=0), "must be 0 (no cap) or a positive number of requests")]
_FoldSeconds = Annotated[float, Rule(Meta(ge=0), "must be 0 (no folding) or a positive number of seconds")]
_Origin = Annotated[
    str,
    Rule(
        Meta(pattern=r"^(?:\*|[a-z][a-z0-9+.-]*://[^/\s?#]+)\Z"),
        "{value!r} is not an origin; write scheme://host[:port] with no path or trailing slash "
        "(https://chat.example.org, http://localhost:3000), or '*' for any",
    ),
]


class ConsoleConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``platforms.api_server.console`` section.

    ``secure_cookie``: ``auto`` marks the login cookies ``Secure`` when the request came over HTTPS (directly, or
    by the word of a proxy in ``trusted_proxies``); ``always`` marks them so whatever the request says (a browser
    then keeps them only over HTTPS).
    """

    secure_cookie: typing.Literal["auto", "always"] = "auto"


class ApiServerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``platforms.api_server`` section of ``config.yaml``.

    ``key`` is the bearer key clients must send; when it is unset, the environment variable named by ``key_env``
    supplies it, and when neither is set the API is open (allowed on a loopback ``host`` only).
    ``keepalive_s`` is how long a streaming response stays silent before it sends an SSE comment;
    ``max_concurrent_runs`` caps the requests running turns at once (0: no cap; beyond it, 429).
    ``retry_fold_s`` is how long after a chat-completions request ends an identical one without
    ``Idempotency-Key`` is taken as its client's retry and gets its turn (:mod:`platforms.api_server.retry_fold`;
    0: never).
    ``user`` is the user every request with this key speaks for (its memories and the sessions it may search); without
    it, a request's OpenAI ``user``, then (with ``trust_user_headers``) Open WebUI's ``X-OpenWebUI-User-*`` headers
    name the user (:mod:`platforms.api_server.principal`: turn the headers on only behind Open WebUI alone).
    ``housekeeping`` answers Open WebUI's and LibreChat's title, tag and follow-up prompts with the agent alone, no
    session (:mod:`platforms.api_server.housekeeping`).
    ``cors_origins`` are the browser origins (``https://chat.example.org``; ``*``: any) whose pages may call the
    API; a request from any other ``Origin`` is refused with 403.
    ``trusted_proxies`` are the addresses or networks (``127.0.0.1``, ``10.0.0.0/8``) of the reverse proxies whose
    ``X-Forwarded-*`` / ``Forwarded`` headers are believed (:mod:`platforms.api_server.proxies`); ``console``
    is the web console's section.
    """

    enabled: bool = True
    host: ListenHost = "127.0.0.1"
    port: Port = 8642
    key: _Key | None = None
    key_env: str = "HERMES_API_KEY"
    model_name: _ModelName = "hermes-agent"
    request_timeout_s: PositiveSeconds = 300.0
    max_body_bytes: BodyBytes = 4 * 1024 * 1024
    keepalive_s: PositiveSeconds = 30.0
    max_concurrent_runs: _Runs = 64
    retry_fold_s: _FoldSeconds = 10.0
    user: _User | None = None
    trust_user_headers: bool = False
    housekeeping: bool = True
    cors_origins: tuple[_Origin, ...] = ()
    trusted_proxies: tuple[str, ...] = ()
    console: ConsoleConfig = msgspec.field(default_factory=ConsoleConfig)

    def __post_init__(self) -> None:
        check_section(self, _SECTION)
        for index, proxy in enumerate(self.trusted_proxies):
            try:
                ipaddress.ip_network(proxy.strip(), strict=False)
            except ValueError:
                raise ConfigError(
                    f"{_SECTION}.trusted_proxies[{index}]",
                    f"{proxy!r} is not an IP address or network; write the reverse proxy's address (127.0.0.1, ::1) "
                    "or its network in CIDR form (10.0.0.0/8, fd00::/8)",
                ) from None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
