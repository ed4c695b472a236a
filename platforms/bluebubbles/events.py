"""What a BlueBubbles server POSTs to its webhook, turned into inbound messages.

Every webhook body is ``{"type", "data"}``; only ``new-message`` starts turns (message updates, typing, read
receipts and the rest are acknowledged and skipped). Its ``data`` is the server's message: ``guid`` (the dedupe
key), ``text``, ``isFromMe`` (our own sends come back as events too, and are skipped), ``handle.address`` (the
sender's phone number or Apple ID), ``chats[0].guid`` (the chat, ``iMessage;-;+15551234567`` one-to-one,
``iMessage;+;chat1234...`` a group), ``attachments`` (``guid``, ``mimeType``, ``transferName``, ``totalBytes``),
``dateCreated`` (milliseconds) and ``associatedMessageType`` (set on tapbacks, which are skipped). The key is
``agent:main:bluebubbles~<server>:dm:<chat guid>``, or ``…:group:<chat guid>:<sender>`` in a group.
"""

from __future__ import annotations

import re

import msgspec

from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource
from platforms.support import json_guard
from platforms.support.http_host import Refused

__all__ = ["NEW_MESSAGE", "PLATFORM", "AttachmentRef", "Event", "Message", "decode_event", "inbound_of", "skip_reason"]

PLATFORM = "bluebubbles"
NEW_MESSAGE = "new-message"
_CHAT_GUID = re.compile(r"[A-Za-z]{1,16};[-+];[\x21-\x7e]{1,200}")
_GUID = re.compile(r"[\x21-\x7e]{1,200}")


class Handle(msgspec.Struct, frozen=True, kw_only=True):
    address: str = ""


class Chat(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    guid: str
    display_name: str | None = None


class AttachmentRef(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One file of a message as the server describes it; the bytes are fetched by ``guid``."""

    guid: str
    mime_type: str | None = None
    transfer_name: str | None = None
    total_bytes: int | None = None


class Message(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """``data`` of a ``new-message`` event."""

    guid: str
    text: str | None = None
    is_from_me: bool = False
    handle: Handle | None = None
    chats: list[Chat] = []
    attachments: list[AttachmentRef] = []
    date_created: int | None = None
    associated_message_type: str | int | None = None


class Event(msgspec.Struct, frozen=True, kw_only=True):
    """A webhook body; ``data`` is decoded once ``type`` says what it is."""

    type: str
    data: msgspec.Raw = msgspec.Raw(b"null")


_EVENT = msgspec.json.Decoder(Event)
_MESSAGE = msgspec.json.Decoder(Message)


def decode_event(body: bytes) -> tuple[str, Message | None]:
    """The event type of ``body`` and, for a new message, the message; :class:`Refused` 400 names the fault."""
    try:
        event = json_guard.decode(_EVENT, body)
        if event.type != NEW_MESSAGE:
            return event.type, None
        message = json_guard.decode(_MESSAGE, bytes(event.data))
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise Refused(400, f"the webhook body is not what BlueBubbles sends ({str(exc)[:160]})") from None
    if not _GUID.fullmatch(message.guid):
        raise Refused(400, "the message has no valid guid (at $.data.guid)")
    if not message.chats or not _CHAT_GUID.fullmatch(message.chats[0].guid):
        raise Refused(400, "the message has no valid chat guid such as iMessage;-;+15551234567 (at $.data.chats)")
    for index, ref in enumerate(message.attachments):
        if not _GUID.fullmatch(ref.guid):
            raise Refused(400, f"attachment {index} has no valid guid (at $.data.attachments[{index}].guid)")
    return event.type, message


def is_group(chat_guid: str) -> bool:
    """Whether ``chat_guid`` names a group chat (``service;+;id``) rather than a one-to-one chat (``service;-;id``)."""
    return chat_guid.split(";", 2)[1] == "+"


def skip_reason(message: Message, *, now: float, max_age_s: float) -> str | None:
    """Why ``message`` starts no turn (it is acknowledged all the same), or ``None`` when it may."""
    if message.is_from_me:
        return "our own message"
    if message.associated_message_type not in (None, 0, "", "0"):
        return "a tapback or other reaction"
    if message.handle is None or not message.handle.address:
        return "a message without a sender (handle.address)"
    if message.date_created is not None and now - message.date_created / 1000 > max_age_s:
        return f"a stale message, sent {now - message.date_created / 1000:.0f} s ago (platforms.bluebubbles.max_age_s)"
    if not (message.text or "").strip() and not message.attachments:
        return "a message without text or files"
    return None


def _stand_in(ref: AttachmentRef) -> str:
    major = (ref.mime_type or "").partition("/")[0]
    return f"[{major if major in ('image', 'audio', 'video') else 'file'}]"


def inbound_of(message: Message, *, server_name: str, received_at: float | None = None) -> InboundMessage:
    """The inbound message of ``message`` (files as stand-ins such as ``[image]``; they are fetched later)."""
    chat = message.chats[0]
    sender = message.handle.address if message.handle is not None else ""
    group = is_group(chat.guid)
    source = SessionSource(
        platform=PLATFORM,
        account_id=server_name,
        chat_type="group" if group else "dm",
        chat_id=chat.guid,
        user_id=sender,
        chat_name=chat.display_name if group else None,
        message_id=message.guid,
    )
    text = "\n".join(part for part in ((message.text or "").strip(), *map(_stand_in, message.attachments)) if part)
    return InboundMessage(source=source, text=text, message_id=message.guid, received_at=received_at)
