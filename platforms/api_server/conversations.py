"""``/v1/conversations``: OpenAI's Conversations API, each conversation a stored session.

- ``POST /v1/conversations`` creates one (``conv_<hex>``) with up to 20 items and 16 metadata pairs: a live session
  of the API's, its chat id the conversation's id, holding the items. It speaks for the request's user
  (:mod:`.principal`; else the conversation is its own user), and so does every turn in it.
- ``GET``, ``POST`` (new metadata) and ``DELETE /v1/conversations/{id}``; deleting deletes its sessions, their
  messages and the responses made in them (as deleting a session does).
- ``/v1/conversations/{id}/items``: ``GET`` lists the stored messages as items (``after``, ``order``, ``limit``, as a
  cursor page), ``POST`` adds items without running a turn, and ``GET``/``DELETE .../items/{item_id}`` reach one
  (a deleted item is its stored message, taken out of the transcript).
- ``POST /v1/responses`` with ``conversation: "conv_..."`` runs its turn in the conversation's session: the model sees
  the conversation's items as they are stored then, and the turn's messages become its next items
  (:mod:`.responses_turns`).

Every route is within the API key's scope, and a key that speaks for one user sees only that user's conversations:
anything else is a 404 like an unknown id.
"""

from __future__ import annotations

import time
import uuid
from functools import partial
from typing import TYPE_CHECKING, Any

from aiohttp import web

from hermes_actors.conversation_port import ConversationRecord
from hermes_actors.errors import SessionBusyError, SessionClosedError
from hermes_actors.routing import SessionSource
from platforms.api_server.conversations_wire import (
    conversation_object,
    decode_conversation,
    decode_items,
    decode_metadata,
    item_id_message,
    items_of,
    not_found,
)
from platforms.api_server.principal import key_sees, request_user
from platforms.api_server.responses_items import page_of
from platforms.api_server.responses_wire import item_messages
from platforms.api_server.service import require_json
from platforms.api_server.sessions import memory_scope
from platforms.api_server.wire import PLATFORM, ApiError, json_response

if TYPE_CHECKING:
    from platforms.api_server.service import ApiService

__all__ = ["ConversationsApi"]


