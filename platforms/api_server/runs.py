"""``/v1/runs``: a turn submitted now and watched by the server, not by the request.

- ``POST /v1/runs`` (``{"input", "session_id"?, "instructions"?, "model"?}``) commits the turn's inbox message and
  answers 202 ``{run_id, status: "queued"}`` at once. The run id *is* the message's inbox id, so a run is durable
  and ordered like every other turn of its session (``session_id`` or ``X-Hermes-Session-Id`` continues a session
  under the rules of :mod:`platforms.api_server.sessions`; without either a run starts a fresh one).
- Each run is watched by one task on the server's loop, through a :class:`TurnCall`; what it sees is kept in a
  :class:`Run` (status, outcome, buffered events). ``GET /v1/runs/{id}`` answers from it, or from the store
  (:meth:`ApiInbox.stored_answer`) for a run this process does not watch (after a restart): a pending one is watched
  again from then on.
- ``GET /v1/runs/{id}/events`` streams ``message.delta``, ``tool.started``, ``tool.completed`` and then
  ``run.completed``, ``run.failed`` or ``run.cancelled``; ``POST /v1/runs/{id}/stop`` stops the turn as ``/stop``
  does (409 once the run has completed or failed; a cancelled one answers as it is). ``X-Hermes-Busy`` (or
  ``hermes_busy``) says what the run's message does while its session is busy; one refused as busy is ``failed``
  with the error code ``session_busy``. A run whose turn is stopped from elsewhere (``/stop``, ``/new`` in its
  session) is ``cancelled`` as soon as the stopped turn is stored, and none of the stopped turn's deltas after the
  stop is published.
- A run whose turn paused on tool calls that need approval is ``requires_approval`` (``approval`` names the request;
  subscribers get ``run.requires_approval``) until ``POST /v1/runs/{id}/approval`` answers it
  (:mod:`platforms.api_server.approvals`): the run goes on with the turn that continues from the decision.
- Runs count under ``max_concurrent_runs`` until they end; a draining server refuses new ones. Finished runs are
  kept for :data:`KEEP_S` seconds, the newest :data:`KEEP` of them; the store still answers for older ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from functools import partial
from typing import TYPE_CHECKING

import msgspec
from aiohttp import web

from hermes_actors.messages import Conversation, InboundMessage
from hermes_actors.ports import StoredAnswer
from platforms.api_server.approvals import decision_body, decision_message, follow_decision
from platforms.api_server.busy import requested_busy
from platforms.api_server.models import requested_agent
from platforms.api_server.principal import request_user
from platforms.api_server.run import Run, RunError, RunStatus, RunView
from platforms.api_server.service import require_json
from platforms.api_server.sessions import SESSION_HEADER, memory_scope, session_named
from platforms.api_server.turn_call import Finished, Idle, TextDelta, ToolEvent
from platforms.api_server.wire import PLATFORM, ApiError, decode_body, json_response

if TYPE_CHECKING:
    from platforms.api_server.service import ApiService

__all__ = ["KEEP", "KEEP_S", "RunRequest", "Runs"]

KEEP_S = 600.0  # how long a finished run stays in memory
KEEP = 1000  # the most finished runs kept in memory
_TICK_S = 0.25  # how often a run's watcher looks at its stop; also a subscriber's look at its client
_STORE_CHECK_S = 2.0  # how often a run's watcher reads the store for a turn that ended without a reply to it
_RUN_ID = re.compile(r"run_[0-9a-f]{32}")

_log = logging.getLogger(__name__)


class RunRequest(msgspec.Struct, frozen=True, kw_only=True):
    """The body of ``POST /v1/runs``; fields it does not name are ignored."""

    input: str
    session_id: str | None = None
    instructions: str | None = None
    model: str | None = None  # an agent's name chooses the agent of a session it starts (platforms.api_server.models)
    hermes_busy: str | None = None  # the message's busy policy (platforms.api_server.busy)


_request_decoder = msgspec.json.Decoder(RunRequest)


class Runs:
    """The runs of one API server: its routes and the runs this process watches."""

    def __init__(self, service: ApiService, *, keep_s: float = KEEP_S, keep: int = KEEP) -> None:
        self._service = service
        self._keep_s = keep_s
        self._keep = keep
        self._runs: dict[str, Run] = {}
        self._answering: set[str] = set()  # runs whose approval this process is submitting an answer for

    def add_to(self, app: web.Application) -> None:
        app.router.add_post("/v1/runs", self.create)
        app.router.add_get("/v1/runs/{run_id}", self.status)
        app.router.add_get("/v1/runs/{run_id}/events", self.events)
        app.router.add_post("/v1/runs/{run_id}/stop", self.stop)
        app.router.add_post("/v1/runs/{run_id}/approval", self.approve)

    async def close(self) -> None:
        """Stop watching every run (the server stops): their turns go on and are stored."""
        tasks = [run.task for run in self._runs.values() if run.task is not None and not run.task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- routes ------------------------------------------------------------------------------------------------

    async def create(self, request: web.Request) -> web.Response:
        service = self._service
        require_json(request)
        body = decode_body(_request_decoder, await service.read_body(request))
        if not body.input.strip():
            raise ApiError(400, "input is empty; send the text the agent should answer", param="input")
        named = _session_of(request, body)
        busy = requested_busy(request.headers, body.hermes_busy)
        user = memory_scope(request.headers) or request_user(service.config, None, request.headers)
        if body.instructions is not None and named is not None:
            raise ApiError(
                400,
                "instructions apply to a run that starts a session: a continued session keeps its own system prompt "
                "and history; leave out instructions or session_id",
                param="instructions",
            )
        service.admit()
        run: Run | None = None
        try:
            run_id = f"run_{uuid.uuid4().hex}"
            inbound = msgspec.structs.replace(_inbound(service, run_id, body, named or run_id, user), busy=busy)
            call = service.turn_call(inbound)
            run = Run(run_id, scope=service.scope, prompt=body.input, call=call)
            call.open(on_started=run.begin)
            run.routing_key = await service.submit(inbound, continues=named, idempotency=None, call=call)
        except BaseException:
            if run is not None and run.call is not None:
                run.call.close()
            service.release()
            raise
        run.admitted = True
        self._watch(run)
        session_id = await service.session_hint(run.routing_key)
        run.session_id = run.session_id or session_id
        accepted = RunView(run_id=run.run_id, status=RunStatus.QUEUED, session_id=session_id)
        return json_response(accepted, status=202, headers={"Location": f"/v1/runs/{run.run_id}"})

    async def status(self, request: web.Request) -> web.Response:
        return json_response(await self.view(await self._find(request)))

    async def view(self, run: Run) -> RunView:
        """What ``run`` is now, with the session its turn went to once that is known."""
        if run.session_id is None and run.routing_key is not None:
            run.session_id = await self._service.session_hint(run.routing_key)
        return run.view()

    async def events(self, request: web.Request) -> web.StreamResponse:
        service = self._service
        run = await self._find(request)
        response = await service.event_stream(request)
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        with contextlib.suppress(ConnectionError):  # the subscriber left: the run goes on
            async for event in run.follow(_TICK_S):
                now = loop.time()
                if event is not None:
                    await response.write(event)
                    quiet_since = now
                    continue
                if request.transport is None or request.transport.is_closing():
                    return response
                if service.stopping is not None and service.stopping.done():
                    break
                if now - quiet_since >= service.config.keepalive_s:
                    await response.write(b": keepalive\n\n")
                    quiet_since = now
            await response.write_eof()
        return response

    async def stop(self, request: web.Request) -> web.Response:
        return json_response(await self.stop_run(await self._find(request)))

    async def approve(self, request: web.Request) -> web.Response:
        """Answer the request for approval the run waits for (:mod:`platforms.api_server.approvals`): the run goes on
        with the turn that continues from the decision (202)."""
        service = self._service
        require_json(request)
        run = await self._find(request)
        body = decision_body(await service.read_body(request))
        inbound = await decision_message(service, request, run, body)
        service.admit()
        call = service.turn_call(inbound)
        self._answering.add(run.run_id)
        try:
            call.open(on_started=run.begin)
            await service.submit(inbound, continues=None, idempotency=None, call=call)
        except BaseException:
            call.close()
            service.release()
            raise
        finally:
            self._answering.discard(run.run_id)
        run.resume(call)
        run.admitted = True
        self._watch(run)
        return json_response(run.view(), status=202, headers={"Location": f"/v1/runs/{run.run_id}"})

    async def stop_run(self, run: Run) -> RunView:
        """Stop ``run``'s turn as ``/stop`` does; a 409 once it has completed or failed."""
        if run.status is RunStatus.CANCELLED:
            return run.view()  # stopped already (a stop sent twice, or a /stop from elsewhere)
        if run.status is RunStatus.REQUIRES_APPROVAL:
            raise ApiError(
                409,
                f"run {run.run_id} waits for approval, no turn runs; deny it with POST /v1/runs/{run.run_id}/approval",
                code="run_waiting_for_approval",
            )
        if run.status.finished:
            raise ApiError(
                409,
                f"run {run.run_id} has already finished ({run.status}); there is nothing to stop",
                code="run_finished",
            )
        if run.status is not RunStatus.STOPPING:
            # A run still queued is stopped once its turn begins: a /stop now would stop the turn ahead of it.
            if (run.began or run.adopted) and not await self._send_stop(run):
                raise ApiError(
                    503,
                    "the gateway did not take the stop; retry once hermesd is running",
                    type="server_error",
                    code="service_unavailable",
                )
            run.status = RunStatus.STOPPING
        return run.view()

    async def _send_stop(self, run: Run) -> bool:
        """Send the run's session a ``/stop`` whose reply the run's watcher expects; whether it was taken."""
        assert run.call is not None  # an unfinished run is watched
        stop_id = f"api-stop-{uuid.uuid4().hex}"
        reply = self._service.waiters.expect(stop_id)
        if not await self._service.stop_turn(run.call.inbound, stop_id=stop_id):
            self._service.waiters.forget(stop_id, reply)
            return False
        run.stop_id, run.stop_reply = stop_id, reply
        return True

    # -- finding a run ---------------------------------------------------------------------------------------

    async def _find(self, request: web.Request) -> Run:
        return await self.find(request.match_info["run_id"])

    async def find(self, run_id: str, *, every_key: bool = False) -> Run:
        """The run ``run_id`` names, watched or read back from the store; a 404 for an unknown one, or another
        key's (the same 404, so ids of other keys cannot be probed). ``every_key`` (the admin key) finds any key's
        run of this API."""
        run = self._runs.get(run_id)
        if run is not None and (every_key or run.scope == self._service.scope):
            return run
        unknown = ApiError(
            404, f"no run {run_id[:100]!r}; send the run_id POST /v1/runs returned", code="run_not_found"
        )
        if run is not None or not _RUN_ID.fullmatch(run_id):
            raise unknown
        stored = await self._stored(run_id)
        if stored is None or not (every_key or stored.message.source.scope_id == self._service.scope):
            raise unknown
        return self._adopt(stored)

    async def _stored(self, run_id: str) -> StoredAnswer | None:
        """What the store holds of the run's message; a 503 when the store cannot be read (hermesd stops)."""
        inbox, host = self._service.parts()
        try:
            return await host.blocking(partial(inbox.stored_answer, PLATFORM, run_id))
        except Exception as exc:
            _log.warning("api_server: could not read run %s from the store: %s", run_id, exc)
            raise ApiError(
                503,
                f"the store cannot be read now ({exc}); retry once hermesd is running",
                type="server_error",
                code="service_unavailable",
            ) from None

    def _adopt(self, stored: StoredAnswer) -> Run:
        """A run read back from the store: finished as it is stored, or, still pending, watched from now on."""
        message = stored.message
        run = self._runs.get(message.message_id)
        if run is not None:  # another request adopted it meanwhile
            return run
        pending = stored.state == "pending"
        call = self._service.turn_call(message) if pending else None
        run = Run(
            message.message_id,
            scope=message.source.scope_id,
            prompt=message.text,
            call=call,
            session_id=stored.session_id,
            source=message.source,
        )
        if call is None:
            run.end_stored(stored, watched=False)
            self._keep_run(run)
            return run
        run.adopted = True
        call.open(on_started=run.begin)  # the turn may have ended between the read and now: the store will say
        self._watch(run)
        return run

    # -- watching ------------------------------------------------------------------------------------------------

    def _watch(self, run: Run) -> None:
        self._keep_run(run)
        run.task = asyncio.get_running_loop().create_task(self._follow(run), name=run.run_id)

    async def _follow(self, run: Run) -> None:
        """Carry the run's turn into ``run`` until it ends; give back its place under the cap. A run read back
        pending from the store (``adopted``) may have begun before it was watched: the store is read at once,
        and a turn it says ended without a reply is not taken for a stop (a failure's reply may have been
        missed)."""
        call = run.call
        assert call is not None
        loop = asyncio.get_running_loop()
        next_look = loop.time() if run.adopted else loop.time() + _STORE_CHECK_S
        silent = False  # the store said the turn ended without a reply to us: one more look before believing it
        stop_seen = False
        try:
            async for event in call.events(_TICK_S):
                if run.status is RunStatus.STOPPING and run.stop_reply is None and run.began:
                    await self._send_stop(run)  # asked for while it was queued; it has begun now
                if isinstance(event, TextDelta):
                    run.publish("message.delta", {"delta": event.text})
                elif isinstance(event, ToolEvent):
                    name = "tool.started" if event.status == "running" else "tool.completed"
                    run.publish(name, {"tool": event.name, "call_id": event.call_id})
                elif isinstance(event, Finished):
                    run.end_with(event)
                elif isinstance(event, Idle):
                    stopped = run.stop_reply is not None and run.stop_reply.done() and not stop_seen
                    if not stopped and loop.time() < next_look:
                        continue
                    stop_seen = stop_seen or stopped
                    next_look = loop.time() + _STORE_CHECK_S
                    try:
                        stored = await self._stored(run.run_id)
                    except ApiError:
                        continue  # logged; looked at again later
                    if stored is None or stored.state == "pending":
                        continue
                    if stored.reply is not None or stored.state != "done" or stopped or silent:
                        # The stop's answer comes after the stopped turn committed (and after its reply, if any).
                        run.end_stored(stored, watched=not run.adopted or stopped)
                        break
                    silent = True
        except Exception:
            _log.exception("api_server: watching run %s failed", run.run_id)
            message = "the server stopped watching this run after an internal error (see the daemon log); its turn "
            run.end(RunStatus.FAILED, error=RunError(message=message + "goes on in its session", code="internal_error"))
        finally:
            call.close()
            if run.stop_reply is not None:
                self._service.waiters.forget(run.stop_id, run.stop_reply)
            if run.admitted:
                run.admitted = False
                self._service.release()
            self._prune()
        if run.status is RunStatus.REQUIRES_APPROVAL and run.call is call:  # until answered, here or elsewhere
            answered = follow_decision(run, partial(self._stored, run.run_id), self._answering, _STORE_CHECK_S)
            run.task = asyncio.get_running_loop().create_task(answered, name=run.run_id)

    def _keep_run(self, run: Run) -> None:
        self._runs[run.run_id] = run
        self._prune()

    def _prune(self) -> None:
        """Forget finished runs older than ``keep_s``, and the oldest beyond the newest ``keep``."""
        now = time.monotonic()
        ended = sorted((r for r in self._runs.values() if r.ended_at is not None), key=lambda r: r.ended_at or 0.0)
        excess = len(ended) - self._keep
        for index, run in enumerate(ended):
            if index < excess or now - (run.ended_at or now) > self._keep_s:
                del self._runs[run.run_id]


def _session_of(request: web.Request, body: RunRequest) -> str | None:
    """The session the run continues: ``session_id`` of the body or the header (the same shape rules; a 400 when
    both are given and differ)."""
    header = session_named(request.headers)
    if body.session_id is None:
        return header
    try:
        named = session_named({SESSION_HEADER: body.session_id})
    except ApiError as error:
        raise ApiError(400, str(error).replace(SESSION_HEADER, "session_id"), param="session_id") from None
    if header is not None and named != header:
        raise ApiError(400, f"session_id and {SESSION_HEADER} name different sessions; send one", param="session_id")
    return named


def _inbound(service: ApiService, run_id: str, body: RunRequest, name: str, user: str | None) -> InboundMessage:
    context = Conversation(system=body.instructions) if body.instructions else msgspec.UNSET
    return InboundMessage(
        source=service.source(name, user),
        text=body.input,
        message_id=run_id,
        received_at=time.time(),
        context=context,
        agent=requested_agent(service.parts()[0], body.model) or msgspec.UNSET,
    )
