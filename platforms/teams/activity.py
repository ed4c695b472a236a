"""The Bot Framework activity as it arrives: decoded once, and the inbound message a user's message becomes.

Teams has three conversation types. ``personal`` is a DM with the bot; ``groupChat`` a group chat (one session
per user by default); ``channel`` a team channel, whose ``conversation.id`` ends in ``;messageid=<root>``: the
thread the message is in, which is the session (shared by its users) and where the reply goes. The tenant
(``channelData.tenant.id``, else ``conversation.tenantId``) is the key's scope. The message id is
``<conversation.id>:<activity id>``: Teams' activity ids are unique only within a conversation, and a redelivery
carries the same one.

The bot's own ``<at>name</at>`` mention is removed from the text; another person's becomes ``@name``. A message
without text whose ``value`` is a press of an approval card's button (:mod:`platforms.teams.cards`) is that
decision, from the person who pressed. Only ``type: message`` starts a turn; ``conversationUpdate``,
``messageReaction``, ``typing``, ``invoke`` and the rest are acknowledged and skipped.
"""

from __future__ import annotations

import html
import re
from typing import Any

import msgspec

from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource
from platforms.support import json_guard
from platforms.support.http_host import Refused
from platforms.teams.cards import submitted_decision

__all__ = [
    "PLATFORM",
    "Activity",
    "Address",
    "Skipped",
    "TeamsAttachment",
    "decode_activity",
    "split_conversation",
    "to_inbound",
]

PLATFORM = "teams"
_THREAD = ";messageid="
_AT = re.compile(r"<at>(.*?)</at>", re.DOTALL)
_SPACES = re.compile(r"[ \t]{2,}")
_MAX_ID = 512


