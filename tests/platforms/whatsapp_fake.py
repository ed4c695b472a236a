"""A local WhatsApp Cloud API: the Graph API's ``messages`` endpoint on loopback, and Meta's side of the webhook.

:class:`FakeGraph` serves ``POST /<version>/<phone_number_id>/messages`` as the Graph API does: a Bearer access
token (HTTP 401 with ``OAuthException`` code 190 otherwise, 403 code 10 for a token of another number), a JSON
body with ``messaging_product: whatsapp``, ``recipient_type``, ``to``, ``type: text`` and ``text.body`` of at
most 4,096 characters (HTTP 400 with code 100 or 131008 otherwise), ``{"messaging_product", "contacts",
"messages": [{"id": "wamid..."}]}`` on success, and whatever a test scripts with :meth:`FakeGraph.fail_next`
(an ``{"error": {"message", "type", "code", "error_data", "fbtrace_id"}}`` body with any status, code and
``Retry-After``). Every accepted message is recorded with its arrival time. A ``type: document`` message names an
uploaded media ``id`` (of the same number), a ``filename`` and an optional ``caption`` of at most 1,024 characters.

``POST /<version>/<phone_number_id>/media`` takes an upload as the Cloud API does: ``multipart/form-data`` with
``messaging_product: whatsapp``, ``type`` and ``file`` of a supported type (documents: plain text, PDF, Office;
anything else is error 131053), answered ``{"id": ...}``; uploads are recorded (:attr:`FakeGraph.uploads`) and
:meth:`FakeGraph.fail_next_upload` scripts a refusal.

Media added with :meth:`FakeGraph.add_media` are served the Cloud API's two-step way: ``GET /<version>/<media
id>`` (with the same Bearer token, and ``phone_number_id`` checked when given) answers ``{"messaging_product",
"url", "mime_type", "sha256", "file_size", "id"}`` or a Graph error (code 100 for an unknown id); the ``url``
(``/whatsapp_business/attachments/?mid=…``, as on ``lookaside.fbsbx.com``) gives the bytes to a valid token and
HTTP 401 to anyone else. Lookups and downloads are recorded; :meth:`FakeGraph.fail_next_download` scripts a
download status.

The webhook helpers build ``whatsapp_business_account`` notifications (messages of every type, group messages,
contacts, delivery statuses) and :func:`deliver` POSTs them as Meta does, signed with the app secret
(``X-Hub-Signature-256: sha256=`` + hex HMAC-SHA256 of the raw body); :func:`handshake` makes the ``GET``
verification request. Written from Meta's documentation, independently of the adapter's code.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit

from aiohttp import web

from platforms.support.http_host import HttpHost
from tests.platforms.form_data import parse_form
from tests.platforms.support import Arrivals

__all__ = [
    "Answer",
    "FakeGraph",
    "MediaCall",
    "Sent",
    "deliver",
    "handshake",
    "message",
    "notification",
    "sign",
    "status",
    "text_message",
]

MAX_TEXT_CHARS = 4096
_wamids = itertools.count(1)
_UPLOAD_TYPES = frozenset(
    {
        "text/plain",
        "application/pdf",
        "application/msword",
        "application/vnd.ms-excel",
        "application/vnd.ms-powerpoint",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "image/jpeg",
        "image/png",
        "audio/ogg",
        "video/mp4",
    }
)


def new_wamid() -> str:
    """A fresh id shaped like a real ``wamid``."""
    raw = f"\x15\x02\x00\x11\x18\x12{next(_wamids):020d}".encode()
    return "wamid." + base64.b64encode(b"HBgL" + raw).decode()


@dataclass(frozen=True)
class Sent:
    """One accepted message: the number it was sent from, its token, fields, the id given and arrival time."""

    number: str
    token: str
    to: str
    recipient_type: str
    body: str
    context: str | None
    id: str
    at: float  # time.monotonic() on arrival
    kind: str = "text"
    document: dict[str, Any] | None = None  # a document message's document object


@dataclass(frozen=True)
class MediaCall:
    """A media lookup or download: the media id, the Bearer token sent (``None``: none) and the status answered."""

    media_id: str
    token: str | None
    status: int


@dataclass(frozen=True)
class _Media:
    number: str
    data: bytes
    mime_type: str


@dataclass(frozen=True)
class _Failure:
    status: int
    headers: dict[str, str]
    body: dict[str, Any]


def _error(code: int, message: str, *, kind: str = "OAuthException", details: str | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"message": message, "type": kind, "code": code, "fbtrace_id": "AbCdEfGhIjK"}
    if details is not None:
        error["error_data"] = {"messaging_product": "whatsapp", "details": details}
    return {"error": error}


@dataclass
class FakeGraph:
    """The Graph API for some numbers: ``tokens`` maps each valid access token to the phone number id it serves."""

    tokens: Mapping[str, str]
    version: str = "v21.0"
    sent: list[Sent] = field(default_factory=list)
    attempts: list[float] = field(default_factory=list)  # arrival time of every authenticated call
    _arrivals: Arrivals[Sent] = field(default_factory=lambda: Arrivals("sent", "the fake Graph API"))
    _script: deque[_Failure | None] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    lookups: list[MediaCall] = field(default_factory=list)
    downloads: list[MediaCall] = field(default_factory=list)
    _media: dict[str, _Media] = field(default_factory=dict)
    _download_script: deque[int] = field(default_factory=deque)
    _redirects: dict[str, str] = field(default_factory=dict)  # media id -> where its download redirects
    uploads: list[tuple[str, str, str, bytes]] = field(default_factory=list)  # (number, type, file name, bytes)
    _upload_script: deque[_Failure] = field(default_factory=deque)
    _media_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(900_000_000_000_001))

    def __post_init__(self) -> None:
        app = web.Application()
        app.router.add_post("/{version}/{number}/messages", self._messages)
        app.router.add_post("/{version}/{number}/media", self._upload)
        app.router.add_get("/whatsapp_business/attachments/", self._download)
        app.router.add_get("/{version}/{media_id}", self._lookup)
        self.host = HttpHost(app, name="fake-graph")

    @property
    def base_url(self) -> str:
        """What ``platforms.whatsapp.graph_base_url`` should be."""
        return self.host.url

    def start(self) -> FakeGraph:
        self.host.start()
        return self

    def stop(self) -> None:
        self.host.stop()

    def fail_next(
        self,
        *,
        status: int = 400,
        code: int = 131000,
        message: str = "Something went wrong",
        details: str | None = None,
        retry_after: str | None = None,
        count: int = 1,
        after: int = 0,
    ) -> None:
        """Answer ``count`` authenticated calls, after ``after`` normal ones, with HTTP ``status`` and a Graph
        error body carrying ``code``."""
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        body = _error(code, message, details=details or message)
        with self._lock:
            self._script.extend([None] * after)
            self._script.extend(_Failure(status, headers, body) for _ in range(count))

    def fail_next_upload(self, *, status: int = 400, code: int = 131053, message: str = "Media upload error") -> None:
        """Answer the next media upload with HTTP ``status`` and a Graph error carrying ``code``."""
        with self._lock:
            self._upload_script.append(_Failure(status, {}, _error(code, message, details=message)))

    def add_media(self, media_id: str, data: bytes, *, mime_type: str, number: str) -> dict[str, Any]:
        """Hold ``data`` as media ``media_id`` received by ``number``; return the media object a webhook carries."""
        with self._lock:
            self._media[media_id] = _Media(number=number, data=data, mime_type=mime_type)
        digest = base64.b64encode(hashlib.sha256(data).digest()).decode()
        return {"mime_type": mime_type, "sha256": digest, "id": media_id}

    def redirect_download(self, media_id: str, to: str) -> None:
        """Answer the authorised downloads of ``media_id`` with a 302 to ``to``."""
        with self._lock:
            self._redirects[media_id] = to

    def fail_next_download(self, status: int, count: int = 1) -> None:
        """Answer the next ``count`` authorised downloads with HTTP ``status``."""
        with self._lock:
            self._download_script.extend([status] * count)

    def take(self, timeout: float = 10.0) -> Sent:
        """The next accepted message, waiting up to ``timeout``."""
        return self._arrivals.take(timeout)

    def drain(self) -> list[Sent]:
        """Every message that arrived and was not taken yet."""
        return self._arrivals.drain()

    def nothing_more(self, wait: float = 0.2) -> bool:
        """Whether no further message arrives within ``wait`` seconds."""
        return self._arrivals.nothing_more(wait)

    async def _messages(self, request: web.Request) -> web.Response:
        arrived = time.monotonic()
        if request.match_info["version"] != self.version:
            return web.json_response(_error(2500, "Unknown path components"), status=400)
        number = request.match_info["number"]
        token = self._sender(request, number)
        if isinstance(token, web.Response):
            return token
        raw = await request.read()
        with self._lock:
            self.attempts.append(arrived)
            failure = self._script.popleft() if self._script else None
        if failure is not None:
            return web.json_response(failure.body, status=failure.status, headers=failure.headers)
        try:
            fields = json.loads(raw)
        except ValueError:
            return web.json_response(_error(100, "Invalid parameter", details="the body is not JSON"), status=400)
        refused = self._refusal(fields)
        if refused is not None:
            return web.json_response(refused, status=400)
        document = fields.get("document") if fields.get("type") == "document" else None
        if document is not None:
            with self._lock:
                media = self._media.get(str(document.get("id")))
            if media is None or media.number != number:
                details = f"Media id {document.get('id')} is not an upload of this number"
                return web.json_response(_error(131053, "Media upload error", details=details), status=400)
        to = fields["to"]
        text = fields["text"]["body"] if document is None else document.get("caption", "")
        context = fields.get("context")
        quoted = context.get("message_id") if isinstance(context, dict) else None
        sent = Sent(
            number=number,
            token=token,
            to=to,
            recipient_type=fields.get("recipient_type", "individual"),
            body=text,
            context=quoted if isinstance(quoted, str) else None,
            id=new_wamid(),
            at=arrived,
            kind=fields.get("type", "text"),
            document=document,
        )
        with self._lock:
            self.sent.append(sent)
        self._arrivals.put(sent)
        answer: dict[str, Any] = {"messaging_product": "whatsapp", "messages": [{"id": sent.id}]}
        if sent.recipient_type == "individual":
            answer["contacts"] = [{"input": to, "wa_id": to}]
        return web.json_response(answer)

    async def _upload(self, request: web.Request) -> web.Response:
        number = request.match_info["number"]
        token = self._sender(request, number)
        if isinstance(token, web.Response):
            return token
        raw = await request.read()
        with self._lock:
            failure = self._upload_script.popleft() if self._upload_script else None
        if failure is not None:
            return web.json_response(failure.body, status=failure.status)
        try:
            fields, files = parse_form(request.headers.get("Content-Type", ""), raw)
        except ValueError:
            return web.json_response(_error(100, "Invalid parameter", details="not a multipart form"), status=400)
        if fields.get("messaging_product") != "whatsapp" or len(files) != 1 or files[0].field != "file":
            return web.json_response(_error(100, "Invalid parameter", details="messaging_product and file"), status=400)
        kind = fields.get("type", "")
        if kind not in _UPLOAD_TYPES:
            details = f"Param file must be a file with one of the following types: {', '.join(sorted(_UPLOAD_TYPES))}"
            return web.json_response(_error(131053, "Media upload error", details=details), status=400)
        media_id = str(next(self._media_ids))
        with self._lock:
            self._media[media_id] = _Media(number=number, data=files[0].data, mime_type=kind)
            self.uploads.append((number, kind, files[0].filename, files[0].data))
        return web.json_response({"id": media_id})

    def _sender(self, request: web.Request, number: str) -> str | web.Response:
        """The token of a request that may act for ``number``, else Graph's refusal."""
        token = self._token(request)
        if token is None or token not in self.tokens:
            return web.json_response(_error(190, "Invalid OAuth access token - Cannot parse access token"), status=401)
        if self.tokens[token] != number:
            return web.json_response(_error(10, "Application does not have permission for this action"), status=403)
        return token

    def _token(self, request: web.Request) -> str | None:
        authorization = request.headers.get("Authorization", "")
        return authorization.removeprefix("Bearer ") if authorization.startswith("Bearer ") else None

    def _number(self, number: str, token: str | None) -> web.Response:
        """``GET /<version>/<phone_number_id>``: the number's profile, for a token of that number."""
        if token is None or token not in self.tokens:
            return web.json_response(_error(190, "Invalid OAuth access token - Cannot parse access token"), status=401)
        if self.tokens[token] != number:
            message = f"Unsupported get request. Object with ID '{number}' does not exist"
            return web.json_response(_error(100, message, kind="GraphMethodException"), status=400)
        return web.json_response(
            {
                "verified_name": "Hermes Test",
                "display_phone_number": "+1 555-0100",
                "id": number,
                "quality_rating": "GREEN",
            }
        )

    async def _lookup(self, request: web.Request) -> web.Response:
        media_id, token = request.match_info["media_id"], self._token(request)
        if media_id in self.tokens.values():
            return self._number(media_id, token)
        with self._lock:
            media = self._media.get(media_id)
        number = request.query.get("phone_number_id")
        status, answer = 200, None
        if request.match_info["version"] != self.version:
            status, answer = 400, _error(2500, "Unknown path components")
        elif token is None or token not in self.tokens:
            status, answer = 401, _error(190, "Invalid OAuth access token - Cannot parse access token")
        elif media is None or (number is not None and number != media.number) or self.tokens[token] != media.number:
            message = f"Unsupported get request. Object with ID '{media_id}' does not exist"
            status, answer = 400, _error(100, message, kind="GraphMethodException")
        with self._lock:
            self.lookups.append(MediaCall(media_id=media_id, token=token, status=status))
        if answer is not None or media is None:
            return web.json_response(answer, status=status)
        digest = base64.b64encode(hashlib.sha256(media.data).digest()).decode()
        # on the name it was asked by, as a CDN link on Graph's own host would be
        url = f"http://{request.host}/whatsapp_business/attachments/?mid={media_id}&ext=1764464400&hash=ATtz0p1Qd"
        return web.json_response(
            {
                "messaging_product": "whatsapp",
                "url": url,
                "mime_type": media.mime_type,
                "sha256": digest,
                "file_size": len(media.data),
                "id": media_id,
            }
        )

    async def _download(self, request: web.Request) -> web.Response:
        media_id, token = request.query.get("mid", ""), self._token(request)
        with self._lock:
            media = self._media.get(media_id)
            authorised = token is not None and token in self.tokens
            scripted = self._download_script.popleft() if authorised and self._download_script else None
            status = 401 if not authorised else scripted or (404 if media is None else 200)
            redirect = self._redirects.get(media_id) if status == 200 else None
            self.downloads.append(MediaCall(media_id=media_id, token=token, status=302 if redirect else status))
        if redirect is not None:
            raise web.HTTPFound(redirect)
        if status != 200 or media is None:
            return web.Response(status=status, text="", content_type="text/plain")
        return web.Response(body=media.data, headers={"Content-Type": media.mime_type})

    @staticmethod
    def _refusal(fields: Any) -> dict[str, Any] | None:
        if not isinstance(fields, dict) or fields.get("messaging_product") != "whatsapp":
            return _error(100, "The parameter messaging_product is required.")
        if fields.get("recipient_type", "individual") not in ("individual", "group"):
            return _error(100, "Invalid parameter", details="recipient_type must be individual or group")
        if not isinstance(fields.get("to"), str) or not fields["to"]:
            return _error(131008, "Required parameter is missing", details="The parameter to is required.")
        if fields.get("type", "text") == "document":
            document = fields.get("document")
            if not isinstance(document, dict) or not isinstance(document.get("id"), str):
                return _error(131008, "Required parameter is missing", details="document['id'] is required.")
            if not isinstance(document.get("filename", ""), str) or len(document.get("caption", "")) > 1024:
                return _error(100, "Invalid parameter", details="document['caption'] is at most 1024 characters.")
            return None
        if fields.get("type", "text") != "text":
            return _error(131009, "Parameter value is not valid", details="only text and documents are faked")
        text = fields.get("text")
        body = text.get("body") if isinstance(text, dict) else None
        if not isinstance(body, str) or not body:
            return _error(131008, "Required parameter is missing", details="The parameter text['body'] is required.")
        if len(body) > MAX_TEXT_CHARS:
            return _error(100, "Invalid parameter", details="Param text['body'] must be at most 4096 characters long.")
        return None


