"""Room events in, :class:`InboundMessage` out: the one place Matrix message contents are read.

``m.room.message`` with ``msgtype`` ``m.text``, ``m.notice`` or ``m.emote`` starts a turn with its ``body`` (an
emote as ``* body``; the quoted fallback of a rich reply, lines starting with ``>``, is cut off). Media
(``m.image``, ``m.file``, ``m.audio``, ``m.video``, ``m.location``) and ``m.sticker`` become stand-ins such as
``[image: cat.png]`` followed by a caption when there is one; the file of an image, file, audio clip or video is
described by :class:`MatrixFile` for :mod:`platforms.matrix.files` to download. A file sent end-to-end encrypted
(``content.file`` instead of ``content.url``) is described with the reason it cannot be read. Edits
(``m.replace``), key-verification requests and every other event type start nothing. An ``m.room.encrypted``
event cannot be read (end-to-end encryption is not built) and is reported by the poller.

``content.m.relates_to`` with ``rel_type: m.thread`` puts a message in the thread of its root event, whose id is
the thread id. The inbound message id is the event id: it names one event in one room forever, so any redelivery
(a repeated ``/sync`` after a crash, an overlap with a backfilled page) collides with it in the durable inbox.
"""

from __future__ import annotations

import mimetypes
import re

import msgspec

from hermes_actors.media import kind_of
from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource
from platforms.matrix.wire import EventError, MediaContent, MediaInfo, MessageContent, RoomEvent, decode_as

__all__ = [
    "ENCRYPTED",
    "PLATFORM",
    "Incoming",
    "MatrixFile",
    "checked_event_id",
    "checked_room_id",
    "checked_user_id",
    "inbound_message",
    "incoming_of",
]

PLATFORM = "matrix"
ENCRYPTED = "m.room.encrypted"

_MESSAGE = "m.room.message"
_STICKER = "m.sticker"
_STAND_INS = {"m.image": "image", "m.file": "file", "m.audio": "audio", "m.video": "video", "m.location": "location"}
_FILE_KINDS = {"m.image": "image", "m.audio": "audio", "m.video": "video", "m.file": None}  # None: by MIME type
# Grammar of the ids (printable ASCII, at most 255 bytes); room ids of room version 12 have no server part.
_ROOM_ID = re.compile(r"![\x21-\x7e]{1,254}")
_EVENT_ID = re.compile(r"\$[\x21-\x7e]{1,254}")
_USER_ID = re.compile(r"@[\x21-\x39\x3b-\x7e]{1,253}:[\x21-\x7e]{1,253}")
_FALLBACK = re.compile(r"(?:>[^\n]*\n)+\n")


class MatrixFile(msgspec.Struct, frozen=True, kw_only=True):
    """The file of a media message: its ``mxc://`` URI and what the event says of it.

    ``problem`` says why it cannot be fetched at all (sent end-to-end encrypted, no URI); ``size`` and
    ``mime_type`` come from the content's ``info`` and are ``None`` when it does not say (or says nonsense).
    """

    kind: str  # image, audio, video or document
    url: str | None = None
    name: str | None = None
    mime_type: str | None = None
    size: int | None = None
    problem: str | None = None


class Incoming(msgspec.Struct, frozen=True, kw_only=True):
    """A room message that starts a turn, before the room around it is known; ``file`` is its media, if any."""

    event_id: str
    sender: str
    text: str
    thread_id: str | None = None
    file: MatrixFile | None = None


def checked_room_id(value: str) -> str:
    """``value`` if it is a room id (``!opaque:server`` or, since room version 12, ``!opaque``)."""
    if not _ROOM_ID.fullmatch(value):
        raise EventError(f"{value[:80]!r} is not a room id")
    return value


def checked_event_id(value: str, field: str = "event_id") -> str:
    """``value`` if it is an event id (``$opaque``)."""
    if not _EVENT_ID.fullmatch(value):
        raise EventError(f"the {field} {value[:80]!r} is not an event id")
    return value


def checked_user_id(value: str, field: str = "sender") -> str:
    """``value`` if it is a user id (``@local:server``)."""
    if len(value) > 255 or not _USER_ID.fullmatch(value):
        raise EventError(f"the {field} {value[:80]!r} is not a user id")
    return value


