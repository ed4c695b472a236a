"""Signed webhooks: ``POST /webhooks/<route>`` turns a JSON payload into a user message; replies go to a callback.

Requests are authenticated with the Standard Webhooks scheme (HMAC-SHA256 over ``<id>.<timestamp>.<body>`` in the
``webhook-id``, ``webhook-timestamp`` and ``webhook-signature`` headers, five minutes of clock tolerance), so any
sender with a Standard Webhooks library can post here and nothing unsigned gets in. Every route has its own
secret. The ``webhook-id`` is the inbound message id, so the gateway's durable inbox recognises a redelivery and
runs no second turn. The answer is 202 once the message is committed; the reply leaves later through the outbox,
POSTed to the route's ``callback_url`` (signed when the route has a ``callback_secret``) under a ``webhook-id``
that stays the same on every retry, so the receiver can drop repeats.

A request the adapter cannot use gets a small JSON ``{"error": ...}`` saying why: 404 unknown route, 413 too
large, 401 unsigned, badly signed or outside the tolerance, 400 malformed; 503 if the message could not be stored.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import SplitResult, urlsplit

import msgspec
from aiohttp import web

from hermes_actors.errors import ConfigError
from hermes_actors.messages import InboundMessage, OutboundMessage
from hermes_actors.routing import SessionSource
from platforms.base import Capabilities, ReplySender, SendError
from platforms.support import http_client, json_guard
from platforms.support.http_client import shown
from platforms.support.http_host import HttpAdapter, Refused

__all__ = ["TOLERANCE_S", "WebhookAdapter", "WebhookConfig", "WebhookReply", "WebhookRoute", "new_webhook_secret"]

_log = logging.getLogger(__name__)

TOLERANCE_S = 300  # how far a webhook-timestamp may be from our clock, either way

_SECRET_PREFIX = "whsec_"
_MIN_KEY_BYTES = 24  # the Standard Webhooks lower bound
_NEW_SECRET_HINT = (
    "generate one with: python -c \"import secrets,base64;print('whsec_'+base64.b64encode(secrets.token_bytes(24))"
    '.decode())"'
)
_ROUTE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FIELD_PATH = re.compile(r"[^.]+(?:\.[^.]+)*")
_WEBHOOK_ID = re.compile(r"[\x21-\x7e]{1,256}")  # printable ASCII: it is signed and stored as the message id
_TIMESTAMP = re.compile(r"[0-9]{1,15}")
_CHAT_TYPES = ("dm", "group", "channel", "thread")
_MAX_ID_CHARS = 256
_MAX_RETRY_AFTER_S = 3600.0  # a callback asking for longer is tried again after an hour anyway
_EXCERPT_BYTES = 200
_PLATFORM = "webhook"


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
    text: str = "text"
    chat_id: str = "chat_id"
    user_id: str = "user_id"
    thread_id: str | None = None
    user_name: str | None = None
    chat_type: str = "dm"
    callback_url: str | None = None
    callback_secret: str | None = None


class WebhookConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``platforms.webhook`` section; the daemon starts no webhook server when ``enabled`` is false."""

    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = 8644
    max_body_bytes: int = 1024 * 1024
    routes: dict[str, WebhookRoute] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.host:
            raise ConfigError("platforms.webhook.host", "must not be empty; use 127.0.0.1 to listen on loopback only")
        if not 0 <= self.port <= 65535:
            raise ConfigError("platforms.webhook.port", "must be a TCP port between 0 and 65535")
        if self.max_body_bytes < 1:
            raise ConfigError("platforms.webhook.max_body_bytes", "must be a positive number of bytes")
        for name, route in self.routes.items():
            _check_route(name, route)


