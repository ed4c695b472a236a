"""``POST /v1/chat/completions``: a request becomes a durable turn, streamed as the model writes it, answered with
what really happened.

- A frontend's housekeeping prompt (a title, tags, follow-ups) is answered without a session
  (:mod:`platforms.api_server.housekeeping`).
- Stateless by default (:mod:`platforms.api_server.conversation`): the body's conversation is what the model sees,
  stored in the session its fingerprint names. ``X-Hermes-Session-Id`` continues a stored session instead (the
  body's history is then ignored).
- ``Idempotency-Key`` (:mod:`platforms.api_server.idempotency`) makes the key the message's inbox id: a retry, even
  after a restart, is answered from the store instead of running the agent again. Without one, a request exactly
  like one still running or just ended is its client's retry and gets that turn (:mod:`.retry_fold`).
- ``tools`` are the client's own function tools (:mod:`platforms.api_server.client_tools`): a turn whose model calls
  one ends with ``tool_calls`` and ``finish_reason: "tool_calls"``, and the client's next request, its messages
  ending with the ``tool`` results, continues the same session from them. The gateway's own tool runs
  (``session_search``, MCP tools) are never in ``tool_calls``.
- Streaming sends each text delta of the model as it arrives, a keep-alive comment after ``keepalive_s`` of
  silence, and a client's tool calls in one delta before the finish; a client that disconnects stops the turn as
  ``/stop`` does. The gateway's own tool runs are sent as ``event: hermes.tool.progress`` only to a client that asks
  with ``X-Hermes-Tool-Progress: 1`` (a frame without ``choices``, which OpenAI's clients cannot read).
- A turn the agent failed is not an answer: 502 ``agent_incomplete`` without text (with ``x-should-retry: false``:
  its message is stored), ``finish_reason: error`` with ``X-Hermes-Completed: false`` when part of the answer was
  already produced.
- ``stream_options.include_usage`` sends the usage once, in a last chunk with empty ``choices``, as OpenAI does.
- ``X-Hermes-Busy`` (or ``hermes_busy``) says what the message does while its session answers another one
  (:mod:`platforms.api_server.busy`); one refused as busy is a 409 ``session_busy`` with ``Retry-After``.
- A turn stopped by another request (``/stop``, ``/new``) is told at once: 409 ``turn_stopped`` (with
  ``x-should-retry: false``), or, once a stream has begun, a chunk with ``finish_reason: cancelled`` and then the
  error; nothing the stopped turn writes afterwards is sent.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import TYPE_CHECKING

import msgspec
from aiohttp import web

from hermes_actors.messages import InboundMessage
from platforms.api_server.busy import requested_busy
from platforms.api_server.conversation import ChatTurn, chat_turn
from platforms.api_server.housekeeping import AgentAsking, answer_housekeeping, housekeeping_task
from platforms.api_server.idempotency import Idempotency
from platforms.api_server.models import conversation_with, requested_agent
from platforms.api_server.principal import forwarded_user, request_user
from platforms.api_server.retry_fold import Folded
from platforms.api_server.service import DISCONNECT_POLL_S, KEEP_ALIVE, failure_error, require_json
from platforms.api_server.sessions import (
    COMPLETED_HEADER,
    CONVERSATION_HEADER,
    MEMORY_HEADER,
    SESSION_HEADER,
    memory_scope,
    session_named,
    wants_tool_progress,
)
from platforms.api_server.tool_wire import calls_of, delta_calls
from platforms.api_server.turn_call import Finished, Idle, TextDelta, ToolEvent, TurnCall
from platforms.api_server.wire import (
    ApiError,
    ChatRequest,
    Delta,
    ToolProgress,
    Turn,
    decode_chat,
    json_response,
    sse_event,
    usage_of,
)

if TYPE_CHECKING:
    from platforms.api_server.service import ApiService

__all__ = ["ChatCompletions"]

_log = logging.getLogger(__name__)

_DONE = b"data: [DONE]\n\n"


class ChatCompletions:
    """The chat-completions route of one API server (``service`` holds what the routes share)."""

    def __init__(self, service: ApiService) -> None:
        self._service = service

    async def handle(self, request: web.Request) -> web.StreamResponse:
        service = self._service
        require_json(request)
        named = session_named(request.headers)
        memory = memory_scope(request.headers)
        body = await service.read_body(request)
        chat = decode_chat(body)
        asks = service.config.housekeeping and named is None and isinstance(service.parts()[0], AgentAsking)
        housekeeping = housekeeping_task(chat) if asks else None  # a cluster replica runs them as turns
        if housekeeping is not None:  # a frontend's title or tags prompt: no session, nothing stored
            return await answer_housekeeping(service, request, chat, *housekeeping)
        forwarded = forwarded_user(service.config, request.headers)
        turn_of = chat_turn(chat, stateless=named is None, scope=service.scope, user=chat.user or forwarded)
        user = memory or request_user(service.config, chat.user, request.headers)
        idempotency = Idempotency.of(request.headers, body, service.scope)
        if idempotency is not None:
            return await self._turn(request, chat, turn_of, named, user, idempotency)
        progress = "progress" if wants_tool_progress(request.headers) else None  # another answer: not a retry
        folded = service.retry_fold.begin(body, service.scope, named, memory, forwarded, progress)
        failed = False  # whether the client got no answer it would not retry (a 5xx)
        try:
            response = await self._turn(request, chat, turn_of, named, user, folded)
            failed = response.status >= 500
            return response
        except ApiError as exc:
            failed = exc.status >= 500
            raise
        finally:
            service.retry_fold.end(folded, failed=failed)

    async def _turn(
        self,
        request: web.Request,
        chat: ChatRequest,
        turn_of: ChatTurn,
        named: str | None,
        user: str | None,
        keyed: Idempotency | Folded,
    ) -> web.StreamResponse:
        """Run the request's turn for ``user`` (:mod:`.principal`; ``None``: the conversation is its own user).
        ``keyed`` names its message: by its ``Idempotency-Key``, or by its place among recent requests (a client's
        retry folds into the turn it repeats)."""
        service = self._service
        idempotency = keyed.idempotency() if isinstance(keyed, Folded) else keyed
        with service.admitted():
            attachments = await service.attachments(turn_of.images) if turn_of.images else ()
            agent = requested_agent(service.parts()[0], chat.model)  # a new session's agent; a session keeps its own
            name = named or conversation_with(turn_of.name, agent) or f"api-{uuid.uuid4().hex}"
            source = service.source(name, user)
            turn_id = uuid.uuid4().hex
            inbound = InboundMessage(
                source=source,
                text=turn_of.text,
                message_id=keyed.message_id,
                attachments=attachments,
                received_at=time.time(),
                context=turn_of.conversation or msgspec.UNSET,
                fingerprint=keyed.fingerprint,
                agent=agent or msgspec.UNSET,
                client_tools=turn_of.tools or msgspec.UNSET,
                tool_results=turn_of.tool_results or msgspec.UNSET,
                busy=requested_busy(request.headers, chat.hermes_busy, chat.metadata),
                streams=msgspec.UNSET if chat.stream else False,  # without a stream, only the outcome is read
            )
            call = service.turn_call(inbound)
            try:
                call.open()
                retried = isinstance(keyed, Folded) and keyed.retried
                routing_key = await service.submit(
                    inbound, continues=named, idempotency=idempotency, call=call, retried=retried
                )
                turn = Turn(
                    completion_id=f"chatcmpl-{turn_id}",
                    created=int(time.time()),
                    model=chat.model or service.config.model_name,
                    prompt=turn_of.text,
                    routing_key=routing_key,
                    deadline=asyncio.get_running_loop().time() + service.config.request_timeout_s,
                )
                extra = {CONVERSATION_HEADER: name} if named is None else {}
                memory = memory_scope(request.headers)
                if memory is not None:
                    extra[MEMORY_HEADER] = memory
                if chat.stream:
                    include_usage = chat.stream_options is not None and chat.stream_options.include_usage
                    progress = wants_tool_progress(request.headers)
                    return await self._stream(
                        request, turn, call, extra, include_usage=include_usage, progress=progress
                    )
                return await self._complete(request, turn, call, extra)
            finally:
                call.close()

    # -- answers ---------------------------------------------------------------------------------------------

    async def _complete(
        self, request: web.Request, turn: Turn, call: TurnCall, extra: dict[str, str]
    ) -> web.StreamResponse:
        service = self._service
        async for event in call.events(DISCONNECT_POLL_S):
            if isinstance(event, Finished):
                return self._answer(turn, event, extra)
            if isinstance(event, Idle):
                ended = await service.wait_ended(request, turn, call)
                if ended is not None:
                    return ended.response()
        raise AssertionError("unreachable: events end with Finished")  # pragma: no cover

    def _answer(self, turn: Turn, finished: Finished, extra: dict[str, str]) -> web.Response:
        headers = {**extra, **({SESSION_HEADER: finished.session_id} if finished.session_id else {})}
        if finished.reply is not None:
            calls = calls_of(finished.tool_calls)
            return json_response(turn.completion(finished.reply, finished.usage, calls=calls), headers=headers)
        if finished.failure_code == "agent_incomplete" and finished.streamed:
            headers[COMPLETED_HEADER] = "false"
            return json_response(turn.completion(finished.streamed, None, "error"), headers=headers)
        return failure_error(finished, headers).response()

    async def _stream(
        self,
        request: web.Request,
        turn: Turn,
        call: TurnCall,
        extra: dict[str, str],
        *,
        include_usage: bool,
        progress: bool,
    ) -> web.StreamResponse:
        service = self._service
        response: web.StreamResponse | None = None
        quiet_since = asyncio.get_running_loop().time()
        try:
            async for event in call.events(min(DISCONNECT_POLL_S, service.config.keepalive_s)):
                now = asyncio.get_running_loop().time()
                if isinstance(event, Idle):
                    ended = await service.wait_ended(request, turn, call)
                    if ended is not None:
                        if response is None:
                            return ended.response()
                        await response.write(sse_event(ended.body))
                        break
                    if now - quiet_since >= service.config.keepalive_s:
                        if response is None:  # a silent turn: the headers go now, with the session known by now
                            session_id = call.session_id or await service.session_hint(turn.routing_key)
                            response = await self._open_stream(request, turn, extra, session_id)
                        await response.write(KEEP_ALIVE)
                        quiet_since = now
                    continue
                quiet_since = now
                if response is None:
                    if isinstance(event, Finished) and event.reply is None and not event.streamed:
                        headers = {**extra, **({SESSION_HEADER: event.session_id} if event.session_id else {})}
                        return failure_error(event, headers).response()
                    session_id = call.session_id or await service.session_hint(turn.routing_key)
                    response = await self._open_stream(request, turn, extra, session_id)
                if isinstance(event, TextDelta):
                    await response.write(turn.chunk(Delta(content=event.text)))
                elif isinstance(event, ToolEvent) and progress:
                    await response.write(
                        ToolProgress(tool=event.name, toolCallId=event.call_id, status=event.status).event()
                    )
                elif isinstance(event, Finished):
                    await self._finish_stream(response, turn, call, event, include_usage=include_usage)
            if response is not None:
                await response.write_eof()
        except ConnectionError:
            if call.finished is None:
                _log.info("api_server: the client left while its reply streamed; stopping its turn")
                await service.stop_call(call)
        return response if response is not None else web.Response(status=499)

    async def _open_stream(
        self, request: web.Request, turn: Turn, extra: dict[str, str], session_id: str | None
    ) -> web.StreamResponse:
        headers = {**extra, **({SESSION_HEADER: session_id} if session_id else {})}
        response = await self._service.event_stream(request, headers)
        await response.write(turn.chunk(Delta(role="assistant", content="")))
        return response

    async def _finish_stream(
        self, response: web.StreamResponse, turn: Turn, call: TurnCall, finished: Finished, *, include_usage: bool
    ) -> None:
        if finished.stopped:
            await response.write(turn.chunk(Delta(), "cancelled"))
            await response.write(sse_event(failure_error(finished, {}).body))
            return
        if finished.reply is None and finished.failure_code != "agent_incomplete":
            await response.write(sse_event(failure_error(finished, {}).body))  # the turn was not saved
            return
        streamed = finished.streamed
        reply = finished.reply
        if reply is not None and streamed != reply:  # an agent that did not stream, or streamed only some of it
            rest = reply[len(streamed) :] if reply.startswith(streamed) else ("" if streamed else reply)
            if rest:
                await response.write(turn.chunk(Delta(content=rest)))
        usage = usage_of(turn.prompt, reply if reply is not None else streamed, finished.usage)
        calls = calls_of(finished.tool_calls)
        if calls:
            await response.write(turn.chunk(Delta(tool_calls=delta_calls(calls))))
        finish = "tool_calls" if calls else "stop" if reply is not None else "error"
        await response.write(turn.chunk(Delta(), finish))
        if include_usage:  # once, in a last chunk without choices, as OpenAI sends it
            await response.write(turn.chunk(None, usage=usage))
        await response.write(_DONE)
