"""A local signal-cli ``daemon --http`` in multi-account mode: ``GET /api/v1/events`` (SSE) and ``POST /api/v1/rpc``.

Written from signal-cli's man page (signal-cli-jsonrpc(5)) and its HTTP handler, not from the adapter:

- ``/api/v1/events?account=<number>`` answers ``text/event-stream``; each received envelope is one event,
  ``id:<daemon start>-<sequence>`` (versions that buffer events; ``event_ids=False`` models older ones),
  ``event:receive`` and ``data:{"envelope":{...},"account":"+1..."}``; a ``:`` comment every ``keepalive_s``.
  No ``account`` means every account; an unknown one is 400 with no body. A ``Host`` other than the daemon's
  address is 421. The last ``buffer_size`` events are kept, and a client that connects with ``Last-Event-ID``
  first gets the kept events after it (all of them when the id is unknown, e.g. from an earlier run).
- Receiving follows ``--receive-mode=on-connection``: an account fetches from the Signal server only while one of
  its streams is open, so envelopes pushed while none is open wait (as on the Signal server) and arrive on the
  next connection.
- ``/api/v1/rpc`` takes one JSON-RPC 2.0 request (``Content-Type: application/json`` or 415) and answers 200
  with ``result`` or ``error``: -32700 unparsable, -32600 not a request, -32601 unknown method, -32602 no or an
  unknown ``account``, -1 an empty message. ``send`` needs exactly one of ``recipient`` and ``groupId`` and
  answers ``{"timestamp": ..., "results": [{"recipientAddress": {...}, "type": "SUCCESS"}]}``. Its
  ``attachment`` (or ``attachments``: signal-cli takes a list parameter's plural too) is a list of data URIs as
  RFC 2397 writes them, with signal-cli's ``filename=`` parameter (``data:<type>;filename=<name>;base64,<data>``);
  one that is not is -1, as signal-cli refuses an attachment it cannot read (:attr:`Sent.files`).
- ``getAttachment`` (signal-cli's GetAttachmentCommand) takes ``id`` and exactly one of ``recipient`` and
  ``groupId``, and answers ``{"data": "<base64>"}`` for a file stored with :meth:`FakeSignalCli.add_attachment`;
  an unknown id is -1 ``Could not find attachment with ID: ...`` (signal-cli's UserErrorException).

Tests queue envelopes with :meth:`FakeSignalCli.push` (built by :func:`message`, :func:`receipt`, ...), write raw
bytes into streams with :meth:`push_raw`, cut (:meth:`drop`) or freeze (:meth:`stall`) open streams, script
answers (:meth:`refuse_streams`, :meth:`answer_send` with the error builders below), store attachment files
(:meth:`add_attachment`), and read :attr:`sent`, :attr:`attachment_calls`, :attr:`connections` and
:attr:`protocol_errors` (requests that broke the protocol).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import queue
import re
import threading
import time
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, unquote_to_bytes

from aiohttp import web

from platforms.support.http_host import HttpHost

__all__ = [
    "Connection",
    "FakeSignalCli",
    "Person",
    "Sent",
    "io_error",
    "message",
    "not_a_member_error",
    "parse_data_uri",
    "rate_limit_error",
    "receipt",
    "sync_sent",
    "typing",
    "unregistered_error",
    "untrusted_error",
]

_FIRST_TIMESTAMP = 1_764_460_800_000
_timestamps = itertools.count(_FIRST_TIMESTAMP, 7)


@dataclass(frozen=True)
class Person:
    """A Signal user: ACI, phone number (``None`` when not shared) and profile name."""

    uuid: str
    number: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class Sent:
    """One ``send`` request: its params (``account`` included) and headers (lower-cased names)."""

    params: dict[str, Any]
    headers: Mapping[str, str]
    request_id: Any

    @property
    def account(self) -> str | None:
        value = self.params.get("account")
        return value if isinstance(value, str) else None

    @property
    def text(self) -> str:
        return str(self.params.get("message", ""))

    @property
    def files(self) -> list[tuple[str | None, str, bytes]]:
        """The attachments sent: (file name, MIME type, bytes) of each data URI."""
        found = self.params.get("attachment", self.params.get("attachments")) or []
        return [parsed for uri in found if (parsed := parse_data_uri(uri)) is not None]

    @property
    def to(self) -> str:
        """The recipient, or ``group:<groupId>``."""
        if "groupId" in self.params:
            return f"group:{self.params['groupId']}"
        recipient = self.params.get("recipient")
        return str(recipient[0] if isinstance(recipient, list) else recipient)


@dataclass(frozen=True)
class Connection:
    """One ``GET /api/v1/events``: the account asked for and the ``Last-Event-ID`` it sent."""

    account: str | None
    last_event_id: str | None
    headers: Mapping[str, str]
    at: float


def _timestamp(value: int | None) -> int:
    return next(_timestamps) if value is None else value


def _source(sender: Person) -> dict[str, Any]:
    return {
        "source": sender.number or sender.uuid,
        "sourceNumber": sender.number,
        "sourceUuid": sender.uuid,
        "sourceName": sender.name,
        "sourceDevice": 1,
    }


def message(
    sender: Person,
    text: str | None,
    *,
    group: str | None = None,
    group_name: str = "Test group",
    timestamp: int | None = None,
    attachments: list[dict[str, Any]] | None = None,
    **data: Any,
) -> dict[str, Any]:
    """An envelope with a ``dataMessage`` as signal-cli writes it (``data`` adds fields such as ``mentions``)."""
    stamp = _timestamp(timestamp)
    body: dict[str, Any] = {"timestamp": stamp, "message": text, "expiresInSeconds": 0, "viewOnce": False}
    if group is not None:
        body["groupInfo"] = {"groupId": group, "groupName": group_name, "revision": 3, "type": "DELIVER"}
    if attachments is not None:
        body["attachments"] = [
            {
                "contentType": "application/octet-stream",
                "filename": None,
                "id": f"att{index}",
                "size": 1024,
                "width": None,
                "height": None,
                "caption": None,
                "uploadTimestamp": stamp,
                **attachment,
            }
            for index, attachment in enumerate(attachments)
        ]
    body.update(data)
    return {
        **_source(sender),
        "timestamp": stamp,
        "serverReceivedTimestamp": stamp + 50,
        "serverDeliveredTimestamp": stamp + 60,
        "dataMessage": body,
    }


def receipt(sender: Person, *timestamps: int) -> dict[str, Any]:
    """A delivery receipt for our messages sent at ``timestamps``."""
    stamp = _timestamp(None)
    return {
        **_source(sender),
        "timestamp": stamp,
        "serverReceivedTimestamp": stamp,
        "serverDeliveredTimestamp": stamp,
        "receiptMessage": {
            "when": stamp,
            "isDelivery": True,
            "isRead": False,
            "isViewed": False,
            "timestamps": list(timestamps),
        },
    }


def typing(sender: Person, action: str = "STARTED") -> dict[str, Any]:
    """A typing indicator."""
    stamp = _timestamp(None)
    return {
        **_source(sender),
        "timestamp": stamp,
        "serverReceivedTimestamp": stamp,
        "serverDeliveredTimestamp": stamp,
        "typingMessage": {"action": action, "timestamp": stamp},
    }


def sync_sent(own: Person, text: str, destination: Person) -> dict[str, Any]:
    """What the account sent from another of its devices (the phone), as a sync message."""
    stamp = _timestamp(None)
    return {
        **_source(own),
        "sourceDevice": 2,
        "timestamp": stamp,
        "serverReceivedTimestamp": stamp,
        "serverDeliveredTimestamp": stamp,
        "syncMessage": {
            "sentMessage": {
                "destination": destination.number,
                "destinationNumber": destination.number,
                "destinationUuid": destination.uuid,
                "timestamp": stamp,
                "message": text,
                "expiresInSeconds": 0,
                "viewOnce": False,
            }
        },
    }


_DATA_URI = re.compile(
    r"data:(?P<type>[^;,]+/[^;,]+)?(?P<parameters>(?:;[^;,=]+=[^;,]*)*)(?P<base64>;base64)?,(?P<data>.*)", re.S
)


def parse_data_uri(uri: object) -> tuple[str | None, str, bytes] | None:
    """(file name, MIME type, bytes) of a data URI as signal-cli reads one, or ``None``."""
    match = _DATA_URI.fullmatch(uri) if isinstance(uri, str) else None
    if match is None:
        return None
    parameters = dict(part.split("=", 1) for part in (match["parameters"] or "").split(";") if part and "=" in part)
    try:
        data = base64.b64decode(match["data"], validate=True) if match["base64"] else unquote_to_bytes(match["data"])
    except ValueError:
        return None
    name = parameters.get("filename")
    return (unquote(name) if name is not None else None), match["type"] or "text/plain", data


def _results(kind: str, recipient: str, **extra: Any) -> dict[str, Any]:
    return {
        "response": {
            "timestamp": _timestamp(None),
            "results": [{"recipientAddress": {"uuid": recipient, "number": None}, "type": kind, **extra}],
        }
    }


def unregistered_error(recipient: str) -> dict[str, Any]:
    """A send to a user who deleted their account."""
    return {"code": -1, "message": "Failed to send message", "data": _results("UNREGISTERED_FAILURE", recipient)}


def untrusted_error(recipient: str) -> dict[str, Any]:
    """A send to a user whose safety number changed."""
    return {
        "code": -4,
        "message": "Failed to send message due to untrusted identities",
        "data": _results("IDENTITY_FAILURE", recipient),
    }


def rate_limit_error(
    recipient: str, *, retry_after: int | None = None, token: str | None = None, code: int = -5
) -> dict[str, Any]:
    """A send Signal rate-limited (``code=-1`` is how versions without error -5 report it)."""
    extra: dict[str, Any] = {}
    if retry_after is not None:
        extra["retryAfterSeconds"] = retry_after
    if token is not None:
        extra["token"] = token
    message = "Failed to send message due to rate limiting" if code == -5 else "Failed to send message"
    return {"code": code, "message": message, "data": _results("RATE_LIMIT_FAILURE", recipient, **extra)}


def io_error() -> dict[str, Any]:
    """signal-cli could not reach the Signal server."""
    return {"code": -3, "message": "Failed to send message: Connection reset (IOException)", "data": None}


def not_a_member_error(group: str) -> dict[str, Any]:
    """A send to a group the account has left."""
    return {"code": -1, "message": f"User is not a member in group: Test group ({group})", "data": None}


@dataclass(frozen=True)
class _Scripted:
    status: int = 200
    error: dict[str, Any] | None = None
    result: Any = None
    body: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass
class _Stream:
    """An open event stream: which accounts it carries and its outgoing queue (``None`` closes it)."""

    accounts: frozenset[str]
    outgoing: asyncio.Queue[bytes | None]
    loop: asyncio.AbstractEventLoop
    stalled: bool = False

    def put(self, item: bytes | None) -> None:
        self.loop.call_soon_threadsafe(self.outgoing.put_nowait, item)


@dataclass(frozen=True)
class _Event:
    sequence: int
    account: str
    data: bytes


class FakeSignalCli:
    """The fake daemon; :meth:`start` binds 127.0.0.1 on a free port, :meth:`stop` ends it."""

    def __init__(
        self,
        accounts: Iterable[str],
        *,
        event_ids: bool = True,
        keepalive_s: float = 0.2,
        buffer_size: int = 1000,
        max_text_chars: int = 2000,
    ) -> None:
        self.accounts = list(accounts)
        self.event_ids = event_ids
        self.keepalive_s = keepalive_s
        self.buffer_size = buffer_size
        self.max_text_chars = max_text_chars
        self.sent: queue.SimpleQueue[Sent] = queue.SimpleQueue()
        self.connections: list[Connection] = []
        self.attachment_calls: list[dict[str, Any]] = []  # the params of every getAttachment
        self.protocol_errors: list[str] = []
        self._attachments: dict[str, bytes] = {}
        self._lock = threading.Condition()
        self._prefix = f"{int(time.time() * 1000)}-"
        self._sequence = itertools.count(1)
        self._buffer: deque[_Event] = deque()
        self._pending: dict[str, deque[bytes]] = defaultdict(deque)  # waiting on the Signal server
        self._streams: list[_Stream] = []
        self._refusals: deque[_Scripted] = deque()
        self._send_script: deque[_Scripted] = deque()
        self._closing = False
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_get("/api/v1/events", self._events)
        app.router.add_post("/api/v1/rpc", self._rpc)
        app.router.add_get("/api/v1/check", self._check)
        self.host = HttpHost(app, name="fake-signal-cli")

    # -- control -------------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.host.url

    def start(self) -> FakeSignalCli:
        self.host.start()
        return self

    def stop(self) -> None:
        with self._lock:
            self._closing = True
            streams = list(self._streams)
        for stream in streams:
            stream.put(None)
        self.host.stop()

    def push(self, account: str, *envelopes: dict[str, Any]) -> None:
        """Envelopes for ``account`` arrive at the Signal server; open streams get them at once, else the next."""
        data = [
            json.dumps({"envelope": e, "account": account}, ensure_ascii=False, separators=(",", ":"))
            for e in envelopes
        ]
        with self._lock:
            self._pending[account].extend(line.encode() for line in data)
            self._deliver(account)

    def push_raw(self, account: str, raw: bytes) -> None:
        """Write ``raw`` as it is into every open stream of ``account`` (hostile or broken event-stream bytes)."""
        with self._lock:
            for stream in self._streams:
                if account in stream.accounts and not stream.stalled:
                    stream.put(raw)

    def drop(self) -> None:
        """Close every open stream, as when the daemon restarts or the connection is cut."""
        with self._lock:
            streams, self._streams = list(self._streams), []
        for stream in streams:
            stream.put(None)

    def stall(self) -> None:
        """Freeze every open stream: no more keep-alives, and events written to it are lost (a half-open socket)."""
        with self._lock:
            for stream in self._streams:
                stream.stalled = True

    def restart(self, *, keep_buffer: bool = False) -> None:
        """Start numbering events afresh, as a restarted daemon does, and close the streams.

        A restarted daemon has forgotten its kept events; ``keep_buffer`` keeps them, which is what a client whose
        ``Last-Event-ID`` has dropped out of the buffer sees: every kept event again.
        """
        with self._lock:
            self._prefix = f"{int(time.time() * 1000) + 1}-"
            if not keep_buffer:
                self._buffer.clear()
        self.drop()

    def refuse_streams(
        self, count: int = 1, *, status: int = 400, body: bytes = b"", content_type: str | None = None
    ) -> None:
        """Answer the next ``count`` event-stream requests with ``status`` (or 200 with a wrong content type)."""
        headers = {} if content_type is None else {"Content-Type": content_type}
        with self._lock:
            self._refusals.extend(_Scripted(status=status, body=body, headers=headers) for _ in range(count))

    def heal(self) -> None:
        """Forget the refusals :meth:`refuse_streams` scripted and not yet answered."""
        with self._lock:
            self._refusals.clear()

    def answer_send(
        self,
        error: dict[str, Any] | None = None,
        *,
        result: Any = None,
        status: int = 200,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Answer the next ``send`` with a JSON-RPC ``error``, a ``result``, or a raw HTTP ``status``/``body``."""
        with self._lock:
            self._send_script.append(
                _Scripted(status=status, error=error, result=result, body=body, headers=dict(headers or {}))
            )

    def add_attachment(self, attachment_id: str, data: bytes) -> None:
        """Store ``data`` as the attachment ``attachment_id`` (what signal-cli downloaded when it received it)."""
        with self._lock:
            self._attachments[attachment_id] = data

    def take_sent(self, timeout: float = 10.0) -> Sent:
        """The next ``send`` request, waiting up to ``timeout`` seconds."""
        return self.sent.get(timeout=timeout)

    def wait_connections(self, count: int, timeout: float = 10.0) -> list[Connection]:
        """Wait until ``count`` event-stream requests have arrived in all; return them."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self.connections) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"expected {count} event-stream connections, got {len(self.connections)}")
                self._lock.wait(left)
            return list(self.connections)

    def open_streams(self) -> int:
        """How many event streams are open now."""
        with self._lock:
            return len(self._streams)

    def waiting(self, account: str) -> int:
        """How many envelopes wait on the Signal server for ``account``."""
        with self._lock:
            return len(self._pending[account])

    # -- event streams -----------------------------------------------------------------------------------------------

    def _frame(self, event: _Event) -> bytes:
        head = f"id:{self._prefix}{event.sequence}\n" if self.event_ids else ""
        return f"{head}event:receive\n".encode() + b"data:" + event.data + b"\n\n"

    def _deliver(self, account: str) -> None:
        """Receive ``account``'s waiting envelopes if a stream of it is open (caller holds the lock)."""
        streams = [s for s in self._streams if account in s.accounts]
        if not streams:
            return
        while self._pending[account]:
            event = _Event(sequence=next(self._sequence), account=account, data=self._pending[account].popleft())
            self._buffer.append(event)
            while len(self._buffer) > self.buffer_size:
                self._buffer.popleft()
            for stream in streams:
                if not stream.stalled:  # a stalled socket swallows it: only the buffer keeps it
                    stream.put(self._frame(event))

    def _replay(self, accounts: frozenset[str], last_event_id: str | None) -> list[bytes]:
        if last_event_id is None or not self.event_ids:
            return []
        after = 0
        if last_event_id.startswith(self._prefix) and last_event_id[len(self._prefix) :].isdigit():
            after = int(last_event_id[len(self._prefix) :])
        return [self._frame(e) for e in self._buffer if e.sequence > after and e.account in accounts]

    def _host_ok(self, request: web.Request) -> bool:
        return request.host in (f"127.0.0.1:{self.host.port}", f"localhost:{self.host.port}")

    async def _events(self, request: web.Request) -> web.StreamResponse:
        if not self._host_ok(request):
            return web.Response(status=421)
        account = request.query.get("account") or None
        last_event_id = request.headers.get("Last-Event-ID")
        with self._lock:
            self.connections.append(
                Connection(
                    account=account,
                    last_event_id=last_event_id,
                    headers={k.lower(): v for k, v in request.headers.items()},
                    at=time.monotonic(),
                )
            )
            self._lock.notify_all()
            refusal = self._refusals.popleft() if self._refusals else None
        if refusal is not None:
            return web.Response(status=refusal.status, body=refusal.body or None, headers=refusal.headers)
        if account is not None and account not in self.accounts:
            return web.Response(status=400)
        accounts = frozenset(self.accounts if account is None else [account])
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        stream = _Stream(accounts=accounts, outgoing=asyncio.Queue(), loop=asyncio.get_running_loop())
        with self._lock:
            if self._closing:
                return response
            for frame in self._replay(accounts, last_event_id):
                stream.outgoing.put_nowait(frame)
            self._streams.append(stream)
            for name in accounts:
                self._deliver(name)
        try:
            await self._pump(stream, response)
        finally:
            with self._lock:
                if stream in self._streams:
                    self._streams.remove(stream)
        return response

    async def _pump(self, stream: _Stream, response: web.StreamResponse) -> None:
        while True:
            try:
                item = await asyncio.wait_for(stream.outgoing.get(), timeout=self.keepalive_s)
            except TimeoutError:
                item = b":\n"
            if item is None:
                return
            if stream.stalled:
                continue
            try:
                await response.write(item)
            except (ConnectionError, RuntimeError):
                return

    # -- JSON-RPC ------------------------------------------------------------------------------------------------------

    def _error(self, request_id: Any, code: int, text: str, problem: str | None = None) -> web.Response:
        if problem is not None:
            with self._lock:
                self.protocol_errors.append(problem)
        error = {"code": code, "message": text, "data": None}
        return web.json_response({"jsonrpc": "2.0", "error": error, "id": request_id})

    async def _check(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _rpc(self, request: web.Request) -> web.Response:
        if not self._host_ok(request):
            return web.Response(status=421)
        if not request.headers.get("Content-Type", "").startswith("application/json"):
            with self._lock:
                self.protocol_errors.append("rpc without Content-Type application/json")
            return web.Response(status=415)
        try:
            body = json.loads(await request.read())
        except ValueError:
            return self._error(None, -32700, "Parse error", "rpc body is not JSON")
        if not isinstance(body, dict) or body.get("jsonrpc") != "2.0" or not isinstance(body.get("method"), str):
            return self._error(None, -32600, "method field must be set", f"not a JSON-RPC 2.0 request: {body!r}")
        request_id = body.get("id")
        if request_id is None:
            return self._error(None, -32600, "id must be set", "a request without an id gets no answer")
        method = body["method"]
        if method not in ("send", "getAttachment"):
            return self._error(request_id, -32601, "Method not implemented", f"unexpected method {method!r}")
        params = body.get("params")
        if not isinstance(params, dict):
            return self._error(
                request_id, -32602, "Method requires valid account parameter", f"{method} without params"
            )
        account = params.get("account")
        if account is None:
            return self._error(
                request_id, -32602, "Method requires valid account parameter", f"{method} without account"
            )
        if account not in self.accounts:
            return self._error(request_id, -32602, "Specified account does not exist")
        if method == "getAttachment":
            return self._get_attachment(request_id, params)
        problem = self._check_send(params)
        if problem is not None:
            return self._error(request_id, -1, problem, f"send params: {problem}")
        self.sent.put(
            Sent(params=params, headers={k.lower(): v for k, v in request.headers.items()}, request_id=request_id)
        )
        with self._lock:
            script = self._send_script.popleft() if self._send_script else None
        if script is not None:
            if script.body is not None or script.status != 200:
                return web.Response(status=script.status, body=script.body, headers=script.headers)
            if script.error is not None:
                return web.json_response({"jsonrpc": "2.0", "error": script.error, "id": request_id})
            return web.json_response({"jsonrpc": "2.0", "result": script.result, "id": request_id})
        target = params.get("recipient") or params.get("groupId")
        result = {
            "timestamp": _timestamp(None),
            "results": [{"recipientAddress": {"uuid": str(target), "number": None}, "type": "SUCCESS"}],
        }
        return web.json_response({"jsonrpc": "2.0", "result": result, "id": request_id})

    def _get_attachment(self, request_id: Any, params: dict[str, Any]) -> web.Response:
        with self._lock:
            self.attachment_calls.append(params)
        attachment_id = params.get("id")
        if not isinstance(attachment_id, str) or (params.get("recipient") is None) == (params.get("groupId") is None):
            problem = "getAttachment needs an id and exactly one of recipient and groupId"
            return self._error(request_id, -32602, problem, f"getAttachment params: {params!r}")
        with self._lock:
            data = self._attachments.get(attachment_id)
        if data is None:
            return self._error(request_id, -1, f"Could not find attachment with ID: {attachment_id}")
        result = {"data": base64.b64encode(data).decode()}
        return web.json_response({"jsonrpc": "2.0", "result": result, "id": request_id})

    def _check_send(self, params: Mapping[str, Any]) -> str | None:
        recipient, group = params.get("recipient"), params.get("groupId")
        if (recipient is None) == (group is None):
            return "exactly one of recipient and groupId must be given"
        if recipient is not None and not (
            isinstance(recipient, str) or (isinstance(recipient, list) and all(isinstance(r, str) for r in recipient))
        ):
            return "recipient must be a string or a list of strings"
        if group is not None and not isinstance(group, str):
            return "groupId must be a string"
        attachments = params.get("attachment", params.get("attachments")) or []
        if not isinstance(attachments, list) or any(parse_data_uri(uri) is None for uri in attachments):
            return "Invalid attachment: an attachment must be a data URI (data:<type>;filename=<name>;base64,<data>)"
        text = params.get("message")
        if not isinstance(text, str) or not (text or attachments):
            return "Sending empty message is not allowed, either a message, attachment or sticker must be given."
        if len(text) > self.max_text_chars:
            return f"the message is longer than {self.max_text_chars} characters"
        if ("quoteTimestamp" in params) != ("quoteAuthor" in params):
            return "quoteTimestamp and quoteAuthor go together"
        return None
