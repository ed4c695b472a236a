"""A fake WeCom server API on loopback and WeCom's side of the callbacks, for the wecom adapter's tests.

Written from WeCom's documentation, independent of the adapter: ``GET /cgi-bin/gettoken`` (corpid and corpsecret
in, ``access_token`` and ``expires_in`` out), ``POST /cgi-bin/message/send?access_token=`` (errcode 40014 for a
token it did not hand out, scripted errcodes; ``msgtype`` text, or file naming an uploaded ``media_id``, with the
duplicate check: a repeat of the same message to the same user within ``duplicate_check_interval`` is answered
without being sent), ``POST /cgi-bin/media/upload?access_token=&type=file`` (the file as ``media`` in a
``multipart/form-data`` body; answered with a ``media_id``), ``GET /cgi-bin/media/get`` (the bytes, or a JSON
errcode with HTTP 200 as WeCom does). :func:`seal` encrypts as WeCom does (random 16 bytes, 4-byte length, XML, corp id;
PKCS#7 to 32 bytes; AES-256-CBC with the key's first 16 bytes as IV), :func:`signature` signs, :func:`message_xml`
builds a message and :func:`push` / :func:`check_url` post and get the callback URL.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import itertools
import json
import os
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

from aiohttp import web
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from platforms.support.http_host import HttpHost
from tests.platforms.form_data import parse_form

__all__ = ["FakeWecom", "Sent", "check_url", "message_xml", "push", "seal", "signature"]


@dataclass(frozen=True)
class Sent:
    """A message an app sent to a user."""

    touser: str
    agentid: int
    text: str
    msgtype: str = "text"
    media_id: str | None = None


class FakeWecom:
    """The server API on ``127.0.0.1`` (port 0); start with :meth:`start`, stop with :meth:`stop`."""

    def __init__(self) -> None:
        self.secrets: dict[str, str] = {}  # corp id -> secret
        self.token_requests: list[str] = []
        self.calls: list[int] = []  # errcode of every message/send
        self.sent: list[Sent] = []
        self.media: dict[str, tuple[bytes, str]] = {}
        self.media_requests: list[str] = []
        self.failures: deque[dict[str, Any]] = deque()
        self.uploads: dict[str, tuple[str, str, bytes]] = {}  # media id -> (file name, content type, bytes)
        self.upload_failures: deque[dict[str, Any]] = deque()
        self._recent: dict[str, tuple[str, float]] = {}  # the JSON of a duplicate-checked send -> (msgid, when)
        self._lose_next = False
        self._tokens: set[str] = set()
        self._counter = itertools.count(1)
        self._changed = threading.Condition()
        app = web.Application()
        app.router.add_get("/cgi-bin/gettoken", self._token)
        app.router.add_post("/cgi-bin/message/send", self._send)
        app.router.add_get("/cgi-bin/media/get", self._media)
        app.router.add_post("/cgi-bin/media/upload", self._upload)
        self.host = HttpHost(app, name="fake-wecom")

    @property
    def base_url(self) -> str:
        return self.host.url

    def start(self) -> None:
        self.host.start()

    def stop(self) -> None:
        self.host.stop()

    def fail_next(self, *answers: dict[str, Any]) -> None:
        """Answer the next sends with these JSON bodies (HTTP 200, as WeCom does)."""
        with self._changed:
            self.failures.extend(answers)

    def lose_next_answer(self) -> None:
        """Handle the next send, then drop the connection without answering it."""
        with self._changed:
            self._lose_next = True

    def revoke_tokens(self) -> None:
        with self._changed:
            self._tokens.clear()

    def wait_sent(self, count: int, timeout: float = 10.0) -> list[Sent]:
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.sent) >= count, timeout):
                raise AssertionError(f"expected {count} sent messages, got {self.sent}")
            return list(self.sent)

    def wait_calls(self, count: int, timeout: float = 10.0) -> list[int]:
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.calls) >= count, timeout):
                raise AssertionError(f"expected {count} calls, got {self.calls}")
            return list(self.calls)

    async def _token(self, request: web.Request) -> web.Response:
        corp, secret = request.query.get("corpid", ""), request.query.get("corpsecret", "")
        if not corp or self.secrets.get(corp) != secret:
            return web.json_response({"errcode": 40001, "errmsg": "invalid credential"})
        token = f"tok{next(self._counter)}"
        with self._changed:
            self._tokens.add(token)
            self.token_requests.append(corp)
        return web.json_response({"errcode": 0, "errmsg": "ok", "access_token": token, "expires_in": 7200})

    async def _send(self, request: web.Request) -> web.Response:
        body = await request.json()
        with self._changed:
            if self.failures:
                answer = self.failures.popleft()
            elif request.query.get("access_token") not in self._tokens:
                answer = {"errcode": 40014, "errmsg": "invalid access_token"}
            elif body["msgtype"] == "file" and body["file"]["media_id"] not in self.uploads:
                answer = {"errcode": 40007, "errmsg": "invalid media_id"}
            else:
                answer = self._sent(body)
            self.calls.append(int(answer["errcode"]))
            lose, self._lose_next = self._lose_next, False
            self._changed.notify_all()
        if lose and request.transport is not None:
            request.transport.abort()
        return web.json_response(answer)

    def _sent(self, body: dict[str, Any]) -> dict[str, Any]:
        key = json.dumps({k: v for k, v in body.items() if k not in ("duplicate_check_interval",)}, sort_keys=True)
        seen = self._recent.get(key) if body.get("enable_duplicate_check") == 1 else None
        interval = float(body.get("duplicate_check_interval", 1800))
        if seen is not None and time.monotonic() - seen[1] < interval:
            return {"errcode": 0, "errmsg": "ok", "invaliduser": "", "msgid": seen[0]}
        if body["msgtype"] == "text":
            assert len(body["text"]["content"].encode()) <= 2048
            sent = Sent(touser=body["touser"], agentid=body["agentid"], text=body["text"]["content"])
        else:
            assert body["msgtype"] == "file"
            sent = Sent(body["touser"], body["agentid"], "", msgtype="file", media_id=body["file"]["media_id"])
        self.sent.append(sent)
        msgid = f"msg{next(self._counter)}"
        if body.get("enable_duplicate_check") == 1:
            self._recent[key] = (msgid, time.monotonic())
        return {"errcode": 0, "errmsg": "ok", "invaliduser": "", "msgid": msgid}

    async def _upload(self, request: web.Request) -> web.Response:
        raw = await request.read()
        with self._changed:
            if self.upload_failures:
                return web.json_response(self.upload_failures.popleft())
            if request.query.get("access_token") not in self._tokens:
                return web.json_response({"errcode": 40014, "errmsg": "invalid access_token"})
        try:
            _, files = parse_form(request.headers.get("Content-Type", ""), raw)
        except ValueError:
            return web.json_response({"errcode": 44001, "errmsg": "empty media data"})
        if (
            request.query.get("type") != "file"
            or len(files) != 1
            or files[0].field != "media"
            or len(files[0].data) < 5
        ):
            return web.json_response({"errcode": 40004, "errmsg": "invalid media type"})
        media_id = f"media{next(self._counter)}"
        with self._changed:
            self.uploads[media_id] = (files[0].filename, files[0].content_type, files[0].data)
        return web.json_response(
            {"errcode": 0, "errmsg": "ok", "type": "file", "media_id": media_id, "created_at": "0"}
        )

    async def _media(self, request: web.Request) -> web.Response:
        media_id = request.query.get("media_id", "")
        with self._changed:
            self.media_requests.append(media_id)
            valid = request.query.get("access_token") in self._tokens
        if not valid:
            return web.json_response({"errcode": 42001, "errmsg": "access_token expired"})
        if media_id not in self.media:
            return web.json_response({"errcode": 40007, "errmsg": "invalid media_id"})
        data, content_type = self.media[media_id]
        return web.Response(body=data, content_type=content_type)


def seal(plain: bytes, encoding_aes_key: str, corp_id: str) -> str:
    """WeCom's ciphertext of ``plain`` for ``corp_id``."""
    key = base64.b64decode(encoding_aes_key + "=")
    data = os.urandom(16) + struct.pack(">I", len(plain)) + plain + corp_id.encode()
    padder = padding.PKCS7(256).padder()
    padded = padder.update(data) + padder.finalize()
    encryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).encryptor()
    return base64.b64encode(encryptor.update(padded) + encryptor.finalize()).decode()


