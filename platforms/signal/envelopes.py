"""signal-cli's ``receive`` events in, :class:`InboundMessage` out: the one place signal-cli's JSON shapes are read.

The HTTP daemon's event stream carries one JSON object per event: ``{"account": "+15550001", "envelope": {...}}``
(and an ``exception`` when signal-cli could not decrypt or trust the sender). The same object wrapped as a JSON-RPC
notification, ``{"jsonrpc": "2.0", "method": "receive", "params": {...}}``, as the socket and stdin transports
write it, or with the subscription form's ``params.result``, is read too.

Only an envelope with a ``dataMessage`` that carries something to answer starts a turn. Receipts, typing
indicators, calls, stories, edits, sync messages (what this account sent from another device, a note to self)
and anything sent by the account itself are skipped, as are reactions, deletions, group updates and
disappearing-message settings. Attachments, stickers, contacts and polls become stand-ins such as ``[image]``, and
each attachment is also described by a :class:`SignalFile` (:func:`files_of`) for :mod:`platforms.signal.files` to
fetch; mention placeholders (U+FFFC) become ``@name``.

Keys: the sender's ACI (``sourceUuid``) is the stable user id and the participant (``user_id_alt``; the phone
number, when shared, is ``user_id`` and the display name falls back to it). A direct chat is
``agent:main:signal~<account>:dm:<sender uuid>``; a group message (``dataMessage.groupInfo.groupId``) is
``agent:main:signal~<account>:group:<group id>:<sender uuid>``. Signal names a message by its sender and the
sender's timestamp, so the inbound message id is ``<sender uuid>:<timestamp>``: a redelivery (signal-cli's
``Last-Event-ID`` replay, Signal resending an unacknowledged envelope) collides with it in the durable inbox.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import msgspec

from hermes_actors.errors import PlatformError
from hermes_actors.media import kind_of
from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource
from platforms.signal.config import is_uuid

__all__ = [
    "MAX_TEXT_CHARS",
    "PLATFORM",
    "Envelope",
    "EventError",
    "Notification",
    "SignalFile",
    "Skipped",
    "decode_event",
    "files_of",
    "inbound_from_event",
]

_log = logging.getLogger(__name__)

PLATFORM = "signal"
MAX_TEXT_CHARS = 64_000  # Signal bodies are about 2 KiB (the rest comes as an attachment): more is not Signal

_NUMBER = re.compile(r"\+?[0-9]{1,20}")
_GROUP_ID = re.compile(r"[A-Za-z0-9+/_=-]{1,128}")  # base64: 24 characters for old groups, 44 for v2
_MAX_TIMESTAMP = 2**63
_MAX_PRINTED = 256  # names, file names and signal-cli exception texts are cut to this
_PLACEHOLDER = "\ufffc"  # where Signal put a mention in the text
_LONG_TEXT = "text/x-signal-plain"
_ATTACHMENT_ID = re.compile(r"[A-Za-z0-9_.=+-]{1,256}")  # a file name in signal-cli's attachments directory


class EventError(PlatformError):
    """An event is not one signal-cli would send (not JSON, a field of the wrong type, an id of the wrong shape)."""


class Skipped(msgspec.Struct, frozen=True, kw_only=True):
    """An event that starts no turn, why, and the level to log it at (receipts and typing: debug)."""

    reason: str
    level: int = logging.INFO


class GroupInfo(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    group_id: str
    group_name: str | None = None
    type: str | None = None  # DELIVER, UPDATE, QUIT


class Attachment(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """An attachment as signal-cli lists it; ``id`` and ``size`` stay untyped (a bad one costs the file, not the
    message)."""

    content_type: str | None = None
    filename: str | None = None
    id: Any = None
    size: Any = None


class SignalFile(msgspec.Struct, frozen=True, kw_only=True):
    """An attachment to fetch with ``getAttachment``: signal-cli's id (``None``: it gave none) and what it says."""

    id: str | None
    kind: str
    mime_type: str | None = None
    name: str | None = None
    size: int | None = None


