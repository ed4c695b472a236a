"""The shapes of a WhatsApp Cloud API webhook notification, as msgspec Structs, and its decoder.

Only the fields the adapter reads are declared; msgspec ignores the rest. A ``messages`` change's ``value`` stays a
plain dict until its ``field`` says what it is, then :mod:`platforms.whatsapp.events` converts it to :class:`Value`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from platforms.support import json_guard
from platforms.support.http_host import Refused

__all__ = [
    "Button",
    "Change",
    "Choice",
    "Contact",
    "Entry",
    "FlowReply",
    "Interactive",
    "Location",
    "Media",
    "Message",
    "MetaError",
    "Metadata",
    "Notification",
    "Profile",
    "Status",
    "Text",
    "Value",
    "decode_notification",
]


class Change(msgspec.Struct, frozen=True, kw_only=True):
    field: str
    value: dict[str, Any]  # typed once ``field`` says it is a ``messages`` value


class Entry(msgspec.Struct, frozen=True, kw_only=True):
    id: str | None = None
    changes: list[Change] = msgspec.field(default_factory=list)


class Notification(msgspec.Struct, frozen=True, kw_only=True):
    """The outer webhook body."""

    object: str
    entry: list[Entry] = msgspec.field(default_factory=list)


class Metadata(msgspec.Struct, frozen=True, kw_only=True):
    phone_number_id: str
    display_phone_number: str | None = None


class Profile(msgspec.Struct, frozen=True, kw_only=True):
    name: str | None = None


class Contact(msgspec.Struct, frozen=True, kw_only=True):
    wa_id: str | None = None
    profile: Profile | None = None


class Text(msgspec.Struct, frozen=True, kw_only=True):
    body: str = ""


class Choice(msgspec.Struct, frozen=True, kw_only=True):
    id: str | None = None
    title: str = ""
    description: str | None = None


class FlowReply(msgspec.Struct, frozen=True, kw_only=True):
    body: str | None = None
    name: str | None = None


class Interactive(msgspec.Struct, frozen=True, kw_only=True):
    type: str = ""
    button_reply: Choice | None = None
    list_reply: Choice | None = None
    nfm_reply: FlowReply | None = None


class Button(msgspec.Struct, frozen=True, kw_only=True):
    text: str = ""
    payload: str | None = None


class Media(msgspec.Struct, frozen=True, kw_only=True):
    id: str | None = None
    caption: str | None = None
    filename: str | None = None
    mime_type: str | None = None
    sha256: str | None = None


class Location(msgspec.Struct, frozen=True, kw_only=True):
    latitude: float | None = None
    longitude: float | None = None
    name: str | None = None
    address: str | None = None


class Message(msgspec.Struct, frozen=True, kw_only=True):
    """One user message (the fields read; media objects and the rest are only named)."""

    id: str
    sender: str = msgspec.field(name="from")
    timestamp: str
    type: str
    group_id: str | None = None
    text: Text | None = None
    interactive: Interactive | None = None
    button: Button | None = None
    image: Media | None = None
    video: Media | None = None
    audio: Media | None = None
    sticker: Media | None = None
    document: Media | None = None
    location: Location | None = None


class ErrorData(msgspec.Struct, frozen=True, kw_only=True):
    details: str | None = None


class MetaError(msgspec.Struct, frozen=True, kw_only=True):
    code: int | None = None
    title: str | None = None
    message: str | None = None
    error_data: ErrorData | None = None

    def describe(self) -> str:
        """``code title: details`` for a log line."""
        details = (self.error_data.details if self.error_data else None) or self.message or ""
        return f"{self.code} {self.title or ''}: {details}".strip(" :")[:300]


class Status(msgspec.Struct, frozen=True, kw_only=True):
    """A delivery receipt for one of our replies: ``sent``, ``delivered``, ``read`` or ``failed``."""

    id: str = ""
    status: str = ""
    recipient_id: str | None = None
    errors: list[MetaError] = msgspec.field(default_factory=list)


class Value(msgspec.Struct, frozen=True, kw_only=True):
    metadata: Metadata
    contacts: list[Contact] = msgspec.field(default_factory=list)
    messages: list[Message] = msgspec.field(default_factory=list)
    statuses: list[Status] = msgspec.field(default_factory=list)
    errors: list[MetaError] = msgspec.field(default_factory=list)


_decoder = msgspec.json.Decoder(Notification)


def decode_notification(body: bytes) -> Notification:
    """The outer notification, or :class:`Refused` (400) naming what is wrong."""
    try:
        return json_guard.decode(_decoder, body)
    except msgspec.ValidationError as exc:
        raise Refused(400, f"the body is not a webhook notification ({exc})") from None
    except msgspec.DecodeError as exc:
        raise Refused(400, f"the body is not valid JSON ({exc})") from None
