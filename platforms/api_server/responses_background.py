"""Background responses of ``/v1/responses`` (``background: true``): the request answers at once, the turn goes on.

- ``POST /v1/responses`` with ``background: true`` commits the turn's inbox message and answers the response
  ``queued`` (streamed: ``response.created`` and ``response.queued``, then the turn's events as they come). It is
  ``in_progress`` once its turn begins, and ends ``completed``, ``failed``, ``incomplete`` (stopped from elsewhere)
  or ``cancelled``; then it is stored as any response is.
- ``GET /v1/responses/{id}`` answers the response as it stands; with ``?stream=true`` it streams its events from
  the start, or from after ``starting_after`` (a ``sequence_number`` the client saw), then the live ones.
- ``POST /v1/responses/{id}/cancel`` stops the turn as ``/stop`` does (a queued turn is stopped once it begins, so a
  stop never reaches the turn ahead of it) and answers the response ``cancelled``; a cancelled one answers as it is;
  a finished one is a 409.
- The turn is an inbox row (message id ``api-<response id>``), so it is durable: after a restart, ``GET`` of a
  response whose turn is still pending watches it again (``in_progress``; its stream starts over from 0, and the
  request fields the row does not keep, such as ``previous_response_id``, are left out), and of one whose turn
  ended while no server watched it answers and stores it from the stored reply.
- Each counts under ``max_concurrent_runs`` until its turn ends (one read back after a restart does not). Ended
  ones stay in memory for :data:`KEEP_S` seconds (for streams that resume); the store answers for them after that,
  and a stored one is not streamed again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING

from aiohttp import web

from hermes_actors.messages import InboundMessage
from hermes_actors.ports import StoredAnswer
from platforms.api_server.response_draft import ResponseDraft
from platforms.api_server.responses_wire import StreamEvent
from platforms.api_server.turn_call import Finished, Idle, TextDelta, ToolEvent, TurnCall
from platforms.api_server.wire import PLATFORM, ApiError, json_response

if TYPE_CHECKING:
    from platforms.api_server.service import ApiService

__all__ = ["KEEP_S", "BackgroundResponse", "BackgroundResponses", "Keep", "Settle", "stored_outcome", "turn_id"]

KEEP_S = 600.0  # how long an ended background response stays in memory
_TICK_S = 0.25  # how often a watcher looks at a cancel and the server's stop; a stream at its client
_STORE_CHECK_S = 2.0  # how often the watcher of a response read back from the store looks at its inbox row

_log = logging.getLogger(__name__)

Keep = Callable[[ResponseDraft, "str | None"], Awaitable[None]]
Settle = Callable[[ResponseDraft, InboundMessage, Finished], Awaitable[Finished]]


class BackgroundResponse:
    """One background response this process watches: its draft, its turn, and every stream event it made."""

    def __init__(self, draft: ResponseDraft, call: TurnCall, scope: str | None) -> None:
        self.draft = draft
        self.call = call
        self.scope = scope
        self.events: list[StreamEvent] = []
        self.changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.began = False
        self.adopted = False  # read back pending from the store (after a restart): its Finished may never come
        self.admitted = False  # counted under max_concurrent_runs (one this server started) until it ends
        self.cancelling = False
        self.ended_at: float | None = None

    def publish(self, events: list[StreamEvent]) -> None:
        if events:
            self.events.extend(events)
            self.changed.set()

    def begin(self) -> None:
        self.began = True
        self.publish(self.draft.begin())

    @property
    def ended(self) -> bool:
        return self.draft.status not in ("queued", "in_progress")

    async def follow(self, after: int) -> AsyncIterator[StreamEvent | None]:
        """Its events after sequence number ``after``, then the live ones until it ends (``None`` each idle tick)."""
        index = after + 1
        while True:
            while index < len(self.events):
                yield self.events[index]
                index += 1
            if self.ended:  # its last event is published with its end
                return
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), _TICK_S)
            if index >= len(self.events):
                yield None


class BackgroundResponses:
    """The background responses of one API server; ``keep`` stores a response with the session it ran in."""

    def __init__(
        self, service: ApiService, keep: Keep, *, keep_s: float = KEEP_S, settle: Settle | None = None
    ) -> None:
        self._service = service
        self._keep = keep
        self._keep_s = keep_s
        self._settle = settle  # a turn's outcome as the response ends with it (an approval answered elsewhere first)
        self._watched: dict[str, BackgroundResponse] = {}

    async def close(self, app: web.Application | None = None) -> None:
        """Stop watching (the server stops): the turns go on and are stored; ``GET`` adopts them after a restart."""
        tasks = [entry.task for entry in self._watched.values() if entry.task is not None and not entry.task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def start(
        self,
        request: web.Request,
        inbound: InboundMessage,
        draft: ResponseDraft,
        *,
        continues: str | None,
        stream: bool,
    ) -> web.StreamResponse:
        """Submit the turn and answer at once: the ``queued`` response, or its stream."""
        service = self._service
        service.admit()
        call = service.turn_call(inbound)
        entry = BackgroundResponse(draft, call, service.scope)
        entry.publish(draft.queue())  # before the turn can begin
        queued = draft.response()  # the answer: the turn may begin before the submit returns
        try:
            call.open(on_started=entry.begin)
            await service.submit(inbound, continues=continues, idempotency=None, call=call)
        except BaseException:
            call.close()
            service.release()
            raise
        entry.admitted = True
        self._watch(entry)
        if stream:
            return await self.stream(request, entry, after=-1)
        return json_response(queued)

    def find(self, response_id: str) -> BackgroundResponse | None:
        """The background response ``response_id`` this process watches (or watched lately), within the key."""
        entry = self._watched.get(response_id)
        return entry if entry is not None and entry.scope == self._service.scope else None

    async def adopt(self, stored: StoredAnswer, model: str) -> BackgroundResponse | None:
        """A background response read back from its inbox row (after a restart): watched again while its turn is
        pending; answered (and stored) from the stored reply once it ended; ``None`` for another key's."""
        message = stored.message
        if message.source.scope_id != self._service.scope:
            return None
        response_id = message.message_id.removeprefix("api-bg-")
        if (entry := self._watched.get(response_id)) is not None:
            return entry
        agent = message.agent if isinstance(message.agent, str) else None
        draft = ResponseDraft.start(
            response_id,
            created_at=int(message.received_at or time.time()),
            model=agent or model,
            prompt=message.text,
            instructions=None,
            previous_response_id=None,
            conversation=None,
            store=True,
            background=True,
        )
        call = self._service.turn_call(message)
        entry = BackgroundResponse(draft, call, message.source.scope_id)
        entry.publish([*draft.queue(), *draft.begin()])  # its stream starts over from 0: created, queued, in_progress
        entry.began = True
        if stored.state != "pending":
            entry.publish(draft.finish(stored_outcome(stored)))
            await self._keep(draft, stored.session_id)
            entry.ended_at = time.monotonic()
            self._watched[response_id] = entry
            return entry
        entry.adopted = True
        call.open()  # the turn may have ended between the read and now: the watcher looks at the store
        self._watch(entry)
        return entry

    async def cancel(self, entry: BackgroundResponse) -> None:
        """Cancel ``entry``: its turn is stopped once it has begun; a 409 once it has ended otherwise."""
        if entry.draft.status == "cancelled":
            return
        if entry.ended:
            raise ApiError(
                409,
                f"response {entry.draft.base.id} has already ended ({entry.draft.status}); there is nothing to cancel",
                code="response_finished",
            )
        entry.cancelling = True
        entry.publish(entry.draft.cancel())
        if entry.began:
            await self._service.stop_call(entry.call)

    async def stream(self, request: web.Request, entry: BackgroundResponse, *, after: int) -> web.StreamResponse:
        """Stream ``entry``'s events after ``after``; a client that leaves leaves the turn running."""
        service = self._service
        response = await service.event_stream(request)
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        with contextlib.suppress(ConnectionError):
            async for event in entry.follow(after):
                if event is not None:
                    await response.write(event.sse())
                    quiet_since = loop.time()
                    continue
                if request.transport is None or request.transport.is_closing():
                    return response
                if service.stopping is not None and service.stopping.done():
                    break
                if loop.time() - quiet_since >= service.config.keepalive_s:
                    await response.write(b": keepalive\n\n")
                    quiet_since = loop.time()
            await response.write_eof()
        return response

    # -- watching ---------------------------------------------------------------------------------------------------

    def _watch(self, entry: BackgroundResponse) -> None:
        self._watched[entry.draft.base.id] = entry
        self._prune()
        entry.task = asyncio.get_running_loop().create_task(self._follow(entry), name=entry.draft.base.id)

    async def _follow(self, entry: BackgroundResponse) -> None:
        """Carry the turn's events into the draft until the turn ends, then store the response."""
        call, draft = entry.call, entry.draft
        loop = asyncio.get_running_loop()
        next_look = loop.time()
        try:
            async for event in call.events(_TICK_S):
                if isinstance(event, Idle) and entry.adopted and loop.time() >= next_look:
                    next_look = loop.time() + _STORE_CHECK_S
                    stored = await self._stored(call.message_id)
                    if stored is not None and stored.state != "pending":
                        event = stored_outcome(stored)
                if entry.cancelling and entry.began and not call.stopped:
                    await self._service.stop_call(call)  # cancelled while queued: it has begun now
                if isinstance(event, Finished):
                    if not entry.cancelling and not event.stopped and self._settle is not None:
                        event = await self._settle(draft, call.inbound, event)
                    if not entry.cancelling:
                        entry.publish(draft.abandon("stopped") if event.stopped else draft.finish(event))
                    await self._keep(draft, event.session_id)
                    break
                if entry.cancelling:
                    continue  # nothing after the cancel is published
                if isinstance(event, TextDelta):
                    entry.publish(draft.text(event.text))
                elif isinstance(event, ToolEvent):
                    entry.publish(draft.tool(event))
        except Exception:
            _log.exception("api_server: watching background response %s failed", draft.base.id)
        finally:
            call.close()
            if entry.admitted:
                entry.admitted = False
                self._service.release()
            entry.ended_at = time.monotonic()
            entry.changed.set()

    async def _stored(self, message_id: str) -> StoredAnswer | None:
        inbox, host = self._service.parts()
        try:
            return await host.blocking(partial(inbox.stored_answer, PLATFORM, message_id))
        except Exception as exc:  # looked at again later
            _log.warning("api_server: could not read %s from the store: %s", message_id, exc)
            return None

    def _prune(self) -> None:
        """Forget background responses that ended more than ``keep_s`` ago (the store answers for them)."""
        now = time.monotonic()
        for response_id, entry in list(self._watched.items()):
            if entry.ended_at is not None and now - entry.ended_at > self._keep_s:
                del self._watched[response_id]


def turn_id(response_id: str) -> str:
    """The inbox message id of a background response's turn: a response read back from the store after a restart
    is found by it (a foreground response's turn is never adopted)."""
    return f"api-bg-{response_id}"


def stored_outcome(stored: StoredAnswer) -> Finished:
    """The outcome of a turn that ended while no server watched it, as the store has it (a turn that paused for
    approval ends with its request, whatever text came before it)."""
    if stored.state == "done" and (stored.reply is not None or stored.approval is not None):
        return Finished(
            session_id=stored.session_id,
            reply=stored.reply or "",
            usage=stored.usage,
            tool_calls=stored.tool_calls,
            approval=stored.approval,
        )
    if stored.state == "done":
        failure = "the turn ended without an answer: the agent failed or the turn was stopped"
        return Finished(session_id=stored.session_id, reply=None, failure=failure, failure_code="no_answer")
    failure = "the turn was not run: its session had too many messages waiting; send it again"
    return Finished(session_id=stored.session_id, reply=None, failure=failure, failure_code="rejected")
