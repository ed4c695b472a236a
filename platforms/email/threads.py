"""What a reply needs of the mail it answers, kept durably: its subject and the thread's ``References``.

A reply is threaded by mail clients through ``In-Reply-To`` (the answered Message-ID, which is the inbound message
id) and ``References`` (the thread's ancestors plus that id), and reads best under ``Re: <subject>``. None of it
is in the session key, so the latest mail of each conversation (account, correspondent, thread) is stored as a
poll cursor of its own (platform ``email:thread``) before its batch is committed, and cached here; a reply after
a restart still finds it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import msgspec

from hermes_actors.ports import PollCursor

if TYPE_CHECKING:
    from hermes_actors.ports import ChatInbox

__all__ = ["THREAD_PLATFORM", "ThreadState", "Threads"]

THREAD_PLATFORM = "email:thread"


class ThreadState(msgspec.Struct, frozen=True, kw_only=True):
    """The latest mail of a conversation: its Message-ID, subject and ancestors. ``opened``: a thread a handoff
    reserved, whose root (``message_id``) is not sent yet."""

    message_id: str
    subject: str
    references: tuple[str, ...] = ()
    opened: bool = False


_decode = msgspec.json.Decoder(ThreadState).decode


def _key(account: str, chat_id: str, thread_id: str | None) -> str:
    return msgspec.json.encode([account, chat_id, thread_id or ""]).decode()


class Threads:
    """The :class:`ThreadState` per (account, correspondent, thread), in memory and in the store."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: dict[str, ThreadState] = {}
        self._inbox: ChatInbox | None = None

    def attach(self, inbox: ChatInbox) -> None:
        """Store and read states through ``inbox`` from now on."""
        self._inbox = inbox

    def remember(self, account: str, chat_id: str, thread_id: str | None, state: ThreadState) -> None:
        """Make ``state`` the conversation's latest; durable when this returns (or it raises)."""
        key = _key(account, chat_id, thread_id)
        with self._lock:
            if self._known.get(key) == state:
                return
        inbox = self._inbox
        if inbox is not None:
            cursor = PollCursor(platform=THREAD_PLATFORM, cursor=msgspec.json.encode(state).decode(), account_id=key)
            inbox.accept_many([], cursor=cursor)
        with self._lock:
            self._known[key] = state

    def find(self, account: str, chat_id: str, thread_id: str | None) -> ThreadState | None:
        """The conversation's latest mail, from memory or the store; ``None`` when none is known."""
        key = _key(account, chat_id, thread_id)
        with self._lock:
            known = self._known.get(key)
        if known is not None or self._inbox is None:
            return known
        stored = self._inbox.poll_cursor(THREAD_PLATFORM, key)
        if stored is None:
            return None
        try:
            state = _decode(stored)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
        with self._lock:
            self._known.setdefault(key, state)
        return state
