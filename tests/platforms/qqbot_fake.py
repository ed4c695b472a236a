"""A local QQ Bot open platform: the token service, the OpenAPI message endpoints and media files on loopback,
and QQ's side of the HTTP callback.

Written from QQ's documentation, independently of the adapter. :class:`FakeQq` serves ``POST
/app/getAppAccessToken`` (``{"appId", "clientSecret"}`` → ``{"access_token", "expires_in": "7200"}``, the lifetime
as a string as QQ sends it; code 100016 for a wrong secret), and ``POST /v2/users/{openid}/messages``,
``/v2/groups/{group_openid}/messages`` and ``/channels/{channel_id}/messages`` with ``Authorization: QQBot
<token>`` (401, code 11244, for a token it did not issue or has revoked). A direct or group message with a
``msg_id`` and ``msg_seq`` it already has is refused with code 40054005. Failures can be scripted
(:meth:`FakeQq.fail`). Files added with :meth:`FakeQq.add_file` are served at ``/files/<key>``.

The gateway: ``GET /gateway`` (with a valid token) names ``ws://.../websocket``, which sends ``op 10`` Hello,
takes ``op 2`` Identify (a valid ``QQBot`` token, else close 4004) and answers ``READY`` with a new ``session_id``, or
``op 6`` Resume of a session it knows (replaying every event after ``seq``, then ``RESUMED``; an unknown one gets
``op 9``), and answers each ``op 1`` heartbeat with ``op 11``. :meth:`FakeQq.push` dispatches an event with the
session's next ``s`` (kept for a later resume, also while no connection is open); :meth:`FakeQq.close`,
:meth:`FakeQq.ask_reconnect` and :meth:`FakeQq.invalidate` end a connection as QQ does.

:func:`callback_headers` signs a body as QQ does (Ed25519; the seed is the AppSecret repeated to 32 bytes, cut to
32; the signed bytes are the timestamp followed by the body) and :func:`post` delivers it.
"""

from __future__ import annotations

import asyncio
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
from tests.platforms.support import Arrivals, wait_on

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
    heartbeat_ms: int = 30_000
    identifies: list[dict[str, Any]] = field(default_factory=list)
    resumes: list[dict[str, Any]] = field(default_factory=list)
    heartbeats: list[Any] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)
    _sessions: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    _current: str | None = None
    _live: web.WebSocketResponse | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    def __post_init__(self) -> None:
        app = web.Application()
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/websocket", self._websocket)
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

    # -- the gateway

    def wait(self, check: Any, what: str, timeout: float = 10.0) -> Any:
        """Wait until ``check()`` holds (re-checked whenever the gateway's state changes)."""
        return wait_on(self.changed, check, timeout, lambda: f"the fake QQ gateway: no {what}")

    def connected(self) -> bool:
        with self._lock:
            return self._live is not None and self._current is not None

    def push(self, event: str, data: dict[str, Any]) -> int:
        """Dispatch ``event`` in the current session (sent now if a connection is open); return its ``s``."""
        with self._lock:
            assert self._current is not None, "no session to dispatch in"
            log = self._sessions[self._current]
            seq = log[-1][0] + 1 if log else 1
            frame = json.dumps({"op": 0, "id": f"{event}:{secrets.token_hex(6)}", "s": seq, "t": event, "d": data})
            log.append((seq, frame))
            live, loop = self._live, self._loop
        if live is not None and loop is not None:
            asyncio.run_coroutine_threadsafe(live.send_str(frame), loop).result(5)
        return seq

    def _on_loop(self, coro: Any) -> None:
        with self._lock:
            loop = self._loop
        assert loop is not None
        asyncio.run_coroutine_threadsafe(coro, loop).result(5)

    def close(self, code: int) -> None:
        """Close the open connection with ``code``."""
        with self._lock:
            live = self._live
        assert live is not None
        self._on_loop(live.close(code=code, message=b"closed by the fake"))

    def ask_reconnect(self) -> None:
        """Send ``op 7``: the client should reconnect and resume."""
        with self._lock:
            live = self._live
        assert live is not None
        self._on_loop(live.send_str(json.dumps({"op": 7})))

    def invalidate(self) -> None:
        """Forget the current session and send ``op 9``."""
        with self._lock:
            live = self._live
            if self._current is not None:
                del self._sessions[self._current]
            self._current = None
        assert live is not None
        self._on_loop(live.send_str(json.dumps({"op": 9, "d": False})))

    async def _gateway(self, request: web.Request) -> web.Response:
        with self._lock:
            known = request.headers.get("Authorization", "").removeprefix("QQBot ") in self._tokens
        if not known:
            return _error(401, 11244, "token not exist or expire")
        return web.json_response({"url": self.base_url.replace("http://", "ws://") + "/websocket"})

    async def _websocket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        with self._lock:
            self._loop = asyncio.get_running_loop()
        await ws.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": self.heartbeat_ms}}))
        async for message in ws:
            frame = json.loads(message.data)
            if frame["op"] == 1:
                with self.changed:
                    self.heartbeats.append(frame["d"])
                    self.changed.notify_all()
                await ws.send_str(json.dumps({"op": 11}))
            elif frame["op"] in (2, 6):
                await self._hello_done(ws, frame)
        with self.changed:
            with self._lock:
                if self._live is ws:
                    self._live = None
            self.changed.notify_all()
        return ws

    async def _hello_done(self, ws: web.WebSocketResponse, frame: dict[str, Any]) -> None:
        data = frame["d"]
        with self._lock:
            valid = str(data.get("token", "")).removeprefix("QQBot ") in self._tokens
        if not valid:
            await ws.close(code=4004, message=b"invalid token")
            return
        if frame["op"] == 2:
            session = secrets.token_hex(8)
            with self.changed:
                with self._lock:
                    self._sessions[session] = []
                    self._current, self._live = session, ws
                    self.identifies.append(data)
                self.changed.notify_all()
            ready = {"version": 1, "session_id": session, "user": {"id": "1", "username": "bot", "bot": True}}
            await ws.send_str(json.dumps({"op": 0, "s": 0, "t": "READY", "d": ready}))
            return
        with self._lock:
            log = self._sessions.get(str(data.get("session_id")))
        if log is None:
            await ws.send_str(json.dumps({"op": 9, "d": False}))
            return
        replay = [text for seq, text in list(log) if data.get("seq") is None or seq > int(data["seq"])]
        for text in replay:
            await ws.send_str(text)
        await ws.send_str(json.dumps({"op": 0, "t": "RESUMED", "d": ""}))
        with self.changed:
            with self._lock:
                self._current, self._live = str(data["session_id"]), ws
                self.resumes.append(data)
            self.changed.notify_all()

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
