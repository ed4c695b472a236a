"""What a bot has read, kept as its poll cursor: the newest post committed, overall and per channel.

Mattermost's websocket has no replay: events sent while a bot is disconnected (a drop, a restart, a crash) are gone.
So the cursor says where the inbox stops, and every new connection catches up over REST before it reads events:
``GET /channels/{id}/posts?since=<ms>`` for each channel the bot belongs to whose ``last_post_at`` is past what was
committed there (a channel never seen falls back to the overall mark, so a direct message opened while the bot was
away is found too). The state is committed with the inbox rows it covers (``accept_many(..., cursor=...)``), so it
never runs ahead of what is stored; a post fetched twice is recognised by its id. The overall mark is read back
:data:`OVERLAP_MS` early, since posts of different channels may commit a little out of their ``create_at`` order.

What stays out of reach: a channel the bot joins and leaves while it is away, and more than 1,000 posts in one
channel between two connections (``since`` answers at most that many); both are logged when they could apply.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import msgspec

from hermes_actors.ports import PollCursor
from platforms.mattermost.events import PLATFORM
from platforms.support.cursors import CursorState

if TYPE_CHECKING:
    from hermes_actors.ports import ChatInbox

__all__ = ["KEPT_CHANNELS", "OVERLAP_MS", "ReadState", "read_state", "state_cursor"]

_log = logging.getLogger(__name__)

KEPT_CHANNELS = 10_000  # channels remembered; the least recently posted fall back to the overall mark
OVERLAP_MS = 5_000


class ReadState(msgspec.Struct, frozen=True, kw_only=True):
    """``since``: the newest ``create_at`` committed anywhere (or the first connection's time); ``channels``: the
    newest committed in each channel."""

    since: int
    channels: dict[str, int] = msgspec.field(default_factory=dict)

    def mark(self, channel_id: str) -> int:
        """Where catching up in ``channel_id`` starts (ms)."""
        known = self.channels.get(channel_id)
        return known if known is not None else max(self.since - OVERLAP_MS, 0)

    def advanced(self, channel_id: str, create_at: int) -> ReadState:
        """This state once a post of ``channel_id`` made at ``create_at`` is committed."""
        channels = dict(self.channels)
        channels[channel_id] = max(channels.get(channel_id, 0), create_at)
        if len(channels) > KEPT_CHANNELS:
            for stale, _ in sorted(channels.items(), key=lambda item: item[1])[: len(channels) - KEPT_CHANNELS]:
                del channels[stale]
        return ReadState(since=max(self.since, create_at), channels=channels)


_STATE = CursorState(ReadState)


def read_state(inbox: ChatInbox, bot: str) -> ReadState | None:
    """The stored state of ``bot``, or ``None`` (first start, or text that does not decode: logged)."""
    stored = inbox.poll_cursor(PLATFORM, bot)
    if not stored:
        return None
    try:
        return msgspec.json.decode(stored, type=ReadState)
    except (msgspec.DecodeError, msgspec.ValidationError):
        _log.warning(
            "mattermost bot %r: the stored read position does not decode (%r); starting afresh", bot, stored[:80]
        )
        return None


def state_cursor(bot: str, state: ReadState) -> PollCursor:
    """``state`` as the poll cursor of ``bot``, committed with the posts it covers."""
    return PollCursor(platform=PLATFORM, cursor=_STATE.encode(state), account_id=bot)
