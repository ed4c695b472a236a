"""The 24-hour customer service window: when each user last wrote to each of our numbers.

WhatsApp lets a business send a free-form message to a user only within 24 hours of that user's last message to
the number; after that only an approved template may open the conversation again. The sender asks
:class:`ServiceWindows` before each reply to a user, so a reply outside the window is refused with a clear reason
(and given up by the outbox) instead of being sent into a certain ``131047`` failure.

The times live in memory and are loaded at start from the inbox, which already holds every accepted message
with its WhatsApp ``timestamp`` (``InboundMessage.received_at``): nothing is written twice, a restart or a crash
loses nothing, and a message accepted but not yet answered counts as soon as it is accepted. Only rows received
in the last 24 hours are read. Until they are (the gateway replays unanswered messages before the adapter
starts), the sender holds replies back instead of refusing them. Each chat also remembers whether it is a group,
which the sender needs to address a reply (``recipient_type``); groups are not held to the window here (Meta
documents it for one-to-one conversations) and the Graph API's own ``131047`` answer covers them.

Another process may have accepted the user's latest message: in cluster mode the replica that sends WhatsApp's
replies is not the one the notification reached. So when a chat is unknown here or its window looks closed,
:meth:`ServiceWindows.current` reads the inbox rows received since the last read (with an overlap for clock skew
between processes) before answering.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence

import msgspec

from hermes_actors.messages import InboundMessage

__all__ = ["WINDOW_S", "Chat", "ReadInbox", "ServiceWindows"]

WINDOW_S = 24 * 3600.0
_KEPT = 100_000  # chats remembered before those outside the window are dropped
_OVERLAP_S = 300.0  # how far before the last read a new read starts: the inbox rows are stamped by other clocks

ReadInbox = Callable[[float], Sequence[InboundMessage]]
"""The platform's inbox rows received at or after a time (``ChatInbox.recent_inbound`` bound to the platform)."""


class Chat(msgspec.Struct, frozen=True, kw_only=True):
    """What is known of one chat of one number: its kind and the time of the user's last message."""

    group: bool
    last_inbound_at: float


class ServiceWindows:
    """The last inbound time per (number, chat); thread-safe (the HTTP loop writes, the outbox thread reads)."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._chats: dict[tuple[str, str], Chat] = {}
        self._loaded = threading.Event()
        self._read: ReadInbox | None = None
        self._read_at = float("-inf")

    def note(self, inbound: InboundMessage) -> None:
        """Count an accepted message: its chat's window now runs from its ``received_at`` (if later)."""
        source = inbound.source
        if not source.chat_id:
            return
        at = inbound.received_at if inbound.received_at is not None else self._clock()
        key = (source.account_id or "", source.chat_id)
        group = source.chat_type == "group"
        with self._lock:
            known = self._chats.get(key)
            if known is None and len(self._chats) >= _KEPT:
                self._forget_closed()
            if known is None or at > known.last_inbound_at:
                self._chats[key] = Chat(group=group, last_inbound_at=at)

    def get(self, account_id: str, chat_id: str) -> Chat | None:
        """The chat, or ``None`` when nobody wrote from it in the window (or ever)."""
        with self._lock:
            return self._chats.get((account_id, chat_id))

    def current(self, account_id: str, chat_id: str) -> Chat | None:
        """:meth:`get`, after reading the inbox rows received since the last read when the chat is unknown or its
        window looks closed (another process may have accepted the user's latest message)."""
        chat = self.get(account_id, chat_id)
        if self._read is None or (chat is not None and self._clock() < chat.last_inbound_at + WINDOW_S):
            return chat
        now = self._clock()
        with self._lock:
            since = max(now - WINDOW_S, self._read_at - _OVERLAP_S)
        for inbound in self._read(since):
            self.note(inbound)
        with self._lock:
            self._read_at = max(self._read_at, now)
        return self.get(account_id, chat_id)

    def attach(self, read: ReadInbox) -> int:
        """Read the inbox with ``read``: the last 24 hours now (:meth:`load`; how many chats are known), newer rows
        in :meth:`current`."""
        now = self._clock()
        self._read = read
        known = self.load(read(now - WINDOW_S))
        with self._lock:
            self._read_at = max(self._read_at, now)
        return known

    @property
    def loaded(self) -> bool:
        """Whether :meth:`load` has run: before it, a missing chat may only mean the inbox was not read yet."""
        return self._loaded.is_set()

    def load(self, accepted: Iterable[InboundMessage]) -> int:
        """Count the messages accepted before this process started (the inbox's last 24 hours); return how many
        chats are known."""
        for inbound in accepted:
            self.note(inbound)
        self._loaded.set()
        with self._lock:
            return len(self._chats)

    def _forget_closed(self) -> None:
        cutoff = self._clock() - WINDOW_S
        for key in [k for k, chat in self._chats.items() if chat.last_inbound_at < cutoff]:
            del self._chats[key]