class Mention(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    name: str | None = None
    number: str | None = None
    uuid: str | None = None
    start: int = 0


class DataMessage(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The fields of a ``dataMessage`` this adapter reads; signal-cli adds fields often, the rest are ignored."""

    message: str | None = None
    group_info: GroupInfo | None = None
    attachments: list[Attachment] | None = None
    mentions: list[Mention] | None = None
    sticker: Any = None
    contacts: list[Any] | None = None
    payment: Any = None
    poll_create: Any = None
    reaction: Any = None
    remote_delete: Any = None
    is_expiration_update: bool | None = None


class Envelope(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A received envelope: who sent it, when, and what kind of content it holds."""

    timestamp: int
    source: str | None = None
    source_number: str | None = None
    source_uuid: str | None = None
    source_name: str | None = None
    data_message: DataMessage | None = None
    edit_message: Any = None
    story_message: Any = None
    sync_message: Any = None
    call_message: Any = None
    receipt_message: Any = None
    typing_message: Any = None


class Notification(msgspec.Struct, frozen=True, kw_only=True):
    """One ``receive`` event: the account it is for, the envelope, and signal-cli's exception if any."""

    account: str | None = None
    envelope: Envelope | None = None
    exception: Any = None


class _Params(Notification, frozen=True, kw_only=True):
    result: Notification | None = None  # the subscription form (receive mode manual)


class _Frame(_Params, frozen=True, kw_only=True):
    jsonrpc: str | None = None
    method: str | None = None
    params: _Params | None = None


_decode = msgspec.json.Decoder(_Frame).decode


def decode_event(data: str | bytes) -> Notification:
    """Decode an event's data; :class:`EventError` says what is wrong and where (``$.envelope.timestamp``)."""
    try:
        frame = _decode(data)
    except msgspec.ValidationError as exc:
        raise EventError(f"not a signal-cli receive event: {exc}") from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise EventError(f"not valid JSON: {exc}") from None
    if frame.jsonrpc is None and frame.method is None and frame.params is None:
        return Notification(account=frame.account, envelope=frame.envelope, exception=frame.exception)
    if frame.method != "receive":
        raise EventError(f"a JSON-RPC {str(frame.method)[:40]!r} notification is not a receive event")
    params = frame.params or _Params()
    found = params.result or params
    return Notification(account=found.account, envelope=found.envelope, exception=found.exception)


def inbound_from_event(
    event: Notification, account: str, *, received_at: float | None = None
) -> InboundMessage | Skipped:
    """The inbound message of an event on ``account``'s stream, or why it starts no turn.

    Raises :class:`EventError` for an event for another account and for values signal-cli never writes.
    """
    if event.account is not None and event.account.lower() != account.lower():
        raise EventError(f"an event for account {event.account[:40]!r} arrived on the stream of {account}")
    envelope = event.envelope
    if envelope is None:
        return Skipped(reason=f"no envelope ({_exception(event.exception) or 'nothing to read'})")
    kind = _other_kind(envelope)
    if kind is not None:
        quiet = kind in ("a receipt", "a typing indicator")
        return Skipped(reason=kind, level=logging.DEBUG if quiet else logging.INFO)
    data = envelope.data_message
    if data is None:
        return _unreadable(envelope, account, _exception(event.exception))
    uuid, number = _sender(envelope)
    if account.lower() in (uuid, number):
        return Skipped(reason="sent by this account", level=logging.DEBUG)
    not_new = _not_a_new_message(data)
    if not_new is not None:
        return Skipped(reason=not_new)
    text = _text_of(data)
    if text is None:
        return Skipped(reason="it carries no text")
    timestamp = _timestamp(envelope.timestamp)
    sender = uuid or number
    assert sender is not None  # _sender raises without one
    group = data.group_info
    chat_id = _group_id(group.group_id) if group is not None else sender
    source = SessionSource(
        platform=PLATFORM,
        account_id=account,
        chat_type="dm" if group is None else "group",
        chat_id=chat_id,
        user_id=number or uuid,
        user_id_alt=uuid,
        chat_name=_printable(group.group_name) if group is not None else None,
        user_name=_printable(envelope.source_name) or number,
    )
    return InboundMessage(source=source, text=text, message_id=f"{sender}:{timestamp}", received_at=received_at)


def files_of(event: Notification) -> list[SignalFile]:
    """The attachments of the message in ``event`` (the long text of a long message too), to fetch by id."""
    data = event.envelope.data_message if event.envelope is not None else None
    found: list[SignalFile] = []
    for attachment in (data.attachments if data is not None else None) or []:
        mime = (attachment.content_type or "").strip().lower() or None
        ident = attachment.id if isinstance(attachment.id, str) and _ATTACHMENT_ID.fullmatch(attachment.id) else None
        size = attachment.size if type(attachment.size) is int and attachment.size >= 0 else None
        name = _printable(attachment.filename)
        found.append(SignalFile(id=ident, kind=kind_of(mime), mime_type=mime, name=name, size=size))
    return found


def _unreadable(envelope: Envelope, account: str, problem: str | None) -> Skipped:
    """An envelope without content: signal-cli could not decrypt it (an untrusted identity) or it was empty."""
    if problem is None:
        return Skipped(reason="no data message")
    sender = (_printable(envelope.source_uuid or envelope.source_number or envelope.source) or "the sender")[:64]
    hint = ""
    if "untrusted" in problem.lower():
        hint = (
            f"; the sender's safety number changed: verify it and run signal-cli -a {account} trust "
            f"--trust-all-known-keys {sender}, and ask them to send it again"
        )
    return Skipped(reason=f"signal-cli could not read a message from {sender}: {problem}{hint}", level=logging.WARNING)


def _other_kind(envelope: Envelope) -> str | None:
    """What an envelope is when it is not a message to answer."""
    if envelope.receipt_message is not None:
        return "a receipt"
    if envelope.typing_message is not None:
        return "a typing indicator"
    if envelope.sync_message is not None:
        return "a sync message from another device of this account"
    if envelope.call_message is not None:
        return "a call"
    if envelope.story_message is not None:
        return "a story"
    if envelope.edit_message is not None:
        return "an edit of an earlier message"
    return None


def _not_a_new_message(data: DataMessage) -> str | None:
    if data.reaction is not None:
        return "a reaction"
    if data.remote_delete is not None:
        return "a deletion"
    if data.is_expiration_update:
        return "a disappearing-messages setting"
    group = data.group_info
    if group is not None and group.type not in (None, "DELIVER") and not data.message and not data.attachments:
        return f"a group {group.type.lower()[:20]}"
    return None


def _sender(envelope: Envelope) -> tuple[str | None, str | None]:
    """The sender's ACI and phone number; at least one, else :class:`EventError`."""
    uuid = envelope.source_uuid or None
    if uuid is not None and not is_uuid(uuid):
        raise EventError(f"sourceUuid {uuid[:40]!r} is not a UUID")
    number = envelope.source_number or None
    if number is None and envelope.source and not is_uuid(envelope.source):
        number = envelope.source  # the deprecated field holds the number when there is one
    if number is not None and not _NUMBER.fullmatch(number):
        raise EventError(f"sourceNumber {number[:40]!r} is not a phone number")
    if uuid is None and envelope.source and is_uuid(envelope.source):
        uuid = envelope.source.lower()
    if uuid is None and number is None:
        raise EventError("the envelope names no sender (no sourceUuid, sourceNumber or source)")
    return (None if uuid is None else uuid.lower()), number


def _timestamp(value: int) -> int:
    if not 0 < value < _MAX_TIMESTAMP:
        raise EventError(f"the envelope's timestamp {value} is out of range")
    return value


def _group_id(value: str) -> str:
    if not _GROUP_ID.fullmatch(value):
        raise EventError(f"groupId {value[:40]!r} is not a base64 group id")
    return value


def _printable(value: str | None) -> str | None:
    """``value`` without control characters, at most 256 characters, or ``None`` when nothing is left."""
    if not value:
        return None
    cleaned = "".join(c for c in value if c.isprintable())[:_MAX_PRINTED].strip()
    return cleaned or None


def _exception(value: Any) -> str | None:
    """signal-cli's ``exception`` (``{"message": ..., "type": ...}``) as one printable line."""
    if isinstance(value, dict):
        kind, message = value.get("type"), value.get("message")
        return _printable(": ".join(str(part)[:200] for part in (kind, message) if part))
    return None if value is None else _printable(str(value)[:200])


def _text_of(data: DataMessage) -> str | None:
    """The text with mentions spelled out, then the stand-ins; ``None`` when there is nothing to answer."""
    text = _with_mentions(data.message or "", data.mentions or [])
    parts = [text] if text.strip() else []
    parts.extend(_stand_ins(data))
    if not parts:
        return None
    joined = "\n".join(parts)
    if len(joined) > MAX_TEXT_CHARS:
        _log.warning("signal: cut a message of %d characters to %d", len(joined), MAX_TEXT_CHARS)
        joined = joined[:MAX_TEXT_CHARS] + " [cut: longer than Signal allows]"
    return joined


def _with_mentions(text: str, mentions: list[Mention]) -> str:
    if _PLACEHOLDER not in text or not mentions:
        return text
    names = iter(sorted(mentions, key=lambda mention: mention.start))
    pieces = text.split(_PLACEHOLDER)
    out = [pieces[0]]
    for piece in pieces[1:]:
        mention = next(names, None)
        label = None if mention is None else _printable(mention.name or mention.number or mention.uuid)
        out.append(f"@{label}" if label else _PLACEHOLDER)
        out.append(piece)
    return "".join(out)


def _stand_ins(data: DataMessage) -> list[str]:
    found = [_attachment_stand_in(attachment) for attachment in data.attachments or []]
    if data.sticker is not None:
        found.append("[sticker]")
    if data.contacts:
        found.append("[contact]")
    if data.payment is not None:
        found.append("[payment]")
    if data.poll_create is not None:
        found.append("[poll]")
    return found


def _attachment_stand_in(attachment: Attachment) -> str:
    kind = (attachment.content_type or "").lower()
    if kind == _LONG_TEXT:
        return "[the rest of this long message came as an attachment]"
    for prefix, stand_in in (("image/", "[image]"), ("video/", "[video]"), ("audio/", "[audio]")):
        if kind.startswith(prefix):
            return stand_in
    name = _printable(attachment.filename)
    return f"[file: {name[:100]}]" if name else "[file]"