def signature(token: str, timestamp: str, nonce: str, ciphertext: str) -> str:
    """``msg_signature``: hex SHA-1 of the four values sorted and joined."""
    return hashlib.sha1("".join(sorted([token, timestamp, nonce, ciphertext])).encode()).hexdigest()


def message_xml(corp_id: str, agent_id: int, **fields: str | None) -> bytes:
    """A message's plaintext XML, text by default."""
    values: dict[str, str | None] = {
        "ToUserName": corp_id,
        "FromUserName": "zhangsan",
        "CreateTime": "1764460800",
        "MsgType": "text",
        "Content": "hello",
        "MsgId": "7000000000000000001",
        "AgentID": str(agent_id),
    }
    values.update(fields)
    inner = "".join(f"<{k}><![CDATA[{v}]]></{k}>" for k, v in values.items() if v is not None)
    return f"<xml>{inner}</xml>".encode()


def push(
    url: str,
    plain: bytes,
    *,
    token: str,
    encoding_aes_key: str,
    corp_id: str,
    agent_id: int,
    timestamp: int = 1_764_460_800,
    nonce: str = "n0nce",
    forge: str | None = None,
    raw: bytes | None = None,
) -> tuple[int, str]:
    """POST a message to a callback URL as WeCom does; return the status and the text answered."""
    sealed = seal(plain, encoding_aes_key, corp_id)
    mac = forge or signature(token, str(timestamp), nonce, sealed)
    body = (
        raw
        or (
            f"<xml><ToUserName><![CDATA[{corp_id}]]></ToUserName><AgentID><![CDATA[{agent_id}]]></AgentID>"
            f"<Encrypt><![CDATA[{sealed}]]></Encrypt></xml>"
        ).encode()
    )
    query = urlencode({"msg_signature": mac, "timestamp": timestamp, "nonce": nonce})
    return _request("POST", f"{url}?{query}", body)


def check_url(
    url: str, echo: str, *, token: str, encoding_aes_key: str, corp_id: str, timestamp: int = 1_764_460_800
) -> tuple[int, str]:
    """The ``GET`` WeCom sends when the callback URL is saved; return the status and the text answered."""
    sealed = seal(echo.encode(), encoding_aes_key, corp_id)
    mac = signature(token, str(timestamp), "echo-nonce", sealed)
    query = urlencode({"msg_signature": mac, "timestamp": timestamp, "nonce": "echo-nonce", "echostr": sealed})
    return _request("GET", f"{url}?{query}", None)


def _request(method: str, url: str, body: bytes | None) -> tuple[int, str]:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        connection.request(method, f"{parts.path}?{parts.query}", body=body, headers={"Content-Type": "text/xml"})
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()
