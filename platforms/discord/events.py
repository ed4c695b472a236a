"""Discord gateway payloads in, :class:`InboundMessage` out: the one place Discord's JSON shapes are read.

Every frame is ``{"op", "d", "s", "t"}``; ``d`` stays raw until ``op`` and ``t`` say what it is, then decodes into
the Struct for that event, so a malformed event is an :class:`EventError` naming the field (``$.author.id``) and
never a crash. Ids are snowflakes: decimal strings, checked as such.

Chats map as SPEC section 2 has them. A message without ``guild_id`` is a DM: ``dm`` keyed by its DM channel. A
guild text, announcement, voice or forum channel is ``group`` with the guild as scope, one session per member. A
thread is a channel of its own whose ``parent_id`` is the channel it hangs off: it becomes ``group`` with the parent
as chat and the thread as thread id, one shared session (the same key a ``/handoff`` thread is bound under). Channel
types come from :class:`ChannelCache`, filled from ``GUILD_CREATE``, ``THREAD_*`` and ``CHANNEL_*`` events and from
``GET /channels/{id}`` when a message arrives from a channel not seen yet.

Only user text starts turns: messages from bots (our own replies come back as ``MESSAGE_CREATE`` too), webhooks
and system messages (joins, pins, thread notices) are skipped. Our own ``<@id>`` mention is removed from the text.
The inbound message id is the message's snowflake, unique across Discord, so an event Discord replays on resume
collides with the first copy in the durable inbox. Each attachment leaves a stand-in such as ``[image: plot.png]``
in the text (so a message of files alone still has text); the files themselves are fetched into the media store
by :mod:`platforms.discord.files` before the message is accepted.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Annotated, TypeVar

import msgspec

from hermes_actors.errors import PlatformError
from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource

__all__ = [
    "DM_TYPES",
    "PLATFORM",
    "THREAD_TYPES",
    "Channel",
    "ChannelCache",
    "EventError",
    "Frame",
    "GuildCreate",
    "Hello",
    "Message",
    "MessageAttachment",
    "Ready",
    "Skipped",
    "ThreadListSync",
    "User",
    "decode_data",
    "decode_frame",
    "inbound_from_message",
    "skip_reason",
]

PLATFORM = "discord"
DM_TYPES = frozenset({1, 3})  # DM, group DM
THREAD_TYPES = frozenset({10, 11, 12})  # announcement, public and private threads
_USER_TEXT = frozenset({0, 19})  # DEFAULT and REPLY; the others are system notices
_CACHED_CHANNELS = 100_000

Snowflake = Annotated[str, msgspec.Meta(pattern=r"^[0-9]{1,20}$")]
T = TypeVar("T")


class EventError(PlatformError):
    """A gateway payload is not one Discord would send (not JSON, a missing field, an id that is no snowflake)."""


class Frame(msgspec.Struct, frozen=True, kw_only=True):
    """One gateway payload; ``d`` is decoded later, by :func:`decode_data`, once ``op`` and ``t`` are known."""

    op: int
    d: msgspec.Raw = msgspec.Raw(b"null")
    s: int | None = None
    t: str | None = None


class Hello(msgspec.Struct, frozen=True, kw_only=True):
    heartbeat_interval: Annotated[int, msgspec.Meta(ge=1, le=3_600_000)]  # milliseconds


class User(msgspec.Struct, frozen=True, kw_only=True):
    id: Snowflake
    username: str = ""
    global_name: str | None = None
    bot: bool = False


class Ready(msgspec.Struct, frozen=True, kw_only=True):
    session_id: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    resume_gateway_url: Annotated[str, msgspec.Meta(pattern=r"^wss?://", max_length=2000)]
    user: User


class Channel(msgspec.Struct, frozen=True, kw_only=True):
    """What the adapter keeps of a channel: enough to tell a DM, a channel and a thread (with its parent) apart."""

    id: Snowflake
    type: int
    guild_id: Snowflake | None = None
    parent_id: Snowflake | None = None
    name: str | None = None

    @property
    def is_thread(self) -> bool:
        return self.type in THREAD_TYPES

    @property
    def is_dm(self) -> bool:
        return self.type in DM_TYPES


class GuildCreate(msgspec.Struct, frozen=True, kw_only=True):
    id: Snowflake
    unavailable: bool = False
    channels: list[Channel] = msgspec.field(default_factory=list)
    threads: list[Channel] = msgspec.field(default_factory=list)


class ThreadListSync(msgspec.Struct, frozen=True, kw_only=True):
    guild_id: Snowflake
    threads: list[Channel] = msgspec.field(default_factory=list)


class _Member(msgspec.Struct, frozen=True, kw_only=True):
    nick: str | None = None


class MessageAttachment(msgspec.Struct, frozen=True, kw_only=True):
    """An entry of a message's ``attachments`` (the fields used): ``url`` is a signed CDN address and
    ``content_type`` is absent when Discord does not know the type. Discord always sends ``filename``, ``size`` and
    ``url``; they default here so that a payload missing one still yields the message (the file is then refused,
    saying why)."""

    filename: str = ""
    size: int | None = None  # bytes
    content_type: str | None = None
    url: str | None = None


class _Sticker(msgspec.Struct, frozen=True, kw_only=True):
    name: str = ""


class Message(msgspec.Struct, frozen=True, kw_only=True):
    """The fields of a ``MESSAGE_CREATE`` this adapter reads; Discord adds fields often, the rest are ignored."""

    id: Snowflake
    channel_id: Snowflake
    author: User
    guild_id: Snowflake | None = None
    content: str = ""
    type: int = 0
    webhook_id: Snowflake | None = None
    member: _Member | None = None
    attachments: list[MessageAttachment] = msgspec.field(default_factory=list)
    sticker_items: list[_Sticker] = msgspec.field(default_factory=list)


class Skipped(msgspec.Struct, frozen=True, kw_only=True):
    """A message that starts no turn, and why; ``quiet`` ones (bots' messages, our own replies) log at debug."""

    reason: str
    quiet: bool = False


_decode_frame = msgspec.json.Decoder(Frame).decode


def decode_frame(text: str | bytes) -> Frame:
    """Decode one gateway payload; :class:`EventError` says what is wrong."""
    try:
        return _decode_frame(text)
    except msgspec.ValidationError as exc:
        raise EventError(f"not a gateway payload: {exc}") from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise EventError(f"not valid JSON: {exc}") from None


def decode_data(frame: Frame, kind: type[T]) -> T:
    """Decode ``frame.d`` as ``kind``; :class:`EventError` names the event and the field at fault."""
    what = frame.t or f"op {frame.op}"
    try:
        return msgspec.json.decode(frame.d, type=kind)
    except msgspec.ValidationError as exc:
        raise EventError(f"{what} is malformed: {exc}") from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise EventError(f"{what} is not valid JSON: {exc}") from None


class ChannelCache:
    """Channels by id, shared by the receiving shards and the sender; bounded, least recently used dropped first."""

    def __init__(self, limit: int = _CACHED_CHANNELS) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._channels: OrderedDict[str, Channel] = OrderedDict()

    def get(self, channel_id: str) -> Channel | None:
        with self._lock:
            found = self._channels.get(channel_id)
            if found is not None:
                self._channels.move_to_end(channel_id)
            return found

    def put(self, channels: Iterable[Channel], guild_id: str | None = None) -> None:
        """Remember ``channels``; ``guild_id`` fills in the guild of channels listed inside a ``GUILD_CREATE``."""
        with self._lock:
            for channel in channels:
                if guild_id is not None and channel.guild_id is None:
                    channel = msgspec.structs.replace(channel, guild_id=guild_id)
                self._channels[channel.id] = channel
                self._channels.move_to_end(channel.id)
            while len(self._channels) > self._limit:
                self._channels.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._channels)


