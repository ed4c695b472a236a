"""The reference system's rows as typed values: sessions, messages, routes, and the decoding of their loose fields.

No SQL here: :mod:`.source` reads the rows and builds these.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import msgspec

from hermes_actors.routing import SessionSource

__all__ = [
    "HermesMessage",
    "HermesRoute",
    "HermesSession",
    "Repair",
    "SessionStub",
    "int_value",
    "json_value",
    "origin_value",
    "route_value",
    "text_value",
    "timestamp_value",
]

_ORIGIN_FIELDS = ("chat_id", "chat_type", "thread_id", "user_id", "user_id_alt", "chat_name", "user_name")


class Repair(msgspec.Struct, frozen=True, kw_only=True):
    """A text value of the source that was not UTF-8: where it was, and its original bytes."""

    table: str
    row: str
    column: str
    raw: bytes


class SessionStub(msgspec.Struct, frozen=True, kw_only=True):
    """What ordering needs of a session; ``readable_id`` is false when its id is not UTF-8 (it is skipped)."""

    id: str
    parent_session_id: str | None
    started_at: float
    readable_id: bool = True


class HermesSession(msgspec.Struct, frozen=True, kw_only=True):
    """One row of the source's ``sessions``, with ``origin_json`` decoded into a :class:`SessionSource`."""

    id: str
    source: str
    started_at: float
    user_id: str | None = None
    session_key: str | None = None
    chat_id: str | None = None
    chat_type: str | None = None
    thread_id: str | None = None
    display_name: str | None = None
    origin: SessionSource | None = None
    model: str | None = None
    system_prompt: str | None = None
    parent_session_id: str | None = None
    ended_at: float | None = None
    end_reason: str | None = None
    title: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    repairs: tuple[Repair, ...] = ()

    @property
    def scope_id(self) -> str | None:
        """The workspace the session's origin recorded (``scope_id``, or ``guild_id``), if any."""
        return self.origin.scope_id if self.origin is not None else None


class HermesMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One row of the source's ``messages``; ``active`` rows are the live transcript."""

    id: int
    role: str
    content: str | None
    timestamp: float
    tool_call_id: str | None = None
    tool_calls: str | None = None
    tool_name: str | None = None
    token_count: int | None = None
    platform_message_id: str | None = None
    active: bool = True
    compacted: bool = False
    repairs: tuple[Repair, ...] = ()


class HermesRoute(msgspec.Struct, frozen=True, kw_only=True):
    """A routing entry: ``key`` reaches ``session_id``. ``problem`` says why an entry cannot be used."""

    found_in: str  # "gateway_routing" or the sessions.json path
    key: str
    session_id: str | None = None
    origin: SessionSource | None = None
    updated_at: float | None = None
    problem: str | None = None


def text_value(value: Any) -> str | None:
    """A JSON scalar as text: ids may be numbers (Telegram chat ids); empty strings count as absent."""
    if value is None or isinstance(value, bool | dict | list):
        return None
    text = value if isinstance(value, str) else str(value)
    return text or None


def origin_value(value: Any, fallback_platform: str | None) -> SessionSource | None:
    """A source ``origin`` JSON object as a :class:`SessionSource` (``None`` when it names no platform)."""
    if not isinstance(value, dict):
        return None
    platform = text_value(value.get("platform")) or fallback_platform
    if platform is None:
        return None
    fields = {name: text_value(value.get(name)) for name in _ORIGIN_FIELDS}
    return SessionSource(
        platform=platform,
        scope_id=text_value(value.get("scope_id")) or text_value(value.get("guild_id")),
        chat_type=fields.pop("chat_type") or "dm",
        **fields,
    )


def json_value(text: str | None) -> Any:
    """Parsed JSON, or ``None`` for empty or malformed text."""
    if not text:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def timestamp_value(value: Any) -> float | None:
    """A number, or an ISO datetime (naive ones are local time) as unix seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return None
    return None


def int_value(value: Any) -> int:
    """A number as an int (anything else: 0)."""
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def route_value(found_in: str, key: str, entry: Any, updated_at: float | None) -> HermesRoute:
    """A routing entry of the source as a :class:`HermesRoute`, with the problem that makes it unusable if any."""
    if not isinstance(entry, dict):
        return HermesRoute(found_in=found_in, key=key, problem="its entry is not a JSON object")
    session_id = text_value(entry.get("session_id"))
    if session_id is None:
        return HermesRoute(found_in=found_in, key=key, problem="its entry names no session_id")
    return HermesRoute(
        found_in=found_in,
        key=key,
        session_id=session_id,
        origin=origin_value(entry.get("origin"), text_value(entry.get("platform"))),
        updated_at=updated_at if updated_at is not None else timestamp_value(entry.get("updated_at")),
    )
