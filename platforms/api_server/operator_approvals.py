"""The operator's ``/api/approvals``: requests for approval waiting for an answer, and the operator's answer.

- ``GET /api/approvals`` lists the requests nobody has answered, oldest first (``data``: each with ``id``,
  ``session_id``, where it was asked, the ``calls`` and ``expires_at``);
- ``POST /api/approvals/{id}`` with ``{"decision": "approve" | "deny", "reason"?}`` answers one as the operator:
  202 with the request as answered; the session continues the paused turn and its reply goes to the chat that was
  asked. 404 for no such request, 409 when it was answered already or its conversation ended.

Both take the admin key, as ``/api/sessions`` does; the console's Approvals page answers through the same port.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TypeVar

import msgspec
from aiohttp import web

from hermes_actors.approval_port import ApprovalDesk, ApprovalError, ApprovalNotFoundError
from platforms.api_server.approvals import Decision
from platforms.api_server.operator_api import Attached, Route
from platforms.api_server.wire import ApiError, json_response
from platforms.support.http_body import read_decoded

__all__ = ["DecisionOnly", "OperatorApprovals", "approval_call"]

T = TypeVar("T")


class DecisionOnly(msgspec.Struct, frozen=True, kw_only=True):
    """The body of an operator's answer (the request is the path's)."""

    decision: Decision
    reason: str | None = None


_decoder = msgspec.json.Decoder(DecisionOnly)


async def approval_call(attached: Attached, call: Callable[[ApprovalDesk], T]) -> T:
    """Run ``call(inbox.approvals)`` off the event loop; the port's refusals become API errors."""
    running = attached()
    if running is None:
        raise ApiError(503, "the API server is not started", type="server_error", code="service_unavailable")
    inbox, host = running
    try:
        return await host.blocking(partial(call, inbox.approvals))
    except ApprovalNotFoundError as exc:
        raise ApiError(404, str(exc), code="approval_not_found") from None
    except ApprovalError as exc:
        raise ApiError(409, str(exc), code="approval_closed") from None


def approval_in_path(request: web.Request) -> int:
    """The ``{approval_id}`` of the path (a 404 for one no request could have)."""
    raw = request.match_info["approval_id"]
    if not raw.isdigit() or len(raw) > 18:
        raise ApiError(404, f"no approval {raw[:100]!r}", code="approval_not_found")
    return int(raw)


class OperatorApprovals:
    """The ``/api/approvals`` routes (see the module docstring)."""

    def __init__(self, attached: Attached, max_body_bytes: int) -> None:
        self._attached = attached
        self._max_body = max_body_bytes

    def add_to(self, app: web.Application, guarded: Callable[[Route], Route]) -> None:
        """Add the routes, each behind the admin key (``guarded``)."""
        app.router.add_get("/api/approvals", guarded(self.listing))
        app.router.add_post("/api/approvals/{approval_id}", guarded(self.decide))

    async def listing(self, request: web.Request) -> web.Response:
        waiting = await approval_call(self._attached, lambda desk: desk.pending())
        return json_response({"object": "list", "data": waiting})

    async def decide(self, request: web.Request) -> web.Response:
        approval_id = approval_in_path(request)
        raw = await read_decoded(request, self._max_body)
        try:
            body = _decoder.decode(raw)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise ApiError(
                400, f'the body is not an answer ({exc}); send {{"decision": "approve" or "deny"}}', param="decision"
            ) from None
        approved = body.decision is Decision.APPROVE
        answered = await approval_call(
            self._attached, lambda desk: desk.decide(approval_id, approved=approved, reason=body.reason)
        )
        return json_response(answered, status=202)
