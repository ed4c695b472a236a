"""A local BlueBubbles server: its REST API on loopback, and its side of the webhook.

Written from BlueBubbles' documentation, independently of the adapter. :class:`FakeBlueBubbles` serves ``POST
/api/v1/message/text`` and ``GET /api/v1/attachment/{guid}/download``, both wanting the server password as the
``password`` query parameter (401 ``{"status": 401, "message": "Unauthorized"}`` otherwise), answering in the
server's format ``{"status", "message", "data"}`` or, on failure, ``{"status", "message", "error": {"type",
"message"}}``. A send needs ``chatGuid`` of a chat the server knows, ``message`` and ``tempGuid`` (400 otherwise)
and answers the sent message with a fresh ``guid``. ``POST /api/v1/message/attachment`` takes a
``multipart/form-data`` body with ``chatGuid``, ``tempGuid``, ``name`` and the file as ``attachment`` (400 without
one of them) and answers the same way. Failures can be scripted (:meth:`FakeBlueBubbles.fail`, for either send).

:func:`new_message` builds a ``new-message`` webhook body as the server POSTs it, and :func:`post` delivers one.
"""

from __future__ import annotations

import http.client
import secrets
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from platforms.support.http_host import HttpHost
from tests.platforms.form_data import Upload, parse_form
from tests.platforms.support import Arrivals

__all__ = ["Answer", "FakeBlueBubbles", "Sent", "new_message", "post", "token"]


def new_message(
    text: str,
    *,
    chat: str,
    sender: str,
    guid: str | None = None,
    from_me: bool = False,
    attachments: Sequence[dict[str, Any]] = (),
    sent_at: float | None = None,
    reaction: int | None = None,
) -> dict[str, Any]:
    """The webhook body of a new message ``text`` from ``sender`` in the chat ``chat``."""
    created = int((time.time() if sent_at is None else sent_at) * 1000)
    group = ";+;" in chat
    return {
        "type": "new-message",
        "data": {
            "originalROWID": 4711,
            "guid": guid or str(uuid.uuid4()).upper(),
            "text": text,
            "attributedBody": [],
            "handle": {"originalROWID": 12, "address": sender, "service": "iMessage", "country": "us"},
            "handleId": 12,
            "otherHandle": 0,
            "chats": [
                {
                    "originalROWID": 7,
                    "guid": chat,
                    "style": 43 if group else 45,
                    "chatIdentifier": chat.split(";", 2)[2],
                    "isArchived": False,
                    "displayName": "Family" if group else "",
                }
            ],
            "attachments": list(attachments),
            "subject": None,
            "error": 0,
            "dateCreated": created,
            "dateRead": None,
            "dateDelivered": None,
            "isFromMe": from_me,
            "isArchived": False,
            "itemType": 0,
            "groupTitle": None,
            "groupActionType": 0,
            "balloonBundleId": None,
            "associatedMessageGuid": "p:0/ABC" if reaction is not None else None,
            "associatedMessageType": reaction,
            "expressiveSendStyleId": None,
            "threadOriginatorGuid": None,
            "hasPayloadData": False,
        },
    }


@dataclass(frozen=True)
class Answer:
    status: int
    text: str


