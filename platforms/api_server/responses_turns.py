"""Where a ``/v1/responses`` turn runs and for whom (:func:`place_turn`), and the stored responses a request may see
(:func:`visible_response`).

- ``previous_response_id`` continues the session of that response: the model sees its stored transcript, then the
  request's input items.
- ``conversation`` naming a conversation of ``/v1/conversations`` (``conv_<hex>``) runs the turn in that
  conversation's session: the model sees the conversation's items as they are stored now (its current session's, a
  compression's summary as system text), then the input items; the turn's messages are stored after them.
- Any other ``conversation`` is a name the client picks: the turn continues from the newest response in it.
- Without either, the turn starts a session.

The user a turn speaks for is the request's (:func:`~platforms.api_server.principal.request_user`: the key's user, the
OpenAI ``user`` or ``safety_identifier``, Open WebUI's trusted headers), else the user of the session it continues,
else the new session is its own user. ``X-Hermes-Session-Key`` still names the memories it sees. A key that speaks
for one user sees only that user's responses and conversations (:func:`~platforms.api_server.principal.key_sees`).
"""

from __future__ import annotations

import re
from functools import partial
from typing import TYPE_CHECKING

import msgspec
from aiohttp import web

from hermes_actors.messages import ContextMessage, Conversation, ResponseRecord
from platforms.api_server.conversations_wire import not_found as conversation_not_found
from platforms.api_server.principal import key_sees, request_user
from platforms.api_server.responses_wire import InputTurn, ResponsesRequest, conversation_of
from platforms.api_server.sessions import memory_scope
from platforms.api_server.wire import ApiError

if TYPE_CHECKING:
    from platforms.api_server.service import ApiService

__all__ = ["TurnPlace", "place_turn", "response_not_found", "visible_response"]

_CONVERSATION_ID = re.compile(r"conv_[0-9a-f]{32}")


class TurnPlace(msgspec.Struct, frozen=True, kw_only=True):
    """Where a turn runs: the session it ``continues`` (``None``: a new one), the chat ``name`` of its source, the
    ``user`` it speaks for, the ``instructions`` in force, what the model sees with its input (``context``), the
    response it follows (``previous``) and the ``conversation`` it belongs to."""

    continues: str | None
    name: str
    user: str
    instructions: str | None
    context: Conversation
    previous: ResponseRecord | None = None
    conversation: str | None = None


def response_not_found(response_id: str, param: str) -> ApiError:
    """The 404 of a response this key does not have."""
    return ApiError(
        404,
        f"no response {response_id[:100]!r}; it was never stored (store: false), was deleted with its session, or "
        "belongs to another API key",
        code="response_not_found",
        param=param,
    )


async def visible_response(service: ApiService, response_id: str) -> ResponseRecord | None:
    """The stored response ``response_id`` of this key (and of its user, for a key that speaks for one)."""
    inbox, host = service.parts()
    found = await host.blocking(partial(inbox.get_response, response_id, service.scope))
    if found is None or service.config.user is None:
        return found
    owner = await host.blocking(partial(inbox.session_owner, found.session_id))
    return found if owner is not None and key_sees(service.config, owner.user_id) else None


async def place_turn(
    service: ApiService, request: web.Request, body: ResponsesRequest, given: InputTurn, response_id: str
) -> TurnPlace:
    """Where the request's turn runs (see the module's docstring); a 404 for a response or conversation this key
    does not have."""
    inbox, host = service.parts()
    conversation = conversation_of(body)
    asked = request_user(service.config, body.user or body.safety_identifier, request.headers)
    user = memory_scope(request.headers) or asked
    system = given.system
    if conversation is not None and _CONVERSATION_ID.fullmatch(conversation):
        found = await host.blocking(partial(inbox.conversations.find, conversation, service.scope))
        if found is None or not key_sees(service.config, found.user_id):
            raise conversation_not_found(conversation, "conversation")
        stored = await host.blocking(partial(inbox.conversations.items, conversation, service.scope, current=True))
        history, systems = [], []
        for item in stored or []:
            if item.role == "system":
                systems.append(item.content)
            else:
                history.append(
                    ContextMessage(
                        role=item.role, content=item.content, tool_calls=item.tool_calls, tool_call_id=item.tool_call_id
                    )
                )
        latest = await host.blocking(partial(inbox.latest_response_in, service.scope, conversation))
        instructions = body.instructions or (latest.instructions if latest is not None else None)
        text = "\n".join(part for part in (instructions, *systems, system) if part) or None
        return TurnPlace(
            continues=found.session_id,
            name=conversation,
            user=user or found.user_id or conversation,
            instructions=instructions,
            context=Conversation(system=text, history=(*history, *given.history)),
            conversation=conversation,
        )
    previous: ResponseRecord | None = None
    if body.previous_response_id is not None:
        previous = await visible_response(service, body.previous_response_id)
        if previous is None:
            raise response_not_found(body.previous_response_id, "previous_response_id")
    elif conversation is not None:
        previous = await host.blocking(partial(inbox.latest_response_in, service.scope, conversation))
    instructions = body.instructions
    if instructions is None and previous is not None:
        instructions = previous.instructions
    continues = previous.session_id if previous is not None else None
    name = continues or f"api-{response_id}"
    if user is None and continues is not None:  # the chain's turns speak for whoever opened the session
        owner = await host.blocking(partial(inbox.session_owner, continues))
        user = owner.user_id if owner is not None else None
    text = "\n".join(part for part in (instructions, system) if part) or None
    return TurnPlace(
        continues=continues,
        name=name,
        user=user or name,
        instructions=instructions,
        context=Conversation(system=text, history=given.history, after_transcript=True),
        previous=previous,
        conversation=conversation,
    )
