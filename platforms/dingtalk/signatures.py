"""Callback signatures remembered: a ``(timestamp, sign)`` pair carries one message.

DingTalk's ``sign`` covers the ``timestamp`` header and the app secret, not the body, so a captured pair would
carry any body (another ``msgId``, conversation or ``sessionWebhook``) for as long as its timestamp stays inside
the hour. Each pair is therefore remembered, before its message is committed, with the ``msgId`` it came with, in
the store, as poll cursors: a restart remembers it, and so does every replica on the same PostgreSQL store. The
same pair again with the same ``msgId`` is DingTalk delivering that message again (:attr:`Claim.AGAIN`; the inbox's
dedupe then answers it as a duplicate); with another ``msgId`` it is a replay (:attr:`Claim.REPLAYED`).

A sign that checked out is a function of its timestamp, so the timestamp (in milliseconds) names the pair. Each
pair has a cursor of its own, ``signed:<robot>:<millisecond modulo SLOT_MS>``, holding the timestamp it last saw and
that pair's ``msgId``: a slot holding another timestamp holds one at least three hours away, outside the window
(two hours wide), and is reused, so a robot keeps at most one row per message of the last three hours. Because two
pairs never share a row, replicas on one PostgreSQL store claiming different pairs never overwrite each other's;
claims in one process take turns, and only the very same pair claimed by two replicas within the same few
milliseconds (before either committed) is not excluded.
"""

from __future__ import annotations

import enum
import logging
import threading

import msgspec

from platforms.base import ChatInbox, PollCursor
from platforms.dingtalk.callback import PLATFORM, REPLAY_WINDOW_S
from platforms.support.cursors import CursorState

__all__ = ["SLOT_MS", "Claim", "Signatures"]

_log = logging.getLogger(__name__)

SLOT_MS = 3 * REPLAY_WINDOW_S * 1000  # more than the 2 * REPLAY_WINDOW_S a valid timestamp may span


class Claim(enum.Enum):
    """What a pair's claim found."""

    NEW = "new"  # first seen: now remembered for this message
    AGAIN = "again"  # already carried this message: a redelivery
    REPLAYED = "replayed"  # already carried another message


class _Pair(msgspec.Struct, frozen=True, kw_only=True):
    """The pair a slot last saw: its timestamp (milliseconds) and the ``msgId`` it carried."""

    timestamp_ms: int
    message_id: str


_NONE = _Pair(timestamp_ms=-1, message_id="")  # an empty slot
_state = CursorState(_Pair)


class Signatures:
    """The pairs a robot's callbacks were signed with, kept through ``inbox``; :meth:`claim` is thread-safe."""

    def __init__(self, inbox: ChatInbox) -> None:
        self._inbox = inbox
        self._lock = threading.Lock()

    def claim(self, robot: str, timestamp_ms: int, message_id: str) -> Claim:
        """Remember that the pair signed at ``timestamp_ms`` carried ``message_id``, unless it carried a message
        already; blocks until that is committed (raises what the store raised)."""
        key = f"signed:{robot}:{timestamp_ms % SLOT_MS}"
        with self._lock:
            seen = _state.decode(
                self._inbox.poll_cursor(PLATFORM, key),
                fresh=lambda: _NONE,
                invalid=lambda text: self._unreadable(key, text),
            )
            if seen.timestamp_ms == timestamp_ms:
                return Claim.AGAIN if seen.message_id == message_id else Claim.REPLAYED
            state = _Pair(timestamp_ms=timestamp_ms, message_id=message_id)
            cursor = PollCursor(platform=PLATFORM, cursor=_state.encode(state), account_id=key)
            self._inbox.submit_many([], cursor=cursor).result(timeout=self._inbox.ask_timeout_s)
        return Claim.NEW

    @staticmethod
    def _unreadable(key: str, text: str) -> _Pair:
        _log.warning("dingtalk: the stored signature %s is unreadable (%.80r); starting the slot afresh", key, text)
        return _NONE
