"""``POST /api/sessions/{id}/chat`` and ``/chat/stream``: an operator runs a turn in a chosen session.

The turn goes the durable way every API turn goes: a routing key of the operator's own
(``agent:main:api_server:dm:operator-<session id>``) is pointed at the session (its newest segment, when it was
compressed) through the inbox port, the message is committed to the inbox, the session's actor runs the turn,
and the reply reaches the waiting request through the adapter's :class:`~hermes_actors.waiters.ReplyWaiters`. A
request that stops waiting (timeout, disconnect) loses only the wait: the turn's reply is stored.

``/chat`` answers ``{"session_id", "reply"}`` (``session_id`` is where the turn ended: a compression moves it);
``/chat/stream`` answers the same as server-sent events: ``: keep-alive`` comments while the turn runs, one
``data: {"session_id", "reply"}`` event, then ``data: [DONE]`` (a failure is a ``data: {"error": ...}`` event).
A turn the agent failed is 502 ``agent_incomplete``, not an answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

import msgspec
from aiohttp import web

from hermes_actors.messages import InboundMessage, OutboundError, OutboundMessage
from hermes_actors.routing import SessionSource, build_session_key
from hermes_actors.waiters import ReplyWaiters
from platforms.api_server.config import ApiServerConfig
from platforms.api_server.guards import Guards
from platforms.api_server.operator_api import Attached, decode_body, operator_call, session_in_path
from platforms.api_server.wire import PLATFORM, ApiError, json_response, sse_event
from platforms.support.http_host import committed, read_decoded

__all__ = ["OperatorChat"]

_KEEP_ALIVE = b": keep-alive\n\n"
_DONE = b"data: [DONE]\n\n"


class _ChatBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    message: str


class _Reply(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str | None
    reply: str


_chat = msgspec.json.Decoder(_ChatBody)


class OperatorChat:
    """The chat routes of the operator API over the adapter's ``waiters`` (the admin key is checked by
    :meth:`OperatorApi.guarded <platforms.api_server.operator_api.OperatorApi.guarded>`)."""

    def __init__(self, attached: Attached, waiters: ReplyWaiters, config: ApiServerConfig, guards: Guards) -> None:
        self._attached = attached
        self._waiters = waiters
        self._config = config
        self._guards = guards

    async def chat(self, request: web.Request) -> web.Response:
        """Run a turn and answer its reply as JSON."""
        inbound, reply = await self._start(request)
        try:
            message = await self._reply(reply, self._config.request_timeout_s)
        finally:
            self._done(inbound, reply)
        return json_response(_Reply(session_id=message.session_id, reply=message.text))

    async def chat_stream(self, request: web.Request) -> web.StreamResponse:
        """Run a turn and answer its reply as server-sent events."""
        inbound, reply = await self._start(request)
        try:
            response = web.StreamResponse(headers={"Cache-Control": "no-cache", **self._guards.stream_headers(request)})
            response.content_type = "text/event-stream"
            await response.prepare(request)
            deadline = asyncio.get_running_loop().time() + self._config.request_timeout_s
            try:
                while not reply.done():
                    left = deadline - asyncio.get_running_loop().time()
                    if left <= 0:
                        break
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(asyncio.shield(reply), min(left, self._config.keepalive_s))
                    if not reply.done():
                        await response.write(_KEEP_ALIVE)
                try:
                    message = await self._reply(reply, 0)
                    await response.write(sse_event(_Reply(session_id=message.session_id, reply=message.text)))
                except ApiError as error:
                    await response.write(sse_event(error.body))
                await response.write(_DONE)
                await response.write_eof()
            except ConnectionError:
                pass  # the client left; the reply is in the transcript
            return response
        finally:
            self._done(inbound, reply)

    async def _start(self, request: web.Request) -> tuple[InboundMessage, asyncio.Future[OutboundMessage]]:
        """Check the request, point the operator's key at the session and commit the message; return it and the
        future of its reply."""
        session_id = session_in_path(request)
        fields = decode_body(_chat, await read_decoded(request, self._config.max_body_bytes) or b"{}")
        if not fields.message.strip():
            raise ApiError(400, "message is empty; send the text of the turn", code="invalid_value", param="message")
        running = self._attached()
        if running is None:
            raise ApiError(503, "the API server is not started", type="server_error", code="service_unavailable")
        inbox, host = running
        target = await operator_call(self._attached, lambda op: op.chat_target(session_id))
        source = SessionSource(platform=PLATFORM, chat_type="dm", chat_id=f"operator-{target}", user_id="operator")
        routing_key = build_session_key(source, inbox.key_policy)

        def point() -> None:
            if inbox.session_for(routing_key) != target:
                inbox.rebind(routing_key, target)

        inbound = InboundMessage(
            source=source, text=fields.message, message_id=f"op-{uuid.uuid4().hex}", received_at=time.time()
        )
        reply = asyncio.wrap_future(self._waiters.expect(inbound.message_id))
        try:
            await host.blocking(point)
            await committed(inbox.submit(inbound), inbox.ask_timeout_s)
        except Exception as exc:
            self._done(inbound, reply)
            raise ApiError(
                503,
                f"the gateway is not taking messages ({exc}); retry once hermesd is running",
                type="server_error",
                code="service_unavailable",
            ) from None
        return inbound, reply

    async def _reply(self, reply: asyncio.Future[OutboundMessage], timeout_s: float) -> OutboundMessage:
        """The turn's reply; a 504 when it takes longer than ``timeout_s``, a 502 when the agent gave none, a 503
        when it could not be saved."""
        try:
            message = reply.result() if reply.done() else await asyncio.wait_for(asyncio.shield(reply), timeout_s)
        except TimeoutError:
            raise ApiError(
                504,
                f"no reply within {self._config.request_timeout_s:g} s; the turn continues and its reply will be in "
                "the session's messages",
                type="server_error",
                code="timeout",
            ) from None
        if message.error == OutboundError.AGENT_FAILED:  # the agent's failure is not an answer
            raise ApiError(502, message.text, type="server_error", code="agent_incomplete")
        if message.error is not None:
            raise ApiError(503, message.text, type="server_error", code=message.error)
        return message

    def _done(self, inbound: InboundMessage, reply: asyncio.Future[OutboundMessage]) -> None:
        self._waiters.forget(inbound.message_id)
        reply.cancel()  # a reply that comes later only goes to the transcript
