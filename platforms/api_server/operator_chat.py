"""``POST /api/sessions/{id}/chat`` and ``/chat/stream``: an operator runs a turn in a chosen session.

The turn goes the durable way every API turn goes: a routing key of the operator's own
(``agent:main:api_server:dm:operator-<session id>``) is pointed at the session (its newest segment, when it was
compressed) through the inbox port, the message is committed to the inbox, the session's actor runs the turn,
and the reply reaches the waiting request through the adapter's :class:`~hermes_actors.waiters.ReplyWaiters`. A
request that stops waiting (timeout, disconnect) loses only the wait: the turn's reply is stored.

``/chat`` answers ``{"session_id", "reply"}`` (``session_id`` is where the turn ended: a compression moves it);
``/chat/stream`` streams the turn as server-sent events: ``data: {"delta"}`` for each piece of text the model
writes, ``event: hermes.tool.progress`` for tool calls, ``: keep-alive`` comments while it is silent, then one
``data: {"session_id", "reply"}`` event and ``data: [DONE]`` (a failure is a ``data: {"error": ...}`` event).
A turn the agent failed is 502 ``agent_incomplete``, not an answer.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import msgspec
from aiohttp import web

from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource, build_session_key
from hermes_actors.waiters import ReplyWaiters
from platforms.api_server.config import ApiServerConfig
from platforms.api_server.guards import Guards
from platforms.api_server.operator_api import Attached, decode_body, operator_call, session_in_path
from platforms.api_server.turn_call import Finished, TextDelta, ToolEvent, TurnCall
from platforms.api_server.wire import PLATFORM, ApiError, ToolProgress, json_response, sse_event
from platforms.support.http_host import committed, read_decoded

__all__ = ["OperatorChat"]

_KEEP_ALIVE = b": keep-alive\n\n"
_DONE = b"data: [DONE]\n\n"


class _ChatBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    message: str


class _Reply(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str | None
    reply: str


class _Delta(msgspec.Struct, frozen=True, kw_only=True):
    delta: str


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
        call = await self._start(request)
        try:
            finished = await self._finished(call)
        finally:
            call.close()
        return json_response(_Reply(session_id=finished.session_id, reply=_answer(finished)))

    async def chat_stream(self, request: web.Request) -> web.StreamResponse:
        """Run a turn and stream it as server-sent events: each text delta as the model writes it, tool calls as
        ``event: hermes.tool.progress``, then the whole reply and ``[DONE]``."""
        call = await self._start(request)
        try:
            response = web.StreamResponse(headers={"Cache-Control": "no-cache", **self._guards.stream_headers(request)})
            response.content_type = "text/event-stream"
            await response.prepare(request)
            deadline = asyncio.get_running_loop().time() + self._config.request_timeout_s
            try:
                async for event in call.events(self._config.keepalive_s):
                    if isinstance(event, TextDelta):
                        await response.write(sse_event(_Delta(delta=event.text)))
                    elif isinstance(event, ToolEvent):
                        progress = ToolProgress(tool=event.name, toolCallId=event.call_id, status=event.status)
                        await response.write(progress.event())
                    elif isinstance(event, Finished):
                        try:
                            reply = _Reply(session_id=event.session_id, reply=_answer(event))
                            await response.write(sse_event(reply))
                        except ApiError as error:
                            await response.write(sse_event(error.body))
                    elif asyncio.get_running_loop().time() >= deadline:
                        await response.write(sse_event(self._timeout().body))
                        break
                    else:
                        await response.write(_KEEP_ALIVE)
                await response.write(_DONE)
                await response.write_eof()
            except ConnectionError:
                pass  # the client left; the reply is in the transcript
            return response
        finally:
            call.close()

    async def _start(self, request: web.Request) -> TurnCall:
        """Check the request, point the operator's key at the session and commit the message; return its turn,
        watched from before the commit."""
        session_id = session_in_path(request)
        fields = decode_body(_chat, await read_decoded(request, self._config.max_body_bytes) or b"{}")
        if not fields.message.strip():
            raise ApiError(400, "message is empty; send the text of the turn", code="invalid_value", param="message")
        return await self.begin(session_id, fields.message)

    async def begin(self, session_id: str, text: str) -> TurnCall:
        """Point the operator's key at ``session_id`` (its live tip) and commit ``text`` as a turn there; return the
        turn, watched from before the commit (the caller closes it). Refusals are :class:`ApiError`."""
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

        inbound = InboundMessage(source=source, text=text, message_id=f"op-{uuid.uuid4().hex}", received_at=time.time())
        call = TurnCall(inbox, self._waiters, inbound)
        call.open()
        try:
            await host.blocking(point)
            await committed(inbox.submit(inbound), inbox.ask_timeout_s)
        except Exception as exc:
            call.close()
            raise ApiError(
                503,
                f"the gateway is not taking messages ({exc}); retry once hermesd is running",
                type="server_error",
                code="service_unavailable",
            ) from None
        return call

    async def _finished(self, call: TurnCall) -> Finished:
        """The turn's outcome; a 504 when it takes longer than ``request_timeout_s``."""
        deadline = asyncio.get_running_loop().time() + self._config.request_timeout_s
        async for event in call.events(1.0):
            if isinstance(event, Finished):
                return event
            if asyncio.get_running_loop().time() >= deadline:
                break
        raise self._timeout()

    def _timeout(self) -> ApiError:
        return ApiError(
            504,
            f"no reply within {self._config.request_timeout_s:g} s; this request stops waiting, but its turn is not "
            "stopped: an answer it gives is stored in the session's messages",
            type="server_error",
            code="timeout",
        )


def _answer(finished: Finished) -> str:
    """The reply of a finished turn; a 502 when the agent gave none, a 409 when the turn was stopped, a 503 when it
    could not be saved."""
    if finished.reply is not None:
        return finished.reply
    if finished.stopped:
        raise ApiError(409, finished.failure or "the turn was stopped before it answered", code=finished.failure_code)
    if finished.failure_code == "agent_incomplete":  # the agent's failure is not an answer
        raise ApiError(
            502, finished.failure or "the agent gave no answer", type="server_error", code="agent_incomplete"
        )
    raise ApiError(
        503, finished.failure or "the turn ended without a reply", type="server_error", code=finished.failure_code
    )
