"""The operator API: ``/api/sessions`` on the API server's listener, for someone holding the admin key.

These routes see every session of every platform, so they take the admin key (``daemon.admin_key``,
``$HERMES_ADMIN_KEY``, or the one ``hermesd`` generated into ``$HERMES_HOME/admin_key``; ``hermesctl admin-key``
prints it), never the client key, compared in constant time. Everything goes through
:class:`~hermes_actors.operator_port.Operator` (``inbox.operator``), off the event loop; a change reaches a live
session through its actor, and a session another process holds is a 409 rather than a silent write.

- ``GET /api/sessions?limit=&offset=&source=&include_children=``: one row per compression lineage, shown by its
  newest session (``lineage`` lists its ids, ``message_count`` is its total); every session with
  ``include_children=true``.
- ``POST /api/sessions`` ``{"id", "title", "system_prompt"}`` (all optional): 201 and the session.
- ``GET``, ``PATCH`` (``{"title"}``, ``{"end": true}``), ``DELETE /api/sessions/{id}``.
- ``GET /api/sessions/{id}/messages``: the whole lineage's messages root first, each with its ``session_id``
  (a compression child starts with the summary and the recent messages it carried over, so those appear in both);
  ``?lineage=false`` gives only the newest session's.
- ``POST /api/sessions/{id}/fork``: 201 and the child (see :meth:`Operator.fork`).
- ``POST /api/sessions/{id}/chat`` and ``/chat/stream`` (:mod:`platforms.api_server.operator_chat`).
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, TypeVar

import msgspec
from aiohttp import web

from hermes_actors.errors import (
    HermesError,
    SessionBusyError,
    SessionClosedError,
    SessionNotFoundError,
    TitleError,
    TitleInUseError,
)
from hermes_actors.operator_port import Operator, SessionExistsError, SessionView
from platforms.api_server.wire import ApiError, json_response
from platforms.support import json_guard
from platforms.support.http_host import read_decoded

if TYPE_CHECKING:
    from hermes_actors.ports import ApiInbox
    from platforms.support.http_host import HttpHost

__all__ = ["Attached", "OperatorApi", "decode_body", "operator_call"]

T = TypeVar("T")
Attached = Callable[[], "tuple[ApiInbox, HttpHost] | None"]
Route = Callable[[web.Request], Awaitable[web.StreamResponse]]

_MAX_LIMIT = 200
_DEFAULT_LIMIT = 20
_NEW_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_PATH_ID = re.compile(r"[\x21-\x7e]{1,256}")
_FIELD_PATH = re.compile(r" - at `\$\.?(?P<path>.*)`$")
_TRUE, _FALSE = frozenset({"true", "1", "yes"}), frozenset({"false", "0", "no", ""})


class _Create(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    id: str | None = None
    title: str | None = None
    system_prompt: str | None = None


class _Patch(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    title: str | msgspec.UnsetType | None = msgspec.UNSET
    end: bool = False


_create = msgspec.json.Decoder(_Create)
_patch = msgspec.json.Decoder(_Patch)


def decode_body(decoder: msgspec.json.Decoder[T], body: bytes) -> T:
    """Decode a JSON body; anything malformed is a 400 naming the field (or the problem)."""
    try:
        return json_guard.decode(decoder, body)
    except msgspec.ValidationError as exc:
        match = _FIELD_PATH.search(str(exc))
        raise ApiError(
            400, f"invalid request body: {exc}", code="invalid_value", param=match["path"] if match else None
        ) from None
    except msgspec.DecodeError as exc:
        raise ApiError(
            400, f"request body is not valid JSON ({exc}); send a JSON object", code="invalid_json"
        ) from None


def _refusal(exc: HermesError) -> ApiError:
    """The HTTP answer to what the operator port raised."""
    text = str(exc)
    match exc:
        case SessionNotFoundError():
            return ApiError(404, text, code="session_not_found")
        case SessionBusyError():
            return ApiError(409, text, code="session_busy")
        case SessionClosedError():
            return ApiError(409, text, code="session_ended")
        case TitleInUseError():
            return ApiError(409, text, code="title_in_use", param="title")
        case SessionExistsError():
            return ApiError(409, text, code="session_exists", param="id")
        case TitleError():
            return ApiError(400, text, code="title_too_long", param="title")
    return ApiError(503, text, type="server_error", code="service_unavailable")


async def operator_call(attached: Attached, call: Callable[[Operator], T]) -> T:
    """Run ``call(inbox.operator)`` off the event loop; the port's refusals become API errors."""
    running = attached()
    if running is None:
        raise ApiError(503, "the API server is not started", type="server_error", code="service_unavailable")
    inbox, host = running
    try:
        return await host.blocking(partial(call, inbox.operator))
    except HermesError as exc:
        raise _refusal(exc) from None


def session_in_path(request: web.Request) -> str:
    """The ``{session_id}`` of the path (a 404 for one no session could have)."""
    session_id = request.match_info["session_id"]
    if not _PATH_ID.fullmatch(session_id):
        raise ApiError(404, f"no session {session_id[:100]!r}", code="session_not_found")
    return session_id


