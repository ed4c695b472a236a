"""A local QQ Bot open platform: the token service, the OpenAPI message endpoints and media files on loopback,
and QQ's side of the HTTP callback.

Written from QQ's documentation, independently of the adapter. :class:`FakeQq` serves ``POST
/app/getAppAccessToken`` (``{"appId", "clientSecret"}`` → ``{"access_token", "expires_in": "7200"}``, the lifetime
as a string as QQ sends it; code 100016 for a wrong secret), and ``POST /v2/users/{openid}/messages``,
``/v2/groups/{group_openid}/messages`` and ``/channels/{channel_id}/messages`` with ``Authorization: QQBot
<token>`` (401, code 11244, for a token it did not issue or has revoked). A direct or group message with a
``msg_id`` and ``msg_seq`` it already has is refused with code 40054005. Failures can be scripted
(:meth:`FakeQq.fail`). Files added with :meth:`FakeQq.add_file` are served at ``/files/<key>``.

:func:`callback_headers` signs a body as QQ does (Ed25519; the seed is the AppSecret repeated to 32 bytes, cut to
32; the signed bytes are the timestamp followed by the body) and :func:`post` delivers it.
"""

from __future__ import annotations

import http.client
import json
import secrets
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from platforms.support.http_host import HttpHost
from tests.platforms.support import Arrivals

__all__ = ["Answer", "FakeQq", "Sent", "callback_headers", "key_of", "post"]


def key_of(secret: str) -> Ed25519PrivateKey:
    """The bot's Ed25519 key as QQ derives it from ``secret``."""
    seed = secret
    while len(seed) < 32:
        seed = seed * 2
    return Ed25519PrivateKey.from_private_bytes(seed[:32].encode())


def callback_headers(secret: str, body: bytes, *, app_id: str, timestamp: int | None = None) -> dict[str, str]:
    """The headers QQ sends with a callback ``body``, signed for the bot with ``secret``."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    signature = key_of(secret).sign(stamp.encode() + body).hex()
    return {
        "Content-Type": "application/json",
        "User-Agent": "QQBot-Callback",
        "X-Bot-Appid": app_id,
        "X-Signature-Method": "Ed25519",
        "X-Signature-Timestamp": stamp,
        "X-Signature-Ed25519": signature,
    }


@dataclass(frozen=True)
class Answer:
    status: int
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


def post(url: str, body: bytes, headers: Mapping[str, str]) -> Answer:
    """POST ``body`` to ``url`` with ``headers``; the status and text of the answer."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=20)
    try:
        connection.request("POST", parts.path, body=body, headers=dict(headers))
        response = connection.getresponse()
        return Answer(response.status, response.read().decode())
    finally:
        connection.close()


@dataclass(frozen=True)
class Sent:
    """One accepted message: the kind of endpoint (``users``, ``groups``, ``channels``), its target, the body."""

    kind: str
    target: str
    body: dict[str, Any]


@dataclass
class _Failure:
    status: int
    body: dict[str, Any]
    headers: dict[str, str]


@dataclass
class FakeQq:
    """QQ's services for bots with these ``secrets`` (AppID → AppSecret)."""

    secrets: Mapping[str, str]
    token_fetches: int = 0
    sent: list[Sent] = field(default_factory=list)
    _arrivals: Arrivals[Sent] = field(default_factory=lambda: Arrivals("sent", "the fake QQ"))
    _tokens: set[str] = field(default_factory=set)
    _seqs: set[tuple[str, int]] = field(default_factory=set)
    _script: deque[_Failure] = field(default_factory=deque)
    _files: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        app = web.Application()
        app.router.add_post("/app/getAppAccessToken", self._token)
        app.router.add_post("/v2/users/{target}/messages", self._message)
        app.router.add_post("/v2/groups/{target}/messages", self._message)
        app.router.add_post("/channels/{target}/messages", self._message)
        app.router.add_get("/files/{key}", self._file)
        self.host = HttpHost(app, name="fake-qq")

    @property
    def base_url(self) -> str:
        return self.host.url

    @property
    def token_url(self) -> str:
        return self.host.url + "/app/getAppAccessToken"

    def start(self) -> FakeQq:
        self.host.start()
        return self

    def stop(self) -> None:
        self.host.stop(5)

    def revoke_tokens(self) -> None:
        """Every token issued so far stops working (as when one expires early)."""
        with self._lock:
            self._tokens.clear()

    def add_file(self, data: bytes, content_type: str) -> str:
        """A file of an incoming message; return its URL."""
        key = secrets.token_urlsafe(12)
        with self._lock:
            self._files[key] = (data, content_type)
        return f"{self.base_url}/files/{key}"

    def fail(self, status: int, code: int, message: str, *, headers: Mapping[str, str] | None = None) -> None:
        """Answer the next message request with ``status`` and QQ's error ``code``."""
        body = {"message": message, "code": code, "err_code": code, "trace_id": secrets.token_hex(16)}
        with self._lock:
            self._script.append(_Failure(status, body, dict(headers or {})))

    def take(self, timeout: float = 10.0) -> Sent:
        return self._arrivals.take(timeout)

    def nothing_more(self, wait: float = 0.2) -> bool:
        return self._arrivals.nothing_more(wait)

    async def _token(self, request: web.Request) -> web.Response:
        body = await request.json()
        if self.secrets.get(str(body.get("appId"))) != body.get("clientSecret"):
            return web.json_response({"code": 100016, "message": "invalid appid or secret"}, status=200)
        token = secrets.token_urlsafe(24)
        with self._lock:
            self._tokens.add(token)
            self.token_fetches += 1
        return web.json_response({"access_token": token, "expires_in": "7200"})

    async def _message(self, request: web.Request) -> web.Response:
        with self._lock:
            known = request.headers.get("Authorization", "").removeprefix("QQBot ") in self._tokens
            failure = self._script.popleft() if self._script and known else None
        if not request.headers.get("Authorization", "").startswith("QQBot ") or not known:
            return _error(401, 11244, "token not exist or expire")
        if failure is not None:
            return web.json_response(failure.body, status=failure.status, headers=failure.headers)
        body = await request.json()
        kind = request.path.split("/")[-3]
        if not body.get("content"):
            return _error(400, 40034006, "content is required")
        if kind != "channels" and body.get("msg_id"):
            seq = (str(body["msg_id"]), int(body.get("msg_seq", 1)))
            with self._lock:
                repeated = seq in self._seqs
                self._seqs.add(seq)
            if repeated:
                return _error(400, 40054005, "消息被去重，请检查请求msgseq")
        sent = Sent(kind=kind, target=request.match_info["target"], body=body)
        with self._lock:
            self.sent.append(sent)
        self._arrivals.put(sent)
        return web.json_response({"id": "ROBOT1.0_" + secrets.token_hex(12), "timestamp": int(time.time())})

    async def _file(self, request: web.Request) -> web.Response:
        with self._lock:
            found = self._files.get(request.match_info["key"])
        if found is None:
            return web.Response(status=404, text="not found")
        return web.Response(body=found[0], content_type=found[1])


def _error(status: int, code: int, message: str) -> web.Response:
    return web.json_response({"message": message, "code": code, "err_code": code}, status=status)
