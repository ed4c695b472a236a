"""What the API's routes share: the running gateway (through the ApiInbox port), admission (the concurrency cap and
draining), submitting a turn, and the ways a wait for one ends without its reply.

Admission: at most ``max_concurrent_runs`` requests run turns at once (429 ``rate_limit_exceeded`` with
``Retry-After`` beyond it); once the server drains (hermesd got SIGTERM) a new request gets 503
``gateway_draining`` with ``Retry-After: 1`` while the requests already waiting get their replies, up to the
drain time.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
from aiohttp import web

from hermes_actors.errors import HermesError, StoreError
from hermes_actors.messages import Attachment, InboundMessage, OutboundError
from hermes_actors.routing import SessionSource
from hermes_actors.waiters import ReplyWaiters
from platforms.api_server.config import ApiServerConfig
from platforms.api_server.guards import Guards
from platforms.api_server.idempotency import Idempotency, stored_outcome
from platforms.api_server.images import image_attachment
from platforms.api_server.retry_fold import RetryFold, retried_outcome
from platforms.api_server.sessions import COMPLETED_HEADER, SESSION_HEADER, continue_session
from platforms.api_server.turn_call import STOPPED, Finished, TurnCall
from platforms.api_server.wire import PLATFORM, ApiError, Turn
from platforms.support.http_host import committed, read_decoded

if TYPE_CHECKING:
    from hermes_actors.ports import ApiInbox, StoredAnswer
    from platforms.support.http_host import HttpHost

__all__ = ["DISCONNECT_POLL_S", "KEEP_ALIVE", "NO_RETRY", "ApiService", "failure_error", "require_json"]

_log = logging.getLogger(__name__)
_STOPPING_READ_S = 0.3  # each store read of a request answered because the server stops

R = TypeVar("R")


async def _within(read: Coroutine[Any, Any, R | None], bound: float | None) -> R | None:
    """``await read``, or ``None`` when it takes longer than ``bound`` seconds (no bound: ``None``)."""
    if bound is None:
        return await read
    try:
        return await asyncio.wait_for(read, bound)
    except TimeoutError:
        return None


KEEP_ALIVE = b": keepalive\n\n"
DISCONNECT_POLL_S = 1.0  # how often a wait looks whether its client is still connected
NO_RETRY = {"x-should-retry": "false"}  # OpenAI's clients retry 409 and 5xx unless told not to


def require_json(request: web.Request) -> None:
    """A 400 naming ``Content-Type`` when the body is declared as something other than JSON (a request that
    declares nothing is read as JSON)."""
    declared = request.headers.get("Content-Type", "").strip()
    if declared and request.content_type != "application/json":
        raise ApiError(
            400,
            f"Content-Type is {request.content_type or 'missing'!r}; send the body as JSON with "
            "'Content-Type: application/json'",
            code="invalid_content_type",
            param="Content-Type",
        )


def failure_error(finished: Finished, headers: dict[str, str]) -> ApiError:
    """The error a request gets for a turn that ended without the agent's answer. A stopped turn is a 409 the
    client must not retry on its own (the user stopped it); a message refused because its session was busy is a
    409 ``session_busy`` with ``Retry-After`` (nothing of it ran: sending it again then is safe)."""
    if finished.failure_code == OutboundError.SESSION_BUSY:
        retry = {"Retry-After": str(finished.retry_after_s or 1)}
        return ApiError(
            409, finished.failure or "the session is busy", code="session_busy", headers={**headers, **retry}
        )
    if finished.stopped:
        return ApiError(
            409,
            finished.failure or "the turn was stopped before it answered",
            code=STOPPED,
            headers={**headers, COMPLETED_HEADER: "false", **NO_RETRY},
        )
    if finished.failure_code == "agent_incomplete":  # the message is stored: a retry would store it again
        return ApiError(
            502,
            f"the agent did not answer: {finished.failure}",
            type="server_error",
            code="agent_incomplete",
            headers={**headers, COMPLETED_HEADER: "false", **NO_RETRY},
        )
    return ApiError(  # the message is kept and runs again (a store that refused its turn): not to be sent twice
        503,
        finished.failure or "the turn ended without a reply",
        type="server_error",
        code=finished.failure_code,
        headers={**headers, **NO_RETRY},
    )


class ApiService:
    """The shared state of one API server. ``attached`` gives the running inbox and host (``None`` before start)."""

    def __init__(
        self,
        config: ApiServerConfig,
        *,
        scope: str | None,
        waiters: ReplyWaiters,
        attached: Callable[[], tuple[ApiInbox, HttpHost] | None],
    ) -> None:
        self.config = config
        self.scope = scope  # the key's fingerprint: the scope of the sessions this server's key made
        self.waiters = waiters
        self._attached = attached
        self._guards = Guards(config)
        self.retry_fold = RetryFold(config.retry_fold_s)
        self.running = 0
        self.draining = False
        self.stopping: asyncio.Future[None] | None = None  # done once the server stops for good

    def parts(self) -> tuple[ApiInbox, HttpHost]:
        """The running gateway's inbox and the server's host, or a 503 before start."""
        attached = self._attached()
        if attached is None:
            raise ApiError(503, "the API server is not started", type="server_error", code="service_unavailable")
        inbox, host = attached
        return inbox, host

    # -- admission ----------------------------------------------------------------------------------------------

    def admit(self) -> None:
        """Count a request or run among the running ones, or refuse it: 503 while draining, 429 over the cap;
        :meth:`release` gives its place back."""
        if self.draining:
            raise ApiError(
                503,
                "the gateway is draining (hermesd is stopping); retry in a moment, against the restarted server",
                type="server_error",
                code="gateway_draining",
                headers={"Retry-After": "1"},
            )
        cap = self.config.max_concurrent_runs
        if cap and self.running >= cap:
            raise ApiError(
                429,
                f"{self.running} requests and runs are running, the most this server takes at once "
                "(platforms.api_server.max_concurrent_runs); retry shortly",
                type="rate_limit_error",
                code="rate_limit_exceeded",
                headers={"Retry-After": "1"},
            )
        self.running += 1

    def release(self) -> None:
        """Give back the place :meth:`admit` took."""
        self.running -= 1

    @contextmanager
    def admitted(self) -> Iterator[None]:
        """:meth:`admit` the request for the ``with`` block."""
        self.admit()
        try:
            yield
        finally:
            self.release()

    async def event_stream(self, request: web.Request, headers: Mapping[str, str] | None = None) -> web.StreamResponse:
        """Start a server-sent events answer to ``request`` with ``headers``: not cached, and with the security
        headers and CORS set here, since an app mounted on the shared port has no response hook of the API's."""
        response = web.StreamResponse(
            headers={"Cache-Control": "no-cache", **self._guards.stream_headers(request), **(headers or {})}
        )
        response.content_type = "text/event-stream"
        await response.prepare(request)
        return response

    # -- a turn -------------------------------------------------------------------------------------------------

    async def read_body(self, request: web.Request) -> bytes:
        return await read_decoded(request, self.config.max_body_bytes)

    def source(self, name: str, user: str | None = None) -> SessionSource:
        """Where a request's turn comes from: the conversation ``name`` in this key's scope, ``user`` (else the
        name) as the user whose memories it sees."""
        return SessionSource(platform=PLATFORM, scope_id=self.scope, chat_type="dm", chat_id=name, user_id=user or name)

    def turn_call(self, inbound: InboundMessage) -> TurnCall:
        inbox, _ = self.parts()
        return TurnCall(inbox, self.waiters, inbound)

    async def attachments(self, images: Sequence[str]) -> tuple[Attachment, ...]:
        """The request's images as attachments, saved into the media store off the loop."""
        inbox, host = self.parts()
        media = inbox.media
        return await host.blocking(lambda: tuple(image_attachment(media, url) for url in images))

    async def submit(
        self,
        inbound: InboundMessage,
        *,
        continues: str | None,
        idempotency: Idempotency | None,
        call: TurnCall,
        retried: bool = False,
    ) -> str:
        """Accept ``inbound`` into the gateway (off the loop); return its routing key or raise a 503. A retried
        idempotent request is checked (409 for another body) and, when already answered, ends ``call`` with the
        stored answer (said as a folded retry's when ``retried``, :mod:`platforms.api_server.retry_fold`)."""
        inbox, host = self.parts()
        try:
            if continues is not None:
                await host.blocking(partial(continue_session, inbox, inbound, continues))
            accepted = await committed(inbox.submit(inbound), inbox.ask_timeout_s)
        except ApiError:
            raise
        except StoreError as exc:
            if exc.fault is None:
                raise self._not_taking(exc) from None
            _log.warning("api_server: the store refused a message: %s", exc)
            raise ApiError(
                503,
                f"the message could not be saved: {exc}. Nothing of it was kept; send it again once the store "
                "takes writes",
                type="server_error",
                code="storage_unavailable",
            ) from None
        except Exception as exc:
            raise self._not_taking(exc) from None
        if accepted.duplicate and idempotency is not None:
            stored = await host.blocking(partial(inbox.stored_answer, PLATFORM, inbound.message_id))
            if stored is not None:
                idempotency.check(stored)
                outcome = stored_outcome(stored)
                if outcome is not None:
                    call.finish_with(retried_outcome(outcome) if retried else outcome)
        return accepted.routing_key

    @staticmethod
    def _not_taking(exc: Exception) -> ApiError:
        """The 503 for a message the gateway did not take (it stops, or is not running)."""
        if isinstance(exc, HermesError):
            _log.warning("api_server: the gateway refused a message: %s", exc)
        else:
            _log.warning("api_server: the gateway refused a message", exc_info=True)
        return ApiError(
            503,
            f"the gateway is not taking messages ({exc}); retry once hermesd is running",
            type="server_error",
            code="service_unavailable",
        )

    async def session_hint(self, routing_key: str) -> str | None:
        """The session the turn's routing key leads to now (for a reply that has not come yet)."""
        try:
            inbox, host = self.parts()
            return await host.blocking(partial(inbox.session_for, routing_key))
        except Exception:
            return None

    async def stop_call(self, call: TurnCall) -> None:
        """Stop ``call``'s turn (its client left), once: a later notice that the client is gone sends nothing."""
        if call.finished is None and not call.stopped:
            call.stopped = True
            await self.stop_turn(call.inbound)

    async def stop_turn(self, inbound: InboundMessage, *, stop_id: str | None = None) -> bool:
        """Stop the turn of ``inbound`` as ``/stop`` does (its client left): the turn's user message stays stored.
        Return whether the stop was submitted.

        ``stop_id`` is the ``/stop`` message's id, for a caller that expects its reply ("Stopped."): it comes once
        the stopped turn has committed.
        """
        try:
            inbox, _ = self.parts()
            stop = msgspec.structs.replace(
                inbound,
                text="/stop",
                message_id=stop_id or f"api-stop-{uuid.uuid4().hex}",
                attachments=(),
                received_at=time.time(),
                context=msgspec.UNSET,
                fingerprint=msgspec.UNSET,
            )
            inbox.submit(stop)
        except Exception:
            _log.warning("api_server: could not stop a turn", exc_info=True)
            return False
        return True

    async def wait_ended(self, request: web.Request, turn: Turn, call: TurnCall) -> ApiError | None:
        """Whether a request waiting for ``turn`` must stop waiting: the error it ends with (time is up, the server
        stops, the client left: its turn is stopped), ``None`` to keep waiting."""
        if request.transport is None or request.transport.is_closing():
            _log.info("api_server: a client left before its reply; stopping its turn")
            await self.stop_call(call)
            return ApiError(499, "the client closed the connection", code="client_closed")
        if self.stopping is not None and self.stopping.done():
            return await self._abandoned(turn, call, timeout=False)
        if asyncio.get_running_loop().time() >= turn.deadline:
            return await self._abandoned(turn, call, timeout=True)
        return None

    async def _abandoned(self, turn: Turn, call: TurnCall, *, timeout: bool) -> ApiError:
        """The error for a request that stops waiting. It says what the store knows: a turn that is still to
        come or running goes on (its answer, if it gives one, is stored), one that ended without reaching this
        request is said to have ended."""
        # Stopping, the server's thread has a bounded time to answer every waiting request: the store reads are
        # bounded too, and one that does not come in time leaves the answer without what it would have said.
        bound = None if timeout else _STOPPING_READ_S
        stored = await _within(self._stored(call), bound)
        session_id = (stored.session_id if stored is not None else None) or await _within(
            self.session_hint(turn.routing_key), bound
        )
        where = f"session {session_id}" if session_id else "its session"
        then = f"; send {SESSION_HEADER}: {session_id} to continue it" if session_id else ""
        headers = {SESSION_HEADER: session_id} if session_id else {}
        why = f"no reply within {self.config.request_timeout_s:g} s" if timeout else "the API server is stopping"
        if stored is not None and stored.state != "pending":
            ended = (
                f"its answer is stored in {where}"
                if stored.reply is not None
                else f"it ended without an answer (it was stopped, or the agent failed); its message is kept in {where}"
            )
            message = f"{why}, and the turn has ended: {ended}{then}"
            code = "turn_ended"
        else:
            message = (
                f"{why}; this request stops waiting, but its turn is not stopped: it waits or runs in {where}, and "
                f"an answer it gives is stored there{then}"
            )
            code = "timeout" if timeout else "gateway_draining"
        # A retry would run the message a second time: its turn has run or goes on.
        return ApiError(
            504 if timeout else 503, message, type="server_error", code=code, headers={**headers, **NO_RETRY}
        )

    async def _stored(self, call: TurnCall) -> StoredAnswer | None:
        """What the store holds of ``call``'s message (``None`` when it cannot be read now)."""
        try:
            inbox, host = self.parts()
            return await host.blocking(partial(inbox.stored_answer, PLATFORM, call.message_id))
        except Exception:
            _log.info("api_server: could not read message %s back from the store", call.message_id, exc_info=True)
            return None
