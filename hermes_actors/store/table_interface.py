"""The protocols of the store's tables around the transcript: ``store.inbox``, ``store.outbox``, ``store.leases``,
``store.timers``, ``store.kv``, ``store.homes``, ``store.memories``, ``store.attachments`` and ``store.responses``.

Re-exported by :mod:`hermes_actors.store.interface`, where :class:`~.interface.StoreInterface` joins them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from hermes_actors.messages import Attachment, ResponseRecord
from hermes_actors.store.records import (
    AttachmentRecord,
    HomeChannel,
    InboxKind,
    InboxRow,
    InboxState,
    OutboxRow,
    QueueSummary,
    TimerRow,
)

if TYPE_CHECKING:
    from hermes_actors.store.inbox import Completion
    from hermes_actors.store.outbox_queue import QueuedReply
    from hermes_actors.store.term_guard import FencedWrite

__all__ = [
    "AttachmentIndex",
    "CursorTable",
    "HomeChannelTable",
    "InboxQueue",
    "LeaseTable",
    "MemoryTable",
    "OutboxQueue",
    "ResponseTable",
    "TimerTable",
]


@runtime_checkable
class InboxQueue(Protocol):
    """The durable inbound queue (``store.inbox``), deduplicated on (platform, account, platform message id)."""

    def add(
        self,
        *,
        platform: str,
        account_id: str,
        platform_message_id: str,
        routing_key: str,
        payload: bytes,
        owner: str | None = None,
        kind: InboxKind = InboxKind.MESSAGE,
    ) -> int | None:
        """Commit an inbound message (or a control row of ``kind``); its row id, ``None`` for a redelivery."""
        ...

    def complete(self, inbox_id: int, *, session_id: str | None, state: InboxState = InboxState.DONE) -> bool:
        """Mark a pending row answered or refused; whether it was pending."""
        ...

    def completion(
        self, inbox_ids: Sequence[int], *, session_id: str, state: InboxState = InboxState.DONE
    ) -> Completion:
        """The completion of the rows a turn answers, for its lease's fence to carry (``fence(then=...)``)."""
        ...

    def claim(self, inbox_id: int, owner: str) -> None:
        """Make ``owner`` the process that runs the pending row's turn."""
        ...

    def find(self, platform: str, account_id: str, platform_message_id: str) -> InboxRow | None:
        """The row of a platform's message, ``None`` when the inbox never took it (or pruned it)."""
        ...

    def pending_among(self, inbox_ids: Sequence[int]) -> set[int]:
        """Which of ``inbox_ids`` are still pending."""
        ...

    def pending(self) -> list[InboxRow]:
        """Every pending row, oldest first."""
        ...

    def depth(self) -> int:
        """How many rows are pending."""
        ...

    def summary(self) -> QueueSummary:
        """How many rows are pending, and when the oldest pending row arrived."""
        ...

    def summary_by_platform(self) -> dict[str, QueueSummary]:
        """Per platform with messages pending: how many, and when the oldest of them arrived."""
        ...

    def get(self, inbox_id: int) -> InboxRow | None:
        """One row, or ``None``."""
        ...

    def prune_completed(self, before: float, *, limit: int = -1) -> int:
        """Forget completed rows older than ``before``; how many."""
        ...

    def payloads_since(self, platform: str, since: float) -> list[bytes]:
        """The payloads of a platform's rows received since ``since``, oldest first."""
        ...


@runtime_checkable
class OutboxQueue(Protocol):
    """Replies committed with their turn and delivered afterwards (``store.outbox``)."""

    def add(
        self,
        *,
        session_id: str | None,
        platform: str,
        account_id: str,
        chat_id: str | None,
        thread_id: str | None,
        payload: bytes,
        attempts: int = 0,
    ) -> int:
        """Queue a reply; its row id. ``attempts=1`` counts its first send ahead, in the caller's transaction."""
        ...

    def adding(
        self,
        *,
        session_id: str | None,
        platform: str,
        account_id: str,
        chat_id: str | None,
        thread_id: str | None,
        payload: bytes,
        attempts: int = 0,
    ) -> QueuedReply:
        """:meth:`add` as a write for a lease's fence to carry (``fence(then=...)``); its row id afterwards."""
        ...

    def backlog(self) -> int:
        """How many replies are neither sent nor given up."""
        ...

    def summary_by_platform(self) -> dict[str, QueueSummary]:
        """Per platform with replies waiting: how many are neither sent nor given up, and when the oldest was
        queued."""
        ...

    def unsent(self, platform: str | None = None, *, limit: int = 1000) -> list[OutboxRow]:
        """Undelivered rows in id order."""
        ...

    def begin_attempt(self, outbox_id: int) -> int:
        """Count a send attempt before it is made; the attempt number."""
        ...

    def begin_attempts(self, outbox_ids: list[int]) -> None:
        """Count a send attempt of each row."""
        ...

    def uncount_attempts(self, outbox_ids: list[int]) -> None:
        """Take back the attempt counted ahead of each unsent row whose send never began."""
        ...

    def mark_sent(self, outbox_id: int, platform_message_id: str | None) -> None:
        """Record delivery."""
        ...

    def mark_sent_many(self, sent: list[tuple[int, str | None]]) -> None:
        """Record the delivery of several rows."""
        ...

    def abandon(self, outbox_id: int, reason: str) -> None:
        """Give a reply up."""
        ...

    def mark_failed(self, outbox_id: int, error: str, retry_at: float) -> None:
        """Record a failed attempt and when to try again."""
        ...

    def prune_finished(self, before: float, *, limit: int = -1) -> int:
        """Forget replies sent or given up before ``before``; how many."""
        ...


