"""A fake Feishu/Lark Open Platform on loopback that speaks the real wire format, for the feishu adapter's tests.

Both halves of the platform, written from Feishu's documentation and independent of the adapter's code:

- the Open API the adapter calls: ``POST /open-apis/auth/v3/tenant_access_token/internal``,
  ``POST /open-apis/im/v1/messages?receive_id_type=chat_id`` and ``POST /open-apis/im/v1/messages/<id>/reply``,
  with bearer tokens checked (99991661 missing, 99991663 invalid), the ``uuid`` dedupe, the 150 KB body limit,
  and scripted failures (HTTP 429 with code 99991400 and ``x-ogw-ratelimit-reset``, 5xx, error codes); a message is
  ``msg_type: text`` or ``file`` (``content`` ``{"file_key"}`` of a file the app uploaded);
- ``POST /open-apis/im/v1/files`` (``multipart/form-data``: ``file_type`` one of opus, mp4, pdf, doc, xls, ppt,
  stream; ``file_name``; ``file``), answered with ``data.file_key``; uploads are recorded in
  :attr:`FakeFeishu.uploads` and take the scripted failures too;
- ``GET /open-apis/im/v1/messages/<id>/resources/<key>?type=image|file`` for a resource added with
  :meth:`FakeFeishu.add_resource`: the bytes with their ``Content-Type`` (and ``Content-Length``, unless the
  resource is sent chunked) for a valid tenant token and the right ``type``; a JSON error answer otherwise (the
  token codes above, 234001 for a wrong type or a key that is not in the message). Every request is recorded;
  :meth:`FakeFeishu.fail_next_download` scripts failures;
- the event push to an app's request URL: :meth:`FakeFeishu.message_event` builds an ``im.message.receive_v1``
  event (schema 2.0), :func:`url_verification` a challenge, and :func:`deliver` POSTs one, AES-256-CBC encrypted
  and signed (``X-Lark-Signature``) when the app has an encrypt key.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import http.client
import itertools
import json
import os
import threading
import uuid as uuid_module
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from platforms.support.http_host import HttpHost
from tests.platforms.form_data import parse_form

__all__ = [
    "ApiCall",
    "Failure",
    "FakeApp",
    "FakeFeishu",
    "ResourceCall",
    "SentMessage",
    "deliver",
    "seal",
    "sign",
    "url_verification",
]

MAX_BODY_BYTES = 150 * 1024
TOKEN_INVALID = {
    "code": 99991663,
    "msg": "Invalid access token for authorization. Please make a request with token attached.",
}
TOKEN_MISSING = {
    "code": 99991661,
    "msg": "Missing access token for authorization. Please make a request with token attached.",
}


@dataclass(frozen=True)
class FakeApp:
    """An app registered on the fake platform, with the secrets its console would show."""

    app_id: str
    app_secret: str
    verification_token: str
    encrypt_key: str | None = None


@dataclass(frozen=True)
class SentMessage:
    """A message an app posted: to a chat, or as a reply to ``reply_to`` (in its thread when ``in_thread``)."""

    app_id: str
    message_id: str
    chat_id: str
    text: str
    reply_to: str | None = None
    in_thread: bool = False
    thread_id: str | None = None
    uuid: str | None = None
    msg_type: str = "text"
    file_key: str | None = None
    card: dict[str, Any] | None = None  # an interactive message's card (an approval's buttons)


@dataclass(frozen=True)
class ApiCall:
    """One IM API request as received, and the answer it got."""

    path: str
    query: Mapping[str, str]
    authorization: str | None
    body: bytes
    status: int
    code: int

    def json(self) -> dict[str, Any]:
        decoded: dict[str, Any] = json.loads(self.body)
        return decoded


@dataclass(frozen=True)
class ResourceCall:
    """One resource download request: the message, the key, the ``type`` asked for and the answer's status."""

    message_id: str
    key: str
    type: str | None
    authorization: str | None
    status: int


@dataclass(frozen=True)
class _Resource:
    type: str
    data: bytes
    content_type: str
    chunked: bool


@dataclass(frozen=True)
class Failure:
    """A scripted answer for the next IM API request."""

    status: int
    code: int
    msg: str = "scripted failure"
    headers: Mapping[str, str] = field(default_factory=dict)
    stall_s: float = 0.0  # answer only after this long (to outlast a client's timeout)


