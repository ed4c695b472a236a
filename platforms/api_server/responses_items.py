"""The input items of a stored response, for ``GET /v1/responses/{id}/input_items``.

A response is stored (``state.db``, ``api_responses.body``) as the response object the client got with one more
key, ``input_items``: the input items its request sent, each given an id (``msg_``, ``fc_``, ``fco_``, ``mcp_``)
unless it came with one, as OpenAI lists them. ``GET /v1/responses/{id}`` leaves that key out; a body stored before
input items were kept has none.

:func:`page_of` answers the list: ``order`` (``desc``, the default, newest first, or ``asc``), ``after`` (the id of
the item the previous page ended with) and ``limit`` (1 to 100, 20 by default), as a cursor page.
"""

from __future__ import annotations

import uuid
from typing import Any

import msgspec
from multidict import MultiMapping

from platforms.api_server.responses_wire import InputItem, ResponseObject
from platforms.api_server.wire import ApiError

__all__ = ["StoredResponse", "input_items", "page_of", "read_stored", "stored_body"]

_PREFIXES = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "mcp_call": "mcp"}
_DEFAULT_LIMIT = 20
_MAX_LIMIT = 100


class StoredResponse(msgspec.Struct, frozen=True, kw_only=True):
    """A stored response read back: the response object as the client got it and its request's input items."""

    response: bytes
    input_items: list[dict[str, Any]]


_KEY = "input_items"  # the key of the input items in a stored body, beside the response object's fields


def stored_body(response: ResponseObject, items: list[dict[str, Any]]) -> bytes:
    """What ``api_responses.body`` holds: the response object with the input items under ``input_items``."""
    fields = msgspec.to_builtins(response)
    fields[_KEY] = items
    return msgspec.json.encode(fields)


def read_stored(body: bytes) -> StoredResponse:
    """The response object and input items ``body`` holds; one stored before input items were kept has none."""
    fields = msgspec.json.decode(body, type=dict[str, Any])
    items = fields.pop(_KEY, [])
    return StoredResponse(response=msgspec.json.encode(fields), input_items=items)


def _given(struct: msgspec.Struct) -> dict[str, Any]:
    """The fields a struct was given (those left out are ``None``)."""
    return {name: value for name, value in msgspec.to_builtins(struct).items() if value is not None}


def _content(content: object, part_type: str) -> list[dict[str, Any]]:
    if isinstance(content, list):
        return [_given(part) for part in content]
    return [{"type": part_type, "text": content or ""}]


def _item(given: InputItem) -> dict[str, Any]:
    """One input item as OpenAI lists it: with an id and a status, a string content as one text part."""
    item_id = given.id or f"{_PREFIXES.get(given.type, 'item')}_{uuid.uuid4().hex}"
    if given.type == "message":
        part = "output_text" if given.role == "assistant" else "input_text"
        return {
            "type": "message",
            "id": item_id,
            "role": given.role,
            "status": "completed",
            "content": _content(given.content, part),
        }
    fields = _given(given)
    fields.update(id=item_id, status="completed")
    if isinstance(given.output, list):
        fields["output"] = "\n".join(part.text or "" for part in given.output)
    return fields


def input_items(given: str | list[InputItem]) -> list[dict[str, Any]]:
    """The request's ``input`` as listed items, in the order sent; a string is one user message."""
    if isinstance(given, str):
        return [_item(InputItem(type="message", role="user", content=given))]
    return [_item(item) for item in given]


def _limit(query: MultiMapping[str]) -> int:
    raw = query.get("limit")
    if raw is None:
        return _DEFAULT_LIMIT
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= _MAX_LIMIT:
        raise ApiError(400, f"limit must be a whole number from 1 to {_MAX_LIMIT}", code="invalid_value", param="limit")
    return limit


def page_of(
    items: list[dict[str, Any]], query: MultiMapping[str], *, what: str = "an input item of this response"
) -> dict[str, Any]:
    """One page of ``items`` (in the order sent) for the list's query; an ``after`` not among them is a 400 saying it
    is not ``what``."""
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise ApiError(400, f"order must be asc or desc, not {order[:20]!r}", code="invalid_value", param="order")
    limit = _limit(query)
    ordered = items if order == "asc" else items[::-1]
    after = query.get("after")
    start = 0
    if after is not None:
        ids = [item["id"] for item in ordered]
        if after not in ids:
            raise ApiError(
                400,
                f"after {after[:100]!r} is not {what}; pass the last_id of the page before",
                code="invalid_value",
                param="after",
            )
        start = ids.index(after) + 1
    data = ordered[start : start + limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": start + limit < len(ordered),
    }
