"""A signed request's JSON payload turned into an inbound message by the route's dotted paths."""

from __future__ import annotations

from typing import Any

import msgspec

from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource
from platforms.support import json_guard
from platforms.support.http_host import Refused
from platforms.webhook.config import ResolvedRoute

__all__ = ["PLATFORM", "to_inbound"]

_MAX_ID_CHARS = 256
PLATFORM = "webhook"
_payload_decoder = msgspec.json.Decoder(dict[str, Any])
_MISSING = object()


def _lookup(payload: dict[str, Any], path: str) -> Any:
    """The value at dotted ``path``, or ``_MISSING`` when a key on the way is absent or the value is null."""
    value: Any = payload
    walked = "$"
    for key in path.split("."):
        if not isinstance(value, dict):
            raise Refused(400, f"{walked} is not a JSON object, so $.{path} cannot be read")
        value = value.get(key, _MISSING)
        walked += "." + key
        if value is _MISSING or value is None:
            return _MISSING
    return value


def _id_at(payload: dict[str, Any], path: str | None) -> str | None:
    """A string-or-integer id at ``path`` as a string; ``None`` when absent or empty."""
    value = _MISSING if path is None else _lookup(payload, path)
    if value is _MISSING:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise Refused(400, f"$.{path} must be a string or an integer, not {_json_type(value)}")
    text = str(value)
    if len(text) > _MAX_ID_CHARS:
        raise Refused(400, f"$.{path} is longer than {_MAX_ID_CHARS} characters")
    return text or None


def _json_type(value: Any) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "an array"}
    return names.get(type(value), "an object")


def to_inbound(route: ResolvedRoute, webhook_id: str, body: bytes, received_at: float) -> InboundMessage:
    """Map a verified body onto an inbound message, or raise :class:`Refused` (400) naming the field."""
    try:
        payload = json_guard.decode(_payload_decoder, body)
    except msgspec.ValidationError as exc:
        raise Refused(400, f"the body must be a JSON object ({exc})") from None
    except msgspec.DecodeError as exc:
        raise Refused(400, f"the body is not valid JSON ({exc})") from None
    mapping = route.config
    text = _lookup(payload, mapping.text)
    if text is _MISSING:
        raise Refused(400, f"$.{mapping.text} is missing; it holds the message text")
    if not isinstance(text, str):
        raise Refused(400, f"$.{mapping.text} must be a string, not {_json_type(text)}")
    if not text.strip():
        raise Refused(400, f"$.{mapping.text} is empty")
    chat_id = _id_at(payload, mapping.chat_id)
    user_id = _id_at(payload, mapping.user_id)
    if chat_id is None and user_id is None:
        raise Refused(400, f"the payload has neither $.{mapping.chat_id} nor $.{mapping.user_id}; send one of them")
    user_name = _MISSING if mapping.user_name is None else _lookup(payload, mapping.user_name)
    if user_name is not _MISSING and not isinstance(user_name, str):
        raise Refused(400, f"$.{mapping.user_name} must be a string, not {_json_type(user_name)}")
    source = SessionSource(
        platform=PLATFORM,
        account_id=route.name,
        chat_type=mapping.chat_type,
        chat_id=chat_id,
        thread_id=_id_at(payload, mapping.thread_id),
        user_id=user_id,
        user_name=user_name if isinstance(user_name, str) else None,
    )
    return InboundMessage(source=source, text=text, message_id=webhook_id, received_at=received_at)
