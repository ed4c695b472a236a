"""How far a long reply got: the parts a platform already has, so a retry resumes after them.

A reply split into parts can fail halfway; the outbox then retries the whole reply. Each sender remembers the ids
of the parts that went out, under :func:`reply_identity` (built on ``OutboundMessage.outbox_id``, the same on every
attempt at one reply and different between replies), and a retry sends only the rest. The memory is bounded and
in-process: after a restart a reply is sent again from its first part, flagged as a possible duplicate.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Generic, TypeVar

import msgspec

from hermes_actors.messages import OutboundMessage

__all__ = ["KEPT_REPLIES", "PartProgress", "reply_identity"]

KEPT_REPLIES = 1_000  # partly sent replies remembered for a resumed retry

T = TypeVar("T")


def reply_identity(message: OutboundMessage) -> str:
    """A hex key the same for every attempt at ``message`` (in any process: the outbox id is the row's), different
    between replies, also between two identical notices to one chat (their outbox ids differ)."""
    identity = msgspec.json.encode(
        [
            message.outbox_id,
            message.account_id,
            message.chat_id,
            message.thread_id,
            message.session_id,
            message.reply_to,
            message.answers,
            message.text,
        ]
    )
    return hashlib.sha256(identity).hexdigest()


class PartProgress(Generic[T]):
    """The platform ids of the parts already sent of each partly sent reply, the ``kept`` newest of them.

    Safe to use from the outbox's threads at once (one per chat).
    """

    def __init__(self, kept: int = KEPT_REPLIES) -> None:
        self._kept = kept
        self._lock = threading.Lock()
        self._sent: OrderedDict[str, list[T]] = OrderedDict()

    def sent(self, message: OutboundMessage) -> list[T]:
        """The ids of the parts of ``message`` sent so far (empty for a reply not started), as a new list."""
        with self._lock:
            return list(self._sent.get(reply_identity(message), ()))

    def remember(self, message: OutboundMessage, sent: Sequence[T]) -> None:
        """Record that the parts ``sent`` of ``message`` went out, so a retry resumes after them."""
        key = reply_identity(message)
        with self._lock:
            self._sent[key] = list(sent)
            self._sent.move_to_end(key)
            while len(self._sent) > self._kept:
                self._sent.popitem(last=False)

    def forget(self, message: OutboundMessage) -> None:
        """``message`` went out whole (or is given up): nothing to resume."""
        with self._lock:
            self._sent.pop(reply_identity(message), None)
