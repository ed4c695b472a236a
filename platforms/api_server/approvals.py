"""Answering a request for approval over the API: ``POST /v1/runs/{id}/approval``.

A run whose turn paused on tool calls that need approval is ``requires_approval`` with the request
(``approval: {id, calls, expires_at}``; its subscribers got ``run.requires_approval``). The body
``{"approval_id": N, "decision": "approve" | "deny", "reason"?}`` answers it as ``/approve N`` or ``/deny N reason``
would in a chat, from the request's principal (the API key and the user it speaks for, as ``POST /v1/runs`` has
them): only the principal of the run's session may answer (403 for anyone else; the runtime checks again). The
answer is a message of the run's conversation, so the run goes on with the turn that continues from the decision
(202, then ``GET`` and the event stream follow it as before) and ends with that turn's reply, or pauses again.
A request answered elsewhere (a chat, the console, another replica, its deadline) is seen in the store
(:func:`follow_decision`): the run ends as the store has it, with the continued turn's reply.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Container
from enum import StrEnum
from functools import partial
from typing import TYPE_CHECKING

import msgspec

from hermes_actors.messages import InboundMessage
from hermes_actors.ports import StoredAnswer
from platforms.api_server.principal import request_user
from platforms.api_server.run import Run, RunStatus
from platforms.api_server.sessions import memory_scope
from platforms.api_server.wire import ApiError

if TYPE_CHECKING:
    from aiohttp import web

    from platforms.api_server.service import ApiService

__all__ = ["Decision", "DecisionBody", "decision_body", "decision_message", "follow_decision"]


class Decision(StrEnum):
    """What a person answers."""

    APPROVE = "approve"
    DENY = "deny"


class DecisionBody(msgspec.Struct, frozen=True, kw_only=True):
    """The body of an approval's answer; fields it does not name are ignored."""

    approval_id: int
    decision: Decision
    reason: str | None = None


_decoder = msgspec.json.Decoder(DecisionBody)


def decision_body(raw: bytes) -> DecisionBody:
    """Decode an answer's body; a 400 naming the field for a body that is not one."""
    try:
        return _decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise ApiError(
            400,
            f"the body is not an approval's answer ({exc}); send "
            '{"approval_id": N, "decision": "approve" or "deny", "reason": "..."}',
            param="decision",
        ) from None
    except msgspec.DecodeError as exc:
        raise ApiError(400, f"the body is not JSON ({exc}); send a JSON object") from None


async def decision_message(service: ApiService, request: web.Request, run: Run, body: DecisionBody) -> InboundMessage:
    """The message that answers ``run``'s request from the request's principal: a 409 when the run does not wait
    for ``body.approval_id``, a 403 when the principal is not the one of the run's session."""
    waiting = run.approval
    if run.status is not RunStatus.REQUIRES_APPROVAL or waiting is None:
        raise ApiError(
            409,
            f"run {run.run_id} is {run.status}, not waiting for an approval; nothing was changed",
            code="run_not_waiting",
        )
    if waiting.id != body.approval_id:
        raise ApiError(
            409,
            f"run {run.run_id} waits for approval {waiting.id}, not {body.approval_id}; answer that one",
            code="approval_mismatch",
            param="approval_id",
        )
    user = memory_scope(request.headers) or request_user(service.config, None, request.headers)
    chat = run.source.chat_id if run.source is not None else None
    source = service.source(chat or run.run_id, user)
    inbox, host = service.parts()
    owner = await host.blocking(partial(inbox.session_owner, run.session_id)) if run.session_id else None
    if owner is not None and (owner.scope_id != source.scope_id or owner.user_id != source.user_id):
        raise ApiError(
            403,
            f"only the user of the run's session (or the operator, in the console) can answer approval "
            f"{body.approval_id}; nothing was changed",
            type="permission_error",
            code="not_your_approval",
        )
    verb = "/approve" if body.decision is Decision.APPROVE else "/deny"
    reason = (body.reason or "").strip()
    text = f"{verb} {body.approval_id}" + (f" {reason}" if reason else "")
    return InboundMessage(source=source, text=text, message_id=f"approval-{uuid.uuid4().hex}", received_at=time.time())


async def follow_decision(
    run: Run, stored: Callable[[], Awaitable[StoredAnswer | None]], answering: Container[str], every_s: float
) -> None:
    """Look at a paused run in the store (``stored``) every ``every_s`` until its request is answered elsewhere (a
    chat's ``/approve``, the console, another process of the cluster, the deadline): the run then ends as the store
    has it, with the continued turn's reply (or pauses on the next request). An answer this process submits (the
    run's id is in ``answering`` meanwhile) resumes the run itself, and the look ends."""
    waiting, call = run.approval, run.call

    def still_waiting() -> bool:
        return run.status is RunStatus.REQUIRES_APPROVAL and run.approval is waiting and run.call is call

    while still_waiting():
        await asyncio.sleep(every_s)
        if not still_waiting() or run.run_id in answering:
            continue
        try:
            found = await stored()
        except ApiError:
            continue  # logged; looked at again later
        if not still_waiting() or run.run_id in answering or found is None or found.state == "pending":
            continue
        if found.approval is None or waiting is None or found.approval.id != waiting.id:
            run.end_stored(found, watched=False)
