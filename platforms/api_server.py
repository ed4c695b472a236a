"""The OpenAI-compatible HTTP API: ``POST /v1/chat/completions``, ``GET /v1/models`` and ``GET /health``.

Any OpenAI client can talk to the agent, but the conversation lives in the store, not in the request: only the
newest user message of a request is a new turn, and the history is the session's transcript. A request names its
conversation with the ``X-Hermes-Session-Id`` header (else the ``user`` field; without either it starts a fresh
one), and the reply's session id comes back in the same header, so a client can pass it on to continue exactly
that session, even one opened on another platform.

A request is answered the durable way: its message is committed to the inbox, the turn runs in the session's actor
and the reply reaches the waiting request through :class:`~hermes_actors.waiters.ReplyWaiters`. A client that stops
waiting (timeout, disconnect, server stop) loses only the wait: the turn continues and its reply is stored.
Every error, ours or aiohttp's, leaves in OpenAI's error shape, so clients raise their usual exceptions.

Images come as ``image_url`` content parts of the newest user message. A base64 ``data:`` URL is saved into the
gateway's media store (one over ``media.max_bytes`` is refused before it is decoded: the turn still runs on the
text and the reply says the image could not be read); an http(s) URL is recorded as the attachment's source URL
and not fetched, so the server never makes requests on a client's behalf (a vision model gets the URL itself).
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import hmac
import ipaddress
import logging
import os
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import msgspec
from aiohttp import web
from aiohttp.typedefs import Handler

from hermes_actors.errors import ConfigError, HermesError, PlatformError
from hermes_actors.ids import is_session_id
from hermes_actors.media import MediaStore, kind_of
from hermes_actors.messages import Attachment, InboundMessage, OutboundMessage
from hermes_actors.routing import SessionSource, build_session_key
from hermes_actors.waiters import ReplyWaiters
from platforms.base import Capabilities, ReplySender
from platforms.support import json_guard
from platforms.support.http_host import HttpAdapter, committed, unreadable

if TYPE_CHECKING:
    from hermes_actors.ports import Inbox

__all__ = ["SESSION_HEADER", "ApiServer", "ApiServerConfig", "key_fingerprint"]

_log = logging.getLogger(__name__)

SESSION_HEADER = "X-Hermes-Session-Id"
_PLATFORM = "api_server"
_KEEP_ALIVE = b": keep-alive\n\n"
_DONE = b"data: [DONE]\n\n"
_DISCONNECT_POLL_S = 1.0  # how often a non-streaming wait looks whether its client is still connected


class ApiServerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``platforms.api_server`` section of ``config.yaml``.

    ``key`` is the bearer key clients must send; when it is unset, the environment variable named by ``key_env``
    supplies it, and when neither is set the API is open (allowed on a loopback ``host`` only).
    ``keepalive_s`` is how often a streaming response sends an SSE comment while the turn runs.
    """

    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = 8642
    key: str | None = None
    key_env: str = "HERMES_API_KEY"
    model_name: str = "hermes-agent"
    request_timeout_s: float = 300.0
    max_body_bytes: int = 4 * 1024 * 1024
    keepalive_s: float = 15.0

    def __post_init__(self) -> None:
        field = "platforms.api_server"
        if not self.host.strip():
            raise ConfigError(f"{field}.host", "must not be empty; use 127.0.0.1 to serve this machine only")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"{field}.port", f"{self.port} is not a TCP port; use 0..65535 (0 picks a free one)")
        if self.key is not None and not self.key.strip():
            raise ConfigError(f"{field}.key", "is empty; remove it or set a non-empty key")
        if not self.model_name.strip():
            raise ConfigError(f"{field}.model_name", "must not be empty; the default is 'hermes-agent'")
        if self.request_timeout_s <= 0:
            raise ConfigError(f"{field}.request_timeout_s", "must be a positive number of seconds")
        if self.max_body_bytes < 1024:
            raise ConfigError(f"{field}.max_body_bytes", "must be at least 1024 bytes; the default is 4 MiB")
        if self.keepalive_s <= 0:
            raise ConfigError(f"{field}.keepalive_s", "must be a positive number of seconds")


