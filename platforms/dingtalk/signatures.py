"""Callback signatures remembered: a ``(timestamp, sign)`` pair carries one message.

DingTalk's ``sign`` covers the ``timestamp`` header and the app secret, not the body, so a captured pair would
carry any body (another ``msgId``, conversation or ``sessionWebhook``) for as long as its timestamp stays inside
the hour. Each pair is therefore remembered, before its message is committed, with the ``msgId`` it came with, in
the store, as poll cursors: a restart remembers it, and so does every replica on the same PostgreSQL store. The
same pair again with the same ``msgId`` is DingTalk delivering that message again (:attr:`Claim.AGAIN`; the inbox's
dedupe then answers it as a duplicate); with another ``msgId`` it is a replay (:attr:`Claim.REPLAYED`).

A sign that checked out is a function of its timestamp, so the timestamp (in milliseconds) names the pair. A
robot's pairs live in at most :data:`SLOTS` cursors ``signed:<robot>:<second modulo SLOTS>``, each holding the
pairs of the one second it last saw: a slot holding another second holds one at least three hours away, outside
the window (two hours wide), and is reused. Claims in one process take turns; two replicas claiming the same
pair within the same few milliseconds are not excluded (the cursors are last-writer-wins).
"""

from __future__ import annotations

import enum
import logging
import threading

import msgspec

from platforms.base import Inbox, PollCursor
from platforms.dingtalk.callback import PLATFORM, REPLAY_WINDOW_S
from platforms.support.cursors import CursorState

__all__ = ["SLOTS", "Claim", "Signatures"]

_log = logging.getLogger(__name__)

SLOTS = 3 * REPLAY_WINDOW_S  # seconds; more than the 2 * REPLAY_WINDOW_S a valid timestamp may span


class Claim(enum.Enum):
    """What a pair's claim found."""

    NEW = "new"  # first seen: now remembered for this message
    AGAIN = "again"  # already carried this message: a redelivery
    REPLAYED = "replayed"  # already carried another message


class _Second(msgspec.Struct, frozen=True, kw_only=True):
    """The pairs seen in one second: timestamp (milliseconds, as text) to ``msgId``."""

    second: int
    messages: dict[str, str] = {}


_state = CursorState(_Second)


class Signatures:
    """The pairs a robot's callbacks were signed with, kept through ``inbox``; :meth:`claim` is thread-safe."""

    def __init__(self, inbox: Inbox) -> None:
        self._inbox = inbox
        self._lock = threading.Lock()

    def claim(self, robot: str, timestamp_ms: int, message_id: str) -> Claim:
        """Remember that the pair signed at ``timestamp_ms`` carried ``message_id``, unless it carried a message
        already; blocks until that is committed (raises what the store raised)."""
        second = timestamp_ms // 1000
        key = f"signed:{robot}:{second % SLOTS}"
        with self._lock:
            seen = _state.decode(
                self._inbox.poll_cursor(PLATFORM, key),
                fresh=lambda: _Second(second=second),
                invalid=lambda text: self._unreadable(key, text, second),
            )
            messages = seen.messages if seen.second == second else {}
            carried = messages.get(str(timestamp_ms))
            if carried is not None:
                return Claim.AGAIN if carried == message_id else Claim.REPLAYED
            state = _Second(second=second, messages={**messages, str(timestamp_ms): message_id})
            cursor = PollCursor(platform=PLATFORM, cursor=_state.encode(state), account_id=key)
            self._inbox.submit_many([], cursor=cursor).result(timeout=self._inbox.ask_timeout_s)
        return Claim.NEW

    @staticmethod
    def _unreadable(key: str, text: str, second: int) -> _Second:
        _log.warning("dingtalk: the stored signatures %s are unreadable (%.80r); starting the slot afresh", key, text)
        return _Second(second=second)
