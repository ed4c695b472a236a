"""The API server adapter: routes, authentication, and the durable wait for a turn's reply."""

from __future__ import annotations

import asyncio
import enum
import hmac
import logging
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import msgspec
from aiohttp import web
from aiohttp.typedefs import Handler

from hermes_actors.errors import ConfigError, HermesError, PlatformError
from hermes_actors.messages import Attachment, InboundMessage, OutboundMessage
from hermes_actors.routing import SessionSource
from hermes_actors.waiters import ReplyWaiters
from platforms.api_server.config import ApiServerConfig, is_loopback
from platforms.api_server.images import image_attachment
from platforms.api_server.probes import KEYED_PATHS, Probes
from platforms.api_server.sessions import SESSION_HEADER, continue_session, key_fingerprint, session_named
from platforms.api_server.surface import add_surface
from platforms.api_server.wire import (
    HTTP_ERRORS,
    PLATFORM,
    ApiError,
    Delta,
    Model,
    ModelList,
    Turn,
    decode_chat,
    json_response,
    new_turn,
    sse_event,
    usage_of,
)
from platforms.base import Capabilities, ReplySender
from platforms.support.http_host import HttpAdapter, HttpHost, committed, read_decoded, unreadable

if TYPE_CHECKING:
    from hermes_actors.ports import Inbox

__all__ = ["ApiServer"]

_log = logging.getLogger(__name__)

_KEEP_ALIVE = b": keep-alive\n\n"
_DONE = b"data: [DONE]\n\n"
_DISCONNECT_POLL_S = 1.0  # how often a non-streaming wait looks whether its client is still connected


class _Ended(enum.Enum):
    """Why a wait for a reply ended without one."""

    TIMEOUT = "timeout"
    STOPPING = "stopping"
    DISCONNECTED = "disconnected"


class _WaitEnded(Exception):
    def __init__(self, why: _Ended) -> None:
        super().__init__(why.value)
        self.why = why