class ConversationsApi:
    """The ``/v1/conversations`` routes of one API server (``service`` holds what the routes share)."""

    def __init__(self, service: ApiService) -> None:
        self._service = service

    def add_to(self, app: web.Application) -> None:
        app.router.add_post("/v1/conversations", self.create)
        app.router.add_get("/v1/conversations/{conversation_id}", self.retrieve)
        app.router.add_post("/v1/conversations/{conversation_id}", self.update)
        app.router.add_delete("/v1/conversations/{conversation_id}", self.delete)
        app.router.add_get("/v1/conversations/{conversation_id}/items", self.list_items)
        app.router.add_post("/v1/conversations/{conversation_id}/items", self.add_items)
        app.router.add_get("/v1/conversations/{conversation_id}/items/{item_id}", self.retrieve_item)
        app.router.add_delete("/v1/conversations/{conversation_id}/items/{item_id}", self.delete_item)

    async def create(self, request: web.Request) -> web.Response:
        service = self._service
        require_json(request)
        body = decode_conversation(await service.read_body(request))
        items = item_messages(body.items, "items")
        conversation_id = f"conv_{uuid.uuid4().hex}"
        user = memory_scope(request.headers) or request_user(service.config, None, request.headers)
        source = SessionSource(
            platform=PLATFORM,
            scope_id=service.scope,
            chat_type="dm",
            chat_id=conversation_id,
            user_id=user or conversation_id,
        )
        record = ConversationRecord(
            id=conversation_id, session_id="", scope=service.scope, metadata=body.metadata or {}, created_at=time.time()
        )
        inbox, host = service.parts()
        opened = await host.blocking(partial(inbox.conversations.open, record, source, items))
        return json_response(conversation_object(opened))

    async def retrieve(self, request: web.Request) -> web.Response:
        return json_response(conversation_object(await self.find(request.match_info["conversation_id"])))

    async def update(self, request: web.Request) -> web.Response:
        require_json(request)
        conversation_id = request.match_info["conversation_id"]
        body = decode_metadata(await self._service.read_body(request))
        await self.find(conversation_id)
        inbox, host = self._service.parts()
        changed = await host.blocking(
            partial(inbox.conversations.set_metadata, conversation_id, self._service.scope, body.metadata)
        )
        if changed is None:
            raise not_found(conversation_id)
        return json_response(conversation_object(changed))

    async def delete(self, request: web.Request) -> web.Response:
        conversation_id = request.match_info["conversation_id"]
        await self.find(conversation_id)
        inbox, host = self._service.parts()
        try:
            deleted = await host.blocking(partial(inbox.conversations.delete, conversation_id, self._service.scope))
        except SessionBusyError as exc:
            raise ApiError(409, f"{exc}; try again once it is free", code="conversation_busy") from None
        if not deleted:
            raise not_found(conversation_id)
        return json_response({"id": conversation_id, "object": "conversation.deleted", "deleted": True})

    async def list_items(self, request: web.Request) -> web.Response:
        listed = await self._items(request.match_info["conversation_id"])
        return json_response(page_of(listed, request.query, what="an item of this conversation"))

    async def add_items(self, request: web.Request) -> web.Response:
        require_json(request)
        conversation_id = request.match_info["conversation_id"]
        body = decode_items(await self._service.read_body(request))
        messages = item_messages(body.items, "items")
        await self.find(conversation_id)
        inbox, host = self._service.parts()
        try:
            added = await host.blocking(
                partial(inbox.conversations.add_items, conversation_id, self._service.scope, messages)
            )
        except SessionClosedError as exc:
            raise ApiError(
                409,
                f"conversation {conversation_id} can take no more items: {exc}; create a new conversation",
                code="conversation_ended",
            ) from None
        if added is None:
            raise not_found(conversation_id)
        data = items_of(added)
        return json_response(
            {
                "object": "list",
                "data": data,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
                "has_more": False,
            }
        )

    async def retrieve_item(self, request: web.Request) -> web.Response:
        item_id = request.match_info["item_id"]
        listed = await self._items(request.match_info["conversation_id"])
        found = next((item for item in listed if item["id"] == item_id), None)
        if found is None:
            raise _item_not_found(item_id)
        return json_response(found)

    async def delete_item(self, request: web.Request) -> web.Response:
        conversation_id, item_id = request.match_info["conversation_id"], request.match_info["item_id"]
        await self.find(conversation_id)
        message_id = item_id_message(item_id)
        if message_id is None:
            raise _item_not_found(item_id)
        inbox, host = self._service.parts()
        deleted = await host.blocking(
            partial(inbox.conversations.delete_item, conversation_id, self._service.scope, message_id)
        )
        if deleted is None:
            raise not_found(conversation_id)
        if not deleted:
            raise _item_not_found(item_id)
        return json_response(conversation_object(await self.find(conversation_id)))

    async def find(self, conversation_id: str, param: str = "conversation_id") -> ConversationRecord:
        """The conversation of this key (and of its user, for a key that speaks for one), else a 404."""
        inbox, host = self._service.parts()
        found = await host.blocking(partial(inbox.conversations.find, conversation_id, self._service.scope))
        if found is None or not key_sees(self._service.config, found.user_id):
            raise not_found(conversation_id, param)
        return found

    async def _items(self, conversation_id: str) -> list[dict[str, Any]]:
        await self.find(conversation_id)
        inbox, host = self._service.parts()
        stored = await host.blocking(partial(inbox.conversations.items, conversation_id, self._service.scope))
        if stored is None:
            raise not_found(conversation_id)
        return items_of(stored)


def _item_not_found(item_id: str) -> ApiError:
    return ApiError(
        404,
        f"no item {item_id[:100]!r} in this conversation; list its items for their ids",
        code="item_not_found",
        param="item_id",
    )
