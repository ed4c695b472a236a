"""The ``platforms.api_server`` section of ``config.yaml``."""

from __future__ import annotations

import ipaddress
import re
import typing

import msgspec

from hermes_actors.errors import ConfigError

__all__ = ["ApiServerConfig", "ConsoleConfig", "is_loopback"]

_ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s?#]+")


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
    host: str = "127.0.0.1"
    port: int = 8642
    key: str | None = None
    key_env: str = "HERMES_API_KEY"
    model_name: str = "hermes-agent"
    request_timeout_s: float = 300.0
    max_body_bytes: int = 4 * 1024 * 1024
    keepalive_s: float = 30.0
    max_concurrent_runs: int = 64
    retry_fold_s: float = 10.0
    user: str | None = None
    trust_user_headers: bool = False
    housekeeping: bool = True
    cors_origins: tuple[str, ...] = ()
    trusted_proxies: tuple[str, ...] = ()
    console: ConsoleConfig = msgspec.field(default_factory=ConsoleConfig)

    def __post_init__(self) -> None:
        field = "platforms.api_server"
        if not self.host.strip():
            raise ConfigError(f"{field}.host", "must not be empty; use 127.0.0.1 to serve this machine only")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"{field}.port", f"{self.port} is not a TCP port; use 0..65535 (0 picks a free one)")
        if self.key is not None and not self.key.strip():
            raise ConfigError(f"{field}.key", "is empty; remove it or set a non-empty key")
        if not self.model_name.strip():
            raise ConfigError(f"{field}.model_name", "must not be empty; the default is 'hermes-agent'")
        if self.request_timeout_s <= 0:
            raise ConfigError(f"{field}.request_timeout_s", "must be a positive number of seconds")
        if self.max_body_bytes < 1024:
            raise ConfigError(f"{field}.max_body_bytes", "must be at least 1024 bytes; the default is 4 MiB")
        if self.max_concurrent_runs < 0:
            raise ConfigError(f"{field}.max_concurrent_runs", "must be 0 (no cap) or a positive number of requests")
        if self.user is not None and not self.user.strip():
            raise ConfigError(f"{field}.user", "is empty; remove it or name the user this key speaks for")
        if self.retry_fold_s < 0:
            raise ConfigError(f"{field}.retry_fold_s", "must be 0 (no folding) or a positive number of seconds")
        if self.keepalive_s <= 0:
            raise ConfigError(f"{field}.keepalive_s", "must be a positive number of seconds")
        for index, origin in enumerate(self.cors_origins):
            if origin != "*" and not _ORIGIN.fullmatch(origin):
                raise ConfigError(
                    f"{field}.cors_origins[{index}]",
                    f"{origin!r} is not an origin; write scheme://host[:port] with no path or trailing slash "
                    "(https://chat.example.org, http://localhost:3000), or '*' for any",
                )
        for index, proxy in enumerate(self.trusted_proxies):
            try:
                ipaddress.ip_network(proxy.strip(), strict=False)
            except ValueError:
                raise ConfigError(
                    f"{field}.trusted_proxies[{index}]",
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
