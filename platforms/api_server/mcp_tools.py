"""What each tool of ``/mcp`` does, for one caller: the sessions it sees, read, searched and talked to, and runs.

A :class:`Caller` is the API key a request carried: the client key sees the sessions this API opened with it
(platform ``api_server``, scope the key's fingerprint), exactly as ``/v1`` does; the admin key sees every session,
as ``/api/sessions`` does. A session or run the caller may not see is answered exactly like one that does not
exist. Every problem is a :class:`ToolError` whose ``envelope`` is the ``session_search`` shape, ``{"error": ...}``
(with a ``code``), so a caller reads one error shape from every tool.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import msgspec

from hermes_actors.ids import is_session_id
from hermes_actors.messages import InboundMessage
from hermes_actors.operator_port import Audience, ConversationFilter, Operator
from platforms.api_server.operator_api import operator_call
from platforms.api_server.run import RunView
from platforms.api_server.service import failure_error
from platforms.api_server.turn_call import Finished, TextDelta, ToolEvent, TurnCall
from platforms.api_server.wire import PLATFORM, ApiError

if TYPE_CHECKING:
    from platforms.api_server.operator_chat import OperatorChat
    from platforms.api_server.runs import Runs
    from platforms.api_server.service import ApiService

__all__ = [
    "Caller",
    "ListArguments",
    "Progress",
    "ReadArguments",
    "RunArguments",
    "SendArguments",
    "SessionTools",
    "ToolError",
]

Progress = Callable[[str], Awaitable[None]]
"""Tells the caller one piece of a turn as it happens (a text delta, a tool call)."""

T = TypeVar("T")

_TICK_S = 1.0
_MAX_LIST = 200
_MAX_READ = 500


class ToolError(Exception):
    """A tool call that did not do what it was asked; ``envelope`` is its answer."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.envelope: dict[str, Any] = {"error": message, "code": code}

    @classmethod
    def of(cls, error: ApiError) -> ToolError:
        detail = error.body.error
        return cls(detail.message, detail.code or "error")


class Caller(msgspec.Struct, frozen=True, kw_only=True):
    """Who called: the admin key (every session), or the client key whose fingerprint is ``scope`` (``None``: a
    server without a key) and which speaks for ``user`` (``platforms.api_server.user``; ``None``: any user)."""

    admin: bool
    scope: str | None = None
    user: str | None = None

    @property
    def audience(self) -> Audience | None:
        """The sessions the caller sees (``None``: every session)."""
        return None if self.admin else Audience(platform=PLATFORM, scope_id=self.scope, user_id=self.user)


