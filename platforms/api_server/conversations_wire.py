"""The wire format of ``/v1/conversations`` (OpenAI's Conversations API): request bodies decoded once at the edge, and
the conversation and item objects that answer them.

A stored message is listed as the items OpenAI would list for it: a user, assistant or system message as a
``message`` item (``msg_<id>``), an assistant's tool calls as ``function_call`` items (``fc_<id>_<n>``, after its
text's ``message`` item when it has text), a tool message as a ``function_call_output`` item (``fco_<id>``); ``<id>``
is the message's id in hexadecimal, so every item id leads back to its message, and deleting an item deletes its
message (all its calls with it).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import msgspec

from hermes_actors.conversation_port import ConversationItem, ConversationRecord
from platforms.api_server.responses_wire import InputItem
from platforms.api_server.wire import ApiError, decode_body

__all__ = [
    "ConversationBody",
    "ItemsBody",
    "MetadataBody",
    "conversation_object",
    "decode_conversation",
    "decode_items",
    "decode_metadata",
    "item_id_message",
    "items_of",
    "not_found",
]

_MAX_ITEMS = 20  # items one request may add, as OpenAI allows
_MAX_PAIRS = 16
_Key = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
_Value = Annotated[str, msgspec.Meta(max_length=512)]
Metadata = Annotated[dict[_Key, _Value], msgspec.Meta(max_length=_MAX_PAIRS)]
_ITEM_ID = re.compile(r"(?:msg|fco)_(?P<id>[0-9a-f]{1,16})|fc_(?P<call>[0-9a-f]{1,16})_\d{1,4}")
_calls = msgspec.json.Decoder(list[dict[str, Any]])


class ConversationBody(msgspec.Struct, frozen=True, kw_only=True):
    """``POST /v1/conversations``: up to 20 initial items and up to 16 metadata pairs."""

    items: Annotated[list[InputItem], msgspec.Meta(max_length=_MAX_ITEMS)] = []
    metadata: Metadata | None = None


class MetadataBody(msgspec.Struct, frozen=True, kw_only=True):
    """``POST /v1/conversations/{id}``: the metadata that replaces the conversation's."""

    metadata: Metadata


class ItemsBody(msgspec.Struct, frozen=True, kw_only=True):
    """``POST /v1/conversations/{id}/items``: 1 to 20 items to add."""

    items: Annotated[list[InputItem], msgspec.Meta(min_length=1, max_length=_MAX_ITEMS)]


_conversation = msgspec.json.Decoder(ConversationBody)
_metadata = msgspec.json.Decoder(MetadataBody)
_items = msgspec.json.Decoder(ItemsBody)


def decode_conversation(body: bytes) -> ConversationBody:
    """A create body (an empty body is an empty conversation); a 400 names the field path."""
    return decode_body(_conversation, body) if body.strip() else ConversationBody()


def decode_metadata(body: bytes) -> MetadataBody:
    """An update body; a 400 names the field path."""
    return decode_body(_metadata, body)


def decode_items(body: bytes) -> ItemsBody:
    """An items body; a 400 names the field path."""
    return decode_body(_items, body)


def conversation_object(record: ConversationRecord) -> dict[str, Any]:
    """The conversation as OpenAI answers it."""
    return {
        "id": record.id,
        "object": "conversation",
        "created_at": int(record.created_at),
        "metadata": record.metadata,
    }


def item_id_message(item_id: str) -> int | None:
    """The id of the stored message an item id names, ``None`` for one this server never gave."""
    found = _ITEM_ID.fullmatch(item_id)
    if found is None:
        return None
    return int(found["id"] or found["call"], 16)


def _message(item: ConversationItem, role: str) -> dict[str, Any]:
    part = {"type": "output_text", "text": item.content, "annotations": []} if role == "assistant" else None
    return {
        "type": "message",
        "id": f"msg_{item.id:x}",
        "role": role,
        "status": "completed",
        "content": [part or {"type": "input_text", "text": item.content}],
    }


def _function_calls(item: ConversationItem) -> list[dict[str, Any]]:
    try:
        calls = _calls.decode(item.tool_calls or "[]")
    except msgspec.DecodeError:  # a ValidationError too: the store keeps what a model sent
        calls = []
    listed = []
    for index, call in enumerate(calls):
        given = call.get("function")
        function: dict[str, Any] = given if isinstance(given, dict) else {}
        listed.append(
            {
                "type": "function_call",
                "id": f"fc_{item.id:x}_{index}",
                "call_id": str(call.get("id") or ""),
                "name": str(function.get("name") or ""),
                "arguments": str(function.get("arguments") or "{}"),
                "status": "completed",
            }
        )
    return listed


def items_of(stored: list[ConversationItem]) -> list[dict[str, Any]]:
    """The stored messages as listed items, oldest first (see the module's docstring)."""
    listed: list[dict[str, Any]] = []
    for item in stored:
        if item.role == "tool":
            listed.append(
                {
                    "type": "function_call_output",
                    "id": f"fco_{item.id:x}",
                    "call_id": item.tool_call_id or "",
                    "output": item.content,
                    "status": "completed",
                }
            )
            continue
        if item.content or not item.tool_calls:
            listed.append(_message(item, item.role if item.role in ("user", "assistant", "system") else "user"))
        if item.tool_calls:
            listed.extend(_function_calls(item))
    return listed


def not_found(conversation_id: str, param: str = "conversation_id") -> ApiError:
    """The 404 of a conversation this key does not have."""
    return ApiError(
        404,
        f"no conversation {conversation_id[:100]!r}; it was never created, was deleted with its session, or belongs "
        "to another API key",
        code="conversation_not_found",
        param=param,
    )