class OperatorApi:
    """The ``/api/sessions`` routes; ``attached`` returns the running server's inbox and host (``None`` before
    start), ``max_body_bytes`` bounds a request body."""

    def __init__(self, attached: Attached, max_body_bytes: int) -> None:
        self._attached = attached
        self._max_body = max_body_bytes

    def add_to(self, app: web.Application, chat: Route, chat_stream: Route) -> None:
        """Add the routes, each behind the admin key (``chat`` and ``chat_stream`` answer the chat routes)."""
        guarded = self.guarded
        app.router.add_get("/api/sessions", guarded(self.listing))
        app.router.add_post("/api/sessions", guarded(self.create))
        app.router.add_get("/api/sessions/{session_id}", guarded(self.get))
        app.router.add_patch("/api/sessions/{session_id}", guarded(self.patch))
        app.router.add_delete("/api/sessions/{session_id}", guarded(self.delete))
        app.router.add_get("/api/sessions/{session_id}/messages", guarded(self.messages))
        app.router.add_post("/api/sessions/{session_id}/fork", guarded(self.fork))
        app.router.add_post("/api/sessions/{session_id}/chat", guarded(chat))
        app.router.add_post("/api/sessions/{session_id}/chat/stream", guarded(chat_stream))

    def guarded(self, route: Route) -> Route:
        """``route`` answered only for a request carrying ``Authorization: Bearer <admin key>``."""

        async def checked(request: web.Request) -> web.StreamResponse:
            running = self._attached()
            if running is None:
                raise ApiError(503, "the API server is not started", type="server_error", code="service_unavailable")
            key = running[0].operator.admin_key
            if key is None:
                raise ApiError(
                    401,
                    "the operator API is off: this server was started without an admin key (hermesd always has "
                    "one: daemon.admin_key, $HERMES_ADMIN_KEY or $HERMES_HOME/admin_key)",
                    code="invalid_admin_key",
                    headers={"WWW-Authenticate": "Bearer"},
                )
            scheme, _, token = request.headers.get("Authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
                raise ApiError(
                    401,
                    "the operator API needs 'Authorization: Bearer <admin key>' (not the client key); "
                    "'hermesctl admin-key' prints it",
                    code="invalid_admin_key",
                    headers={"WWW-Authenticate": "Bearer"},
                )
            return await route(request)

        return checked

    async def _body(self, request: web.Request) -> bytes:
        body = await read_decoded(request, self._max_body)
        return body if body.strip() else b"{}"

    async def listing(self, request: web.Request) -> web.Response:
        query = request.query
        limit = _integer(query.get("limit"), "limit", _DEFAULT_LIMIT, 1, _MAX_LIMIT)
        offset = _integer(query.get("offset"), "offset", 0, 0, None)
        children = _flag(query.get("include_children"), "include_children")
        source = query.get("source") or None
        page = await operator_call(
            self._attached,
            lambda op: op.list_sessions(limit=limit, offset=offset, source=source, include_children=children),
        )
        body = {
            "object": "list",
            "data": page.sessions,
            "total": page.total,
            "limit": page.limit,
            "offset": page.offset,
            "has_more": page.offset + len(page.sessions) < page.total,
        }
        return json_response(body)

    async def create(self, request: web.Request) -> web.Response:
        fields = decode_body(_create, await self._body(request))
        if fields.id is not None and (not _NEW_ID.fullmatch(fields.id) or ".." in fields.id):
            raise ApiError(
                400,
                "id must be 1 to 128 letters, digits, '_', '.' or '-' starting with a letter or digit, without '..' "
                "(leave it out to get a generated one)",
                code="invalid_value",
                param="id",
            )
        view = await operator_call(
            self._attached,
            lambda op: op.create_session(session_id=fields.id, title=fields.title, system_prompt=fields.system_prompt),
        )
        return json_response(view, status=201)

    async def get(self, request: web.Request) -> web.Response:
        session_id = session_in_path(request)
        return json_response(await operator_call(self._attached, lambda op: op.get_session(session_id)))

    async def patch(self, request: web.Request) -> web.Response:
        session_id = session_in_path(request)
        fields = decode_body(_patch, await self._body(request))
        if fields.title is msgspec.UNSET and not fields.end:
            raise ApiError(400, "send 'title' (a string, or null to clear it) and/or 'end': true", code="invalid_value")
        title = fields.title

        def change(op: Operator) -> SessionView:
            if not isinstance(title, msgspec.UnsetType):
                renamed = op.rename(session_id, title)
                if not fields.end:
                    return renamed
            return op.end(session_id)  # after the rename, when both are asked for

        return json_response(await operator_call(self._attached, change))

    async def delete(self, request: web.Request) -> web.Response:
        session_id = session_in_path(request)
        deleted = await operator_call(self._attached, lambda op: op.delete(session_id))
        if not deleted:
            raise ApiError(404, f"no session {session_id!r}", code="session_not_found")
        return json_response({"id": session_id, "object": "session.deleted", "deleted": True})

    async def messages(self, request: web.Request) -> web.Response:
        session_id = session_in_path(request)
        lineage = _flag(request.query.get("lineage"), "lineage", default=True)
        found = await operator_call(self._attached, lambda op: op.messages(session_id, lineage=lineage))
        return json_response(
            {"object": "list", "session_id": found.session_id, "lineage": found.lineage, "data": found.messages}
        )

    async def fork(self, request: web.Request) -> web.Response:
        session_id = session_in_path(request)
        return json_response(await operator_call(self._attached, lambda op: op.fork(session_id)), status=201)


def _integer(raw: str | None, name: str, default: int, low: int, high: int | None) -> int:
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if value < low or (high is not None and value > high):
        bounds = f"{low}..{high}" if high is not None else f"{low} or more"
        raise ApiError(400, f"{name} must be an integer {bounds}, not {raw[:50]!r}", code="invalid_value", param=name)
    return value


def _flag(raw: str | None, name: str, *, default: bool = False) -> bool:
    if raw is None:
        return default
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise ApiError(400, f"{name} must be true or false, not {raw[:50]!r}", code="invalid_value", param=name)