class ApiServer(HttpAdapter[ApiServerConfig]):
    """The OpenAI-compatible API as a platform adapter (``platform = "api_server"``).

    Built before the gateway (its :meth:`senders` go to the gateway's outbox), then started with the gateway.
    ``environ`` replaces ``os.environ`` when looking up ``config.key_env``. Raises :class:`ConfigError` when the
    host is not loopback and no key is configured. When it stops, waiting requests are answered 503 (their turns
    continue and are stored).
    """

    platform = PLATFORM
    capabilities = Capabilities()
    server_name = PLATFORM

    def __init__(self, config: ApiServerConfig, *, environ: Mapping[str, str] | None = None) -> None:
        super().__init__(config)
        env = os.environ if environ is None else environ
        from_env = env.get(config.key_env) if config.key_env else None
        self._key = config.key or from_env or None
        self._key_from_env = config.key is None and self._key is not None
        self._scope = key_fingerprint(self._key) if self._key is not None else None  # sessions made with this key
        if self._key is None and not is_loopback(config.host):
            raise ConfigError(
                "platforms.api_server.key",
                f"required when host is not loopback ({config.host!r} lets other machines in); set "
                f"platforms.api_server.key or the {config.key_env or 'HERMES_API_KEY'} environment variable, "
                "or serve on 127.0.0.1",
            )
        self._waiters = ReplyWaiters(PLATFORM)
        self._started_at = int(time.time())
        self._stopping: asyncio.Future[None] | None = None  # created on the server's loop, done once it stops

    # -- Adapter ---------------------------------------------------------------------------------------------

    def senders(self) -> Sequence[ReplySender]:
        """The reply waiters that hand each turn's reply to its waiting request."""
        return [self._waiters]

    @property
    def key_required(self) -> bool:
        """Whether requests to ``/v1/*``, ``/metrics`` and ``/health/detailed`` must carry the bearer key."""
        return self._key is not None

    def start(self, inbox: Inbox) -> None:
        """Serve the API on ``inbox``; raise :class:`PlatformError` if the address cannot be bound."""
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
        Probes(self._attached, self._waiters.waiting).add_to(app)
        add_surface(app, self.config, self._attached, self._waiters)  # guards, /api/sessions, /v1/capabilities

    def _attached(self) -> tuple[Inbox, HttpHost] | None:
        inbox, host = self._inbox, self._host
        return (inbox, host) if inbox is not None and host is not None else None

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
        except ApiError as error:
            return error.response()
        except web.HTTPRequestEntityTooLarge:
            return ApiError(
                413,
                f"request body is larger than {self.config.max_body_bytes} bytes; only the newest user message "
                "is used, so send less history, or raise platforms.api_server.max_body_bytes",
                code="request_too_large",
            ).response()
        except web.RequestPayloadError as exc:
            return ApiError(400, f"request body cannot be read ({unreadable(exc)})", code="invalid_body").response()
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            code, message = HTTP_ERRORS.get(exc.status, (None, exc.reason))
            return ApiError(exc.status, message, code=code).response()
        except Exception:
            _log.exception("api_server: %s %s failed", request.method, request.path)
            return ApiError(
                500, "internal error in the hermes API server; see the daemon log", type="server_error"
            ).response()

    @web.middleware
    async def _auth_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self._key is not None and (request.path.startswith("/v1/") or request.path in KEYED_PATHS):
            given = request.headers.get("Authorization", "")
            scheme, _, token = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), self._key.encode()):
                raise ApiError(
                    401,
                    "missing or incorrect API key; send 'Authorization: Bearer <key>' with the key the server "
                    "was configured with",
                    code="invalid_api_key",
                    headers={"WWW-Authenticate": "Bearer"},
                )
        return await handler(request)

    # -- routes ----------------------------------------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        model = Model(id=self.config.model_name, object="model", created=self._started_at, owned_by="hermes-actors")
        return json_response(ModelList(object="list", data=[model]))

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        named = session_named(request.headers)
        chat = decode_chat(await read_decoded(request, self.config.max_body_bytes))
        text, images = new_turn(chat.messages)
        attachments = await self._attachments(images) if images else ()
        name = named or chat.user or f"api-{uuid.uuid4().hex}"
        source = SessionSource(
            platform=PLATFORM, scope_id=self._scope, chat_type="dm", chat_id=name, user_id=chat.user or name
        )
        turn_id = uuid.uuid4().hex
        inbound = InboundMessage(
            source=source, text=text, message_id=f"api-{turn_id}", attachments=attachments, received_at=time.time()
        )
        pending = self._waiters.expect(inbound.message_id)
        reply = asyncio.wrap_future(pending)
        try:
            routing_key = await self._submit(inbound, continues=named)
            turn = Turn(
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
        """The request's images as attachments, saved into the media store off the loop."""
        inbox, host = self._inbox, self._host
        if inbox is None or host is None:
            raise ApiError(503, "the API server is not started", type="server_error", code="service_unavailable")
        media = inbox.media
        return await host.blocking(lambda: tuple(image_attachment(media, url) for url in images))

    async def _submit(self, inbound: InboundMessage, *, continues: str | None) -> str:
        """Accept ``inbound`` into the gateway (off the loop); return its routing key or raise a 503."""
        inbox, host = self._inbox, self._host
        if inbox is None or host is None:
            raise ApiError(503, "the API server is not started", type="server_error", code="service_unavailable")
        try:
            if continues is not None:
                await host.blocking(partial(continue_session, inbox, inbound, continues))
            accepted = await committed(inbox.submit(inbound), inbox.ask_timeout_s)
            return accepted.routing_key
        except ApiError:
            raise
        except Exception as exc:
            if isinstance(exc, HermesError):
                _log.warning("api_server: the gateway refused a message: %s", exc)
            else:
                _log.warning("api_server: the gateway refused a message", exc_info=True)
            raise ApiError(
                503,
                f"the gateway is not taking messages ({exc}); retry once hermesd is running",
                type="server_error",
                code="service_unavailable",
            ) from None

    async def _wait(
        self, request: web.Request, reply: asyncio.Future[OutboundMessage], turn: Turn, tick_s: float
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

    async def _abandoned(self, why: _Ended, turn: Turn) -> ApiError:
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
            return ApiError(504, message, type="server_error", code="timeout", headers=headers)
        message = f"the API server is stopping; the turn continues and its reply will be in {where}{then}"
        return ApiError(503, message, type="server_error", code="service_unavailable", headers=headers)

    async def _complete(
        self, request: web.Request, turn: Turn, reply: asyncio.Future[OutboundMessage]
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
            return ApiError(503, message.text, type="server_error", code=message.error, headers=headers).response()
        return json_response(turn.completion(message.text), headers=headers)

    async def _stream(
        self,
        request: web.Request,
        turn: Turn,
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
            return ApiError(503, message.text, type="server_error", code=message.error, headers=headers).response()
        session_id = message.session_id if message is not None else await self._session_hint(turn.routing_key)
        response = web.StreamResponse(
            headers={"Cache-Control": "no-cache", **({SESSION_HEADER: session_id} if session_id else {})}
        )
        response.content_type = "text/event-stream"

        try:
            await response.prepare(request)
            await response.write(turn.chunk(Delta(role="assistant", content="")))
            while message is None:
                try:
                    message = await self._wait(request, reply, turn, tick_s)
                except _WaitEnded as ended:
                    if ended.why is not _Ended.DISCONNECTED:
                        await response.write(sse_event((await self._abandoned(ended.why, turn)).body))
                        await response.write_eof()
                    return response
                if message is None:
                    await response.write(_KEEP_ALIVE)
            if message.error is not None:  # the turn could not be saved: an error event, not the agent's words
                await response.write(
                    sse_event(ApiError(503, message.text, type="server_error", code=message.error).body)
                )
                await response.write_eof()
                return response
            await response.write(turn.chunk(Delta(content=message.text)))
            await response.write(turn.chunk(Delta(), "stop"))
            if include_usage:
                await response.write(turn.chunk(None, usage=usage_of(turn.prompt, message.text)))
            await response.write(_DONE)
            await response.write_eof()
        except ConnectionError:
            _log.info("api_server: client left before its reply was streamed (the reply is in the transcript)")
        return response