@runtime_checkable
class LeaseTable(Protocol):
    """Cross-process session ownership with fencing epochs (``store.leases``)."""

    def grant(self, session_id: str, owner: str, ttl_s: float, *, new: bool = False) -> int | str:
        """Take or renew the lease: its epoch, or the current holder (``new``: a session created in this
        transaction, whose lease is taken without looking for a holder first)."""
        ...

    def acquire(self, session_id: str, owner: str, ttl_s: float) -> str | None:
        """Take or renew the lease: ``None``, or the current holder."""
        ...

    def fence(
        self,
        session_id: str,
        owner: str,
        epoch: int,
        ttl_s: float,
        *,
        seen: int | None = None,
        then: Sequence[FencedWrite] = (),
    ) -> int | None:
        """Check inside the caller's transaction that the lease is still held at ``epoch`` (:class:`LeaseLostError`);
        the database version the hold was seen at (``seen``: one a committed check returned before; ``None``: the
        database has no versions). ``then``: the caller's first writes under the lease, in the check's statement
        where the store can carry them there, else after it, in order."""
        ...

    def epoch_of(self, session_id: str, owner: str) -> int | None:
        """The epoch of ``owner``'s lease, or ``None``."""
        ...

    def heartbeat(self, owner: str, ttl_s: float) -> int:
        """Extend every lease of ``owner``; how many."""
        ...

    def release(self, session_id: str, owner: str) -> bool:
        """Give one lease up; whether ``owner`` held it."""
        ...

    def release_all(self, owner: str) -> int:
        """Give up every lease of ``owner``; how many."""
        ...

    def owners(self) -> list[str]:
        """Every owner holding a lease, expired or not."""
        ...

    def holder(self, session_id: str) -> str | None:
        """The owner of an unexpired lease, or ``None``."""
        ...


@runtime_checkable
class TimerTable(Protocol):
    """Durable named deadlines (``store.timers``)."""

    def set(self, name: str, due_at: float, payload: bytes | None = None) -> None:
        """Create or move a deadline."""
        ...

    def cancel(self, name: str) -> bool:
        """Remove a deadline; whether it existed."""
        ...

    def apply(self, changes: Mapping[str, tuple[float, bytes | None] | None]) -> None:
        """Set or remove several deadlines together."""
        ...

    def all(self) -> list[TimerRow]:
        """Every deadline, earliest first."""
        ...


@runtime_checkable
class CursorTable(Protocol):
    """Small durable values: ``meta`` entries and platform poll cursors (``store.kv``)."""

    def get_meta(self, key: str) -> str | None:
        """A meta value, or ``None``."""
        ...

    def set_meta(self, key: str, value: str) -> None:
        """Set a meta value."""
        ...

    def get_cursor(self, platform: str, account_id: str = "") -> str | None:
        """A platform's poll cursor, or ``None``."""
        ...

    def set_cursor(self, platform: str, cursor: str, account_id: str = "") -> None:
        """Store a poll cursor (in the transaction of the inbox rows it covers)."""
        ...


@runtime_checkable
class HomeChannelTable(Protocol):
    """Where handoffs and notifications go per platform account (``store.homes``)."""

    def set(self, home: HomeChannel) -> None:
        """Make ``home`` its account's home channel."""
        ...

    def get(self, platform: str, account_id: str | None = None) -> HomeChannel | None:
        """The home channel of a platform account, or ``None``."""
        ...


@runtime_checkable
class MemoryTable(Protocol):
    """Notes the agent kept about a user (``store.memories``)."""

    def add(self, user_key: str, contents: list[str], *, source_session_id: str | None) -> int:
        """Store notes about a user; how many."""
        ...

    def for_user(self, user_key: str, *, limit: int = 50) -> list[str]:
        """The newest notes about a user, oldest first."""
        ...


@runtime_checkable
class AttachmentIndex(Protocol):
    """The files of messages (``store.attachments``)."""

    @property
    def media_dir(self) -> Path | None:
        """Where the attachments' files live."""
        ...

    def add(self, message_id: int, attachment: Attachment, *, at: float | None = None) -> int:
        """Record a file of a message; the row id."""
        ...

    def for_session(self, session_id: str) -> list[AttachmentRecord]:
        """Every attachment of a session's messages, in order."""
        ...

    def remove_unreferenced(self, paths: Iterable[str]) -> int:
        """Delete the files among ``paths`` that no row names; how many."""
        ...


@runtime_checkable
class ResponseTable(Protocol):
    """The API's stored responses (``store.responses``), each tied to its session and read within a scope (an API
    key's fingerprint, ``None`` without a key): another scope's response is as unknown as a missing one."""

    def save(self, response: ResponseRecord) -> None:
        """Store ``response``, replacing a row with its id."""
        ...

    def get(self, response_id: str, scope: str | None) -> ResponseRecord | None:
        """The response ``response_id`` of ``scope``, ``None`` when there is none."""
        ...

    def delete(self, response_id: str, scope: str | None) -> bool:
        """Delete the response ``response_id`` of ``scope``; whether there was one."""
        ...

    def latest_in(self, scope: str | None, conversation: str) -> ResponseRecord | None:
        """The newest response of ``scope`` in the conversation named ``conversation``, ``None`` before its first."""
        ...