class ListArguments(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    limit: Annotated[int, msgspec.Meta(ge=1, le=_MAX_LIST)] = 20
    offset: Annotated[int, msgspec.Meta(ge=0)] = 0
    source: str | None = None
    ended: bool | None = None


class ReadArguments(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    session_id: str
    limit: Annotated[int, msgspec.Meta(ge=1, le=_MAX_READ)] = 100


class SendArguments(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    message: str
    session_id: str | None = None


class RunArguments(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    run_id: str


def unknown_session(session_id: str) -> ToolError:
    """The answer for a session the caller cannot see, the same whether it exists or not."""
    return ToolError(
        f"no session {session_id[:100]!r}; pass a session_id that sessions_list or session_search gave this key",
        "session_not_found",
    )


class SessionTools:
    """The tools over one API server's ``service``, ``runs`` and operator ``chat``."""

    def __init__(self, service: ApiService, runs: Runs, chat: OperatorChat) -> None:
        self._service = service
        self._runs = runs
        self._chat = chat

    async def _operator(self, call: Callable[[Operator], T]) -> T:
        attached = self._service.parts
        try:
            return await operator_call(lambda: attached(), call)
        except ApiError as error:
            raise ToolError.of(error) from None

    async def parameters(self) -> dict[str, Any]:
        """``session_search``'s argument schema."""
        return await self._operator(lambda op: op.session_search_parameters())

    async def search(self, caller: Caller, arguments: dict[str, Any]) -> dict[str, Any]:
        answer = await self._operator(lambda op: op.session_search(arguments, audience=caller.audience))
        found: dict[str, Any] = msgspec.json.decode(answer)
        return found

    async def sessions(self, caller: Caller, args: ListArguments) -> dict[str, Any]:
        where = ConversationFilter(source=args.source, ended=args.ended, audience=caller.audience)
        page = await self._operator(lambda op: op.conversations(where, limit=args.limit, offset=args.offset))
        return {
            "object": "list",
            "data": msgspec.to_builtins(page.conversations),
            "total": page.total,
            "limit": page.limit,
            "offset": page.offset,
            "has_more": page.offset + len(page.conversations) < page.total,
        }

    async def _check_visible(self, caller: Caller, session_id: str) -> None:
        """A :class:`ToolError` unless the caller may see ``session_id``."""
        if caller.admin:
            return
        inbox, host = self._service.parts()
        owner = await host.blocking(partial(inbox.session_owner, session_id)) if is_session_id(session_id) else None
        if owner is None or owner.platform != PLATFORM or owner.scope_id != caller.scope:
            raise unknown_session(session_id)
        if caller.user is not None and owner.user_id != caller.user:
            raise unknown_session(session_id)

    async def read(self, caller: Caller, args: ReadArguments) -> dict[str, Any]:
        await self._check_visible(caller, args.session_id)
        try:
            found = await self._operator(lambda op: op.messages(args.session_id, lineage=True))
        except ToolError as error:
            if error.envelope["code"] == "session_not_found":
                raise unknown_session(args.session_id) from None
            raise
        shown = found.messages[-args.limit :]
        return {
            "session_id": found.session_id,
            "lineage": found.lineage,
            "messages": msgspec.to_builtins(shown),
            "omitted": len(found.messages) - len(shown),
        }

    async def send(self, caller: Caller, args: SendArguments, progress: Progress) -> dict[str, Any]:
        """Run a turn with ``args.message`` in the caller's session (a new one without ``session_id``), telling
        ``progress`` its pieces; answer ``{"session_id", "reply"}``."""
        if not args.message.strip():
            raise ToolError("message is empty; send the text of the turn", "invalid_value")
        if caller.admin and args.session_id is None:
            raise ToolError("session_id is required with the admin key: name the session to talk in", "invalid_value")
        if args.session_id is not None:
            await self._check_visible(caller, args.session_id)
        try:
            with self._service.admitted():
                call = await (self._begin_as_admin(args) if caller.admin else self._begin_as_client(caller, args))
                return await self._finish(call, progress)
        except ApiError as error:
            raise ToolError.of(error) from None

    async def _begin_as_admin(self, args: SendArguments) -> TurnCall:
        assert args.session_id is not None
        try:
            return await self._chat.begin(args.session_id, args.message)
        except ApiError as error:
            if error.body.error.code == "session_not_found":
                raise unknown_session(args.session_id) from None
            raise

    async def _begin_as_client(self, caller: Caller, args: SendArguments) -> TurnCall:
        service = self._service
        inbox, host = service.parts()
        user = caller.user  # a key that speaks for one user: the turn is that user's
        if user is None and args.session_id is not None:
            owner = await host.blocking(partial(inbox.session_owner, args.session_id))
            user = owner.user_id if owner is not None else None  # the turn speaks for whoever opened the session
        name = args.session_id or f"mcp-{uuid.uuid4().hex}"
        inbound = InboundMessage(
            source=service.source(name, user),
            text=args.message,
            message_id=f"mcp-{uuid.uuid4().hex}",
            received_at=time.time(),
        )
        call = service.turn_call(inbound)
        call.open()
        try:
            await service.submit(inbound, continues=args.session_id, idempotency=None, call=call)
        except BaseException:
            call.close()
            raise
        return call

    async def _finish(self, call: TurnCall, progress: Progress) -> dict[str, Any]:
        """Follow ``call`` to its end (closing it), telling ``progress`` each delta and tool call. A caller that
        goes away (the call is cancelled) stops the turn, as a chat client that leaves does; a server that stops
        does not (the turn goes on and its answer is stored)."""
        service = self._service
        loop = asyncio.get_running_loop()
        deadline = loop.time() + service.config.request_timeout_s
        try:
            async for event in call.events(_TICK_S):
                if isinstance(event, TextDelta):
                    await progress(event.text)
                elif isinstance(event, ToolEvent):
                    await progress(f"[tool {event.name}: {event.status}]")
                elif isinstance(event, Finished):
                    return _answer(event)
                elif service.stopping is not None and service.stopping.done():
                    raise ToolError(
                        "the API server is stopping; the turn goes on and its answer is stored in its session",
                        "gateway_draining",
                    )
                elif loop.time() >= deadline:
                    raise ToolError(
                        f"no reply within {service.config.request_timeout_s:g} s; the turn is not stopped: its "
                        "answer is stored in its session (read it with session_read)",
                        "timeout",
                    )
            raise ToolError("the turn ended without a reply", "turn_ended")
        except asyncio.CancelledError:
            if service.stopping is None or not service.stopping.done():  # a server that stops leaves turns running
                await asyncio.shield(service.stop_call(call))
            raise
        finally:
            call.close()

    async def run_status(self, caller: Caller, args: RunArguments) -> dict[str, Any]:
        try:
            run = await self._runs.find(args.run_id, every_key=caller.admin)
            return _view(await self._runs.view(run))
        except ApiError as error:
            raise ToolError.of(error) from None

    async def run_stop(self, caller: Caller, args: RunArguments) -> dict[str, Any]:
        try:
            run = await self._runs.find(args.run_id, every_key=caller.admin)
            return _view(await self._runs.stop_run(run))
        except ApiError as error:
            raise ToolError.of(error) from None


def _view(view: RunView) -> dict[str, Any]:
    built: dict[str, Any] = msgspec.to_builtins(view)
    return built


def _answer(finished: Finished) -> dict[str, Any]:
    if finished.reply is None:
        raise ToolError.of(failure_error(finished, {}))
    return {"session_id": finished.session_id, "reply": finished.reply}
