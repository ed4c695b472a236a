"""What Meta sends the webhook: the ``GET`` handshake, ``X-Hub-Signature-256``, and ``whatsapp_business_account``
notifications turned into inbound messages.

A notification is ``{"object": "whatsapp_business_account", "entry": [{"id": <WABA>, "changes": [{"field":
"messages", "value": {...}}]}]}``. A ``messages`` value names our number (``metadata.phone_number_id``), the
senders (``contacts[]``: ``wa_id`` and profile name), their ``messages[]`` and the delivery receipts of our own
replies (``statuses[]``). Other fields (template reviews, account updates) are ignored.

A message with a ``group_id`` is from a group (``…:group:<group_id>:<wa_id>``); any other is a direct chat with
its sender (``…:dm:<wa_id>``). The account is the number's ``phone_number_id``; there is no scope, since the
number belongs to exactly one business account. Text, interactive replies (button and list choices) and template
quick-reply buttons become text; media, locations and contact cards become stand-ins such as ``[image]``
(with the caption, if any), and the media id of an image, audio, video or document is listed in
:attr:`Parsed.media` for :mod:`platforms.whatsapp.files` to download before the message is accepted (stickers
stay stand-ins); reactions and system notices start no turn. The inbound message id is the ``wamid``: Meta
retries an unacknowledged notification for days with the same ids, and the durable inbox keeps one.
``received_at`` is the message's own ``timestamp`` (when the user sent it), which is what the 24-hour window runs
from.

Everything is checked before anything is stored: a payload that is not a notification, or has one malformed
message, is refused whole with a 400, so a notification is never half accepted.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Collection, Mapping

import msgspec

from hermes_actors.media import kind_of
from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource
from platforms.support.http_host import Refused
from platforms.whatsapp.files import MediaRef
from platforms.whatsapp.wire import Interactive, Location, Media, Message, Notification, Status, Value

__all__ = [
    "PLATFORM",
    "SIGNATURE_HEADER",
    "Parsed",
    "answer_handshake",
    "parse_notification",
    "signed_by",
]

PLATFORM = "whatsapp"
SIGNATURE_HEADER = "X-Hub-Signature-256"

_SIGNATURE = re.compile(r"sha256=([0-9a-fA-F]{64})")
_WAMID = re.compile(r"[\x21-\x7e]{1,256}")  # wamid.<base64>: printable ASCII without spaces
_USER_ID = re.compile(r"[A-Za-z0-9._+-]{1,128}")  # a wa_id is the phone number's digits
_GROUP_ID = re.compile(r"[A-Za-z0-9._+/=-]{1,256}")
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_CHALLENGE = re.compile(r"[\x21-\x7e]{1,256}")
_TYPE = re.compile(r"[a-z_]{1,40}")
_MEDIA = ("image", "video", "audio", "sticker", "document")
_DOWNLOADED = ("image", "video", "audio", "document")
_MEDIA_ID = re.compile(r"[\x21-\x7e]{1,256}")
_SKIPPED_TYPES = {
    "reaction": "a reaction (reactions start no turn)",
    "system": "a system notice (a number change or similar)",
    "request_welcome": "a first-contact notice without text",
}


# -- the handshake and the signature -----------------------------------------------------------------------------


def answer_handshake(query: Mapping[str, str], verify_tokens: Collection[str]) -> str:
    """The ``hub.challenge`` to echo for a valid subscription handshake, or :class:`Refused` (400/403)."""
    mode, token, challenge = query.get("hub.mode"), query.get("hub.verify_token"), query.get("hub.challenge")
    if mode != "subscribe":
        raise Refused(400, "not a webhook handshake: hub.mode must be 'subscribe'")
    if challenge is None or not _CHALLENGE.fullmatch(challenge):
        raise Refused(400, "hub.challenge is missing or not 1 to 256 printable characters")
    offered = (token or "").encode()
    if not token or not any(hmac.compare_digest(offered, known.encode()) for known in verify_tokens):
        raise Refused(403, "hub.verify_token does not match the verify_token of any configured number")
    return challenge


def signed_by(header: str | None, body: bytes, secrets: Mapping[str, bytes]) -> set[str]:
    """The numbers (keys of ``secrets``) whose app secret signed ``body``; :class:`Refused` (401) when none did."""
    if header is None:
        raise Refused(401, f"unsigned request: the {SIGNATURE_HEADER} header is required")
    found = _SIGNATURE.fullmatch(header.strip())
    if found is None:
        raise Refused(401, f"{SIGNATURE_HEADER} must be 'sha256=' and 64 hex digits")
    offered = found[1].lower().encode()
    digests: dict[bytes, bool] = {}
    numbers: set[str] = set()
    for number, secret in secrets.items():
        if secret not in digests:  # numbers of one app share its secret
            digest = hmac.new(secret, body, hashlib.sha256).hexdigest().encode()
            digests[secret] = hmac.compare_digest(offered, digest)
        if digests[secret]:
            numbers.add(number)
    if not numbers:
        raise Refused(401, f"{SIGNATURE_HEADER} does not match the body and the app secret of any configured number")
    return numbers


class Parsed(msgspec.Struct, frozen=True, kw_only=True):
    """What a notification holds: messages to accept (and the media to download for them), receipts, and one line
    per thing skipped."""

    inbound: list[InboundMessage]
    statuses: list[tuple[str, Status]]  # (our number, receipt)
    errors: list[tuple[str, str]]  # (our number, an error Meta reported for it)
    skipped: list[str]
    media: dict[str, MediaRef] = msgspec.field(default_factory=dict)  # inbound message id -> its file


def parse_notification(
    notification: Notification, *, numbers: Collection[str], signed: Collection[str], now: float
) -> Parsed:
    """Check every change of ``notification`` and map its messages; :class:`Refused` if any part is broken.

    ``numbers`` are the configured phone number ids, ``signed`` those whose app secret signed the request: a
    change for a configured number signed with another app's secret is refused (403).
    """
    parsed = Parsed(inbound=[], statuses=[], errors=[], skipped=[])
    if notification.object != "whatsapp_business_account":
        parsed.skipped.append(f"a notification for {notification.object[:40]!r}, not whatsapp_business_account")
        return parsed
    for e, entry in enumerate(notification.entry):
        for c, change in enumerate(entry.changes):
            where = f"$.entry[{e}].changes[{c}].value"
            if change.field != "messages":
                parsed.skipped.append(f"a {change.field[:40]!r} change (only messages are read)")
                continue
            try:
                value = msgspec.convert(change.value, Value)
            except msgspec.ValidationError as exc:
                raise Refused(400, f"{where} is not a messages value ({_at(exc, where)})") from None
            number = value.metadata.phone_number_id
            if number not in numbers:
                parsed.skipped.append(
                    f"a change for phone number id {number[:40]!r}, which is not configured "
                    "(add it under platforms.whatsapp.numbers to answer it)"
                )
                continue
            if number not in signed:
                raise Refused(403, f"number {number} belongs to an app whose secret did not sign this request")
            _parse_value(value, number, where, now, parsed)
    return parsed


def _at(exc: msgspec.ValidationError, where: str) -> str:
    return str(exc).replace("`$", f"`{where}", 1)


def _parse_value(value: Value, number: str, where: str, now: float, parsed: Parsed) -> None:
    names = {c.wa_id: c.profile.name for c in value.contacts if c.wa_id and c.profile and c.profile.name}
    for i, message in enumerate(value.messages):
        here = f"{where}.messages[{i}]"
        inbound = _to_inbound(message, number, names, here, now)
        if isinstance(inbound, str):
            parsed.skipped.append(f"message {message.id[:80]}: {inbound}")
            continue
        parsed.inbound.append(inbound)
        ref = _media_ref(message)
        if ref is not None:
            parsed.media[inbound.message_id] = ref
    parsed.statuses.extend((number, status) for status in value.statuses)
    parsed.errors.extend((number, error.describe()) for error in value.errors)


def _checked(value: str | None, pattern: re.Pattern[str], field: str) -> str:
    if value is None:
        raise Refused(400, f"{field} is missing")
    if not pattern.fullmatch(value):
        raise Refused(400, f"{field} {value[:40]!r} is not a valid WhatsApp id")
    return value


def _to_inbound(
    message: Message, number: str, names: Mapping[str, str], where: str, now: float
) -> InboundMessage | str:
    """The inbound message, or why it starts no turn; :class:`Refused` when it is malformed."""
    wamid = _checked(message.id, _WAMID, f"{where}.id")
    sender = _checked(message.sender, _USER_ID, f"{where}.from")
    group = _checked(message.group_id, _GROUP_ID, f"{where}.group_id") if message.group_id is not None else None
    if not _TIMESTAMP.fullmatch(message.timestamp):
        raise Refused(400, f"{where}.timestamp must be Unix seconds as a string of digits")
    if message.type in _SKIPPED_TYPES:
        return _SKIPPED_TYPES[message.type]
    text = _text_of(message)
    if not text.strip():
        return "a message without text"
    source = SessionSource(
        platform=PLATFORM,
        account_id=number,
        chat_type="group" if group else "dm",
        chat_id=group or sender,
        user_id=sender,
        user_name=names.get(sender) or None,
        message_id=wamid,
    )
    # A clock ahead of ours would hold the window open longer than Meta does: never later than now.
    sent_at = min(float(message.timestamp), now)
    return InboundMessage(source=source, text=text, message_id=wamid, received_at=sent_at)


def _text_of(message: Message) -> str:
    """The message as the agent should read it: text, the chosen option, or a stand-in with any caption."""
    kind = message.type
    if kind == "text":
        return message.text.body if message.text else ""
    if kind == "interactive" and message.interactive is not None:
        return _choice(message.interactive)
    if kind == "button" and message.button is not None:
        return message.button.text or message.button.payload or "[button]"
    if kind in _MEDIA:
        media: Media | None = getattr(message, kind)
        return _media(kind, media)
    if kind == "location":
        return _place(message.location)
    if kind == "contacts":
        return "[contact card]"
    if kind == "unsupported":
        return "[unsupported message]"
    return f"[{kind if _TYPE.fullmatch(kind) else 'unknown'} message]"


def _media_ref(message: Message) -> MediaRef | None:
    """The file to download for an image, audio, video or document message (none without a usable media id)."""
    if message.type not in _DOWNLOADED:
        return None
    media: Media | None = getattr(message, message.type)
    if media is None or media.id is None or not _MEDIA_ID.fullmatch(media.id):
        return None
    mime = (media.mime_type or "").split(";", 1)[0].strip().lower() or None  # audio/ogg; codecs=opus
    kind = kind_of(mime) if message.type == "document" else message.type
    name = (media.filename or "").strip()[:200] or None
    return MediaRef(media_id=media.id, kind=kind, mime_type=mime, name=name, sha256=media.sha256)


def _choice(interactive: Interactive) -> str:
    choice = interactive.button_reply or interactive.list_reply
    if choice is not None and choice.title:
        return choice.title
    if interactive.nfm_reply is not None:
        return interactive.nfm_reply.body or "[form reply]"
    return "[interactive reply]"


def _label(text: str | None) -> str:
    return " ".join((text or "").replace("]", ")").split())[:80]


def _media(kind: str, media: Media | None) -> str:
    name = _label(media.filename) if media is not None else ""
    stand_in = f"[{kind}: {name}]" if name else f"[{kind}]"
    caption = (media.caption or "").strip() if media is not None else ""
    return f"{caption}\n{stand_in}" if caption else stand_in


def _place(location: Location | None) -> str:
    if location is None:
        return "[location]"
    words = ", ".join(_label(part) for part in (location.name, location.address) if part and _label(part))
    point = (
        f"{location.latitude:.5f}, {location.longitude:.5f}"
        if location.latitude is not None and location.longitude is not None
        else ""
    )
    inside = "; ".join(part for part in (words, point) if part)
    return f"[location: {inside}]" if inside else "[location]"