def post(url: str, body: bytes, headers: Mapping[str, str] | None = None) -> Answer:
    """POST ``body`` to ``url`` as the server's webhook client does."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=20)
    try:
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        sent = {"Content-Type": "application/json"} | dict(headers or {})
        connection.request("POST", path, body=body, headers=sent)
        response = connection.getresponse()
        return Answer(response.status, response.read().decode())
    finally:
        connection.close()


@dataclass(frozen=True)
class Sent:
    """One accepted send: the request body as posted (a form's fields), and the file of an attachment send."""

    body: dict[str, Any]
    file: Upload | None = None


@dataclass
class _Failure:
    status: int
    body: dict[str, Any]
    headers: dict[str, str]


@dataclass
class FakeBlueBubbles:
    """The REST API of a server with ``password`` that knows the chats ``chats``."""

    password: str
    chats: set[str]
    sent: list[Sent] = field(default_factory=list)
    downloads: list[str] = field(default_factory=list)
    _arrivals: Arrivals[Sent] = field(default_factory=lambda: Arrivals("sent", "the fake BlueBubbles"))
    _script: deque[_Failure] = field(default_factory=deque)
    _files: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        app = web.Application()
        app.router.add_get("/api/v1/ping", self._ping)
        app.router.add_post("/api/v1/message/text", self._text)
        app.router.add_post("/api/v1/message/attachment", self._attachment)
        app.router.add_get("/api/v1/attachment/{guid}/download", self._download)
        self.host = HttpHost(app, name="fake-bluebubbles")

    @property
    def url(self) -> str:
        return self.host.url

    def start(self) -> FakeBlueBubbles:
        self.host.start()
        return self

    def stop(self) -> None:
        self.host.stop(5)

    def add_attachment(self, data: bytes, mime_type: str, name: str) -> dict[str, Any]:
        """A file the server holds; return its description as a message carries it."""
        guid = f"at_0_{uuid.uuid4()}".upper()
        with self._lock:
            self._files[guid] = (data, mime_type)
        return {
            "originalROWID": 3,
            "guid": guid,
            "uti": "public.png",
            "mimeType": mime_type,
            "transferName": name,
            "totalBytes": len(data),
            "height": 8,
            "width": 8,
        }

    def fail(self, status: int, message: str, *, headers: Mapping[str, str] | None = None) -> None:
        """Answer the next send with ``status`` in the server's error format."""
        body = {"status": status, "message": message, "error": {"type": "Server Error", "message": message}}
        with self._lock:
            self._script.append(_Failure(status, body, dict(headers or {})))

    def take(self, timeout: float = 10.0) -> Sent:
        return self._arrivals.take(timeout)

    def nothing_more(self, wait: float = 0.2) -> bool:
        return self._arrivals.nothing_more(wait)

    def _authorized(self, request: web.Request) -> bool:
        return request.query.get("password") == self.password

    async def _ping(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"status": 401, "message": "Unauthorized"}, status=401)
        return web.json_response({"status": 200, "message": "Ping received!", "data": "pong"})

    def _refused(self, request: web.Request) -> web.Response | None:
        """The answer to a send that is not authorized, else the next scripted failure's; ``None``: go on."""
        if not self._authorized(request):
            return web.json_response({"status": 401, "message": "Unauthorized"}, status=401)
        with self._lock:
            failure = self._script.popleft() if self._script else None
        if failure is not None:
            return web.json_response(failure.body, status=failure.status, headers=failure.headers)
        return None

    async def _text(self, request: web.Request) -> web.Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        body = await request.json()
        for name in ("chatGuid", "message", "tempGuid"):
            if not body.get(name):
                return _error(400, f"No {name} provided!")
        if body["chatGuid"] not in self.chats:
            return _error(400, "Chat does not exist!")
        if body.get("method", "apple-script") not in ("apple-script", "private-api"):
            return _error(400, "Invalid send method!")
        sent = Sent(body=body)
        with self._lock:
            self.sent.append(sent)
        self._arrivals.put(sent)
        message = {
            "guid": str(uuid.uuid4()).upper(),
            "tempGuid": body["tempGuid"],
            "text": body["message"],
            "isFromMe": True,
            "dateCreated": int(time.time() * 1000),
        }
        return web.json_response({"status": 200, "message": "Message sent!", "data": message})

    async def _attachment(self, request: web.Request) -> web.Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        try:
            fields, files = parse_form(request.headers.get("Content-Type", ""), await request.read())
        except ValueError:
            return _error(400, "No attachment provided!")
        for name in ("chatGuid", "tempGuid", "name"):
            if not fields.get(name):
                return _error(400, f"No {name} provided!")
        file = next((f for f in files if f.field == "attachment"), None)
        if file is None:
            return _error(400, "No attachment provided!")
        if fields["chatGuid"] not in self.chats:
            return _error(400, "Chat does not exist!")
        sent = Sent(body=dict(fields), file=file)
        with self._lock:
            self.sent.append(sent)
        self._arrivals.put(sent)
        message = {
            "guid": str(uuid.uuid4()).upper(),
            "tempGuid": fields["tempGuid"],
            "text": "",
            "isFromMe": True,
            "attachments": [{"transferName": fields["name"], "totalBytes": len(file.data)}],
        }
        return web.json_response({"status": 200, "message": "Attachment sent!", "data": message})

    async def _download(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"status": 401, "message": "Unauthorized"}, status=401)
        guid = request.match_info["guid"]
        with self._lock:
            self.downloads.append(guid)
            found = self._files.get(guid)
        if found is None:
            return _error(404, "Attachment does not exist!")
        return web.Response(body=found[0], content_type=found[1])


def _error(status: int, message: str) -> web.Response:
    body = {"status": status, "message": message, "error": {"type": "Validation Error", "message": message}}
    return web.json_response(body, status=status)


def token() -> str:
    """A fresh webhook token."""
    return secrets.token_urlsafe(32)
