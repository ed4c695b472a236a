"""A local Microsoft: the Bot Connector's OpenID metadata and signing keys, the login service's token endpoint, and
the Bot Connector's conversation API, all on one loopback server; and the Bot Connector's side of a messaging
endpoint (activities signed as RS256 JWTs).

:class:`FakeTeams` serves what a bot talks to, as Microsoft documents it:

- ``GET /v1/.well-known/openidconfiguration`` (``issuer``, ``jwks_uri``, ``id_token_signing_alg_values_supported``)
  and ``GET /v1/.well-known/keys``: the JWKS, each key with ``kid``, ``kty``, ``use``, ``n``, ``e`` and the
  ``endorsements`` (channel ids) it signs for. :meth:`FakeTeams.rotate` adds a new key and signs with it.
- ``POST /{tenant}/oauth2/v2.0/token``: the client-credentials grant (form body ``grant_type``, ``client_id``,
  ``client_secret``, ``scope``) answering ``{"token_type", "expires_in", "ext_expires_in", "access_token"}``, or
  HTTP 401 ``{"error": "invalid_client"}`` for a wrong secret. :meth:`FakeTeams.revoke_tokens` makes every token
  handed out so far answer 401 (as a revoked token does).
- ``POST /amer/v3/conversations/{conversationId}/activities[/{activityId}]``: a reply, Bearer token required;
  answers ``{"id": ...}`` (201), or whatever :meth:`FakeTeams.fail_next` scripts (429 with ``Retry-After``, 403
  ``BotNotInConversationRoster``, 5xx). ``POST /amer/v3/conversations``: a new channel thread, answering
  ``{"id": "<channel>;messageid=<id>", "activityId": <id>}``.
- ``GET /amer/v3/attachments/{id}/views/original``: an inline image, Bearer token required (401 otherwise), and
  ``GET /files/{id}``: a file's pre-authorised download link (no token).

:func:`message` and :func:`conversation_update` build activities as Teams sends them; :func:`deliver` POSTs one
with ``Authorization: Bearer <JWT>``. Written from Microsoft's documentation, independently of the adapter.
"""

from __future__ import annotations

import base64
import http.client
import itertools
import json
import secrets
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa

from platforms.support.http_host import HttpHost
from tests.platforms.support import Arrivals

__all__ = [
    "ISSUER",
    "Answer",
    "FakeTeams",
    "Posted",
    "conversation_update",
    "deliver",
    "message",
    "new_key",
]

ISSUER = "https://api.botframework.com"
_ids = itertools.count(1_900_000_000_000)  # activity ids the tests do not choose themselves


def new_key() -> rsa.RSAPrivateKey:
    """A fresh 2048-bit RSA key, as the Bot Connector signs with."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _b64(number: int) -> str:
    data = number.to_bytes((number.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass(frozen=True)
class Posted:
    """One reply or thread the fake accepted: the bot's app id (from its token), the conversation, what it said."""

    app_id: str
    conversation: str
    reply_to: str | None
    text: str
    id: str
    body: dict[str, Any]
    at: float


@dataclass(frozen=True)
class _Failure:
    status: int
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class _SigningKey:
    kid: str
    private: rsa.RSAPrivateKey
    endorsements: list[str]


