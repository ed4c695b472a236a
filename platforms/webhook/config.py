"""The ``platforms.webhook`` section of ``config.yaml``: routes, their secrets and callbacks, checked at load."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated
from urllib.parse import SplitResult, urlsplit

import msgspec
from msgspec import Meta

from hermes_actors.constraints import AccountName, ListenHost, Port, PositiveBytes, Rule, check_section
from hermes_actors.errors import ConfigError
from platforms.support.secrets import check_secret_source, read_env_secret, secret_origin
from platforms.support.standard_webhooks import NEW_SECRET_HINT, bad_secret, decode_secret

__all__ = ["ResolvedRoute", "WebhookConfig", "WebhookRoute", "resolve_route"]

_SECTION = "platforms.webhook"
_CHAT_TYPES = ("dm", "group", "channel", "thread")
_FieldPath = Annotated[
    str,
    Rule(Meta(pattern=r"^[^.]+(?:\.[^.]+)*\Z"), "must be a dotted path into the JSON payload, such as 'message.text'"),
]


class WebhookRoute(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One ``POST /webhooks/<name>`` endpoint (``platforms.webhook.routes.<name>``).

    ``secret`` (or the environment variable named by ``secret_env``) is the ``whsec_`` secret requests are signed
    with. The mapping fields are dotted paths into the JSON payload (``message.text``): ``text`` must hold a
    string, the id fields a string or an integer; a payload needs ``chat_id`` or ``user_id``. ``chat_type`` is the
    chat type of every message of the route. Replies are POSTed to ``callback_url``, signed with
    ``callback_secret`` when it is set; without a callback they stay in the transcript. :class:`WebhookConfig`
    checks routes, since only it knows their names.
    """

    secret: str | None = None
    secret_env: str | None = None
    text: _FieldPath = "text"
    chat_id: _FieldPath = "chat_id"
    user_id: _FieldPath = "user_id"
    thread_id: _FieldPath | None = None
    user_name: _FieldPath | None = None
    chat_type: str = "dm"
    callback_url: str | None = None
    callback_secret: str | None = None


class WebhookConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``platforms.webhook`` section; the daemon starts no webhook server when ``enabled`` is false."""

    enabled: bool = True
    host: ListenHost = "127.0.0.1"
    port: Port = 8644
    max_body_bytes: PositiveBytes = 1024 * 1024
    routes: dict[AccountName, WebhookRoute] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        check_section(self, _SECTION)
        for name, route in self.routes.items():
            _check_route(name, route)


def _check_route(name: str, route: WebhookRoute) -> None:
    path = f"{_SECTION}.routes.{name}"
    check_secret_source(
        path,
        "secret",
        route.secret,
        route.secret_env,
        example_env="HERMES_WEBHOOK_SECRET",
        missing=(
            f"every route needs a secret; {NEW_SECRET_HINT}, and set it as secret (or name an environment variable "
            "holding it in secret_env)"
        ),
    )
    if route.secret is not None and decode_secret(route.secret) is None:
        raise bad_secret(f"{path}.secret")
    if route.chat_type not in _CHAT_TYPES:
        raise ConfigError(f"{path}.chat_type", f"must be one of {', '.join(_CHAT_TYPES)}")
    if route.callback_url is not None and _callback_target(route.callback_url) is None:
        raise ConfigError(f"{path}.callback_url", "must be an http:// or https:// URL with a host")
    if route.callback_secret is not None:
        if route.callback_url is None:
            raise ConfigError(f"{path}.callback_secret", "is set but callback_url is not; set both or neither")
        if decode_secret(route.callback_secret) is None:
            raise bad_secret(f"{path}.callback_secret")


def _callback_target(url: str) -> SplitResult | None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        return None
    return parts if parts.scheme in ("http", "https") and parts.hostname else None


class ResolvedRoute(msgspec.Struct, frozen=True, kw_only=True):
    """A route with its secrets decoded."""

    name: str
    config: WebhookRoute
    key: bytes
    secret_origin: str  # for the banner: where the secret comes from
    callback: SplitResult | None
    callback_key: bytes | None


def resolve_route(name: str, route: WebhookRoute, environ: Mapping[str, str]) -> ResolvedRoute:
    if route.secret_env is not None:
        path = f"{_SECTION}.routes.{name}.secret_env"
        value = read_env_secret(path, route.secret_env, environ, export="export the route's secret")
        key = decode_secret(value)
        if key is None:
            raise bad_secret(path, f"the value of {route.secret_env}")
        origin = secret_origin("secret", route.secret_env)
    else:
        key = decode_secret(route.secret or "")
        if key is None:  # WebhookConfig refuses this already; a route built by hand may still get here
            raise bad_secret(f"{_SECTION}.routes.{name}.secret")
        origin = secret_origin("secret", None)
    callback_key = decode_secret(route.callback_secret) if route.callback_secret else None
    callback = _callback_target(route.callback_url) if route.callback_url else None
    return ResolvedRoute(
        name=name, config=route, key=key, secret_origin=origin, callback=callback, callback_key=callback_key
    )
