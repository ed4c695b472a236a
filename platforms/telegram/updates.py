"""Telegram ``Update`` objects in, :class:`InboundMessage` out: the one place the Bot API's shapes are read.

Only ``message`` and ``channel_post`` updates start turns, and a ``callback_query`` of an approval's inline
keyboard (``approve:<id>`` or ``deny:<id>``) becomes ``/approve <id>`` or ``/deny <id>`` from the person who pressed
the button (:func:`approval_markup` makes the keyboard); anything else (edits, reactions, service messages such as
"X joined", other buttons) is acknowledged and dropped. Chats map to chat types as SPEC section 2 has them:
``private`` is ``dm``, ``group`` and ``supergroup`` are ``group``, ``channel`` is ``channel``. A message in a forum
topic (``is_topic_message``) carries the topic's ``message_thread_id`` as its thread, so a topic is one shared
conversation; a plain reply chain in a group is not a topic and stays in the group's per-user session.

The inbound message id is ``<chat id>:<message id>``: Telegram numbers messages per chat, so the pair names one
message for one bot forever. A redelivered update (a webhook retry, a ``getUpdates`` answer that was never
confirmed) collides with it in the gateway's durable inbox. ``update_id`` is not used: it restarts at random
after a week without updates.

Media leave a short stand-in such as ``[image]`` before the caption in the text, so every message has text.
Photos (the largest size) and documents are also listed by :func:`files_of` as :class:`TelegramFile`, which
:mod:`platforms.telegram.files` downloads into the media store as the message's attachments; stickers, voice
notes and the rest stay stand-ins.
"""

from __future__ import annotations

import mimetypes
from typing import Any

import msgspec

from hermes_actors.errors import PlatformError
from hermes_actors.media import kind_of
from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource
from platforms.support import json_guard

__all__ = [
    "ALLOWED_UPDATES",
    "PLATFORM",
    "CallbackQuery",
    "Chat",
    "Message",
    "TelegramFile",
    "Update",
    "UpdateError",
    "User",
    "approval_markup",
    "callback_query_id",
    "decode_update",
    "files_of",
    "inbound_from_update",
    "update_id_of",
]

PLATFORM = "telegram"
ALLOWED_UPDATES = ("message", "channel_post", "callback_query")  # what getUpdates and setWebhook ask Telegram for

_MAX_ID = 2**63  # Telegram ids fit in 52 bits; anything past 64 is not from Telegram
_CHAT_TYPES = {"private": "dm", "group": "group", "supergroup": "group", "channel": "channel"}


class UpdateError(PlatformError):
    """An update is not one Telegram would send (malformed JSON, a field of the wrong type, an id out of range)."""


