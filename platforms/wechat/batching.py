"""What an account remembers between polls: the cursor, messages waiting to be batched, and recent arrivals.

WeChat users send a thought as several messages, and the client splits a long paste into chunks, so messages from
one sender in one chat that come close together become one turn (:class:`Batcher`). The upstream also sends the
same text again under a new message id, so a message whose id, or whose sender, chat and text, arrived within the
dedupe window is dropped (:class:`SeenWindow`).

All of it is one :class:`AccountState`, stored as the account's poll cursor in the transaction that commits the
turns it releases. So a crash loses nothing and repeats nothing: messages waiting in a batch when the process
died are still waiting after the restart, the cursor never runs ahead of what is stored, and the dedupe window
survives (the inbox's own dedupe on the first message id of a batch is the backstop). The state stays small: a
batch is at most a few messages, and the window keeps at most :data:`SEEN_LIMIT` entries.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Sequence

import msgspec

from platforms.support.cursors import CursorState
from platforms.wechat.wire import Piece

__all__ = ["SEEN_LIMIT", "AccountState", "Batcher", "PendingBatch", "SeenWindow", "decode_state", "encode_state"]

_log = logging.getLogger(__name__)

SEEN_LIMIT = 2000  # dedupe entries kept per account (the oldest go first)
_MAX_PIECES = 20  # a batch this long is released at once
_MAX_BATCH_CHARS = 60_000


class PendingBatch(msgspec.Struct, frozen=True, kw_only=True):
    """Messages waiting to become one turn; a ``sealed`` batch takes no more (it is released at once)."""

    pieces: tuple[Piece, ...]
    sealed: bool = False


class AccountState(msgspec.Struct, frozen=True, kw_only=True):
    """An account's poll cursor as stored: the upstream ``get_updates_buf`` and what goes with it."""

    v: int = 1
    buf: str = ""
    pending: tuple[PendingBatch, ...] = ()
    seen: dict[str, float] = msgspec.field(default_factory=dict)  # dedupe key -> when it expires (unix time)


_cursor = CursorState(AccountState)


def encode_state(state: AccountState) -> str:
    """The cursor text for ``state``."""
    return _cursor.encode(state)


def decode_state(text: str | None, account: str) -> AccountState:
    """The state stored as cursor ``text``; a bare upstream buffer (not ours) is taken as the buffer alone."""

    def invalid(buf: str) -> AccountState:
        _log.warning(
            "wechat account %r: the stored cursor is not an account state; using it as get_updates_buf", account
        )
        return AccountState(buf=buf)

    return _cursor.decode(text, fresh=AccountState, invalid=invalid)


class SeenWindow:
    """Dedupe keys seen within the last ``window_s`` seconds of ``clock`` (unix time: it is stored)."""

    def __init__(self, window_s: float, *, clock: Callable[[], float] = time.time, limit: int = SEEN_LIMIT) -> None:
        self._window = window_s
        self._clock = clock
        self._limit = limit
        self._expiry: dict[str, float] = {}

    @staticmethod
    def keys(piece: Piece) -> list[str]:
        """A piece's dedupe keys: its id, and for typed text a hash of chat, sender and text."""
        keys = [f"id:{piece.message_id}"]
        if piece.typed:
            content = msgspec.json.encode([piece.chat_id, piece.user_id, piece.text])
            keys.append("text:" + hashlib.sha256(content).hexdigest()[:32])
        return keys

    def repeat(self, piece: Piece) -> str | None:
        """The key under which ``piece`` was seen within the window, or ``None`` (and it is remembered now)."""
        now = self._clock()
        keys = self.keys(piece)
        for key in keys:
            if self._expiry.get(key, 0.0) > now:
                return key
        if self._window > 0:
            for key in keys:
                self._expiry.pop(key, None)  # re-inserted last: the dict stays in expiry order
                self._expiry[key] = now + self._window
            while len(self._expiry) > self._limit:
                del self._expiry[next(iter(self._expiry))]
        return None

    def snapshot(self) -> dict[str, float]:
        """The unexpired entries, oldest first."""
        now = self._clock()
        for key in [k for k, until in self._expiry.items() if until <= now]:
            del self._expiry[key]
        return dict(self._expiry)

    def restore(self, seen: dict[str, float]) -> None:
        """Take over stored entries."""
        self._expiry = dict(sorted(seen.items(), key=lambda item: item[1]))


