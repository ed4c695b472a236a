"""A local iLink bot API: ``getupdates`` long polls and ``sendmessage``, with the protocol's JSON shapes and headers.

Each bot token has a log of inbound messages; ``get_updates_buf`` is an opaque cursor into it (base64, as the real
one looks), so a client that resends an old cursor gets the same messages again, and one that holds a poll open
with nothing new gets an empty answer after ``hold_s``. Every answer is ``ret``/``errcode``/``errmsg`` JSON; an
unknown token is answered like an expired session (``ret``/``errcode`` -14). Tests queue messages with
:meth:`FakeIlink.push`, script answers (errors, hostile bodies) with :meth:`answer_poll` and :meth:`answer_send`,
and read what the client did from :attr:`sent`, :attr:`polls` and :attr:`protocol_errors` (requests that broke
the protocol: wrong headers, wrong body shape, text over the limit).

It is WeChat's media CDN too: ``GET /c2c/download?encrypted_query_param=...`` serves a file stored with
:meth:`FakeIlink.upload`, AES-128-ECB encrypted with PKCS#7 padding under a fresh key, as the real CDN does;
:meth:`media_item` builds the item that names it (``media.encrypt_query_param`` and ``media.aes_key``, as base64
of the key's hex digits or of its bytes, and an image's hex ``aeskey``). :attr:`downloads` lists the parameters
asked for.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import itertools
import json
import queue
import secrets
import threading
import time
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from platforms.support.http_host import HttpHost

__all__ = ["FakeIlink", "Poll", "Sent"]

SESSION_TIMEOUT = {"ret": -14, "errcode": -14, "errmsg": "session timeout"}
RATE_LIMITED = {"ret": -2, "errcode": -2, "errmsg": "freq limit"}
_BATCH = 100


@dataclass(frozen=True)
class Sent:
    """One ``sendmessage`` request: the bot token it used, its headers (lower-cased names) and its JSON body."""

    token: str
    headers: Mapping[str, str]
    body: dict[str, Any]

    @property
    def msg(self) -> dict[str, Any]:
        message: dict[str, Any] = self.body["msg"]
        return message

    @property
    def text(self) -> str:
        return str(self.msg["item_list"][0]["text_item"]["text"])


@dataclass(frozen=True)
class Poll:
    """One ``getupdates`` request."""

    token: str
    headers: Mapping[str, str]
    body: dict[str, Any]
    at: float  # time.monotonic() when it arrived


@dataclass(frozen=True)
class _Scripted:
    status: int
    headers: Mapping[str, str]
    body: bytes


def _scripted(body: bytes | Mapping[str, Any], status: int, headers: Mapping[str, str] | None) -> _Scripted:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return _Scripted(status=status, headers=dict(headers or {}), body=data)


class FakeIlink:
    """The fake server; :meth:`start` binds 127.0.0.1 on a free port, :meth:`stop` ends it."""

    def __init__(
        self,
        tokens: Iterable[str] = (),
        *,
        hold_s: float = 0.5,
        longpolling_timeout_ms: int | None = 2000,
        max_text_chars: int = 2000,
    ) -> None:
        self.hold_s = hold_s
        self.longpolling_timeout_ms = longpolling_timeout_ms
        self.max_text_chars = max_text_chars
        self.sent: queue.SimpleQueue[Sent] = queue.SimpleQueue()
        self.polls: list[Poll] = []
        self.protocol_errors: list[str] = []
        self._tokens = set(tokens)
        self._log: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self._poll_script: dict[str, deque[_Scripted]] = defaultdict(deque)
        self._send_script: deque[_Scripted] = deque()
        self._ids = itertools.count(7_000_000_001)
        self.downloads: list[str] = []  # the encrypted_query_param of every CDN download
        self._media: dict[str, tuple[bytes, bool]] = {}  # param -> (ciphertext, cut)
        self._params = itertools.count(1)
        self._changed = threading.Condition()
        self._closing = False
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/ilink/bot/getupdates", self._getupdates)
        app.router.add_post("/ilink/bot/sendmessage", self._sendmessage)
        app.router.add_get("/c2c/download", self._download)
        self.host = HttpHost(app, name="fake-ilink")

    # -- control -------------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.host.url

    @property
    def cdn_url(self) -> str:
        """What ``platforms.wechat.cdn_base_url`` should be."""
        return self.host.url + "/c2c"

    def start(self) -> FakeIlink:
        self.host.start()
        return self

    def stop(self) -> None:
        with self._changed:
            self._closing = True
        self.host.stop()

    def add_token(self, token: str) -> None:
        """Accept ``token`` as a logged-in bot from now on."""
        with self._changed:
            self._tokens.add(token)

    def message(
        self,
        from_user: str,
        text: str | None = None,
        *,
        group_id: str | None = None,
        message_id: int | None = None,
        context_token: str | None = None,
        created_ms: int | None = None,
        items: list[dict[str, Any]] | None = None,
        to_user: str = "bot@im.bot",
    ) -> dict[str, Any]:
        """An inbound user message as ``getupdates`` carries it (text, or ``items`` given as they are)."""
        message_id = next(self._ids) if message_id is None else message_id
        message: dict[str, Any] = {
            "seq": message_id % 100_000,
            "message_id": message_id,
            "from_user_id": from_user,
            "to_user_id": to_user,
            "client_id": f"client-{message_id}",
            "create_time_ms": int(time.time() * 1000) if created_ms is None else created_ms,
            "session_id": f"session-{from_user}",
            "message_type": 1,
            "message_state": 2,
            "item_list": items if items is not None else [{"type": 1, "text_item": {"text": text or ""}}],
            "context_token": context_token or f"ctx-{message_id}",
        }
        if group_id is not None:
            message["group_id"] = group_id
        return message

    def upload(self, data: bytes, *, cut: bool = False) -> tuple[str, bytes]:
        """Store ``data`` encrypted under a fresh key; return its ``encrypt_query_param`` and the key.

        A ``cut`` file is served broken: its whole ``Content-Length``, half its bytes, then the connection closes.
        """
        key = secrets.token_bytes(16)
        padder = padding.PKCS7(128).padder()
        padded = padder.update(data) + padder.finalize()
        encryptor = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
        param = f"enc-{next(self._params)}-" + base64.urlsafe_b64encode(secrets.token_bytes(24)).decode()
        with self._changed:
            self._media[param] = (encryptor.update(padded) + encryptor.finalize(), cut)
        return param, key

    def media_item(
        self,
        item_type: int,
        data: bytes | None = None,
        *,
        param: str | None = None,
        key: bytes | None = None,
        key_form: str = "hex",
        cut: bool = False,
        **fields: Any,
    ) -> dict[str, Any]:
        """An item of ``item_type`` (2 image, 3 voice, 4 file, 5 video) naming ``data`` on the CDN (uploaded here),
        or ``param`` and ``key`` as given. ``key_form`` is how ``media.aes_key`` carries the key: ``hex`` (base64
        of its hex digits, as the official plugin sends it) or ``raw`` (base64 of its bytes); an image also gets
        the hex ``aeskey``. ``fields`` go into the item's object (``file_name``, ``len``, ``mid_size``)."""
        if data is not None:
            param, key = self.upload(data, cut=cut)
        media: dict[str, Any] = {"encrypt_type": 1}
        if param is not None:
            media["encrypt_query_param"] = param
        if key is not None:
            encoded = key.hex().encode() if key_form == "hex" else key
            media["aes_key"] = base64.b64encode(encoded).decode()
        inner: dict[str, Any] = {"media": media, **fields}
        if item_type == 2 and key is not None:
            inner["aeskey"] = key.hex()
        name = {2: "image_item", 3: "voice_item", 4: "file_item", 5: "video_item"}[item_type]
        return {"type": item_type, name: inner}

    def push(self, token: str, *messages: dict[str, Any]) -> None:
        """Queue ``messages`` for ``token``'s bot; they are delivered together in the next poll."""
        with self._changed:
            self._log[token].extend(messages)
            self._changed.notify_all()

    def answer_poll(
        self,
        token: str,
        body: bytes | Mapping[str, Any],
        *,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Answer ``token``'s next poll with ``body`` instead of messages (an error, a hostile body)."""
        with self._changed:
            self._poll_script[token].append(_scripted(body, status, headers))

    def heal(self) -> None:
        """Forget the poll answers :meth:`answer_poll` scripted and not yet served."""
        with self._changed:
            self._poll_script.clear()

    def answer_send(
        self, body: bytes | Mapping[str, Any], *, status: int = 200, headers: Mapping[str, str] | None = None
    ) -> None:
        """Answer the next ``sendmessage`` with ``body`` (it is still recorded in :attr:`sent`)."""
        with self._changed:
            self._send_script.append(_scripted(body, status, headers))

    def take_sent(self, timeout: float = 10.0) -> Sent:
        """The next ``sendmessage`` request, waiting up to ``timeout`` seconds."""
        return self.sent.get(timeout=timeout)

    def wait_polls(self, count: int, timeout: float = 10.0) -> list[Poll]:
        """Wait until ``count`` polls have arrived in all; return them."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self.polls) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"expected {count} polls, got {len(self.polls)}")
                self._changed.wait(left)
            return list(self.polls)

    def scripted_left(self, token: str) -> int:
        """How many scripted poll answers for ``token`` are not served yet."""
        with self._changed:
            return len(self._poll_script[token])

    # -- the protocol ----------------------------------------------------------------------------------------------

    def _error(self, problem: str) -> web.Response:
        with self._changed:
            self.protocol_errors.append(problem)
        return web.json_response({"ret": -1, "errcode": -1, "errmsg": problem}, status=400)

    def _token(self, headers: Mapping[str, str]) -> str | None:
        """The bearer token of a request with the iLink headers, or ``None`` (a protocol error is recorded)."""
        problems = []
        if headers.get("AuthorizationType") != "ilink_bot_token":
            problems.append("AuthorizationType must be ilink_bot_token")
        if not headers.get("Content-Type", "").startswith("application/json"):
            problems.append("Content-Type must be application/json")
        try:
            uin = base64.b64decode(headers.get("X-WECHAT-UIN", ""), validate=True).decode("ascii")
            if not uin.isdigit() or int(uin) >= 2**32:
                problems.append("X-WECHAT-UIN must be the base64 of a decimal uint32")
        except (binascii.Error, UnicodeDecodeError):
            problems.append("X-WECHAT-UIN is not base64")
        authorization = headers.get("Authorization", "")
        if not authorization.startswith("Bearer ") or not authorization.removeprefix("Bearer "):
            problems.append("Authorization must be 'Bearer <bot_token>'")
        if problems:
            with self._changed:
                self.protocol_errors.extend(problems)
            return None
        return authorization.removeprefix("Bearer ")

    async def _body(self, request: web.Request) -> dict[str, Any] | None:
        try:
            body = json.loads(await request.read())
        except ValueError:
            return None
        if not isinstance(body, dict) or not isinstance(body.get("base_info"), dict):
            return None
        return body

    @staticmethod
    def _cursor(token: str, position: int) -> str:
        return base64.b64encode(f"{token}|{position}".encode()).decode()

    def _position(self, token: str, buf: object) -> int:
        if not isinstance(buf, str) or not buf:
            return 0
        try:
            owner, _, position = base64.b64decode(buf).decode().rpartition("|")
            if owner == token:
                return int(position)
        except (binascii.Error, UnicodeDecodeError, ValueError):
            pass
        with self._changed:
            self.protocol_errors.append(f"get_updates_buf {buf!r} was not issued to this bot")
        return 0

    async def _getupdates(self, request: web.Request) -> web.Response:
        token = self._token(request.headers)
        body = await self._body(request)
        if token is None or body is None:
            return self._error("getupdates needs the iLink headers and a JSON body with base_info")
        with self._changed:
            self.polls.append(
                Poll(
                    token=token,
                    headers={k.lower(): v for k, v in request.headers.items()},
                    body=body,
                    at=time.monotonic(),
                )
            )
            self._changed.notify_all()
            known = token in self._tokens
            script = self._poll_script[token].popleft() if self._poll_script[token] else None
        if script is not None:
            return web.Response(status=script.status, headers=script.headers, body=script.body)
        if not known:
            return web.json_response(SESSION_TIMEOUT)
        position = self._position(token, body.get("get_updates_buf"))
        deadline = time.monotonic() + self.hold_s
        while True:
            with self._changed:
                waiting = self._log[token][position : position + _BATCH]
                closing = self._closing
            if waiting or closing or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.01)
        answer: dict[str, Any] = {
            "ret": 0,
            "msgs": waiting,
            "get_updates_buf": self._cursor(token, position + len(waiting)),
        }
        if self.longpolling_timeout_ms is not None:
            answer["longpolling_timeout_ms"] = self.longpolling_timeout_ms
        return web.json_response(answer)

    async def _download(self, request: web.Request) -> web.StreamResponse:
        param = request.query.get("encrypted_query_param", "")
        with self._changed:
            self.downloads.append(param)
            found = self._media.get(param)
        if found is None:
            return web.Response(status=404, text="not found")
        data, cut = found
        if not cut:
            return web.Response(body=data, content_type="application/octet-stream")
        response = web.StreamResponse(
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(len(data))}
        )
        await response.prepare(request)
        await response.write(data[: len(data) // 2])
        if request.transport is not None:
            request.transport.close()
        return response

    def _check_message(self, body: dict[str, Any]) -> str | None:
        msg = body.get("msg")
        if not isinstance(msg, dict):
            return "sendmessage needs a msg object"
        items = msg.get("item_list")
        item = items[0] if isinstance(items, list) and len(items) == 1 and isinstance(items[0], dict) else {}
        text_item = item.get("text_item")
        text = text_item.get("text") if isinstance(text_item, dict) else None
        fields_ok = (
            isinstance(msg.get("to_user_id"), str)
            and bool(msg["to_user_id"])
            and isinstance(msg.get("client_id"), str)
            and bool(msg["client_id"])
            and msg.get("from_user_id") == ""
            and msg.get("message_type") == 2
            and msg.get("message_state") == 2
            and item.get("type") == 1
        )
        if not fields_ok or not isinstance(text, str):
            return f"sendmessage msg has the wrong shape: {msg!r}"
        if len(text) > self.max_text_chars:
            return f"text longer than {self.max_text_chars} characters"
        return None

    async def _sendmessage(self, request: web.Request) -> web.Response:
        token = self._token(request.headers)
        body = await self._body(request)
        if token is None or body is None:
            return self._error("sendmessage needs the iLink headers and a JSON body with base_info")
        problem = self._check_message(body)
        if problem is not None:
            return self._error(problem)
        self.sent.put(Sent(token=token, headers={k.lower(): v for k, v in request.headers.items()}, body=body))
        with self._changed:
            script = self._send_script.popleft() if self._send_script else None
            known = token in self._tokens
        if script is not None:
            return web.Response(status=script.status, headers=script.headers, body=script.body)
        return web.json_response({"ret": 0} if known else SESSION_TIMEOUT)