class FakeFeishu:
    """The Open API on ``127.0.0.1`` (port 0); start with :meth:`start`, stop with :meth:`stop`."""

    def __init__(self, *, token_expire_s: int = 7200) -> None:
        self.token_expire_s = token_expire_s
        self.apps: dict[str, FakeApp] = {}
        self.token_requests: list[str] = []  # app ids, one per token handed out
        self.calls: list[ApiCall] = []
        self.sent: list[SentMessage] = []
        self.failures: deque[Failure] = deque()
        self.downloads: list[ResourceCall] = []
        self.download_failures: deque[Failure] = deque()
        self._resources: dict[tuple[str, str], _Resource] = {}
        self._tokens: dict[str, str] = {}  # live token -> app id
        self._messages: dict[str, str] = {}  # message id -> chat id
        self._threads: dict[str, str] = {}  # root message id -> thread id
        self._by_uuid: dict[tuple[str, str], SentMessage] = {}
        self.uploads: dict[str, tuple[str, str, str, bytes]] = {}  # file_key -> (app id, file_type, name, bytes)
        self._counter = itertools.count(1)
        self._changed = threading.Condition()
        app = web.Application(client_max_size=4 * MAX_BODY_BYTES)
        app.router.add_post("/open-apis/auth/v3/tenant_access_token/internal", self._token)
        app.router.add_post("/open-apis/im/v1/messages", self._create)
        app.router.add_post("/open-apis/im/v1/messages/{message_id}/reply", self._reply)
        app.router.add_post("/open-apis/im/v1/files", self._upload)
        app.router.add_get("/open-apis/im/v1/messages/{message_id}/resources/{file_key}", self._resource)
        self.host = HttpHost(app, name="fake-feishu")

    # -- control -------------------------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return self.host.url

    def start(self) -> None:
        self.host.start()

    def stop(self) -> None:
        self.host.stop()

    def add_app(
        self,
        app_id: str,
        *,
        app_secret: str = "secret",
        verification_token: str = "vtoken",
        encrypt_key: str | None = None,
    ) -> FakeApp:
        app = FakeApp(app_id, app_secret, verification_token, encrypt_key)
        self.apps[app_id] = app
        return app

    def fail_next(self, *failures: Failure) -> None:
        """Answer the next IM API requests with ``failures``, in order."""
        with self._changed:
            self.failures.extend(failures)

    def add_resource(
        self,
        message_id: str,
        key: str,
        data: bytes,
        *,
        type: str = "image",
        content_type: str = "image/png",
        chunked: bool = False,
    ) -> None:
        """Make ``key`` a resource of message ``message_id``, fetched with ``?type=<type>``."""
        with self._changed:
            self._resources[(message_id, key)] = _Resource(type, data, content_type, chunked)

    def fail_next_download(self, *failures: Failure) -> None:
        """Answer the next resource downloads with ``failures``, in order."""
        with self._changed:
            self.download_failures.extend(failures)

    def revoke_tokens(self) -> None:
        """Invalidate every token handed out (as when one expires early): requests then get 99991663."""
        with self._changed:
            self._tokens.clear()

    def wait_sent(self, count: int, timeout: float = 10.0) -> list[SentMessage]:
        """Wait until at least ``count`` messages were posted; return all of them."""
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.sent) >= count, timeout):
                raise AssertionError(f"expected {count} sent messages, got {self.sent}")
            return list(self.sent)

    def wait_calls(self, count: int, timeout: float = 10.0) -> list[ApiCall]:
        """Wait until at least ``count`` IM API requests arrived; return all of them."""
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.calls) >= count, timeout):
                raise AssertionError(f"expected {count} IM API calls, got {self.calls}")
            return list(self.calls)

    # -- events pushed to the app ----------------------------------------------------------------------------------

    def message_event(
        self,
        app_id: str,
        text: str | None = "hello",
        *,
        chat_id: str = "oc_chat",
        chat_type: str = "p2p",
        open_id: str = "ou_alice",
        union_id: str = "on_alice",
        user_id: str = "u_alice",
        tenant_key: str = "tenant-a",
        event_id: str | None = None,
        message_id: str | None = None,
        thread_id: str | None = None,
        root_id: str | None = None,
        message_type: str = "text",
        content: str | None = None,
        mentions: Iterable[tuple[str, str]] = (),
        sender_type: str = "user",
        token: str | None = None,
    ) -> dict[str, Any]:
        """An ``im.message.receive_v1`` event (schema 2.0) as Feishu sends it; the message becomes known here.

        ``mentions`` are (key, name) pairs such as ``("@_user_1", "Hermes")``.
        """
        message_id = message_id or f"om_{uuid_module.uuid4().hex}"
        with self._changed:
            self._messages[message_id] = chat_id
        message: dict[str, Any] = {
            "message_id": message_id,
            "create_time": "1764460800000",
            "update_time": "1764460800000",
            "chat_id": chat_id,
            "chat_type": chat_type,
            "message_type": message_type,
            "content": content if content is not None else json.dumps({"text": text}, ensure_ascii=False),
        }
        if root_id is not None:
            message["root_id"] = message["parent_id"] = root_id
        if thread_id is not None:
            message["thread_id"] = thread_id
        if mentions:
            message["mentions"] = [
                {
                    "key": key,
                    "id": {"open_id": f"ou_{name}", "union_id": f"on_{name}", "user_id": name},
                    "name": name,
                    "tenant_key": tenant_key,
                }
                for key, name in mentions
            ]
        return {
            "schema": "2.0",
            "header": {
                "event_id": event_id or uuid_module.uuid4().hex,
                "event_type": "im.message.receive_v1",
                "create_time": "1764460800000",
                "token": token if token is not None else self.apps[app_id].verification_token,
                "app_id": app_id,
                "tenant_key": tenant_key,
            },
            "event": {
                "sender": {
                    "sender_id": {"union_id": union_id, "user_id": user_id, "open_id": open_id},
                    "sender_type": sender_type,
                    "tenant_key": tenant_key,
                },
                "message": message,
            },
        }

    def card_action_event(
        self,
        app_id: str,
        value: dict[str, Any],
        *,
        chat_id: str = "oc_chat",
        message_id: str = "om_card",
        open_id: str = "ou_alice",
        union_id: str = "on_alice",
        tenant_key: str = "tenant-a",
        event_id: str | None = None,
    ) -> dict[str, Any]:
        """A ``card.action.trigger`` event (schema 2.0): ``open_id`` pressed a card button carrying ``value``."""
        return {
            "schema": "2.0",
            "header": {
                "event_id": event_id or uuid_module.uuid4().hex,
                "event_type": "card.action.trigger",
                "create_time": "1764460800000",
                "token": self.apps[app_id].verification_token,
                "app_id": app_id,
                "tenant_key": tenant_key,
            },
            "event": {
                "operator": {"tenant_key": tenant_key, "open_id": open_id, "union_id": union_id},
                "token": "c-card-token",
                "action": {"value": value, "tag": "button"},
                "host": "im_message",
                "context": {"open_message_id": message_id, "open_chat_id": chat_id},
            },
        }

    def push(self, url: str, payload: Any, app_id: str, **options: Any) -> tuple[int, dict[str, Any]]:
        """:func:`deliver` ``payload`` as ``app_id``'s events are delivered (encrypted and signed if it has a key)."""
        options.setdefault("encrypt_key", self.apps[app_id].encrypt_key)
        return deliver(url, payload, **options)

    # -- the Open API ----------------------------------------------------------------------------------------------

    async def _token(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            app = self.apps.get(body.get("app_id", ""))
        except (ValueError, AttributeError):
            return web.json_response({"code": 10003, "msg": "invalid param"}, status=400)
        if app is None or body.get("app_secret") != app.app_secret:
            return web.json_response({"code": 10014, "msg": "app secret invalid"}, status=400)
        token = f"t-{uuid_module.uuid4().hex}"
        with self._changed:
            self._tokens[token] = app.app_id
            self.token_requests.append(app.app_id)
        return web.json_response({"code": 0, "msg": "ok", "tenant_access_token": token, "expire": self.token_expire_s})

    async def _resource(self, request: web.Request) -> web.StreamResponse:
        message_id, key = request.match_info["message_id"], request.match_info["file_key"]
        kind = request.query.get("type")
        authorization = request.headers.get("Authorization")
        with self._changed:
            failure = self.download_failures.popleft() if self.download_failures else None
            app_id = self._tokens.get((authorization or "").removeprefix("Bearer "))
            resource = self._resources.get((message_id, key))
        status, answer = 200, None
        if failure is not None:
            status, answer = failure.status, {"code": failure.code, "msg": failure.msg}
        elif not (authorization or "").startswith("Bearer "):
            status, answer = 400, TOKEN_MISSING
        elif app_id is None:
            status, answer = 400, TOKEN_INVALID
        elif resource is None or kind != resource.type:
            status, answer = 400, {"code": 234001, "msg": "Invalid request param."}
        with self._changed:
            self.downloads.append(ResourceCall(message_id, key, kind, authorization, status))
            self._changed.notify_all()
        if answer is not None or resource is None:
            return web.json_response(answer, status=status, headers=failure.headers if failure else None)
        if not resource.chunked:
            return web.Response(body=resource.data, headers={"Content-Type": resource.content_type})
        response = web.StreamResponse(headers={"Content-Type": resource.content_type})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            for start in range(0, len(resource.data), 1024):
                await response.write(resource.data[start : start + 1024])
            await response.write_eof()
        except (ConnectionResetError, RuntimeError):
            pass  # the client stopped reading (it refused the rest)
        return response

    async def _upload(self, request: web.Request) -> web.Response:
        raw = await request.read()
        status, answer = 200, dict[str, object]()
        with self._changed:
            failure = self.failures.popleft() if self.failures else None
            app_id = self._tokens.get(request.headers.get("Authorization", "").removeprefix("Bearer "))
        if failure is not None:
            status, answer = failure.status, {"code": failure.code, "msg": failure.msg}
        elif not request.headers.get("Authorization", "").startswith("Bearer "):
            status, answer = 400, TOKEN_MISSING
        elif app_id is None:
            status, answer = 400, TOKEN_INVALID
        else:
            try:
                fields, files = parse_form(request.headers.get("Content-Type", ""), raw)
                _require(fields.get("file_type") in ("opus", "mp4", "pdf", "doc", "xls", "ppt", "stream"))
                _require(bool(fields.get("file_name")) and len(files) == 1 and files[0].field == "file")
            except ValueError:
                status, answer = 400, {"code": 234001, "msg": "Invalid request param."}
            else:
                file_key = f"file_v3_{next(self._counter)}"
                with self._changed:
                    self.uploads[file_key] = (app_id, fields["file_type"], fields["file_name"], files[0].data)
                answer = {"code": 0, "msg": "success", "data": {"file_key": file_key}}
        code = answer["code"]
        assert isinstance(code, int)
        call = ApiCall(request.path, dict(request.query), request.headers.get("Authorization"), raw, status, code)
        with self._changed:
            self.calls.append(call)
            self._changed.notify_all()
        return web.json_response(answer, status=status, headers=failure.headers if failure else None)

    async def _create(self, request: web.Request) -> web.Response:
        return await self._message(request, None)

    async def _reply(self, request: web.Request) -> web.Response:
        return await self._message(request, request.match_info["message_id"])

    async def _message(self, request: web.Request, reply_to: str | None) -> web.Response:
        body = await request.read()
        status, answer, headers, stall_s = self._answer(request, body, reply_to)
        if stall_s:
            await asyncio.sleep(stall_s)
        call = ApiCall(
            path=request.path,
            query=dict(request.query),
            authorization=request.headers.get("Authorization"),
            body=body,
            status=status,
            code=int(answer["code"]),
        )
        with self._changed:
            self.calls.append(call)
            self._changed.notify_all()
        return web.json_response(answer, status=status, headers=headers)

    def _answer(
        self, request: web.Request, raw: bytes, reply_to: str | None
    ) -> tuple[int, dict[str, Any], Mapping[str, str], float]:
        with self._changed:
            if self.failures:
                failure = self.failures.popleft()
                return failure.status, {"code": failure.code, "msg": failure.msg}, failure.headers, failure.stall_s
            authorization = request.headers.get("Authorization", "")
            if not authorization.startswith("Bearer "):
                return 400, TOKEN_MISSING, {}, 0.0
            app_id = self._tokens.get(authorization.removeprefix("Bearer "))
            if app_id is None:
                return 400, TOKEN_INVALID, {}, 0.0
        if len(raw) > MAX_BODY_BYTES:
            return 400, {"code": 230025, "msg": "The length of the message content exceeds the limit"}, {}, 0.0
        try:
            body = json.loads(raw)
            content = json.loads(body["content"])
            msg_type = body["msg_type"]
            file_key = content["file_key"] if msg_type == "file" else None
            card = content if msg_type == "interactive" else None
            text = content["text"] if msg_type == "text" else _card_text(card) if card is not None else ""
            uuid = body.get("uuid")
            chat_id = body.get("receive_id") if reply_to is None else self._messages[reply_to]
            if msg_type == "file":
                _require(file_key in self.uploads and self.uploads[file_key][0] == app_id)
            else:
                _require(msg_type in ("text", "interactive") and isinstance(text, str) and bool(text))
            _require(uuid is None or (isinstance(uuid, str) and len(uuid) <= 50))
            _require(reply_to is not None or request.query.get("receive_id_type") == "chat_id")
            _require(isinstance(chat_id, str))
        except (ValueError, KeyError, TypeError):
            return 400, {"code": 230001, "msg": "Your request contains an invalid request parameter."}, {}, 0.0
        with self._changed:
            repeat = self._by_uuid.get((app_id, uuid)) if uuid else None
            if repeat is None:
                in_thread = reply_to is not None and bool(body.get("reply_in_thread"))
                message = SentMessage(
                    app_id=app_id,
                    message_id=f"om_sent{next(self._counter)}",
                    chat_id=chat_id,
                    text=text,
                    reply_to=reply_to,
                    in_thread=in_thread,
                    thread_id=self._threads.setdefault(reply_to, f"omt_{len(self._threads) + 1}")
                    if in_thread and reply_to
                    else None,
                    uuid=uuid,
                    msg_type=msg_type,
                    file_key=file_key,
                    card=card,
                )
                self.sent.append(message)
                self._messages[message.message_id] = chat_id
                if uuid:
                    self._by_uuid[(app_id, uuid)] = message
                repeat = message
        data = {
            "message_id": repeat.message_id,
            "chat_id": repeat.chat_id,
            "msg_type": repeat.msg_type,
            "body": {
                "content": json.dumps({"file_key": repeat.file_key} if repeat.file_key else {"text": repeat.text})
            },
            "sender": {"id": app_id, "id_type": "app_id", "sender_type": "app"},
        }
        if repeat.reply_to:
            data["root_id"] = data["parent_id"] = repeat.reply_to
        if repeat.thread_id:
            data["thread_id"] = repeat.thread_id
        return 200, {"code": 0, "msg": "success", "data": data}, {}, 0.0


def _card_text(card: dict[str, Any]) -> str:
    """The text of a card's ``div`` elements; the card must hold elements whose buttons carry a ``value``."""
    elements = card["elements"]
    _require(isinstance(elements, list) and bool(elements))
    buttons = [b for e in elements if e.get("tag") == "action" for b in e["actions"]]
    _require(all(b.get("tag") == "button" and isinstance(b.get("value"), dict) for b in buttons))
    return "\n".join(e["text"]["content"] for e in elements if e.get("tag") == "div")


def _require(condition: bool) -> None:
    if not condition:
        raise ValueError("invalid request parameter")


# -- delivering events, as Feishu does --------------------------------------------------------------------------


def url_verification(token: str, challenge: str = "challenge-f00d") -> dict[str, Any]:
    """The request Feishu sends when a request URL is saved (the same shape for every event version)."""
    return {"challenge": challenge, "token": token, "type": "url_verification"}


def seal(plain: bytes, encrypt_key: str) -> bytes:
    """``{"encrypt": base64(iv + AES-256-CBC(PKCS#7(plain)))}`` with the key SHA-256(encrypt_key)."""
    key = hashlib.sha256(encrypt_key.encode()).digest()
    iv = os.urandom(16)
    padder = padding.PKCS7(128).padder()
    padded = padder.update(plain) + padder.finalize()
    encryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
    data = iv + encryptor.update(padded) + encryptor.finalize()
    return json.dumps({"encrypt": base64.b64encode(data).decode()}).encode()


def sign(timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> str:
    """``X-Lark-Signature``: hex SHA-256 of timestamp + nonce + encrypt key + raw body."""
    return hashlib.sha256(timestamp.encode() + nonce.encode() + encrypt_key.encode() + body).hexdigest()


def deliver(
    url: str,
    payload: Any,
    *,
    encrypt_key: str | None = None,
    signing_key: str | None = None,
    signed: bool = True,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    """POST an event to an app's request URL; return the status and the JSON answer.

    ``payload`` is JSON-encoded unless it is bytes. With ``encrypt_key`` it is sealed and (unless ``signed`` is
    false) signed with ``signing_key`` (default: the encrypt key). ``headers`` are added last (to tamper).
    """
    body = payload if isinstance(payload, bytes) else json.dumps(payload, ensure_ascii=False).encode()
    send_headers = {"Content-Type": "application/json; charset=utf-8"}
    if encrypt_key is not None:
        body = seal(body, encrypt_key)
        if signed:
            timestamp, nonce = "1764460800", uuid_module.uuid4().hex
            send_headers |= {
                "X-Lark-Request-Timestamp": timestamp,
                "X-Lark-Request-Nonce": nonce,
                "X-Lark-Signature": sign(timestamp, nonce, signing_key or encrypt_key, body),
            }
    send_headers |= dict(headers or {})
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        connection.request("POST", parts.path, body=body, headers=send_headers)
        response = connection.getresponse()
        answer: dict[str, Any] = json.loads(response.read())
        return response.status, answer
    finally:
        connection.close()