class User(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    first_name: str = ""
    last_name: str | None = None
    username: str | None = None


class Chat(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    type: str
    title: str | None = None
    username: str | None = None
    first_name: str | None = None
    last_name: str | None = None


class Document(msgspec.Struct, frozen=True, kw_only=True):
    file_id: str | None = None
    file_name: str | None = None
    mime_type: str | None = None
    file_size: int | None = None


class PhotoSize(msgspec.Struct, frozen=True, kw_only=True):
    file_id: str
    width: int = 0
    height: int = 0
    file_size: int | None = None


class TelegramFile(msgspec.Struct, frozen=True, kw_only=True):
    """A file of a message to fetch with ``getFile``: its id, and what the update says about it."""

    file_id: str
    kind: str  # image or document (a document's kind follows its MIME type)
    mime_type: str | None = None
    name: str | None = None
    size: int | None = None


class Sticker(msgspec.Struct, frozen=True, kw_only=True):
    emoji: str | None = None


class Message(msgspec.Struct, frozen=True, kw_only=True):
    """The fields of a Telegram ``Message`` this adapter reads; Telegram adds fields often, the rest are ignored."""

    message_id: int
    chat: Chat
    sender: User | None = msgspec.field(default=None, name="from")
    sender_chat: Chat | None = None
    message_thread_id: int | None = None
    is_topic_message: bool = False
    text: str | None = None
    caption: str | None = None
    photo: Any = None
    animation: Any = None
    video: Any = None
    video_note: Any = None
    voice: Any = None
    audio: Any = None
    document: Document | None = None
    sticker: Sticker | None = None
    location: Any = None
    venue: Any = None
    contact: Any = None
    poll: Any = None
    dice: Any = None


class CallbackQuery(msgspec.Struct, frozen=True, kw_only=True):
    """A press of an inline keyboard's button: who pressed it, on which message, and the button's data."""

    id: str
    sender: User = msgspec.field(name="from")
    message: Message | None = None
    data: str | None = None


class Update(msgspec.Struct, frozen=True, kw_only=True):
    """A Telegram ``Update``: its id and the kinds that start turns."""

    update_id: int
    message: Message | None = None
    channel_post: Message | None = None
    callback_query: CallbackQuery | None = None


class UpdateId(msgspec.Struct, frozen=True, kw_only=True):
    """Just the id of an update, to step past one that does not decode."""

    update_id: int


_decoder = msgspec.json.Decoder(Update)
_decode_id = msgspec.json.Decoder(UpdateId).decode

# Media without text, in the order they are tested (an animation also carries a document).
_STAND_INS = (
    ("photo", "[image]"),
    ("animation", "[animation]"),
    ("video", "[video]"),
    ("video_note", "[video message]"),
    ("voice", "[voice message]"),
    ("audio", "[audio]"),
    ("location", "[location]"),
    ("venue", "[venue]"),
    ("contact", "[contact]"),
    ("poll", "[poll]"),
    ("dice", "[dice]"),
)


def decode_update(body: bytes | str) -> Update:
    """Decode one update; :class:`UpdateError` says what is wrong and where (``$.message.chat.id``)."""
    try:
        return json_guard.decode(_decoder, body)
    except msgspec.ValidationError as exc:
        raise UpdateError(f"not a Telegram update: {exc}") from None
    except msgspec.DecodeError as exc:
        raise UpdateError(f"not valid JSON: {exc}") from None


def update_id_of(body: bytes | str) -> int | None:
    """The ``update_id`` of an update that may not decode as a whole, or ``None``."""
    try:
        return _decode_id(body).update_id
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        return None


def inbound_from_update(update: Update, account_id: str, *, received_at: float | None = None) -> InboundMessage | None:
    """The inbound message of ``update`` received by bot ``account_id``; ``None`` for updates that start no turn.

    Raises :class:`UpdateError` for values Telegram never sends (an id past 64 bits, an unknown chat type).
    """
    if update.callback_query is not None:
        return _pressed(update.callback_query, account_id, received_at)
    message = update.message or update.channel_post
    if message is None:
        return None
    text = _text_of(message)
    if text is None:
        return None
    user_id, user_name = _sender_of(message)
    source = _source_of(message, account_id, user_id, user_name)
    message_id = f"{source.chat_id}:{_id(message.message_id, 'message_id')}"
    return InboundMessage(source=source, text=text, message_id=message_id, received_at=received_at)


_PRESS_MARK = ":cb:"  # in the message id of a button press: <chat id>:cb:<callback query id>
_DECISIONS = {"approve": "/approve", "deny": "/deny"}


def approval_markup(approval_id: int) -> dict[str, Any]:
    """The inline keyboard of a question for approval: Approve and Deny, answered as ``/approve`` and ``/deny``."""
    buttons = [
        {"text": "Approve", "callback_data": f"approve:{approval_id}"},
        {"text": "Deny", "callback_data": f"deny:{approval_id}"},
    ]
    return {"inline_keyboard": [buttons]}


def callback_query_id(inbound: InboundMessage) -> str | None:
    """The callback query a button press's message came from (to answer it), ``None`` for any other message."""
    _, mark, query = inbound.message_id.partition(_PRESS_MARK)
    return query if mark and query else None


def _pressed(query: CallbackQuery, account_id: str, received_at: float | None) -> InboundMessage | None:
    """The decision a press of an approval's button stands for, from the person who pressed it; ``None`` for any
    other button (or a press on a message Telegram no longer shows)."""
    verb, _, number = (query.data or "").partition(":")
    command = _DECISIONS.get(verb)
    if command is None or not number.isdigit() or query.message is None:
        return None
    presser = query.sender
    full = " ".join(part for part in (presser.first_name, presser.last_name) if part)
    name = f"@{presser.username}" if presser.username else full or None
    source = _source_of(query.message, account_id, _id(presser.id, "callback_query.from.id"), name)
    message_id = f"{source.chat_id}{_PRESS_MARK}{query.id}"
    return InboundMessage(source=source, text=f"{command} {number}", message_id=message_id, received_at=received_at)


def _source_of(message: Message, account_id: str, user_id: str | None, user_name: str | None) -> SessionSource:
    """Where ``message`` is, for a message or a press of one of its buttons by ``user_id``."""
    chat = message.chat
    chat_type = _CHAT_TYPES.get(chat.type)
    if chat_type is None:
        raise UpdateError(f"the chat type {chat.type!r} is not one of {', '.join(_CHAT_TYPES)}")
    chat_id = _id(chat.id, "chat.id")
    thread_id = None
    if message.is_topic_message and message.message_thread_id is not None:
        thread_id = _id(message.message_thread_id, "message_thread_id")
    return SessionSource(
        platform=PLATFORM,
        account_id=account_id,
        chat_type=chat_type,
        chat_id=chat_id,
        thread_id=thread_id,
        user_id=user_id,
        chat_name=_chat_name(chat),
        user_name=user_name,
    )


def files_of(update: Update) -> list[TelegramFile]:
    """The photo (its largest size) and document of ``update``'s message, to download as attachments."""
    message = update.message or update.channel_post
    if message is None:
        return []
    found: list[TelegramFile] = []
    sizes = _photo_sizes(message.photo)
    if sizes:
        largest = max(sizes, key=lambda size: (size.width * size.height, size.file_size or 0))
        found.append(
            TelegramFile(
                file_id=largest.file_id, kind="image", mime_type="image/jpeg", name="photo.jpg", size=largest.file_size
            )
        )
    document = message.document
    if document is not None and document.file_id:
        mime = document.mime_type or (mimetypes.guess_type(document.file_name)[0] if document.file_name else None)
        found.append(
            TelegramFile(
                file_id=document.file_id,
                kind=kind_of(mime),
                mime_type=mime,
                name=document.file_name,
                size=document.file_size,
            )
        )
    return found


def _photo_sizes(photo: object) -> list[PhotoSize]:
    """The sizes of a message's ``photo`` (Telegram sends several); none when it is not the shape Telegram sends."""
    try:
        return msgspec.convert(photo, list[PhotoSize]) if photo is not None else []
    except msgspec.ValidationError:
        return []


def _id(value: int, field: str) -> str:
    if not -_MAX_ID < value < _MAX_ID:
        raise UpdateError(f"the message's {field} is out of range for a Telegram id")
    return str(value)


def _text_of(message: Message) -> str | None:
    """The text, the caption after a media stand-in, or ``None`` for a message with neither (a service message)."""
    if message.text is not None and message.text.strip():
        return message.text
    stand_in = _stand_in(message)
    caption = (message.caption or "").strip()
    if stand_in is None:
        return caption or None
    return f"{stand_in} {caption}" if caption else stand_in


def _stand_in(message: Message) -> str | None:
    for field, stand_in in _STAND_INS:
        if getattr(message, field) is not None:
            return stand_in
    if message.sticker is not None:
        return f"[sticker {message.sticker.emoji}]" if message.sticker.emoji else "[sticker]"
    if message.document is not None:
        return f"[file: {message.document.file_name}]" if message.document.file_name else "[file]"
    return None


def _sender_of(message: Message) -> tuple[str | None, str | None]:
    """The sender's stable id and display name: the user, or the chat a message was sent on behalf of.

    Anonymous group admins and linked channels post as ``sender_chat`` (``from`` is then a placeholder bot), so
    that chat is the participant; a channel post has no sender but its channel.
    """
    if message.sender_chat is not None:
        return _id(message.sender_chat.id, "sender_chat.id"), _chat_name(message.sender_chat)
    sender = message.sender
    if sender is None:
        return None, None
    full = " ".join(part for part in (sender.first_name, sender.last_name) if part)
    return _id(sender.id, "from.id"), (f"@{sender.username}" if sender.username else full or None)


def _chat_name(chat: Chat) -> str | None:
    if chat.title:
        return chat.title
    full = " ".join(part for part in (chat.first_name, chat.last_name) if part)
    return full or (f"@{chat.username}" if chat.username else None)