class WebhookReply(msgspec.Struct, frozen=True, kw_only=True):
    """The JSON body POSTed to a route's ``callback_url``; ``in_reply_to`` and ``answers`` are webhook-ids."""

    route: str
    session_id: str | None
    chat_id: str | None
    thread_id: str | None
    user_id: str | None
    text: str
    in_reply_to: str | None
    answers: tuple[str, ...]
    possible_duplicate: bool


def new_webhook_secret() -> str:
    """Return a fresh Standard Webhooks secret: ``whsec_`` and the base64 of 24 random bytes."""
    return _SECRET_PREFIX + base64.b64encode(secrets.token_bytes(_MIN_KEY_BYTES)).decode()


def _decode_secret(secret: str) -> bytes | None:
    """Return the HMAC key of a ``whsec_`` secret, or ``None`` if it is not one."""
    if not secret.startswith(_SECRET_PREFIX):
        return None
    try:
        key = base64.b64decode(secret[len(_SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        return None
    return key if len(key) >= _MIN_KEY_BYTES else None


def _bad_secret(path: str, what: str = "") -> ConfigError:
    subject = f"{what} must" if what else "must"
    return ConfigError(
        path,
        f"{subject} be 'whsec_' followed by the base64 of at least {_MIN_KEY_BYTES} random bytes; {_NEW_SECRET_HINT}",
    )


def _check_route(name: str, route: WebhookRoute) -> None:
    path = f"platforms.webhook.routes.{name}"
    if not _ROUTE_NAME.fullmatch(name):
        raise ConfigError(path, "a route name is 1 to 64 letters, digits, '_' or '-' (the URL is /webhooks/<name>)")
    if route.secret is None and route.secret_env is None:
        raise ConfigError(
            f"{path}.secret",
            f"every route needs a secret; {_NEW_SECRET_HINT}, and set it as secret (or name an environment variable "
            "holding it in secret_env)",
        )
    if route.secret is not None and route.secret_env is not None:
        raise ConfigError(f"{path}.secret_env", "set either secret or secret_env, not both")
    if route.secret is not None and _decode_secret(route.secret) is None:
        raise _bad_secret(f"{path}.secret")
    if route.secret_env is not None and not _ENV_NAME.fullmatch(route.secret_env):
        raise ConfigError(f"{path}.secret_env", "must be an environment variable name such as HERMES_WEBHOOK_SECRET")
    fields: dict[str, str | None] = {"text": route.text, "chat_id": route.chat_id, "user_id": route.user_id}
    fields |= {"thread_id": route.thread_id, "user_name": route.user_name}
    for field, value in fields.items():
        if value is not None and not _FIELD_PATH.fullmatch(value):
            raise ConfigError(f"{path}.{field}", "must be a dotted path into the JSON payload, such as 'message.text'")
    if route.chat_type not in _CHAT_TYPES:
        raise ConfigError(f"{path}.chat_type", f"must be one of {', '.join(_CHAT_TYPES)}")
    if route.callback_url is not None and _callback_target(route.callback_url) is None:
        raise ConfigError(f"{path}.callback_url", "must be an http:// or https:// URL with a host")
    if route.callback_secret is not None:
        if route.callback_url is None:
            raise ConfigError(f"{path}.callback_secret", "is set but callback_url is not; set both or neither")
        if _decode_secret(route.callback_secret) is None:
            raise _bad_secret(f"{path}.callback_secret")


def _callback_target(url: str) -> SplitResult | None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        return None
    return parts if parts.scheme in ("http", "https") and parts.hostname else None


def _sign(key: bytes, webhook_id: str, timestamp: str, body: bytes) -> str:
    """The base64 HMAC-SHA256 of ``<id>.<timestamp>.<body>`` (without the ``v1,`` prefix)."""
    digest = hmac.new(key, f"{webhook_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


class _Route(msgspec.Struct, frozen=True, kw_only=True):
    """A route with its secrets decoded."""

    name: str
    config: WebhookRoute
    key: bytes
    secret_origin: str  # for the banner: where the secret comes from
    callback: SplitResult | None
    callback_key: bytes | None


def _resolve(name: str, route: WebhookRoute, environ: Mapping[str, str]) -> _Route:
    if route.secret_env is not None:
        path = f"platforms.webhook.routes.{name}.secret_env"
        value = environ.get(route.secret_env)
        if not value:
            raise ConfigError(path, f"environment variable {route.secret_env} is not set; export the route's secret")
        key = _decode_secret(value)
        if key is None:
            raise _bad_secret(path, f"the value of {route.secret_env}")
        origin = f"secret from ${route.secret_env}"
    else:
        key = _decode_secret(route.secret or "")
        if key is None:  # WebhookConfig refuses this already; a route built by hand may still get here
            raise _bad_secret(f"platforms.webhook.routes.{name}.secret")
        origin = "secret in config.yaml"
    callback_key = _decode_secret(route.callback_secret) if route.callback_secret else None
    callback = _callback_target(route.callback_url) if route.callback_url else None
    return _Route(name=name, config=route, key=key, secret_origin=origin, callback=callback, callback_key=callback_key)


def _verify(key: bytes, headers: Mapping[str, str], body: bytes, now: float) -> str:
    """Check the Standard Webhooks headers of a request; return its ``webhook-id`` or raise :class:`Refused`."""
    webhook_id = headers.get("webhook-id")
    timestamp = headers.get("webhook-timestamp")
    signatures = headers.get("webhook-signature")
    if webhook_id is None or timestamp is None or signatures is None:
        raise Refused(401, "unsigned request: webhook-id, webhook-timestamp and webhook-signature are required")
    if not _WEBHOOK_ID.fullmatch(webhook_id):
        raise Refused(401, "webhook-id must be 1 to 256 printable ASCII characters")
    if not _TIMESTAMP.fullmatch(timestamp):
        raise Refused(401, "webhook-timestamp must be an integer number of Unix seconds")
    skew = now - int(timestamp)
    if skew > TOLERANCE_S:
        raise Refused(401, f"webhook-timestamp is {skew:.0f} s old, over the {TOLERANCE_S} s tolerance")
    if skew < -TOLERANCE_S:
        raise Refused(401, f"webhook-timestamp is {-skew:.0f} s in the future, over the {TOLERANCE_S} s tolerance")
    expected = _sign(key, webhook_id, timestamp, body).encode()
    offered = [s.partition(",") for s in signatures.split() if s.isascii()]
    if not any(v == "v1" and hmac.compare_digest(sig.encode(), expected) for v, _, sig in offered):
        raise Refused(401, "webhook-signature does not match the body and the route's secret")
    return webhook_id


_payload_decoder = msgspec.json.Decoder(dict[str, Any])
_MISSING = object()


def _lookup(payload: dict[str, Any], path: str) -> Any:
    """The value at dotted ``path``, or ``_MISSING`` when a key on the way is absent or the value is null."""
    value: Any = payload
    walked = "$"
    for key in path.split("."):
        if not isinstance(value, dict):
            raise Refused(400, f"{walked} is not a JSON object, so $.{path} cannot be read")
        value = value.get(key, _MISSING)
        walked += "." + key
        if value is _MISSING or value is None:
            return _MISSING
    return value


def _id_at(payload: dict[str, Any], path: str | None) -> str | None:
    """A string-or-integer id at ``path`` as a string; ``None`` when absent or empty."""
    value = _MISSING if path is None else _lookup(payload, path)
    if value is _MISSING:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise Refused(400, f"$.{path} must be a string or an integer, not {_json_type(value)}")
    text = str(value)
    if len(text) > _MAX_ID_CHARS:
        raise Refused(400, f"$.{path} is longer than {_MAX_ID_CHARS} characters")
    return text or None


def _json_type(value: Any) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "an array"}
    return names.get(type(value), "an object")


def _to_inbound(route: _Route, webhook_id: str, body: bytes, received_at: float) -> InboundMessage:
    """Map a verified body onto an inbound message, or raise :class:`Refused` (400) naming the field."""
    try:
        payload = json_guard.decode(_payload_decoder, body)
    except msgspec.ValidationError as exc:
        raise Refused(400, f"the body must be a JSON object ({exc})") from None
    except msgspec.DecodeError as exc:
        raise Refused(400, f"the body is not valid JSON ({exc})") from None
    mapping = route.config
    text = _lookup(payload, mapping.text)
    if text is _MISSING:
        raise Refused(400, f"$.{mapping.text} is missing; it holds the message text")
    if not isinstance(text, str):
        raise Refused(400, f"$.{mapping.text} must be a string, not {_json_type(text)}")
    if not text.strip():
        raise Refused(400, f"$.{mapping.text} is empty")
    chat_id = _id_at(payload, mapping.chat_id)
    user_id = _id_at(payload, mapping.user_id)
    if chat_id is None and user_id is None:
        raise Refused(400, f"the payload has neither $.{mapping.chat_id} nor $.{mapping.user_id}; send one of them")
    user_name = _MISSING if mapping.user_name is None else _lookup(payload, mapping.user_name)
    if user_name is not _MISSING and not isinstance(user_name, str):
        raise Refused(400, f"$.{mapping.user_name} must be a string, not {_json_type(user_name)}")
    source = SessionSource(
        platform=_PLATFORM,
        account_id=route.name,
        chat_type=mapping.chat_type,
        chat_id=chat_id,
        thread_id=_id_at(payload, mapping.thread_id),
        user_id=user_id,
        user_name=user_name if isinstance(user_name, str) else None,
    )
    return InboundMessage(source=source, text=text, message_id=webhook_id, received_at=received_at)


def _answer(status: int, body: dict[str, Any]) -> web.Response:
    return web.json_response(body, status=status)


class WebhookAdapter(HttpAdapter[WebhookConfig]):
    """The webhook entry point: an HTTP server for the routes of a :class:`WebhookConfig` and their callbacks.

    Secrets named by ``secret_env`` are read from ``environ`` (default ``os.environ``) here, so a missing one is a
    :class:`ConfigError` before anything starts. ``clock`` checks webhook timestamps and stamps callbacks.
    """

    platform = _PLATFORM
    capabilities = Capabilities()
    server_name = "webhook"

    def __init__(
        self,
        config: WebhookConfig,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        http_timeout_s: float = 10.0,
    ) -> None:
        super().__init__(config)
        env = os.environ if environ is None else environ
        self._routes = {name: _resolve(name, route, env) for name, route in config.routes.items()}
        self._clock = clock
        self._sender = _CallbackSender(self._routes, clock=clock, timeout_s=http_timeout_s)

    def senders(self) -> Sequence[ReplySender]:
        """The callback sender for replies to webhook sessions."""
        return [self._sender]

    def _add_routes(self, app: web.Application) -> None:
        """Serve ``POST /webhooks/<route>``."""
        app.router.add_post("/webhooks/{route}", self._receive)

    def describe(self) -> list[str]:
        """One banner line per route: its URL, how requests are signed and where replies go."""
        if not self._routes:
            return [
                f"Webhooks: {self.url} has no routes; add one under platforms.webhook.routes in config.yaml "
                f"(each needs a secret; {_NEW_SECRET_HINT})"
            ]
        return [self._describe_route(route) for route in self._routes.values()]

    def _describe_route(self, route: _Route) -> str:
        line = f"Webhook route '{route.name}': POST {self.url}/webhooks/{route.name} "
        line += f"(Standard Webhooks signature, {route.secret_origin})"
        if route.callback is None:
            return line + "; replies stay in the transcript (no callback_url)"
        return line + f"; replies POSTed to {shown(route.callback)}"

    async def _receive(self, request: web.Request) -> web.Response:
        name = request.match_info["route"]
        try:
            route = self._routes.get(name)
            if route is None:
                raise Refused(404, f"no webhook route {name!r}; add it under platforms.webhook.routes")
            body = await self._read_body(request)
            webhook_id = _verify(route.key, request.headers, body, self._clock())
            inbound = _to_inbound(route, webhook_id, body, self._clock())
        except Refused as exc:
            _log.info("webhook %r: refused a request (%d %s)", name, exc.status, exc.reason)
            return _answer(exc.status, {"error": exc.reason})
        return await self._accept(inbound)

    async def _accept(self, inbound: InboundMessage) -> web.Response:
        result = await self._accept_inbound(inbound, _log, "webhook %r: could not accept message %s")
        if result is None:  # not stored: the sender should deliver it again later
            return _answer(503, {"error": "the message could not be stored; deliver it again later"})
        return _answer(202, {"accepted": True, "duplicate": result.duplicate, "routing_key": result.routing_key})


def _callback_id(message: OutboundMessage) -> str:
    """A ``webhook-id`` that is the same for every attempt at one reply (after a restart too: it includes the outbox
    row id) and differs between replies, even two with the same text, so the receiver can drop a resend."""
    identity = msgspec.json.encode(
        [message.outbox_id, message.session_id, message.reply_to, message.answers, message.text]
    )
    return "msg_" + hashlib.sha256(identity).hexdigest()[:32]


class _CallbackSender:
    """POSTs replies to their route's ``callback_url`` (the route is the reply's ``account_id``)."""

    platform = _PLATFORM
    idempotent_sends = False  # receivers may dedupe on webhook-id, but nothing says they do

    def __init__(self, routes: Mapping[str, _Route], *, clock: Callable[[], float], timeout_s: float) -> None:
        self._routes = routes
        self._clock = clock
        self._timeout = timeout_s
        self._told: set[str] = set()  # routes already logged as having no callback; one outbox thread calls send

    def send(self, message: OutboundMessage) -> str | None:
        """POST ``message`` to its callback; return the reply's ``webhook-id``, or ``None`` with no callback."""
        route = self._routes.get(message.account_id)
        if route is None or route.callback is None:
            if message.account_id not in self._told:
                self._told.add(message.account_id)
                why = "has no callback_url" if route is not None else "is no longer configured"
                _log.info("webhook route %r %s: its replies stay in the transcript", message.account_id, why)
            return None
        webhook_id = _callback_id(message)
        body = msgspec.json.encode(
            WebhookReply(
                route=route.name,
                session_id=message.session_id,
                chat_id=message.chat_id,
                thread_id=message.thread_id,
                user_id=message.user_id,
                text=message.text,
                in_reply_to=message.reply_to,
                answers=message.answers,
                possible_duplicate=message.possible_duplicate,
            )
        )
        timestamp = str(int(self._clock()))
        headers = {"content-type": "application/json", "webhook-id": webhook_id, "webhook-timestamp": timestamp}
        if route.callback_key is not None:
            headers["webhook-signature"] = "v1," + _sign(route.callback_key, webhook_id, timestamp, body)
        self._post(route.name, route.callback, body, headers)
        return webhook_id

    def _post(self, name: str, url: SplitResult, body: bytes, headers: dict[str, str]) -> None:
        """Send one POST; raise :class:`SendError` unless the callback answers 2xx."""
        where = f"webhook route '{name}': callback {shown(url)}"
        try:
            result = http_client.request("POST", url.geturl(), body=body, headers=headers, timeout=self._timeout)
        except http_client.HttpError as exc:
            raise http_client.send_error(exc, where) from exc
        if result.status >= 300:
            hint = "; check callback_url and the receiver" if 400 <= result.status < 500 else ""
            error = http_client.status_error(result, where, now=self._clock())
            raise SendError(str(error) + hint, retry_after_s=error.retry_after_s) from None