class ChannelAccount(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str | None = None
    aadObjectId: str | None = None


class ConversationAccount(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    conversationType: str | None = None
    tenantId: str | None = None
    isGroup: bool | None = None
    name: str | None = None


class TeamsAttachment(msgspec.Struct, frozen=True, kw_only=True):
    contentType: str
    contentUrl: str | None = None
    content: Any = None
    name: str | None = None


class _Mention(msgspec.Struct, frozen=True, kw_only=True):
    mentioned: ChannelAccount | None = None
    text: str | None = None


class Activity(msgspec.Struct, frozen=True, kw_only=True):
    """A Bot Framework activity (the fields used)."""

    type: str
    id: str | None = None
    serviceUrl: str | None = None
    channelId: str | None = None
    sender: ChannelAccount | None = msgspec.field(default=None, name="from")
    conversation: ConversationAccount | None = None
    recipient: ChannelAccount | None = None
    text: str | None = None
    replyToId: str | None = None
    attachments: list[TeamsAttachment] = msgspec.field(default_factory=list)
    entities: list[dict[str, Any]] = msgspec.field(default_factory=list)
    channelData: dict[str, Any] | None = None
    value: Any = None  # what an Adaptive Card's Action.Submit sent (a press of an approval's button)


class Address(msgspec.Struct, frozen=True, kw_only=True):
    """Where a conversation's replies go: its Bot Connector ``serviceUrl`` and tenant (stored per conversation)."""

    service_url: str
    tenant_id: str | None = None


class Skipped(msgspec.Struct, frozen=True, kw_only=True):
    """An activity that starts no turn, and why; ``quiet`` ones log at debug."""

    reason: str
    quiet: bool = False


_decoder = msgspec.json.Decoder(Activity)


def decode_activity(body: bytes) -> Activity:
    """The activity in ``body``; :class:`Refused` 400 naming the field when it is not one."""
    try:
        activity = json_guard.decode(_decoder, body)
    except msgspec.ValidationError as exc:
        raise Refused(400, f"the body is not a Bot Framework activity ({exc})") from None
    except msgspec.DecodeError as exc:
        raise Refused(400, f"the body is not valid JSON ({exc})") from None
    if not activity.serviceUrl:
        raise Refused(400, "$.serviceUrl is missing")
    if not activity.channelId:
        raise Refused(400, "$.channelId is missing")
    return activity


def split_conversation(conversation_id: str) -> tuple[str, str | None]:
    """(the conversation, the channel thread's root message id or ``None``) of a ``conversation.id``."""
    base, found, thread = conversation_id.partition(_THREAD)
    return (base, thread or None) if found else (conversation_id, None)


def _nested_str(data: dict[str, Any] | None, *path: str) -> str | None:
    value: Any = data
    for name in path:
        value = value.get(name) if isinstance(value, dict) else None
    return value if isinstance(value, str) and value else None


def _text_of(activity: Activity, bot_id: str) -> str:
    """The text as the agent should read it: our mention removed, others as ``@name``, entities decoded."""
    ours: set[str] = set()
    for raw in activity.entities:
        if raw.get("type") != "mention":
            continue
        try:
            mention = msgspec.convert(raw, _Mention, strict=False)
        except msgspec.ValidationError:
            raise Refused(400, f"a mention entity is malformed ({str(raw)[:100]})") from None
        if mention.mentioned is not None and mention.mentioned.id == bot_id and mention.text:
            ours.add(mention.text)
    text = activity.text or ""
    for tag in ours:
        text = text.replace(tag, " ")
    text = _AT.sub(lambda found: "@" + found[1].strip(), text)
    return _SPACES.sub(" ", html.unescape(text).replace("\xa0", " ")).strip()


def _checked(value: str | None, field: str) -> str:
    if not value:
        raise Refused(400, f"{field} is missing")
    if len(value) > _MAX_ID or not value.isprintable():
        raise Refused(400, f"{field} is not an id Teams sends ({len(value)} characters)")
    return value


def to_inbound(
    activity: Activity, *, bot_name: str, bot_app_id: str, received_at: float
) -> tuple[InboundMessage, Address, list[TeamsAttachment]] | Skipped:
    """Map a ``message`` activity to an inbound message, its reply address and its attachments, or a
    :class:`Skipped`; :class:`Refused` if it is broken."""
    if activity.type != "message":
        return Skipped(reason=f"a {activity.type[:40]!r} activity is not a message", quiet=activity.type == "typing")
    if activity.conversation is None or activity.sender is None or activity.recipient is None:
        raise Refused(400, "a message activity needs $.conversation, $.from and $.recipient")
    activity_id = _checked(activity.id, "$.id")
    conversation_id = _checked(activity.conversation.id, "$.conversation.id")
    user = _checked(activity.sender.id, "$.from.id")
    recipient = activity.recipient.id
    if recipient not in (bot_app_id, f"28:{bot_app_id}"):
        raise Refused(403, f"the activity is addressed to {recipient[:60]!r}, not to this bot's app id")
    if user == recipient:
        return Skipped(reason="our own message", quiet=True)
    tenant = _nested_str(activity.channelData, "tenant", "id") or activity.conversation.tenantId
    kind = activity.conversation.conversationType or ("groupChat" if activity.conversation.isGroup else "personal")
    chat_id, thread = split_conversation(conversation_id)
    if kind == "channel":
        chat_type = "channel"
    elif kind == "groupChat":
        chat_type, thread = "group", None
    else:
        chat_type, thread = "dm", None
    text = _text_of(activity, recipient) or submitted_decision(activity.value) or ""
    files = [a for a in activity.attachments if a.contentType != "text/html"]
    if not text and not files:
        return Skipped(reason="a message without text or files")
    source = SessionSource(
        platform=PLATFORM,
        account_id=bot_name,
        scope_id=tenant,
        chat_type=chat_type,
        chat_id=chat_id,
        thread_id=thread,
        user_id=user,
        user_id_alt=activity.sender.aadObjectId or None,
        chat_name=activity.conversation.name or _nested_str(activity.channelData, "channel", "name"),
        user_name=activity.sender.name or None,
        message_id=activity_id,
    )
    inbound = InboundMessage(
        source=source, text=text, message_id=f"{conversation_id}:{activity_id}", received_at=received_at
    )
    address = Address(service_url=activity.serviceUrl or "", tenant_id=tenant)
    return inbound, address, files
