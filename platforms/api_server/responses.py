"""``/v1/responses``: OpenAI's Responses API over stored sessions.

- ``POST /v1/responses`` runs a turn. A fresh request starts a session; ``previous_response_id`` continues the
  session of that response (the model sees the stored transcript, as ``X-Hermes-Session-Id`` continuation does),
  ``conversation`` naming one of ``/v1/conversations`` runs in its session, and any other ``conversation`` (a name
  the client chooses) continues from the newest response in it (:mod:`.responses_turns`, also for the user a turn
  speaks for). ``instructions`` are extra system text, inherited from the previous response when absent. Input
  items before the last user message are history the model sees for this turn (tool calls and outputs as text); the
  last one is the new turn.
- The output holds this turn only: an ``mcp_call`` item (``server_label: "hermes"``) for each run of the gateway's
  own tools (``session_search``, MCP tools; from the turn's live tool events, which carry the arguments and the
  result), then the ``message``. ``tools`` are the client's own function tools (:mod:`.client_tools`): a turn whose
  model calls one ends with a ``function_call`` item for each such call, and a request whose input is their
  ``function_call_output`` items, with ``previous_response_id``, continues the same session from them.
- Unless ``store`` is false the response is kept in ``state.db`` with the session it ran in (deleting or pruning the
  session takes it along): ``GET`` and ``DELETE /v1/responses/{id}`` reach it, within the API key's scope.
- Streaming sends ``response.created``, the items as they are made (``response.output_item.added``/``.done``,
  ``response.output_text.delta`` for each model delta, ``response.output_text.done``), then ``response.completed`` or
  ``response.failed``, each with its ``sequence_number``. A client that disconnects stops the turn as ``/stop`` does,
  and an ``incomplete`` snapshot of the response is stored.
- A turn that paused on the gateway's tool calls that need approval ends with an ``mcp_approval_request`` item per
  call (``id`` ``mcpr_<approval id>_<n>``); a request with ``previous_response_id`` whose input is an
  ``mcp_approval_response`` (``approval_request_id``, ``approve``, ``reason``), or ``POST /v1/responses/{id}/approval``
  with ``{approval_id, decision: approve|deny, reason?}``, answers it and continues the turn.
- A turn stopped by another request (``/stop``, ``/new``) ends the response at once as ``incomplete`` with
  ``incomplete_details.reason: stopped`` (``response.incomplete`` when streaming), and that snapshot is stored.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from functools import partial
from typing import TYPE_CHECKING

import msgspec
from aiohttp import web

from hermes_actors.messages import InboundMessage, ResponseRecord
from hermes_actors.routing import SessionSource
from platforms.api_server.approvals import Decision, decision_body
from platforms.api_server.busy import requested_busy
from platforms.api_server.models import requested_agent
from platforms.api_server.response_draft import ResponseDraft
from platforms.api_server.responses_background import BackgroundResponse, BackgroundResponses, turn_id
from platforms.api_server.responses_items import input_items, page_of, read_stored, stored_body
from platforms.api_server.responses_settled import decided_elsewhere, settle_refused, settled_response
from platforms.api_server.responses_turns import place_turn, response_not_found, visible_response
from platforms.api_server.responses_wire import (
    ResponsesRequest,
    StreamEvent,
    decode_responses,
    input_turn,
    request_tools,
)
from platforms.api_server.service import DISCONNECT_POLL_S, KEEP_ALIVE, failure_error, require_json
from platforms.api_server.sessions import COMPLETED_HEADER, SESSION_HEADER
from platforms.api_server.turn_call import Finished, Idle, TextDelta, ToolEvent, TurnCall
from platforms.api_server.wire import PLATFORM, ApiError, Turn, json_response
from platforms.support.http_host import committed

if TYPE_CHECKING:
    from platforms.api_server.service import ApiService

__all__ = ["ResponsesApi"]

_log = logging.getLogger(__name__)

_LEFT = "client_disconnected"
_STOPPED = "stopped"  # by /stop or /new from another request
_SETTLE_POLL_S = 0.05  # how often a stopped turn's inbox row is looked at until its commit
_RESPONSE_ID = re.compile(r"resp_[0-9a-f]{32}")
_REASONS = {499: _LEFT, 504: "timeout"}  # any other abandoned wait: the server is stopping


class ResponsesApi:
    """The ``/v1/responses`` routes of one API server (``service`` holds what the routes share)."""

    def __init__(self, service: ApiService) -> None:
        self._service = service
        self._background = BackgroundResponses(service, self._keep, settle=partial(settle_refused, service))

    def add_to(self, app: web.Application) -> None:
        app.router.add_post("/v1/responses", self.create)
        app.router.add_get("/v1/responses/{response_id}", self.retrieve)
        app.router.add_get("/v1/responses/{response_id}/input_items", self.list_input_items)
        app.router.add_post("/v1/responses/{response_id}/cancel", self.cancel)
        app.router.add_post("/v1/responses/{response_id}/approval", self.approval)
        app.router.add_delete("/v1/responses/{response_id}", self.delete)
        app.on_shutdown.append(self._background.close)  # their turns go on; GET adopts them after a restart

    # -- stored responses -------------------------------------------------------------------------------------------

    async def retrieve(self, request: web.Request) -> web.StreamResponse:
        response_id = request.match_info["response_id"]
        stream = request.query.get("stream", "false").lower() == "true"
        background = self._background.find(response_id)
        if background is None:
            found = await visible_response(self._service, response_id)
            if found is not None and stream:
                raise ApiError(
                    400,
                    f"response {response_id[:100]} has ended and is no longer streamed; GET it without stream",
                    code="invalid_value",
                    param="stream",
                )
            if found is not None:
                return web.Response(body=read_stored(found.body).response, content_type="application/json")
            background = await self._adopt(response_id)
        if background is None:
            raise response_not_found(response_id, "response_id")
        if not stream:
            return json_response(background.draft.response())
        return await self._background.stream(request, background, after=_starting_after(request))

    async def cancel(self, request: web.Request) -> web.Response:
        response_id = request.match_info["response_id"]
        background = self._background.find(response_id)
        if background is None:
            found = await visible_response(self._service, response_id)
            if found is not None and _was_background(found.body):
                raise ApiError(
                    409,
                    f"response {response_id[:100]} has already ended; there is nothing to cancel",
                    code="response_finished",
                )
            if found is not None:
                raise ApiError(
                    400,
                    f"response {response_id[:100]} was not created with background: true; only those can be cancelled",
                    code="invalid_value",
                    param="response_id",
                )
            background = await self._adopt(response_id)
        if background is None:
            raise response_not_found(response_id, "response_id")
        await self._background.cancel(background)
        return json_response(background.draft.response())

    async def _adopt(self, response_id: str) -> BackgroundResponse | None:
        """A background response this process does not watch (a restart came between), from its inbox row."""
        if not _RESPONSE_ID.fullmatch(response_id):
            return None
        inbox, host = self._service.parts()
        stored = await host.blocking(partial(inbox.stored_answer, PLATFORM, turn_id(response_id)))
        if stored is None:
            return None
        return await self._background.adopt(stored, self._service.config.model_name)

    async def list_input_items(self, request: web.Request) -> web.Response:
        response_id = request.match_info["response_id"]
        background = self._background.find(response_id)
        if background is not None:
            return json_response(page_of(background.draft.input_items, request.query))
        found = await visible_response(self._service, response_id)
        if found is None:
            raise response_not_found(response_id, "response_id")
        return json_response(page_of(read_stored(found.body).input_items, request.query))

    async def delete(self, request: web.Request) -> web.Response:
        inbox, _ = self._service.parts()
        response_id = request.match_info["response_id"]
        if self._service.config.user is not None and await visible_response(self._service, response_id) is None:
            raise response_not_found(response_id, "response_id")
        deleted = await committed(inbox.delete_response(response_id, self._service.scope), inbox.ask_timeout_s)
        if not deleted:
            raise response_not_found(response_id, "response_id")
        return json_response({"id": response_id, "object": "response.deleted", "deleted": True})

    # -- a turn ---------------------------------------------------------------------------------------------------

    async def create(self, request: web.Request) -> web.StreamResponse:
        require_json(request)
        return await self._respond(request, decode_responses(await self._service.read_body(request)))

    async def approval(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/responses/{id}/approval`` (``{approval_id, decision, reason?}``): a response continuing
        ``{id}`` with the answer to the request for approval it ended with, as ``/approve`` or ``/deny`` from the
        request's principal (the session's runtime refuses anyone else, in the answer's text)."""
        require_json(request)
        decided = decision_body(await self._service.read_body(request))
        verb = "/approve" if decided.decision is Decision.APPROVE else "/deny"
        reason = f" {decided.reason.strip()}" if decided.reason and decided.reason.strip() else ""
        text = f"{verb} {decided.approval_id}{reason}"
        previous = request.match_info["response_id"]
        return await self._respond(request, ResponsesRequest(input=text, previous_response_id=previous))

    async def _respond(self, request: web.Request, body: ResponsesRequest) -> web.StreamResponse:
        service = self._service
        given = input_turn(body.input)
        tools = request_tools(body)
        if body.background and not body.store:
            raise ApiError(
                400,
                "background responses must be stored (they are read back with GET); leave out store: false",
                code="invalid_value",
                param="store",
            )
        response_id = f"resp_{uuid.uuid4().hex}"
        place = await place_turn(service, request, body, given, response_id)
        inbound = InboundMessage(
            source=SessionSource(
                platform=PLATFORM, scope_id=service.scope, chat_type="dm", chat_id=place.name, user_id=place.user
            ),
            text=given.text,
            message_id=turn_id(response_id) if body.background else f"api-{response_id}",
            received_at=time.time(),
            context=place.context,
            agent=requested_agent(service.parts()[0], body.model) or msgspec.UNSET,  # a session it starts
            client_tools=tools or msgspec.UNSET,
            tool_results=given.tool_results or msgspec.UNSET,
            busy=requested_busy(request.headers, body.hermes_busy, body.metadata),
        )
        draft = ResponseDraft.start(
            response_id,
            created_at=int(time.time()),
            model=body.model or service.config.model_name,
            prompt=given.text,
            instructions=place.instructions,
            previous_response_id=place.previous.id if place.previous is not None else None,
            conversation=place.conversation,
            store=body.store,
            background=body.background,
        )
        draft.input_items = input_items(body.input)
        if (done := await decided_elsewhere(service, draft, inbound)) is not None:
            return await settled_response(service, request, draft, done, stream=body.stream, keep=self._keep)
        if body.background:
            return await self._background.start(request, inbound, draft, continues=place.continues, stream=body.stream)
        with service.admitted():
            call = service.turn_call(inbound)
            try:
                call.open()
                routing_key = await service.submit(inbound, continues=place.continues, idempotency=None, call=call)
                turn = Turn(
                    completion_id=response_id,
                    created=draft.base.created_at,
                    model=draft.base.model,
                    prompt=given.text,
                    routing_key=routing_key,
                    deadline=asyncio.get_running_loop().time() + service.config.request_timeout_s,
                )
                if body.stream:
                    return await self._stream(request, turn, call, draft)
                return await self._complete(request, turn, call, draft)
            finally:
                call.close()

    async def _complete(self, request: web.Request, turn: Turn, call: TurnCall, draft: ResponseDraft) -> web.Response:
        async for event in call.events(DISCONNECT_POLL_S):
            if isinstance(event, TextDelta):
                draft.text(event.text)
            elif isinstance(event, ToolEvent):
                draft.tool(event)
            elif isinstance(event, Finished):
                headers = {SESSION_HEADER: event.session_id} if event.session_id else {}
                if event.stopped:
                    await self._abandon(draft, turn, call, _STOPPED)
                    return json_response(draft.response(), headers={**headers, COMPLETED_HEADER: "false"})
                if event.reply is None and not draft.produced:
                    raise failure_error(event, headers)
                draft.finish(await settle_refused(self._service, draft, call.inbound, event))
                await self._keep(draft, event.session_id)
                if event.reply is None:
                    headers[COMPLETED_HEADER] = "false"
                return json_response(draft.response(), headers=headers)
            else:
                ended = await self._service.wait_ended(request, turn, call)
                if ended is not None:
                    await self._abandon(draft, turn, call, _REASONS.get(ended.status, "server_stopping"))
                    raise ended
        raise AssertionError("unreachable: events end with Finished")  # pragma: no cover

    async def _stream(
        self, request: web.Request, turn: Turn, call: TurnCall, draft: ResponseDraft
    ) -> web.StreamResponse:
        service = self._service
        session_id = await service.session_hint(turn.routing_key)
        response = await service.event_stream(request, {SESSION_HEADER: session_id} if session_id else None)
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        try:
            await _send(response, draft.created())
            async for event in call.events(min(DISCONNECT_POLL_S, service.config.keepalive_s)):
                if isinstance(event, Idle):
                    ended = await service.wait_ended(request, turn, call)
                    if ended is not None:
                        events = await self._abandon(draft, turn, call, _REASONS.get(ended.status, "server_stopping"))
                        if ended.status != 499:
                            await _send(response, events)
                        break
                    if loop.time() - quiet_since >= service.config.keepalive_s:
                        await response.write(KEEP_ALIVE)
                        quiet_since = loop.time()
                    continue
                quiet_since = loop.time()
                if isinstance(event, TextDelta):
                    await _send(response, draft.text(event.text))
                elif isinstance(event, ToolEvent):
                    await _send(response, draft.tool(event))
                elif isinstance(event, Finished) and event.stopped:
                    await _send(response, await self._abandon(draft, turn, call, _STOPPED))
                elif isinstance(event, Finished):
                    events = draft.finish(await settle_refused(service, draft, call.inbound, event))
                    await self._keep(draft, event.session_id)
                    await _send(response, events)
            await response.write_eof()
        except ConnectionError:
            _log.info("api_server: the client left while its response streamed; stopping its turn")
            if draft.status == "in_progress":
                await service.stop_call(call)
                await self._abandon(draft, turn, call, "client_disconnected")
        return response

    async def _abandon(self, draft: ResponseDraft, turn: Turn, call: TurnCall, reason: str) -> list[StreamEvent]:
        """Make the response ``incomplete`` and store that snapshot. A stopped turn (its client left, or another
        request stopped it): its commit (soon) names the session it was saved in; a turn that goes on may have no
        saved session yet (a new session's row comes with its first turn's commit), and then the snapshot is not
        stored."""
        events = draft.abandon(reason)
        inbox, host = self._service.parts()
        session_id: str | None = None
        if reason in (_LEFT, _STOPPED):  # a stopped turn sends no reply; its commit completes the inbox row
            deadline = asyncio.get_running_loop().time() + inbox.ask_timeout_s
            while session_id is None and asyncio.get_running_loop().time() < deadline:
                stored = await host.blocking(partial(inbox.stored_answer, PLATFORM, call.message_id))
                if stored is not None and stored.state != "pending":
                    session_id = stored.session_id
                    break
                await asyncio.sleep(_SETTLE_POLL_S)
        else:  # the turn goes on: its session is stored only if an earlier turn saved it
            session_id = await self._service.session_hint(turn.routing_key)
            if session_id is not None and await host.blocking(partial(inbox.session_owner, session_id)) is None:
                session_id = None
        await self._keep(draft, session_id)
        return events

    async def _keep(self, draft: ResponseDraft, session_id: str | None) -> None:
        """Store the response (unless the request said ``store: false``) with the session it ran in."""
        base = draft.base
        if not base.store:
            return
        if session_id is None:
            _log.info("api_server: response %s is not stored: its turn has no saved session yet", base.id)
            return
        record = ResponseRecord(
            id=base.id,
            session_id=session_id,
            scope=self._service.scope,
            status=draft.status,
            body=stored_body(draft.response(), draft.input_items),
            created_at=time.time(),
            conversation=base.conversation.id if base.conversation is not None else None,
            previous_id=base.previous_response_id,
            instructions=base.instructions,
        )
        try:
            inbox, _ = self._service.parts()
            await committed(inbox.save_response(record), inbox.ask_timeout_s)
        except Exception:
            _log.warning("api_server: response %s could not be stored", base.id, exc_info=True)


async def _send(response: web.StreamResponse, events: list[StreamEvent]) -> None:
    if events:
        await response.write(b"".join(event.sse() for event in events))


class _Background(msgspec.Struct, frozen=True):
    background: bool = False


_background_flag = msgspec.json.Decoder(_Background)


def _was_background(body: bytes) -> bool:
    """Whether a stored response was created with ``background: true``."""
    return _background_flag.decode(body).background


def _starting_after(request: web.Request) -> int:
    raw = request.query.get("starting_after", "-1")
    try:
        return int(raw)
    except ValueError:
        raise ApiError(
            400, "starting_after must be the sequence_number of an event", code="invalid_value", param="starting_after"
        ) from None
