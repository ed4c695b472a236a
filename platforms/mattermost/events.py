"""Mattermost posts in, :class:`InboundMessage` out: which posts start turns and how they are keyed.

Chats map as SPEC section 2 has them. A direct channel (``D``) is ``dm`` keyed by its channel id; a group message
(``G``) is ``group`` keyed by its channel; a public or private channel (``O``/``P``) is ``group`` with its team as
the scope (``agent:main:mattermost.<team>~<bot>:group:<channel>:<user>``), one session per member. A reply in a
thread (``root_id`` set) carries the root post's id as thread id and shares one session, which is also the key a
``/handoff`` thread is bound under.

Only what people write starts turns: our own posts (they come back as ``posted`` events), posts of bots, webhooks
and plugins (``props.from_bot``/``from_webhook``), system messages (``type`` ``system_*``) and deleted posts are
skipped. A mention of the bot (``@name``) is removed from the text. The inbound message id is the post id, unique on
the server, so a post seen again (over the websocket and again by a catch-up) collides in the durable inbox. Each
file leaves a stand-in such as ``[image: plot.png]`` in the text; the files themselves are fetched into the media
store by :mod:`platforms.mattermost.files` before the message is accepted.
"""

from __future__ import annotations

import re

import msgspec

from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource
from platforms.mattermost.wire import Post

__all__ = ["DIRECT", "GROUP", "PLATFORM", "Skipped", "Where", "inbound_from_post", "skip_reason"]

PLATFORM = "mattermost"
DIRECT, GROUP = "D", "G"
_CHANNELS = frozenset({"O", "P"})


class Skipped(msgspec.Struct, frozen=True, kw_only=True):
    """A post that starts no turn, and why; ``quiet`` ones (our own, bots') log at debug."""

    reason: str
    quiet: bool = False


class Where(msgspec.Struct, frozen=True, kw_only=True):
    """What is known of a post's channel: its type, team and name (from the event or ``GET /channels/{id}``)."""

    channel_type: str
    team_id: str = ""
    channel_name: str = ""


def skip_reason(post: Post, own_user_id: str) -> Skipped | None:
    """Why ``post`` starts no turn, or ``None`` when it may."""
    if post.user_id == own_user_id:
        return Skipped(reason="our own post", quiet=True)
    if post.from_bot:
        return Skipped(reason="a post of a bot, webhook or plugin", quiet=True)
    if post.type:
        return Skipped(reason=f"a system message ({post.type[:40]})")
    if post.delete_at:
        return Skipped(reason="a deleted post")
    return None


def _stand_ins(post: Post) -> list[str]:
    known = {info.id: info for info in post.metadata.files} if post.metadata is not None else {}
    lines = []
    for file_id in post.file_ids:
        info = known.get(file_id)
        major = info.mime_type.partition("/")[0] if info is not None else ""
        label = major if major in ("image", "audio", "video") else "file"
        name = info.name.replace("]", ")")[:80] if info is not None else ""
        lines.append(f"[{label}: {name}]" if name else f"[{label}]")
    return lines


def _text_of(post: Post, own_username: str) -> str:
    text = post.message
    if own_username:
        mention = re.compile(rf"(?<![\w.-])@{re.escape(own_username)}(?![\w.-])", re.IGNORECASE)
        stripped = mention.sub("", text).strip()
        text = stripped or ("" if post.file_ids else text)  # a bare mention is a question too
    return "\n".join(part for part in (text.strip(), *_stand_ins(post)) if part)


def inbound_from_post(
    post: Post,
    bot: str,
    *,
    own_user_id: str,
    own_username: str,
    where: Where,
    sender_name: str = "",
    received_at: float | None = None,
) -> InboundMessage | Skipped:
    """The inbound message of ``post`` received by bot ``bot`` in the channel ``where``, or why it starts none."""
    skipped = skip_reason(post, own_user_id)
    if skipped is not None:
        return skipped
    text = _text_of(post, own_username)
    if not text:
        return Skipped(reason="a post without text or files")
    if where.channel_type not in (DIRECT, GROUP, *_CHANNELS):
        return Skipped(reason=f"a post in a channel of unknown type {where.channel_type[:10]!r}")
    user_name = sender_name.removeprefix("@") or None
    channel = where.channel_type in _CHANNELS
    if channel and not where.team_id:
        return Skipped(reason=f"a post in channel {post.channel_id} whose team is not known")
    source = SessionSource(
        platform=PLATFORM,
        account_id=bot,
        scope_id=where.team_id if channel else None,
        chat_type="dm" if where.channel_type == DIRECT else "group",
        chat_id=post.channel_id,
        thread_id=post.root_id or None,
        user_id=post.user_id,
        chat_name=where.channel_name or None,
        user_name=user_name,
        message_id=post.id,
    )
    return InboundMessage(source=source, text=text, message_id=post.id, received_at=received_at)