def incoming_of(event: RoomEvent) -> Incoming | None:
    """The message ``event`` carries, or ``None`` for an event that starts no turn.

    Raises :class:`EventError` for a message whose ids or content are malformed.
    """
    if event.type not in (_MESSAGE, _STICKER):
        return None
    event_id = checked_event_id(event.event_id)
    sender = checked_user_id(event.sender)
    content = decode_as(event.content, MessageContent, f"the content of {event_id}")
    relation = content.relates_to
    if relation is not None and relation.rel_type == "m.replace":
        return None  # an edit of an earlier message, not a new one
    text = _text_of(event.type, content)
    if text is None:
        return None
    thread_id = None
    if relation is not None and relation.rel_type == "m.thread":
        if relation.event_id is None:
            raise EventError(f"the thread relation of {event_id} names no root event")
        thread_id = checked_event_id(relation.event_id, "thread root")
    file = _file_of(event, content) if event.type == _MESSAGE else None
    return Incoming(event_id=event_id, sender=sender, text=text, thread_id=thread_id, file=file)


def inbound_message(
    incoming: Incoming,
    *,
    account_id: str,
    room_id: str,
    direct: bool,
    room_name: str | None = None,
    user_name: str | None = None,
    received_at: float | None = None,
) -> InboundMessage:
    """The inbound message of ``incoming`` in ``room_id`` as account ``account_id`` received it.

    ``direct`` rooms are ``dm`` (one session per room), others ``group`` (one per member, or per thread).
    """
    source = SessionSource(
        platform=PLATFORM,
        account_id=account_id,
        chat_type="dm" if direct else "group",
        chat_id=room_id,
        thread_id=incoming.thread_id,
        user_id=incoming.sender,
        chat_name=room_name,
        user_name=user_name,
        message_id=incoming.event_id,
    )
    return InboundMessage(source=source, text=incoming.text, message_id=incoming.event_id, received_at=received_at)


def _file_of(event: RoomEvent, content: MessageContent) -> MatrixFile | None:
    """The file of an ``m.image``, ``m.file``, ``m.audio`` or ``m.video`` message; ``None`` for other messages."""
    msgtype = content.msgtype or ""
    if msgtype not in _FILE_KINDS:
        return None
    name = (content.filename or "").strip() or (content.body or "").strip() or None
    # The fields are untyped, so this decodes whenever the text did; only a well-formed info is used.
    media = decode_as(event.content, MediaContent, "the media content")
    try:
        info = msgspec.convert(media.info, MediaInfo) if isinstance(media.info, dict) else MediaInfo()
    except msgspec.ValidationError:
        info = MediaInfo()  # a malformed info only costs the early size check and the type
    mime = info.mimetype.strip().lower() if info.mimetype and info.mimetype.strip() else None
    mime = mime or (mimetypes.guess_type(name, strict=False)[0] if name else None)
    size = info.size if info.size is not None and info.size >= 0 else None
    kind = _FILE_KINDS[msgtype] or kind_of(mime)
    if media.file is not None and media.url is None:
        problem = "it was sent end-to-end encrypted, and this adapter cannot decrypt files"
        return MatrixFile(kind=kind, name=name, mime_type=mime, size=size, problem=problem)
    if not isinstance(media.url, str) or not media.url:
        return MatrixFile(kind=kind, name=name, mime_type=mime, size=size, problem="the message names no file to fetch")
    return MatrixFile(kind=kind, url=media.url, name=name, mime_type=mime, size=size)


def _text_of(event_type: str, content: MessageContent) -> str | None:
    body = (content.body or "").strip()
    if event_type == _STICKER:
        return f"[sticker: {body}]" if body else "[sticker]"
    msgtype = content.msgtype or ""
    kind = _STAND_INS.get(msgtype)
    if kind is not None:
        return _stand_in(kind, content)
    if msgtype.startswith("m.key.") or not body:
        return None  # a verification request is for clients; an empty message says nothing
    fallback = _FALLBACK.match(body)
    if fallback is not None and content.relates_to is not None and content.relates_to.in_reply_to is not None:
        body = body[fallback.end() :].strip()
        if not body:
            return None
    if msgtype == "m.emote":
        return f"* {body}"
    return body  # m.text, m.notice, and unknown msgtypes, whose body is their readable fallback


def _stand_in(kind: str, content: MessageContent) -> str:
    """``[image: name]`` and a caption: with ``filename`` set, a different ``body`` is the caption (Matrix 1.10)."""
    body = (content.body or "").strip()
    name = (content.filename or "").strip() or body
    caption = body if content.filename and body and body != content.filename.strip() else ""
    if kind == "location":
        name, caption = "", body
    head = f"[{kind}: {name}]" if name else f"[{kind}]"
    return f"{head} {caption}" if caption else head