def skip_reason(message: Message, own_user_id: str | None) -> Skipped | None:
    """Why ``message`` starts no turn (checked before any channel lookup), or ``None`` when it may."""
    if own_user_id is not None and message.author.id == own_user_id:
        return Skipped(reason="our own message", quiet=True)
    if message.author.bot or message.webhook_id is not None:
        return Skipped(reason="a message from a bot or webhook", quiet=True)
    if message.type not in _USER_TEXT:
        return Skipped(reason=f"a system message (type {message.type})")
    return None


def _stand_in(attachment: MessageAttachment) -> str:
    kind = (attachment.content_type or "").partition("/")[0]
    label = kind if kind in ("image", "audio", "video") else "file"
    name = attachment.filename.replace("]", ")")[:80]
    return f"[{label}: {name}]" if name else f"[{label}]"


def _text_of(message: Message, own_user_id: str | None) -> str:
    text = message.content
    if own_user_id is not None:
        stripped = re.sub(rf"<@!?{re.escape(own_user_id)}>", "", text).strip()
        text = stripped or ("" if message.attachments or message.sticker_items else text)  # a bare mention asks
    stand_ins = [_stand_in(a) for a in message.attachments]
    stand_ins += [f"[sticker: {s.name[:80]}]" if s.name else "[sticker]" for s in message.sticker_items]
    return "\n".join(part for part in (text.strip(), *stand_ins) if part)


def _display_name(user: User, member: _Member | None) -> str | None:
    return (member.nick if member is not None else None) or user.global_name or user.username or None


def inbound_from_message(
    message: Message,
    account_id: str,
    *,
    own_user_id: str | None,
    channel: Channel | None,
    received_at: float | None = None,
) -> InboundMessage | Skipped:
    """The inbound message of ``message`` received by bot ``account_id``, or why it starts no turn.

    ``channel`` is the message's channel when known; an unknown guild channel is taken for a plain channel.
    """
    skipped = skip_reason(message, own_user_id)
    if skipped is not None:
        return skipped
    text = _text_of(message, own_user_id)
    if not text:
        return Skipped(reason="a message without text or attachments (embeds and polls start no turn)")
    user_name = _display_name(message.author, message.member)
    if message.guild_id is None:
        source = SessionSource(
            platform=PLATFORM,
            account_id=account_id,
            chat_type="dm",
            chat_id=message.channel_id,
            user_id=message.author.id,
            chat_name=user_name,
            user_name=user_name,
            message_id=message.id,
        )
    else:
        thread = channel is not None and channel.is_thread and channel.parent_id is not None
        name = channel.name if channel is not None else None
        source = SessionSource(
            platform=PLATFORM,
            account_id=account_id,
            scope_id=message.guild_id,
            chat_type="group",
            chat_id=channel.parent_id if thread and channel is not None else message.channel_id,
            thread_id=message.channel_id if thread else None,
            user_id=message.author.id,
            chat_name=(name if thread else f"#{name}") if name else None,
            user_name=user_name,
            message_id=message.id,
        )
    return InboundMessage(source=source, text=text, message_id=message.id, received_at=received_at)
