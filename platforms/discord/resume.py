"""What a bot's gateway session is across connections and restarts.

The intents it identifies with, the close codes that end it for good or force a new one, and the resume state: the
session id and last committed sequence, stored as the bot's poll cursor with the inbox rows it covers, so a new
connection (or a new process) resumes where the inbox stops.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import msgspec

from hermes_actors.ports import PollCursor
from platforms.discord.events import PLATFORM
from platforms.support.connections import Ended, Fatal

if TYPE_CHECKING:
    from hermes_actors.ports import ChatInbox

__all__ = [
    "FATAL_CLOSES",
    "INTENTS",
    "MESSAGE_CONTENT",
    "NEW_SESSION_CLOSES",
    "RESUMABLE_CLOSE",
    "ProtocolBroken",
    "ResumeState",
    "after_close",
    "read_resume_state",
    "resume_cursor",
]

_log = logging.getLogger(__name__)

GUILDS, GUILD_MESSAGES, DIRECT_MESSAGES, MESSAGE_CONTENT = 1 << 0, 1 << 9, 1 << 12, 1 << 15
INTENTS = GUILDS | GUILD_MESSAGES | DIRECT_MESSAGES | MESSAGE_CONTENT
RESUMABLE_CLOSE = 4000  # any code but 1000/1001 keeps the session resumable
FATAL_CLOSES = {
    4004: "Discord refused the token; copy the bot token again from the Developer Portal (Bot page)",
    4010: "Discord refused the shard; sharding is not built",
    4011: "the bot is in too many guilds for one connection (sharding required), which is not built",
    4012: "Discord refused the gateway version; this adapter speaks v10",
    4013: "Discord refused the intents value",
    4014: (
        "the bot may not use the Message Content intent; enable 'Message Content Intent' on the Bot page of the "
        "Developer Portal, or set platforms.discord.message_content_intent: false"
    ),
}
NEW_SESSION_CLOSES = {4007: "the resume sequence was refused", 4009: "the session timed out"}


class ResumeState(msgspec.Struct, frozen=True, kw_only=True):
    """What resuming a session needs, stored as the bot's poll cursor with the inbox rows it covers."""

    session_id: str
    seq: int | None
    resume_gateway_url: str
    user_id: str


def read_resume_state(inbox: ChatInbox, bot: str) -> ResumeState | None:
    """The stored resume state of ``bot``, or ``None`` (first start, or a value that does not decode)."""
    stored = inbox.poll_cursor(PLATFORM, bot)
    if stored is None:
        return None
    try:
        return msgspec.json.decode(stored, type=ResumeState)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        _log.warning("discord bot %r: the stored session does not decode (%s); starting a new one", bot, exc)
        return None


def resume_cursor(bot: str, state: ResumeState) -> PollCursor:
    """``state`` as the poll cursor of ``bot``, committed with the messages it covers."""
    return PollCursor(platform=PLATFORM, cursor=msgspec.json.encode(state).decode(), account_id=bot)


def after_close(code: int | None, reason: object) -> tuple[Ended, bool]:
    """How a connection Discord closed with ``code`` ends: the next step, and whether the session must start anew
    (identify instead of resume). Raises :class:`Fatal` for a close that reconnecting cannot fix."""
    said = f"{code}" + (f" {str(reason)[:100]!r}" if reason else "")
    if code in FATAL_CLOSES:
        raise Fatal(f"Discord closed the connection ({said}): {FATAL_CLOSES[code]}")
    if code in NEW_SESSION_CLOSES:
        return Ended(f"Discord closed the connection ({said}: {NEW_SESSION_CLOSES[code]})"), True
    return Ended(f"the connection closed ({said})"), False


class ProtocolBroken(Exception):
    """The server broke the handshake (no Hello)."""