class _Open:
    __slots__ = ("deadline", "key", "pieces", "sealed")

    def __init__(self, key: tuple[str, str], pieces: list[Piece], deadline: float, sealed: bool) -> None:
        self.key = key
        self.pieces = pieces
        self.deadline = deadline
        self.sealed = sealed


class Batcher:
    """Groups pieces by (chat, sender) into batches released after a quiet spell (not thread-safe).

    A piece joins its sender's open batch when it arrives before the batch's deadline and, when both carry a
    creation time, was written within the wait of the previous piece (so a backlog delivered at once still
    splits where the sender paused). The wait is ``window_s``, or ``long_wait_s`` after a piece of at least
    ``long_chars`` characters. A command (``/...``) is never merged: it closes the open batch and goes alone.
    """

    def __init__(
        self,
        *,
        window_s: float,
        long_chars: int,
        long_wait_s: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._window = window_s
        self._long_chars = long_chars
        self._long_wait = long_wait_s
        self._monotonic = monotonic
        self._batches: list[_Open] = []  # in arrival order

    def _wait_after(self, piece: Piece) -> float:
        return self._long_wait if len(piece.text) >= self._long_chars else self._window

    def _joins(self, batch: _Open, piece: Piece, now: float) -> bool:
        if batch.sealed or now >= batch.deadline or len(batch.pieces) >= _MAX_PIECES:
            return False
        if sum(len(p.text) for p in batch.pieces) + len(piece.text) > _MAX_BATCH_CHARS:
            return False
        last = batch.pieces[-1]
        if last.created_ms is None or piece.created_ms is None:
            return True
        return piece.created_ms - last.created_ms <= self._wait_after(last) * 1000

    def add(self, piece: Piece) -> None:
        """Put ``piece`` into its sender's open batch or start a new one."""
        now = self._monotonic()
        key = (piece.chat_id, piece.user_id)
        open_batch = next((b for b in reversed(self._batches) if b.key == key and not b.sealed), None)
        command = piece.text.lstrip().startswith("/")
        if open_batch is not None and not command and self._joins(open_batch, piece, now):
            open_batch.pieces.append(piece)
            open_batch.deadline = now + self._wait_after(piece)
            return
        if open_batch is not None:  # the sender paused (or sent a command): that batch is complete
            open_batch.sealed = True
            open_batch.deadline = min(open_batch.deadline, now)
        deadline = now if command else now + self._wait_after(piece)
        self._batches.append(_Open(key, [piece], deadline, sealed=command))

    def take_due(self) -> list[list[Piece]]:
        """Remove and return the batches to release now, in order (never one ahead of an earlier one of its sender)."""
        now = self._monotonic()
        due: list[list[Piece]] = []
        held: set[tuple[str, str]] = set()
        kept: list[_Open] = []
        for batch in self._batches:
            if batch.key not in held and batch.deadline <= now:
                due.append(batch.pieces)
            else:
                held.add(batch.key)
                kept.append(batch)
        self._batches = kept
        return due

    def put_back(self, batches: Sequence[Sequence[Piece]], retry_at: float) -> None:
        """Return batches whose release failed; they go first again at ``retry_at`` and take no more pieces."""
        returned = [_Open((b[0].chat_id, b[0].user_id), list(b), retry_at, sealed=True) for b in batches if b]
        self._batches = returned + self._batches

    def next_deadline(self) -> float | None:
        """The monotonic time the next batch is due, or ``None`` when nothing waits."""
        behind: dict[tuple[str, str], float] = {}  # a batch is due no earlier than its sender's earlier batches
        for batch in self._batches:
            behind[batch.key] = max(batch.deadline, behind.get(batch.key, batch.deadline))
        return min(behind.values(), default=None)

    def snapshot(self) -> tuple[PendingBatch, ...]:
        """The waiting batches, for the stored state."""
        return tuple(PendingBatch(pieces=tuple(b.pieces), sealed=b.sealed) for b in self._batches)

    def restore(self, pending: Sequence[PendingBatch]) -> None:
        """Take over stored batches: sealed ones are due now, open ones get a fresh wait."""
        now = self._monotonic()
        for batch in pending:
            if not batch.pieces:
                continue
            first = batch.pieces[0]
            deadline = now if batch.sealed else now + self._wait_after(batch.pieces[-1])
            self._batches.append(_Open((first.chat_id, first.user_id), list(batch.pieces), deadline, batch.sealed))
