"""What Twilio POSTs for an incoming message, turned into an inbound message.

The request is form-encoded (``application/x-www-form-urlencoded``); the fields read are ``MessageSid`` (``SM`` or
``MM`` and 32 hex digits, the dedupe key: Twilio sends one message once, and a replayed request carries the same
sid), ``AccountSid``, ``From`` (the user), ``To`` (our number, the account in the session key), ``Body`` and, for
MMS, ``NumMedia`` with ``MediaUrl{N}`` and ``MediaContentType{N}`` (up to ten files). Every message is a direct chat:
``agent:main:sms~<To>:dm:<From>``. A field of the wrong shape, a parameter sent twice or more than ten media are a
:class:`~platforms.support.http_host.Refused` 400, checked before anything is stored. A message for a number not
configured, from a sender that is no phone number (``whatsapp:...`` of a number also used for WhatsApp), or without
text or media is acknowledged and skipped, saying why.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from urllib.parse import urlsplit

import msgspec

from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource
from platforms.sms.config import NUMBER
from platforms.support.http_host import Refused

__all__ = ["MAX_MEDIA", "PLATFORM", "Incoming", "MediaRef", "inbound_of", "parse_form", "skip_reason"]

PLATFORM = "sms"
MAX_MEDIA = 10  # Twilio's limit of media per MMS

_MESSAGE_SID = re.compile(r"(SM|MM)[0-9a-f]{32}")
_ACCOUNT_SID = re.compile(r"AC[0-9a-f]{32}")
_ADDRESS = re.compile(r"[\x21-\x7e]{1,64}")
_URL = re.compile(r"[\x21-\x7e]{1,2000}")
_COUNT = re.compile(r"[0-9]{1,2}")
_CONTENT_TYPE = re.compile(r"[a-z0-9.+-]{1,40}/[a-z0-9.+-]{1,80}")


class MediaRef(msgspec.Struct, frozen=True, kw_only=True):
    """One MMS file: where Twilio keeps it and the type Twilio named."""

    url: str
    content_type: str | None = None


class Incoming(msgspec.Struct, frozen=True, kw_only=True):
    """The fields of an incoming message this adapter reads, checked."""

    message_sid: str
    account_sid: str
    sender: str
    to: str
    body: str
    media: list[MediaRef]


def _one(fields: dict[str, str], name: str, pattern: re.Pattern[str], *, required: bool = True) -> str:
    value = fields.get(name)
    if value is None:
        if required:
            raise Refused(400, f"{name} is missing")
        return ""
    if not pattern.fullmatch(value):
        raise Refused(400, f"{name} {value[:40]!r} is not what Twilio sends")
    return value


def _is_url(url: str) -> bool:
    if not _URL.fullmatch(url):
        return False
    try:
        parts = urlsplit(url)
        return parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a malformed host or port
        return False


def parse_form(params: Sequence[tuple[str, str]]) -> Incoming:
    """The incoming message of the form ``params``; :class:`Refused` (400) names the field at fault."""
    fields: dict[str, str] = {}
    for name, value in params:
        if name in fields:
            raise Refused(400, f"the parameter {name[:40]!r} appears twice")
        fields[name] = value
    count = int(_one(fields, "NumMedia", _COUNT, required=False) or "0")
    if count > MAX_MEDIA:
        raise Refused(400, f"NumMedia is {count}; Twilio sends at most {MAX_MEDIA}")
    media = []
    for index in range(count):
        url = fields.get(f"MediaUrl{index}", "")
        if not _is_url(url):
            raise Refused(400, f"MediaUrl{index} is missing or not an http(s) URL")
        content_type = _one(fields, f"MediaContentType{index}", _CONTENT_TYPE, required=False).lower() or None
        media.append(MediaRef(url=url, content_type=content_type))
    return Incoming(
        message_sid=_one(fields, "MessageSid", _MESSAGE_SID),
        account_sid=_one(fields, "AccountSid", _ACCOUNT_SID),
        sender=_one(fields, "From", _ADDRESS),
        to=_one(fields, "To", _ADDRESS),
        body=fields.get("Body", ""),
        media=media,
    )


def skip_reason(incoming: Incoming, numbers: Collection[str]) -> str | None:
    """Why ``incoming`` starts no turn (it is acknowledged all the same), or ``None`` when it may."""
    if incoming.to not in numbers:
        return f"a message to {incoming.to}, which is not configured (add it to platforms.sms.numbers to answer it)"
    if not NUMBER.fullmatch(incoming.sender):
        return f"a message from {incoming.sender[:40]!r}, which is not a phone number"
    if not incoming.body.strip() and not incoming.media:
        return "a message without text or media"
    return None


def _stand_in(ref: MediaRef) -> str:
    major = (ref.content_type or "").partition("/")[0]
    return f"[{major if major in ('image', 'audio', 'video') else 'file'}]"


def inbound_of(incoming: Incoming, *, received_at: float | None = None) -> InboundMessage:
    """The inbound message of ``incoming`` (media as stand-ins such as ``[image]``; the files are fetched later)."""
    text = "\n".join(part for part in (incoming.body.strip(), *map(_stand_in, incoming.media)) if part)
    source = SessionSource(
        platform=PLATFORM,
        account_id=incoming.to,
        chat_type="dm",
        chat_id=incoming.sender,
        user_id=incoming.sender,
        message_id=incoming.message_sid,
    )
    return InboundMessage(source=source, text=text, message_id=incoming.message_sid, received_at=received_at)
