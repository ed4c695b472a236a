"""A ``/v1/responses`` answer to a request for approval that was answered elsewhere first.

A response that paused ends with ``mcp_approval_request`` items; its client answers with an ``mcp_approval_response``
(or ``POST /v1/responses/{id}/approval``). When the request was answered before that (a chat's ``/approve``, the
console, another replica, its deadline) and the turn has continued from the decision, the new response is that
continued turn's answer as the store has it (:func:`decided_elsewhere`; its reply, or the next request it paused on),
and no message is sent: the session would only say the request was answered already. An answer that arrives while
the request is still open goes to the session as a message, as before; when the session refuses it because another
decision came first (:func:`settle_refused`: that decision's turn was under way), the response is that turn's
answer too.
"""

from __future__ import annotations

import re
from functools import partial
from typing import TYPE_CHECKING, Any

import msgspec

from hermes_actors.messages import InboundMessage, ResponseRecord
from hermes_actors.ports import StoredAnswer
from platforms.api_server.response_draft import ResponseDraft
from platforms.api_server.responses_background import Keep, stored_outcome, turn_id
from platforms.api_server.responses_turns import visible_response
from platforms.api_server.sessions import SESSION_HEADER
from platforms.api_server.turn_call import Finished
from platforms.api_server.wire import PLATFORM, json_response

if TYPE_CHECKING:
    from aiohttp import web

    from platforms.api_server.service import ApiService

__all__ = ["decided_elsewhere", "response_turn_id", "settle_refused", "settled_response"]

_DECISION = re.compile(r"^/(?:approve|deny)\s+#?(\d{1,18})\b")


class _Asked(msgspec.Struct):
    """The parts of a stored response that say what it asked and how it ran."""

    output: list[dict[str, Any]] = []
    background: bool | None = False


_asked_decoder = msgspec.json.Decoder(_Asked)


def response_turn_id(record: ResponseRecord) -> str:
    """The inbox message id of the turn that made the stored response ``record``."""
    return turn_id(record.id) if _asked_decoder.decode(record.body).background else f"api-{record.id}"


async def decided_elsewhere(service: ApiService, draft: ResponseDraft, sent: InboundMessage) -> StoredAnswer | None:
    """The stored answer of the turn that continued from the request ``sent`` answers (``/approve N``, ``/deny N``),
    when the response ``draft`` follows (its ``previous_response_id``, else the newest of its conversation) asked
    request ``N``, it was answered elsewhere and continued, and ``sent`` comes from the session's own user; ``None``
    otherwise (no answer, another request, one still open, or another user: the session answers the message)."""
    decision = _DECISION.match(sent.text)
    if decision is None:
        return None
    previous = await _asking(service, draft)
    if previous is None:
        return None
    approval_id = int(decision[1])
    prefix = f"mcpr_{approval_id}_"
    asked = _asked_decoder.decode(previous.body)
    if not any(str(item.get("id", "")).startswith(prefix) for item in asked.output):
        return None
    inbox, host = service.parts()
    stored = await host.blocking(partial(inbox.stored_answer, PLATFORM, response_turn_id(previous)))
    if stored is None or stored.state != "done":
        return None
    if stored.approval is not None and stored.approval.id == approval_id:
        return None  # no turn has continued from it yet: the session takes the answer (or says who was first)
    owner = await host.blocking(partial(inbox.session_owner, stored.session_id)) if stored.session_id else None
    if owner is None or (owner.scope_id, owner.user_id) != (sent.source.scope_id, sent.source.user_id):
        return None  # only the session's user may answer: the session tells anyone else so
    return stored


async def _asking(service: ApiService, draft: ResponseDraft) -> ResponseRecord | None:
    """The stored response ``draft`` follows: its ``previous_response_id``'s, else its conversation's newest."""
    base = draft.base
    if base.previous_response_id is not None:
        return await visible_response(service, base.previous_response_id)
    if base.conversation is None:
        return None
    inbox, host = service.parts()
    return await host.blocking(partial(inbox.latest_response_in, service.scope, base.conversation.id))


async def settled_response(
    service: ApiService,
    request: web.Request,
    draft: ResponseDraft,
    stored: StoredAnswer,
    *,
    stream: bool,
    keep: Keep,
) -> web.StreamResponse:
    """Answer ``draft`` with the stored answer :func:`decided_elsewhere` found (as JSON, or its whole stream at
    once), stored with the session it ran in like any response."""
    created = draft.created()
    events = draft.finish(stored_outcome(stored))
    await keep(draft, stored.session_id)
    headers = {SESSION_HEADER: stored.session_id} if stored.session_id else {}
    if not stream:
        return json_response(draft.response(), headers=headers)
    response = await service.event_stream(request, headers or None)
    await response.write(b"".join(event.sse() for event in (*created, *events)))
    await response.write_eof()
    return response


async def settle_refused(
    service: ApiService, draft: ResponseDraft, sent: InboundMessage, finished: Finished
) -> Finished:
    """``finished``, the outcome of the answer ``sent`` for ``draft``; or, when the session refused that answer
    because the request had been answered elsewhere first, the outcome of the turn that continued from it."""
    follows = draft.base.previous_response_id is not None or draft.base.conversation is not None
    if not follows or finished.reply is None or _DECISION.match(sent.text) is None:
        return finished
    inbox, host = service.parts()
    own = await host.blocking(partial(inbox.stored_answer, PLATFORM, sent.message_id))
    if own is None or own.state != "rejected":
        return finished
    done = await decided_elsewhere(service, draft, sent)
    return finished if done is None else stored_outcome(done)
