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
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

import msgspec

from hermes_actors.messages import InboundMessage

__all__ = ["WINDOW_S", "Chat", "ServiceWindows"]

WINDOW_S = 24 * 3600.0
_KEPT = 100_000  # chats remembered before those outside the window are dropped


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