# -- the request, decoded once at the edge ---------------------------------------------------------------------


class _ImageUrl(msgspec.Struct, frozen=True, kw_only=True):
    url: str
    detail: str | None = None


class _ContentPart(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    text: str | None = None
    image_url: _ImageUrl | None = None


class _ChatMessage(msgspec.Struct, frozen=True, kw_only=True):
    role: str
    content: str | list[_ContentPart] | None = None


class _StreamOptions(msgspec.Struct, frozen=True, kw_only=True):
    include_usage: bool = False


class _ChatRequest(msgspec.Struct, frozen=True, kw_only=True):
    """The fields of a chat-completions request we use; the rest (temperature, tools, ...) are ignored."""

    messages: list[_ChatMessage]
    model: str | None = None
    stream: bool = False
    stream_options: _StreamOptions | None = None
    user: str | None = None


_request_decoder = msgspec.json.Decoder(_ChatRequest)
_FIELD_PATH = re.compile(r" - at `\$\.?(?P<path>.*)`$")
_MAX_SESSION_NAME = 256
_SESSION_NAME = re.compile(rf"[\x20-\x7e]{{1,{_MAX_SESSION_NAME}}}")

# -- the responses ----------------------------------------------------------------------------------------------


class _Usage(msgspec.Struct, frozen=True, kw_only=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class _Message(msgspec.Struct, frozen=True, kw_only=True):
    role: str
    content: str


class _Choice(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    message: _Message
    finish_reason: str


class _Completion(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: str
    created: int
    model: str
    choices: list[_Choice]
    usage: _Usage


class _Delta(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    role: str | None = None
    content: str | None = None


class _ChunkChoice(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    delta: _Delta
    finish_reason: str | None = None


class _Chunk(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    id: str
    object: str
    created: int
    model: str
    choices: list[_ChunkChoice]
    usage: _Usage | None = None


class _Model(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: str
    created: int
    owned_by: str


class _ModelList(msgspec.Struct, frozen=True, kw_only=True):
    object: str
    data: list[_Model]


class _ErrorDetail(msgspec.Struct, frozen=True, kw_only=True):
    message: str
    type: str
    param: str | None
    code: str | None


class _ErrorBody(msgspec.Struct, frozen=True, kw_only=True):
    error: _ErrorDetail


class _ApiError(Exception):
    """A request ends with an OpenAI-shaped error."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = _ErrorBody(error=_ErrorDetail(message=message, type=type, param=param, code=code))
        self.headers = dict(headers or {})

    def response(self) -> web.Response:
        return _json(self.body, status=self.status, headers=self.headers)


class _Ended(enum.Enum):
    """Why a wait for a reply ended without one."""

    TIMEOUT = "timeout"
    STOPPING = "stopping"
    DISCONNECTED = "disconnected"


class _WaitEnded(Exception):
    def __init__(self, why: _Ended) -> None:
        super().__init__(why.value)
        self.why = why


class _Turn(msgspec.Struct, frozen=True, kw_only=True):
    """One request's turn, and the OpenAI objects that answer it."""

    completion_id: str
    created: int
    model: str
    prompt: str
    routing_key: str
    deadline: float  # event-loop time

    def completion(self, text: str) -> _Completion:
        choice = _Choice(index=0, message=_Message(role="assistant", content=text), finish_reason="stop")
        return _Completion(
            id=self.completion_id,
            object="chat.completion",
            created=self.created,
            model=self.model,
            choices=[choice],
            usage=_usage(self.prompt, text),
        )

    def chunk(self, delta: _Delta | None, finish_reason: str | None = None, usage: _Usage | None = None) -> bytes:
        """One SSE event; ``delta=None`` makes the choice-less chunk that carries ``usage``."""
        choices = [] if delta is None else [_ChunkChoice(index=0, delta=delta, finish_reason=finish_reason)]
        chunk = _Chunk(
            id=self.completion_id,
            object="chat.completion.chunk",
            created=self.created,
            model=self.model,
            choices=choices,
            usage=usage,
        )
        return _sse(chunk)


_HTTP_ERRORS = {
    404: ("unknown_url", "no such endpoint; the API serves POST /v1/chat/completions, GET /v1/models, GET /health"),
    405: ("method_not_allowed", "method not allowed here; chat completions take POST, models and health take GET"),
}


def _json(payload: object, *, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(
        body=msgspec.json.encode(payload), status=status, headers=headers, content_type="application/json"
    )


def _sse(payload: object) -> bytes:
    return b"data: " + msgspec.json.encode(payload) + b"\n\n"


def _estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _usage(prompt: str, reply: str) -> _Usage:
    prompt_tokens, completion_tokens = _estimate_tokens(prompt), _estimate_tokens(reply)
    return _Usage(
        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, total_tokens=prompt_tokens + completion_tokens
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _decode_chat(body: bytes) -> _ChatRequest:
    """Decode a chat-completions body; a malformed one becomes a 400 naming the field path or the problem."""
    try:
        return json_guard.decode(_request_decoder, body)
    except msgspec.ValidationError as exc:
        match = _FIELD_PATH.search(str(exc))
        raise _ApiError(
            400, f"invalid request body: {exc}", code="invalid_value", param=match["path"] if match else None
        ) from None
    except json_guard.NestingError as exc:
        raise _ApiError(400, f"request body is {exc}; send a flatter JSON object", code="invalid_json") from None
    except msgspec.DecodeError as exc:
        raise _ApiError(
            400, f"request body is not valid JSON ({exc}); send a JSON object", code="invalid_json"
        ) from None


def _session_named(headers: Mapping[str, str]) -> str | None:
    """The session or conversation ``X-Hermes-Session-Id`` names, ``None`` when it is absent or blank.

    A name is 1 to 256 printable ASCII characters without ``/``, ``\\`` or ``..``: it becomes a chat id, turns up
    in logs and paths, and is matched against stored session ids, so anything else is a 400 naming the header.
    """
    value = headers.get(SESSION_HEADER, "").strip()
    if not value:
        return None
    if not _SESSION_NAME.fullmatch(value) or "/" in value or "\\" in value or ".." in value:
        raise _ApiError(
            400,
            f"{SESSION_HEADER} must be 1 to {_MAX_SESSION_NAME} printable ASCII characters without '/', '\\' "
            "or '..'; send the session id a response of this API returned in its header",
            code="invalid_header",
            param=SESSION_HEADER,
        )
    return value


def _new_turn(messages: Sequence[_ChatMessage]) -> tuple[str, list[str]]:
    """Return the text and image URLs of the newest user message: the only part of the request that is a new turn."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role != "user":
            continue
        content = message.content
        images: list[str] = []
        if isinstance(content, list):
            for part_index, part in enumerate(content):
                images.extend(_image_of(part, f"messages[{index}].content[{part_index}]"))
            content = "\n".join(part.text or "" for part in content if part.type == "text")
        if (not content or not content.strip()) and not images:
            raise _ApiError(
                400, "the newest user message has no text or image; send some", param=f"messages[{index}].content"
            )
        return content or "", images
    raise _ApiError(400, "messages holds no message with role 'user'; add one", param="messages")


def _image_of(part: _ContentPart, where: str) -> list[str]:
    """The image URL of a content part (none for a text part); a 400 for any other kind of part."""
    if part.type == "text":
        return []
    if part.type != "image_url":
        raise _ApiError(
            400,
            f"content part type {part.type!r} is not supported; only 'text' and 'image_url' parts are: send other "
            "files as a link in the text",
            code="unsupported_content",
            param=f"{where}.type",
        )
    if part.image_url is None or not part.image_url.url.strip():
        raise _ApiError(400, "an image_url part needs image_url.url", param=f"{where}.image_url")
    return [part.image_url.url.strip()]


def _image_attachment(media: MediaStore, url: str) -> Attachment:
    """Save a ``data:`` image into the media store; record an http(s) one by its URL; refuse anything else."""
    if url.startswith(("http://", "https://")):
        return media.link(url, kind="image")
    if not url.startswith("data:"):
        return media.refuse("only data: and http(s) image URLs are accepted", kind="image", source_url=url[:200])
    header, _, payload = url[len("data:") :].partition(",")
    mime, *parameters = header.split(";")
    mime = mime.strip().lower() or "image/png"
    if "base64" not in parameters:
        return media.refuse("only base64 data: URLs are read", kind=kind_of(mime), mime_type=mime)
    return media.save_base64(payload, kind=kind_of(mime), mime_type=mime)


class ApiServer(HttpAdapter[ApiServerConfig]):
    """The OpenAI-compatible API as a platform adapter (``platform = "api_server"``).

    Built before the gateway (its :meth:`senders` go to the gateway's outbox), then started with the gateway.
    ``environ`` replaces ``os.environ`` when looking up ``config.key_env``. Raises :class:`ConfigError` when the
    host is not loopback and no key is configured. When it stops, waiting requests are answered 503 (their turns
    continue and are stored).
    """

    platform = _PLATFORM
    capabilities = Capabilities()
    server_name = _PLATFORM

    def __init__(self, config: ApiServerConfig, *, environ: Mapping[str, str] | None = None) -> None:
        super().__init__(config)
        env = os.environ if environ is None else environ
        from_env = env.get(config.key_env) if config.key_env else None
        self._key = config.key or from_env or None
        self._key_from_env = config.key is None and self._key is not None
        self._scope = key_fingerprint(self._key) if self._key is not None else None  # sessions made with this key
        if self._key is None and not _is_loopback(config.host):
            raise ConfigError(
                "platforms.api_server.key",
                f"required when host is not loopback ({config.host!r} lets other machines in); set "
                f"platforms.api_server.key or the {config.key_env or 'HERMES_API_KEY'} environment variable, "
                "or serve on 127.0.0.1",
            )
        self._waiters = ReplyWaiters(_PLATFORM)
        self._started_at = int(time.time())
        self._stopping: asyncio.Future[None] | None = None  # created on the server's loop, done once it stops

    # -- Adapter ---------------------------------------------------------------------------------------------

    def senders(self) -> Sequence[ReplySender]:
        """The reply waiters that hand each turn's reply to its waiting request."""
        return [self._waiters]

    @property
    def key_required(self) -> bool:
        """Whether requests to ``/v1/*`` must carry the bearer key."""
        return self._key is not None

    def start(self, inbox: Inbox) -> None:
        """Serve the API for ``gateway``; raise :class:`PlatformError` if the address cannot be bound."""
        if self._host is not None:
            raise PlatformError("api_server: start() was already called; build a new ApiServer to serve again")
        super().start(inbox)

    def describe(self) -> list[str]:
        """Banner lines: the base URL, a curl example and whether a key is required."""
        base = f"{self.url}/v1"
        example = {"model": self.config.model_name, "messages": [{"role": "user", "content": "hello"}]}
        body = msgspec.json.encode(example).decode()
        auth = ""
        if self._key_from_env:
            auth = f' -H "Authorization: Bearer ${self.config.key_env}"'
        elif self._key is not None:
            auth = " -H 'Authorization: Bearer <platforms.api_server.key>'"
        lines = [
            f"OpenAI-compatible API: {base}  (curl {base}/chat/completions -H 'Content-Type: application/json'"
            f"{auth} -d '{body}')"
        ]
        if self._key_from_env:
            lines.append(f"  requires Authorization: Bearer <key> (the key is in ${self.config.key_env})")
        elif self._key is not None:
            lines.append("  requires Authorization: Bearer <key> (platforms.api_server.key)")
        else:
            lines.append(
                f"  no key required: any local program may use it (set ${self.config.key_env} or "
                "platforms.api_server.key to require one)"
            )
        return lines

    # -- application -----------------------------------------------------------------------------------------

    def _application(self) -> web.Application:
        app = web.Application(
            client_max_size=self.config.max_body_bytes, middlewares=[self._error_middleware, self._auth_middleware]
        )
        self._add_routes(app)
        app.on_startup.append(self._on_startup)
        app.on_shutdown.append(self._on_shutdown)
        return app

    def _add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)

    async def _on_startup(self, app: web.Application) -> None:
        self._stopping = asyncio.get_running_loop().create_future()

    async def _on_shutdown(self, app: web.Application) -> None:
        # Runs before aiohttp waits for open handlers: waiting requests answer now instead of being cancelled.
        if self._stopping is not None and not self._stopping.done():
            self._stopping.set_result(None)

    @web.middleware
    async def _error_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except _ApiError as error:
            return error.response()
        except web.HTTPRequestEntityTooLarge:
            return _ApiError(
                413,
                f"request body is larger than {self.config.max_body_bytes} bytes; only the newest user message "
                "is used, so send less history, or raise platforms.api_server.max_body_bytes",
                code="request_too_large",
            ).response()
        except web.RequestPayloadError as exc:
            return _ApiError(400, f"request body cannot be read ({unreadable(exc)})", code="invalid_body").response()
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            code, message = _HTTP_ERRORS.get(exc.status, (None, exc.reason))
            return _ApiError(exc.status, message, code=code).response()
        except Exception:
            _log.exception("api_server: %s %s failed", request.method, request.path)
            return _ApiError(
                500, "internal error in the hermes API server; see the daemon log", type="server_error"
            ).response()

    @web.middleware
    async def _auth_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self._key is not None and request.path.startswith("/v1/"):
            given = request.headers.get("Authorization", "")
            scheme, _, token = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), self._key.encode()):
                raise _ApiError(
                    401,
                    "missing or incorrect API key; send 'Authorization: Bearer <key>' with the key the server "
                    "was configured with",
                    code="invalid_api_key",
                    headers={"WWW-Authenticate": "Bearer"},
                )
        return await handler(request)

    # -- routes ----------------------------------------------------------------------------------------------

    async def _health(self, request: web.Request) -> web.Response:
        """200 while the gateway can take messages; 503 naming the reason when it cannot (the store cannot be
        written: a full or read-only disk), so a load balancer stops sending turns that would fail."""
        inbox, host = self._inbox, self._host
        reason: str | None = "the API server is not started"
        if inbox is not None and host is not None:
            reason = await host.blocking(inbox.store_unwritable_reason)
        body = {"platform": _PLATFORM, "waiting": self._waiters.waiting()}
        if reason is not None:
            return _json({"status": "unavailable", "reason": reason, **body}, status=503)
        return _json({"status": "ok", **body})

    async def _models(self, request: web.Request) -> web.Response:
        model = _Model(id=self.config.model_name, object="model", created=self._started_at, owned_by="hermes-actors")
        return _json(_ModelList(object="list", data=[model]))

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        named = _session_named(request.headers)
        chat = _decode_chat(await request.read())
        text, images = _new_turn(chat.messages)
        attachments = await self._attachments(images) if images else ()
        name = named or chat.user or f"api-{uuid.uuid4().hex}"
        source = SessionSource(
            platform=_PLATFORM, scope_id=self._scope, chat_type="dm", chat_id=name, user_id=chat.user or name
        )
        turn_id = uuid.uuid4().hex
        inbound = InboundMessage(
            source=source, text=text, message_id=f"api-{turn_id}", attachments=attachments, received_at=time.time()
        )
        pending = self._waiters.expect(inbound.message_id)
        reply = asyncio.wrap_future(pending)
        try:
            routing_key = await self._submit(inbound, continues=named)
            turn = _Turn(
                completion_id=f"chatcmpl-{turn_id}",
                created=int(time.time()),
                model=chat.model or self.config.model_name,
                prompt=text,
                routing_key=routing_key,
                deadline=asyncio.get_running_loop().time() + self.config.request_timeout_s,
            )
            if chat.stream:
                include_usage = chat.stream_options is not None and chat.stream_options.include_usage
                return await self._stream(request, turn, reply, include_usage=include_usage)
            return await self._complete(request, turn, reply)
        finally:
            self._waiters.forget(inbound.message_id)
            reply.cancel()  # a reply that comes later only goes to the transcript

    # -- a turn ----------------------------------------------------------------------------------------------

    async def _attachments(self, images: Sequence[str]) -> tuple[Attachment, ...]:
        """The request's images as attachments, saved into the gateway's media store off the loop."""
        inbox, host = self._inbox, self._host
        if inbox is None or host is None:
            raise _ApiError(503, "the API server is not started", type="server_error", code="service_unavailable")
        media = inbox.media
        return await host.blocking(lambda: tuple(_image_attachment(media, url) for url in images))

    async def _submit(self, inbound: InboundMessage, *, continues: str | None) -> str:
        """Accept ``inbound`` into the gateway (off the loop); return its routing key or raise a 503."""
        inbox, host = self._inbox, self._host
        if inbox is None or host is None:
            raise _ApiError(503, "the API server is not started", type="server_error", code="service_unavailable")
        try:
            if continues is not None:
                await host.blocking(partial(_continue, inbox, inbound, continues))
            accepted = await committed(inbox.submit(inbound), inbox.ask_timeout_s)
            return accepted.routing_key
        except _ApiError:
            raise
        except Exception as exc:
            if isinstance(exc, HermesError):
                _log.warning("api_server: the gateway refused a message: %s", exc)
            else:
                _log.warning("api_server: the gateway refused a message", exc_info=True)
            raise _ApiError(
                503,
                f"the gateway is not taking messages ({exc}); retry once hermesd is running",
                type="server_error",
                code="service_unavailable",
            ) from None

    async def _wait(
        self, request: web.Request, reply: asyncio.Future[OutboundMessage], turn: _Turn, tick_s: float
    ) -> OutboundMessage | None:
        """Wait up to ``tick_s`` for the reply; ``None`` if the tick passed. Raise :class:`_WaitEnded` to give up."""
        remaining = turn.deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise _WaitEnded(_Ended.TIMEOUT)
        waits: set[asyncio.Future[Any]] = {reply}
        if self._stopping is not None:
            waits.add(self._stopping)
        await asyncio.wait(waits, timeout=min(tick_s, remaining), return_when=asyncio.FIRST_COMPLETED)
        if reply.done():
            return reply.result()
        if self._stopping is not None and self._stopping.done():
            raise _WaitEnded(_Ended.STOPPING)
        if request.transport is None:
            raise _WaitEnded(_Ended.DISCONNECTED)
        return None

    async def _session_hint(self, routing_key: str) -> str | None:
        """The session the turn's routing key leads to now (for a reply that has not come yet)."""
        inbox, host = self._inbox, self._host
        if inbox is None or host is None:
            return None
        try:
            return await host.blocking(partial(inbox.session_for, routing_key))
        except Exception:
            return None

    async def _abandoned(self, why: _Ended, turn: _Turn) -> _ApiError:
        """The error for a request that stops waiting: its turn goes on and the reply will be stored."""
        session_id = await self._session_hint(turn.routing_key)
        where = f"session {session_id}" if session_id else "its session"
        then = f"; send {SESSION_HEADER}: {session_id} to continue it" if session_id else ""
        headers = {SESSION_HEADER: session_id} if session_id else None
        if why is _Ended.TIMEOUT:
            message = (
                f"no reply within {self.config.request_timeout_s:g} s; the turn continues and its reply will be "
                f"in {where}{then}"
            )
            return _ApiError(504, message, type="server_error", code="timeout", headers=headers)
        message = f"the API server is stopping; the turn continues and its reply will be in {where}{then}"
        return _ApiError(503, message, type="server_error", code="service_unavailable", headers=headers)

    async def _complete(
        self, request: web.Request, turn: _Turn, reply: asyncio.Future[OutboundMessage]
    ) -> web.StreamResponse:
        tick_s = min(_DISCONNECT_POLL_S, self.config.keepalive_s)
        try:
            message = None
            while message is None:
                message = await self._wait(request, reply, turn, tick_s)
        except _WaitEnded as ended:
            return (await self._abandoned(ended.why, turn)).response()
        headers = {SESSION_HEADER: message.session_id} if message.session_id else None
        if message.error is not None:
            return _ApiError(503, message.text, type="server_error", code=message.error, headers=headers).response()
        return _json(turn.completion(message.text), headers=headers)

    async def _stream(
        self,
        request: web.Request,
        turn: _Turn,
        reply: asyncio.Future[OutboundMessage],
        *,
        include_usage: bool,
    ) -> web.StreamResponse:
        tick_s = self.config.keepalive_s
        try:
            # The headers wait up to one keep-alive for the reply, so they usually carry its session id.
            message = await self._wait(request, reply, turn, tick_s)
        except _WaitEnded as ended:
            return (await self._abandoned(ended.why, turn)).response()
        if message is not None and message.error is not None:
            headers = {SESSION_HEADER: message.session_id} if message.session_id else None
            return _ApiError(503, message.text, type="server_error", code=message.error, headers=headers).response()
        session_id = message.session_id if message is not None else await self._session_hint(turn.routing_key)
        response = web.StreamResponse(
            headers={"Cache-Control": "no-cache", **({SESSION_HEADER: session_id} if session_id else {})}
        )
        response.content_type = "text/event-stream"

        try:
            await response.prepare(request)
            await response.write(turn.chunk(_Delta(role="assistant", content="")))
            while message is None:
                try:
                    message = await self._wait(request, reply, turn, tick_s)
                except _WaitEnded as ended:
                    if ended.why is not _Ended.DISCONNECTED:
                        await response.write(_sse((await self._abandoned(ended.why, turn)).body))
                        await response.write_eof()
                    return response
                if message is None:
                    await response.write(_KEEP_ALIVE)
            if message.error is not None:  # the turn could not be saved: an error event, not the agent's words
                await response.write(_sse(_ApiError(503, message.text, type="server_error", code=message.error).body))
                await response.write_eof()
                return response
            await response.write(turn.chunk(_Delta(content=message.text)))
            await response.write(turn.chunk(_Delta(), "stop"))
            if include_usage:
                await response.write(turn.chunk(None, usage=_usage(turn.prompt, message.text)))
            await response.write(_DONE)
            await response.write_eof()
        except ConnectionError:
            _log.info("api_server: client left before its reply was streamed (the reply is in the transcript)")
        return response


def key_fingerprint(key: str) -> str:
    """The scope of sessions made with bearer ``key``: ``k`` and 16 hex digits of its SHA-256 (never the key)."""
    return "k" + hashlib.sha256(key.encode()).hexdigest()[:16]


def _continue(inbox: Inbox, inbound: InboundMessage, continues: str) -> None:
    """Point the request's routing key at the session ``continues`` names (blocking): a client continues a session
    by naming it in the header.

    Only sessions this API created, with the same key when a key is set (the source's scope is the key's
    fingerprint), are continued; another platform's or another key's session gets the 404 an unknown id gets. A
    header that is not shaped like a session id names a conversation of the client's own choosing.
    """
    owner = inbox.session_owner(continues)
    ours = owner is not None and owner.platform == _PLATFORM and owner.scope_id == inbound.source.scope_id
    if owner is None or not ours:
        if owner is None and not is_session_id(continues):
            return
        raise _ApiError(
            404,
            f"no session {continues[:100]!r}; start a conversation without {SESSION_HEADER}, or send the id a "
            "response of this API returned in its header",
            code="session_not_found",
            param=SESSION_HEADER,
        )
    assert owner is not None
    routing_key = build_session_key(inbound.source, inbox.key_policy)
    if owner.live and inbox.session_for(routing_key) is None:
        inbox.rebind(routing_key, owner.session_id)