# -- Meta's side of the webhook --------------------------------------------------------------------------------


def sign(secret: str, body: bytes) -> str:
    """``X-Hub-Signature-256`` for ``body`` under the app secret ``secret``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def message(kind: str, sender: str = "15551234567", *, wamid: str | None = None, **content: Any) -> dict[str, Any]:
    """A ``messages[]`` entry of type ``kind`` with its content objects (``image={...}``, ``group_id=...``)."""
    return {
        "from": sender,
        "id": wamid or new_wamid(),
        "timestamp": str(int(time.time())),
        "type": kind,
        **content,
    }


def text_message(
    body: str,
    sender: str = "15551234567",
    *,
    wamid: str | None = None,
    timestamp: float | None = None,
    group_id: str | None = None,
) -> dict[str, Any]:
    """A text message from ``sender`` (in group ``group_id`` if given), sent at ``timestamp`` (now)."""
    entry = message("text", sender, wamid=wamid, text={"body": body})
    if timestamp is not None:
        entry["timestamp"] = str(int(timestamp))
    if group_id is not None:
        entry["group_id"] = group_id
    return entry


def status(
    wamid: str, state: str, recipient: str = "15551234567", *, errors: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """A ``statuses[]`` entry: a delivery receipt for a message we sent."""
    entry: dict[str, Any] = {
        "id": wamid,
        "status": state,
        "timestamp": str(int(time.time())),
        "recipient_id": recipient,
    }
    if state != "failed":
        entry["conversation"] = {"id": "c0ffee", "origin": {"type": "service"}}
        entry["pricing"] = {"billable": True, "pricing_model": "PMP", "category": "service"}
    if errors:
        entry["errors"] = [dict(error) for error in errors]
    return entry


def notification(
    number: str,
    messages: Sequence[Mapping[str, Any]] = (),
    *,
    names: Mapping[str, str] | None = None,
    statuses: Sequence[Mapping[str, Any]] = (),
    waba: str = "102290129340398",
    display_phone_number: str = "15550783881",
) -> dict[str, Any]:
    """A ``whatsapp_business_account`` notification for ``number`` with ``contacts[]`` built from the senders."""
    value: dict[str, Any] = {
        "messaging_product": "whatsapp",
        "metadata": {"display_phone_number": display_phone_number, "phone_number_id": number},
    }
    senders = list(dict.fromkeys(str(m.get("from")) for m in messages))
    if messages:
        value["contacts"] = [
            {"profile": {"name": (names or {}).get(sender, f"User {sender[-4:]}")}, "wa_id": sender}
            for sender in senders
        ]
        value["messages"] = [dict(m) for m in messages]
    if statuses:
        value["statuses"] = [dict(s) for s in statuses]
    return {
        "object": "whatsapp_business_account",
        "entry": [{"id": waba, "changes": [{"value": value, "field": "messages"}]}],
    }


@dataclass(frozen=True)
class Answer:
    """What the webhook answered: status, lower-cased headers, the body (JSON-decoded when it is) and the time."""

    status: int
    headers: Mapping[str, str]
    body: Any
    text: str
    seconds: float


def _exchange(
    method: str, url: str, *, body: bytes | None = None, headers: Mapping[str, str] | None = None, timeout: float
) -> Answer:
    parts = urlsplit(url)
    started = time.monotonic()
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
    try:
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        connection.request(method, path, body=body, headers=dict(headers or {}))
        response = connection.getresponse()
        data = response.read()
    finally:
        connection.close()
    text = data.decode("utf-8", "replace")
    try:
        decoded = json.loads(data) if data else None
    except ValueError:
        decoded = None
    return Answer(
        status=response.status,
        headers={k.lower(): v for k, v in response.getheaders()},
        body=decoded,
        text=text,
        seconds=time.monotonic() - started,
    )


def deliver(
    url: str,
    payload: Any,
    secret: str,
    *,
    headers: Mapping[str, str | None] | None = None,
    timeout: float = 10.0,
) -> Answer:
    """POST ``payload`` (JSON-encoded unless bytes) to ``url`` signed with ``secret``, as Meta does.

    ``headers`` overrides or (with ``None``) removes headers, for forged requests.
    """
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    sent: dict[str, str] = {
        "Content-Type": "application/json",
        "User-Agent": "facebookexternalua",
        "X-Hub-Signature-256": sign(secret, body),
    }
    for name, value in (headers or {}).items():
        sent.pop(name, None)
        if value is not None:
            sent[name] = value
    return _exchange("POST", url, body=body, headers=sent, timeout=timeout)


def handshake(
    url: str, *, mode: str | None = "subscribe", token: str | None, challenge: str | None = "1158201444"
) -> Answer:
    """The ``GET`` Meta sends when the callback URL is saved (a ``None`` parameter is left out)."""
    query = {
        name: value
        for name, value in (("hub.mode", mode), ("hub.verify_token", token), ("hub.challenge", challenge))
        if value is not None
    }
    return _exchange("GET", f"{url}?{urlencode(query)}", timeout=10.0)
