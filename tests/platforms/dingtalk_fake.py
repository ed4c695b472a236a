"""A fake DingTalk Open Platform on loopback that speaks the robot wire format, for the dingtalk adapter's tests.

Written from DingTalk's documentation, independent of the adapter: ``POST /v1.0/oauth2/accessToken`` (appKey and
appSecret in, ``accessToken`` and ``expireIn`` out), the robot sends ``/v1.0/robot/oToMessages/batchSend`` and
``/v1.0/robot/groupMessages/send`` (``x-acs-dingtalk-access-token`` checked, 401 for a token it did not hand
out), session webhooks at ``/session/<id>`` (``{"errcode": 0}``), scripted failures for both, and the callback
DingTalk posts to a robot: :meth:`FakeDingtalk.callback` builds the body, :func:`deliver` signs and posts it.
:class:`Canary` is a server no reply may ever reach (an attacker's "session webhook"): it records every request.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import http.client
import itertools
import json
import threading
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from platforms.support.http_host import HttpHost

__all__ = ["Canary", "Failure", "FakeDingtalk", "Sent", "deliver", "sign"]


@dataclass(frozen=True)
class Sent:
    """A message a robot sent: ``via`` is ``webhook``, ``oto`` or ``group``; ``target`` the session, users or
    conversation."""

    via: str
    target: str
    text: str
    robot_code: str | None = None


@dataclass(frozen=True)
class Failure:
    """A scripted answer for the next send (``webhook``: to a session webhook, else to the robot API)."""

    status: int
    body: Mapping[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)
    webhook: bool = False


class FakeDingtalk:
    """The robot APIs on ``127.0.0.1`` (port 0); start with :meth:`start`, stop with :meth:`stop`."""

    def __init__(self, *, token_expire_s: int = 7200) -> None:
        self.token_expire_s = token_expire_s
        self.apps: dict[str, str] = {}  # app key -> secret
        self.token_requests: list[str] = []
        self.calls: list[tuple[str, int]] = []  # (path, status) of every send
        self.sent: list[Sent] = []
        self.failures: deque[Failure] = deque()
        self.files: dict[str, tuple[bytes, str]] = {}  # downloadCode -> (bytes, content type)
        self.file_requests: list[tuple[str, int]] = []  # (downloadCode, status) of every locate request
        self.download_urls: dict[str, str] = {}  # downloadCode -> the downloadUrl to answer instead of our own
        self._tokens: dict[str, str] = {}
        self.opens: list[str] = []  # client ids, one per stream connection opened
        self.acks: list[dict[str, Any]] = []  # every frame the robot sent up its stream
        self.refuse_opens = False
        self._tickets: set[str] = set()
        self._stream: tuple[asyncio.AbstractEventLoop, web.WebSocketResponse] | None = None
        self._counter = itertools.count(1)
        self._changed = threading.Condition()
        app = web.Application()
        app.router.add_post("/v1.0/oauth2/accessToken", self._token)
        app.router.add_post("/v1.0/robot/oToMessages/batchSend", self._oto)
        app.router.add_post("/v1.0/robot/groupMessages/send", self._group)
        app.router.add_post("/session/{session}", self._webhook)
        app.router.add_post("/v1.0/robot/messageFiles/download", self._locate)
        app.router.add_get("/files/{code}", self._file)
        app.router.add_post("/v1.0/gateway/connections/open", self._open)
        app.router.add_get("/gateway", self._gateway)
        self.host = HttpHost(app, name="fake-dingtalk")

    @property
    def base_url(self) -> str:
        return self.host.url

    def start(self) -> None:
        self.host.start()

    def stop(self) -> None:
        self.host.stop()

    def add_app(self, app_key: str, app_secret: str) -> None:
        self.apps[app_key] = app_secret

    def fail_next(self, *failures: Failure) -> None:
        with self._changed:
            self.failures.extend(failures)

    def revoke_tokens(self) -> None:
        with self._changed:
            self._tokens.clear()

    def wait_sent(self, count: int, timeout: float = 10.0) -> list[Sent]:
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.sent) >= count, timeout):
                raise AssertionError(f"expected {count} sent messages, got {self.sent}")
            return list(self.sent)

    def wait_calls(self, count: int, timeout: float = 10.0) -> list[tuple[str, int]]:
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.calls) >= count, timeout):
                raise AssertionError(f"expected {count} calls, got {self.calls}")
            return list(self.calls)

    def wait_stream(self, opens: int, timeout: float = 10.0) -> None:
        """Wait until the robot has opened ``opens`` streams and the last one is connected."""
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.opens) >= opens and self._stream is not None, timeout):
                raise AssertionError(f"expected {opens} stream connections, got {self.opens}")

    def wait_acks(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.acks) >= count, timeout):
                raise AssertionError(f"expected {count} acknowledgements, got {self.acks}")
            return list(self.acks)

    def send_frame(self, kind: str, topic: str, data: str, message_id: str | None = None) -> str:
        """Send a frame down the connected stream; return its ``messageId``."""
        with self._changed:
            assert self._stream is not None, "no stream is connected"
            loop, socket = self._stream
        message_id = message_id or uuid.uuid4().hex
        headers = {"topic": topic, "messageId": message_id, "contentType": "application/json", "time": "1"}
        frame = json.dumps({"specVersion": "1.0", "type": kind, "headers": headers, "data": data})
        asyncio.run_coroutine_threadsafe(socket.send_str(frame), loop).result(timeout=10)
        return message_id

    def push_message(self, body: dict[str, Any], message_id: str | None = None) -> str:
        """Send a robot message down the stream, as a ``CALLBACK`` frame; return its ``messageId``."""
        return self.send_frame("CALLBACK", "/v1.0/im/bot/messages/get", json.dumps(body), message_id)

    def close_stream(self) -> None:
        with self._changed:
            assert self._stream is not None, "no stream is connected"
            loop, socket = self._stream
        asyncio.run_coroutine_threadsafe(socket.close(), loop).result(timeout=10)

    def callback(
        self,
        robot_code: str,
        text: str | None = "hello",
        *,
        msg_id: str = "msg-1",
        conversation_id: str = "cid-dm-alice",
        conversation_type: str = "1",
        staff_id: str = "staff-alice",
        corp_id: str = "ding-corp-a",
        session: str = "s1",
        expires_ms: int = 1_764_460_800_000 + 5_400_000,
        **fields: Any,
    ) -> dict[str, Any]:
        """A callback body as DingTalk posts it for a message to the robot."""
        body: dict[str, Any] = {
            "msgId": msg_id,
            "msgtype": "text",
            "text": {"content": text},
            "conversationId": conversation_id,
            "conversationType": conversation_type,
            "senderId": f"$:LWCP_v1:${staff_id}",
            "senderStaffId": staff_id,
            "senderNick": staff_id.title(),
            "senderCorpId": corp_id,
            "chatbotCorpId": corp_id,
            "chatbotUserId": "$:LWCP_v1:$bot",
            "robotCode": robot_code,
            "isInAtList": True,
            "createAt": 1_764_460_800_000,
            "sessionWebhook": f"{self.base_url}/session/{session}",
            "sessionWebhookExpiredTime": expires_ms,
        }
        if text is None:
            del body["text"]
            body["msgtype"] = "picture"
            body["content"] = {"downloadCode": "dc-1"}
        body.update(fields)
        return body

    # -- handlers -----------------------------------------------------------------------------------------------

    async def _token(self, request: web.Request) -> web.Response:
        body = await request.json()
        key, secret = body.get("appKey"), body.get("appSecret")
        if self.apps.get(key) != secret:
            return web.json_response(
                {"code": "invalidClientIdOrSecret", "message": "无效的clientId或clientSecret"}, status=400
            )
        token = f"tok-{next(self._counter)}"
        with self._changed:
            self._tokens[token] = key
            self.token_requests.append(key)
        return web.json_response({"accessToken": token, "expireIn": self.token_expire_s})

    def _scripted(self, webhook: bool) -> Failure | None:
        with self._changed:
            if self.failures and self.failures[0].webhook == webhook:
                return self.failures.popleft()
        return None

    async def _api(self, request: web.Request, via: str) -> web.Response:
        failure = self._scripted(False)
        token = request.headers.get("x-acs-dingtalk-access-token", "")
        if failure is not None:
            status, answer, headers = failure.status, dict(failure.body), dict(failure.headers)
        elif token not in self._tokens:
            status, answer, headers = 401, {"code": "InvalidAuthentication", "message": "不合法的access_token"}, {}
        else:
            body = await request.json()
            text = json.loads(body["msgParam"])["content"]
            target = body["openConversationId"] if via == "group" else ",".join(body["userIds"])
            assert body["msgKey"] == "sampleText"
            status, answer, headers = 200, {"processQueryKey": f"pqk-{next(self._counter)}"}, {}
            if via == "oto":
                answer |= {"invalidStaffIdList": [], "flowControlledStaffIdList": []}
            with self._changed:
                self.sent.append(Sent(via=via, target=target, text=text, robot_code=body["robotCode"]))
        with self._changed:
            self.calls.append((request.path, status))
            self._changed.notify_all()
        return web.json_response(answer, status=status, headers=headers)

    async def _open(self, request: web.Request) -> web.Response:
        body = await request.json()
        client = body.get("clientId")
        topics = [(s.get("type"), s.get("topic")) for s in body.get("subscriptions", [])]
        if self.refuse_opens or self.apps.get(client) != body.get("clientSecret"):
            return web.json_response({"code": "invalidClientIdOrSecret", "message": "bad client"}, status=400)
        if ("CALLBACK", "/v1.0/im/bot/messages/get") not in topics:
            return web.json_response({"code": "invalidParameter", "message": "no subscriptions"}, status=400)
        ticket = uuid.uuid4().hex
        with self._changed:
            self._tickets.add(ticket)
        return web.json_response({"endpoint": f"ws://127.0.0.1:{self.host.port}/gateway", "ticket": ticket})

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        with self._changed:
            if ticket not in self._tickets:
                return web.json_response({"code": "invalidTicket"}, status=401)
            self._tickets.discard(ticket)  # one connection per ticket
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        with self._changed:
            self.opens.append(ticket)
            self._stream = (asyncio.get_running_loop(), socket)
            self._changed.notify_all()
        async for message in socket:
            with self._changed:
                self.acks.append(json.loads(message.data))
                self._changed.notify_all()
        with self._changed:
            if self._stream is not None and self._stream[1] is socket:
                self._stream = None
        return socket

    async def _locate(self, request: web.Request) -> web.Response:
        body = await request.json()
        code = body.get("downloadCode", "")
        if request.headers.get("x-acs-dingtalk-access-token", "") not in self._tokens:
            status, answer = 401, {"code": "InvalidAuthentication", "message": "不合法的access_token"}
        elif code not in self.files or body.get("robotCode") not in self.apps:
            status, answer = 400, {"code": "invalidParameter", "message": "downloadCode is invalid"}
        else:
            url = self.download_urls.get(code) or f"{self.base_url}/files/{next(self._counter)}-{code}"
            status, answer = 200, {"downloadUrl": url}
        with self._changed:
            self.file_requests.append((code, status))
        return web.json_response(answer, status=status)

    async def _file(self, request: web.Request) -> web.Response:
        code = request.match_info["code"].split("-", 1)[1]
        data, content_type = self.files[code]
        return web.Response(body=data, content_type=content_type)

    async def _oto(self, request: web.Request) -> web.Response:
        return await self._api(request, "oto")

    async def _group(self, request: web.Request) -> web.Response:
        return await self._api(request, "group")

    async def _webhook(self, request: web.Request) -> web.Response:
        failure = self._scripted(True)
        if failure is not None:
            status, answer = failure.status, dict(failure.body)
        else:
            body = await request.json()
            assert body["msgtype"] == "text"
            status, answer = 200, {"errcode": 0, "errmsg": "ok"}
            with self._changed:
                self.sent.append(
                    Sent(via="webhook", target=request.match_info["session"], text=body["text"]["content"])
                )
        with self._changed:
            self.calls.append((request.path, status))
            self._changed.notify_all()
        return web.json_response(answer, status=status)


class Canary:
    """A server on ``127.0.0.1`` that answers any request as a session webhook would and records its path and body."""

    def __init__(self) -> None:
        self.hits: list[tuple[str, bytes]] = []
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._hit)
        self.host = HttpHost(app, name="canary")

    @property
    def url(self) -> str:
        return self.host.url

    def start(self) -> None:
        self.host.start()

    def stop(self) -> None:
        self.host.stop()

    async def _hit(self, request: web.Request) -> web.Response:
        self.hits.append((request.path_qs, await request.read()))
        return web.json_response({"errcode": 0, "errmsg": "ok"})


def sign(timestamp: str, secret: str) -> str:
    """The ``sign`` header: base64 of HMAC-SHA256(secret, timestamp + "\\n" + secret)."""
    mac = hmac.new(secret.encode(), (timestamp + "\n" + secret).encode(), hashlib.sha256)
    return base64.b64encode(mac.digest()).decode()


def deliver(
    url: str,
    payload: Any,
    *,
    secret: str | None,
    timestamp_ms: int = 1_764_460_800_000,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    """POST a callback as DingTalk does (signed with ``secret`` unless it is ``None``); return status and JSON."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload, ensure_ascii=False).encode()
    send = {"Content-Type": "application/json; charset=utf-8"}
    if secret is not None:
        send |= {"timestamp": str(timestamp_ms), "sign": sign(str(timestamp_ms), secret)}
    send |= dict(headers or {})
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        connection.request("POST", parts.path, body=body, headers=send)
        response = connection.getresponse()
        answer: dict[str, Any] = json.loads(response.read())
        return response.status, answer
    finally:
        connection.close()
