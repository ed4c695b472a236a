"""What QQ POSTs to a callback, turned into inbound messages.

Every callback is a payload ``{"id", "op", "d", "s", "t"}``: op 13 asks to validate the address (``d`` holds
``plain_token`` and ``event_ts``), op 0 is an event (``t`` names it, ``d`` is its data). The message events read
are ``C2C_MESSAGE_CREATE`` (a user's direct message, ``author.user_openid``), ``GROUP_AT_MESSAGE_CREATE`` (the bot
@-mentioned in a group: ``group_openid``, ``author.member_openid``), and a guild channel's ``AT_MESSAGE_CREATE`` /
``MESSAGE_CREATE`` (``guild_id``, ``channel_id``, ``author.id``). The dedupe key is the message ``id``.

Chat ids carry their kind, because replies go to a different endpoint for each (:mod:`platforms.qqbot.sender`):
``user.<openid>``, ``group.<group_openid>``, ``channel.<channel_id>``. The guild is the key's scope:
``agent:main:qqbot~<app id>:dm:user.<openid>``, ``…:group:group.<group_openid>:<member_openid>``,
``agent:main:qqbot.<guild>~<app id>:group:channel.<channel>:<author>``.
"""

from __future__ import annotations

import re
from typing import TypeVar

import msgspec

from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource
from platforms.support import json_guard
from platforms.support.http_host import Refused

__all__ = [
    "MESSAGE_EVENTS",
    "PLATFORM",
    "AttachmentRef",
    "Envelope",
    "Message",
    "Validation",
    "decode_envelope",
    "decode_message",
    "decode_validation",
    "inbound_of",
    "skip_reason",
]

PLATFORM = "qqbot"
C2C = "C2C_MESSAGE_CREATE"
GROUP_AT = "GROUP_AT_MESSAGE_CREATE"
MESSAGE_EVENTS = frozenset({C2C, GROUP_AT, "AT_MESSAGE_CREATE", "MESSAGE_CREATE"})
_MENTION = re.compile(r"<@!?[0-9]+>")
_ID = re.compile(r"[\x21-\x7e]{1,256}")
T = TypeVar("T")


class Envelope(msgspec.Struct, frozen=True, kw_only=True):
    """One callback payload; ``d`` is decoded once its ``op`` and ``t`` say what it is."""

    op: int
    d: msgspec.Raw = msgspec.Raw(b"null")
    s: int | None = None
    t: str | None = None
    id: str | None = None


class Validation(msgspec.Struct, frozen=True, kw_only=True):
    """``d`` of op 13: the token to sign back, and the event time it is signed with."""

    plain_token: str
    event_ts: str


class Author(msgspec.Struct, frozen=True, kw_only=True):
    id: str | None = None
    user_openid: str | None = None
    member_openid: str | None = None
    username: str | None = None
    bot: bool = False


class AttachmentRef(msgspec.Struct, frozen=True, kw_only=True):
    """One file of a message, as QQ announces it (the URL may come without a scheme)."""

    url: str
    content_type: str | None = None
    filename: str | None = None
    size: int | None = None


class Message(msgspec.Struct, frozen=True, kw_only=True):
    """``d`` of a message event, with the fields of each kind optional."""

    id: str
    author: Author = Author()
    content: str = ""
    group_openid: str | None = None
    channel_id: str | None = None
    guild_id: str | None = None
    attachments: list[AttachmentRef] = []


_ENVELOPE = msgspec.json.Decoder(Envelope)
_VALIDATION = msgspec.json.Decoder(Validation)
_MESSAGE = msgspec.json.Decoder(Message)


def _decode(decoder: msgspec.json.Decoder[T], raw: bytes, what: str) -> T:
    try:
        return json_guard.decode(decoder, raw)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise Refused(400, f"{what} is not what QQ sends ({str(exc)[:160]})") from None


def decode_envelope(body: bytes) -> Envelope:
    """The payload of a callback body; :class:`Refused` 400 names what is wrong."""
    return _decode(_ENVELOPE, body, "the payload")


def decode_validation(envelope: Envelope) -> Validation:
    """``d`` of an op 13 payload."""
    return _decode(_VALIDATION, bytes(envelope.d), "the validation request")


def decode_message(envelope: Envelope) -> Message:
    """``d`` of a message event, checked for the ids its kind needs."""
    message = _decode(_MESSAGE, bytes(envelope.d), f"the {envelope.t} event")
    needed = {
        C2C: ("author.user_openid", message.author.user_openid),
        GROUP_AT: ("group_openid", message.group_openid),
    }.get(envelope.t or "", ("channel_id", message.channel_id))
    for name, value in (("id", message.id), needed):
        if not value or not _ID.fullmatch(value):
            raise Refused(400, f"the {envelope.t} event has no valid {name}")
    if envelope.t == GROUP_AT and not message.author.member_openid:
        raise Refused(400, f"the {envelope.t} event has no author.member_openid")
    return message


def skip_reason(event: str, message: Message) -> str | None:
    """Why a decoded message starts no turn (it is acknowledged all the same), or ``None`` when it may."""
    if message.author.bot:
        return "a message from a bot"
    if not _text(event, message) and not message.attachments:
        return "a message without text or files"
    return None


def _text(event: str, message: Message) -> str:
    text = message.content
    if event not in (C2C, GROUP_AT):
        text = _MENTION.sub("", text)  # a guild @-mention of the bot is <@!bot id> in the text
    return text.strip()


def _stand_in(ref: AttachmentRef) -> str:
    major = (ref.content_type or "").partition("/")[0]
    return f"[{major if major in ('image', 'audio', 'video') else 'file'}]"


def inbound_of(event: str, message: Message, *, app_id: str, received_at: float | None = None) -> InboundMessage:
    """The inbound message of ``message`` (files as stand-ins such as ``[image]``; they are fetched later)."""
    if event == C2C:
        user = message.author.user_openid or ""
        source = SessionSource(platform=PLATFORM, account_id=app_id, chat_type="dm", chat_id=f"user.{user}")
        source = msgspec.structs.replace(source, user_id=user)
    elif event == GROUP_AT:
        source = SessionSource(
            platform=PLATFORM,
            account_id=app_id,
            chat_type="group",
            chat_id=f"group.{message.group_openid}",
            user_id=message.author.member_openid,
        )
    else:
        source = SessionSource(
            platform=PLATFORM,
            account_id=app_id,
            scope_id=message.guild_id or None,
            chat_type="group",
            chat_id=f"channel.{message.channel_id}",
            user_id=message.author.id or None,
            user_name=message.author.username,
        )
    source = msgspec.structs.replace(source, message_id=message.id)
    text = "\n".join(part for part in (_text(event, message), *map(_stand_in, message.attachments)) if part)
    return InboundMessage(source=source, text=text, message_id=message.id, received_at=received_at)