@dataclass
class FakeTeams:
    """Microsoft's services for the bots ``passwords`` (app id -> client secret)."""

    passwords: Mapping[str, str]
    posted: list[Posted] = field(default_factory=list)
    attempts: list[float] = field(default_factory=list)  # arrival time of every authorised conversation call
    token_requests: list[dict[str, str]] = field(default_factory=list)
    key_fetches: int = 0
    image_requests: list[str | None] = field(default_factory=list)  # the Authorization header of each
    _arrivals: Arrivals[Posted] = field(default_factory=lambda: Arrivals("posted", "the fake Bot Connector"))
    _script: deque[_Failure | None] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _tokens: dict[str, str] = field(default_factory=dict)  # access token -> app id
    _keys: list[_SigningKey] = field(default_factory=list)
    _files: dict[str, tuple[bytes, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._keys.append(_SigningKey(kid="key-1", private=new_key(), endorsements=["msteams", "webchat"]))
        app = web.Application()
        app.router.add_get("/v1/.well-known/openidconfiguration", self._metadata)
        app.router.add_get("/v1/.well-known/keys", self._jwks)
        app.router.add_post("/{tenant}/oauth2/v2.0/token", self._token)
        app.router.add_post("/amer/v3/conversations/{conversation}/activities", self._reply)
        app.router.add_post("/amer/v3/conversations/{conversation}/activities/{activity}", self._reply)
        app.router.add_post("/amer/v3/conversations", self._create)
        app.router.add_get("/amer/v3/attachments/{id}/views/original", self._image)
        app.router.add_get("/files/{id}", self._file)
        self.host = HttpHost(app, name="fake-teams")

    # -- addresses ---------------------------------------------------------------------------------------------

    @property
    def metadata_url(self) -> str:
        """What ``platforms.teams.openid_metadata_url`` should be."""
        return f"{self.host.url}/v1/.well-known/openidconfiguration"

    @property
    def login_url(self) -> str:
        """What ``platforms.teams.login_url`` should be."""
        return self.host.url

    @property
    def service_url(self) -> str:
        """The ``serviceUrl`` of the activities this Bot Connector sends."""
        return f"{self.host.url}/amer/"

    def start(self) -> FakeTeams:
        self.host.start()
        return self

    def stop(self) -> None:
        self.host.stop()

    # -- signing -----------------------------------------------------------------------------------------------

    @property
    def kid(self) -> str:
        """The id of the key tokens are signed with now."""
        return self._keys[-1].kid

    def rotate(self, endorsements: tuple[str, ...] = ("msteams", "webchat")) -> str:
        """Publish a new key and sign with it from now on; return its id."""
        kid = f"key-{len(self._keys) + 1}"
        self._keys.append(_SigningKey(kid=kid, private=new_key(), endorsements=list(endorsements)))
        return kid

    def token(
        self,
        app_id: str,
        *,
        service_url: str | None = None,
        issuer: str = ISSUER,
        audience: str | None = None,
        issued_at: float | None = None,
        lifetime_s: float = 3600.0,
        not_before: float | None = None,
        kid: str | None = None,
        key: rsa.RSAPrivateKey | None = None,
        drop: tuple[str, ...] = (),
    ) -> str:
        """A Bot Connector token for a request to bot ``app_id``, as ``Authorization: Bearer`` carries it."""
        now = time.time() if issued_at is None else issued_at
        claims: dict[str, Any] = {
            "serviceurl": service_url or self.service_url,
            "nbf": int(now if not_before is None else not_before),
            "exp": int(now + lifetime_s),
            "iss": issuer,
            "aud": audience or app_id,
        }
        for name in drop:
            claims.pop(name, None)
        signing = self._keys[-1]
        return jwt.encode(claims, key or signing.private, algorithm="RS256", headers={"kid": kid or signing.kid})

    def revoke_tokens(self) -> None:
        """Every access token handed out so far is refused from now on (401)."""
        with self._lock:
            self._tokens.clear()

    # -- scripting ---------------------------------------------------------------------------------------------

    def fail_next(
        self, status: int, *, retry_after: str | None = None, code: str = "", count: int = 1, after: int = 0
    ) -> None:
        """Answer ``count`` authorised conversation calls, after ``after`` normal ones, with HTTP ``status``."""
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        body = {"error": {"code": code or f"Http{status}", "message": f"scripted failure {status}"}}
        with self._lock:
            self._script.extend([None] * after)
            self._script.extend(_Failure(status, headers, body) for _ in range(count))

    def add_image(self, data: bytes, mimetype: str = "image/png") -> str:
        """Host an inline image; return its ``contentUrl``."""
        image_id = secrets.token_hex(6)
        with self._lock:
            self._files[image_id] = (data, mimetype)
        return f"{self.host.url}/amer/v3/attachments/{image_id}/views/original"

    def add_file(self, data: bytes) -> str:
        """Host a file; return its pre-authorised ``downloadUrl``."""
        file_id = secrets.token_hex(6)
        with self._lock:
            self._files[file_id] = (data, "application/octet-stream")
        return f"{self.host.url}/files/{file_id}"

    def take(self, timeout: float = 10.0) -> Posted:
        """The next accepted reply, waiting up to ``timeout``."""
        return self._arrivals.take(timeout)

    def drain(self) -> list[Posted]:
        return self._arrivals.drain()

    def nothing_more(self, wait: float = 0.2) -> bool:
        return self._arrivals.nothing_more(wait)

    # -- handlers ----------------------------------------------------------------------------------------------

    async def _metadata(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "issuer": ISSUER,
                "authorization_endpoint": "https://invalid.botframework.com",
                "jwks_uri": f"{self.host.url}/v1/.well-known/keys",
                "id_token_signing_alg_values_supported": ["RS256"],
                "token_endpoint_auth_methods_supported": ["private_key_jwt"],
            }
        )

    async def _jwks(self, request: web.Request) -> web.Response:
        with self._lock:
            self.key_fetches += 1
            keys = [
                {
                    "kty": "RSA",
                    "use": "sig",
                    "kid": key.kid,
                    "n": _b64(key.private.public_key().public_numbers().n),
                    "e": _b64(key.private.public_key().public_numbers().e),
                    "endorsements": key.endorsements,
                }
                for key in self._keys
            ]
        return web.json_response({"keys": keys})

    async def _token(self, request: web.Request) -> web.Response:
        form = dict(parse_qsl((await request.read()).decode()))
        with self._lock:
            self.token_requests.append(form | {"tenant": request.match_info["tenant"]})
        if form.get("grant_type") != "client_credentials" or form.get("scope") != f"{ISSUER}/.default":
            return web.json_response({"error": "invalid_request"}, status=400)
        app_id = form.get("client_id", "")
        if self.passwords.get(app_id) != form.get("client_secret"):
            return web.json_response({"error": "invalid_client", "error_description": "AADSTS7000215"}, status=401)
        token = secrets.token_urlsafe(24)
        with self._lock:
            self._tokens[token] = app_id
        return web.json_response(
            {"token_type": "Bearer", "expires_in": 3599, "ext_expires_in": 3599, "access_token": token}
        )

    def _app_of(self, request: web.Request) -> str | None:
        authorization = request.headers.get("Authorization", "")
        token = authorization.removeprefix("Bearer ") if authorization.startswith("Bearer ") else ""
        with self._lock:
            return self._tokens.get(token)

    def _scripted(self) -> _Failure | None:
        with self._lock:
            self.attempts.append(time.monotonic())
            return self._script.popleft() if self._script else None

    async def _reply(self, request: web.Request) -> web.Response:
        arrived = time.monotonic()
        app_id = self._app_of(request)
        if app_id is None:
            return web.json_response({"message": "Authorization has been denied for this request."}, status=401)
        failure = self._scripted()
        if failure is not None:
            return web.json_response(failure.body, status=failure.status, headers=failure.headers)
        body = json.loads(await request.read())
        if body.get("type") != "message" or not isinstance(body.get("text"), str):
            return web.json_response({"error": {"code": "BadArgument"}}, status=400)
        posted = Posted(
            app_id=app_id,
            conversation=request.match_info["conversation"],
            reply_to=request.match_info.get("activity"),
            text=body["text"],
            id=str(next(_ids)),
            body=body,
            at=arrived,
        )
        with self._lock:
            self.posted.append(posted)
        self._arrivals.put(posted)
        return web.json_response({"id": posted.id}, status=201)

    async def _create(self, request: web.Request) -> web.Response:
        app_id = self._app_of(request)
        if app_id is None:
            return web.json_response({"message": "Authorization has been denied for this request."}, status=401)
        failure = self._scripted()
        if failure is not None:
            return web.json_response(failure.body, status=failure.status, headers=failure.headers)
        body = json.loads(await request.read())
        channel = body["channelData"]["channel"]["id"]
        root = str(next(_ids))
        posted = Posted(
            app_id=app_id,
            conversation=channel,
            reply_to=None,
            text=body["activity"]["text"],
            id=root,
            body=body,
            at=time.monotonic(),
        )
        with self._lock:
            self.posted.append(posted)
        self._arrivals.put(posted)
        return web.json_response({"id": f"{channel};messageid={root}", "activityId": root}, status=201)

    async def _image(self, request: web.Request) -> web.Response:
        with self._lock:
            self.image_requests.append(request.headers.get("Authorization"))
            found = self._files.get(request.match_info["id"])
        if self._app_of(request) is None:
            return web.json_response({"message": "Authorization has been denied for this request."}, status=401)
        if found is None:
            return web.Response(status=404)
        return web.Response(body=found[0], headers={"Content-Type": found[1]})

    async def _file(self, request: web.Request) -> web.Response:
        with self._lock:
            found = self._files.get(request.match_info["id"])
        if found is None:
            return web.Response(status=404)
        return web.Response(body=found[0], headers={"Content-Type": found[1]})


# -- the Bot Connector's side of a messaging endpoint -------------------------------------------------------------


def message(
    text: str,
    *,
    bot_app_id: str,
    service_url: str,
    conversation_type: str = "personal",
    conversation_id: str = "a:1personal-chat-id",
    tenant: str = "tenant-1",
    user: str = "29:1user-alice",
    aad: str | None = "aad-alice",
    user_name: str = "Alice",
    activity_id: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A ``message`` activity as Teams sends it to a bot."""
    activity: dict[str, Any] = {
        "text": text,
        "textFormat": "plain",
        "type": "message",
        "timestamp": "2026-12-02T17:00:00.000Z",
        "localTimestamp": "2026-12-02T18:00:00.000+01:00",
        "id": activity_id or str(next(_ids)),
        "channelId": "msteams",
        "serviceUrl": service_url,
        "from": {"id": user, "name": user_name} | ({"aadObjectId": aad} if aad else {}),
        "conversation": {"conversationType": conversation_type, "tenantId": tenant, "id": conversation_id}
        | ({"isGroup": True} if conversation_type != "personal" else {}),
        "recipient": {"id": f"28:{bot_app_id}", "name": "Hermes"},
        "entities": [{"locale": "en-US", "country": "US", "platform": "Web", "type": "clientInfo"}],
        "channelData": {"tenant": {"id": tenant}},
        "locale": "en-US",
    }
    return activity | extra


def conversation_update(*, bot_app_id: str, service_url: str, tenant: str = "tenant-1") -> dict[str, Any]:
    """The ``conversationUpdate`` Teams sends when the bot is added to a conversation."""
    return {
        "type": "conversationUpdate",
        "id": f"f:{next(_ids)}",
        "channelId": "msteams",
        "serviceUrl": service_url,
        "from": {"id": "29:1user-alice", "aadObjectId": "aad-alice"},
        "conversation": {"conversationType": "personal", "tenantId": tenant, "id": "a:1personal-chat-id"},
        "recipient": {"id": f"28:{bot_app_id}", "name": "Hermes"},
        "membersAdded": [{"id": f"28:{bot_app_id}"}],
        "channelData": {"tenant": {"id": tenant}},
    }


@dataclass(frozen=True)
class Answer:
    """What the bot answered: status and the JSON body (or ``None``)."""

    status: int
    body: Any


def deliver(
    url: str, activity: Any, token: str | None, *, headers: Mapping[str, str] | None = None, timeout: float = 15.0
) -> Answer:
    """POST ``activity`` (JSON-encoded unless bytes) to the messaging endpoint ``url`` with ``token``."""
    body = activity if isinstance(activity, bytes) else json.dumps(activity).encode()
    sent = {"Content-Type": "application/json; charset=utf-8", "User-Agent": "Microsoft-BotFramework/3.1"}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    sent |= dict(headers or {})
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
    try:
        connection.request("POST", parts.path, body=body, headers=sent)
        response = connection.getresponse()
        data = response.read()
    finally:
        connection.close()
    try:
        decoded = json.loads(data) if data else None
    except ValueError:
        decoded = None
    return Answer(status=response.status, body=decoded)
