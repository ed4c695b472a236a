"""Delivery of committed replies: one outbox actor per platform.

Replies reach a chat in the order they were committed. Attempts are counted in the store before the adapter is
called, in one write for everything the actor is about to send, so after a crash a row with attempts but no
``sent_at`` has an unknown outcome: it is sent once more with ``possible_duplicate`` set (unless the adapter says
sends are idempotent). A row counted but not sent because an earlier reply to its chat failed is flagged the same
way after a crash, which errs on the side of the flag. A failed send is retried with exponential backoff; later
replies to the same chat wait behind it, other chats do not.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Literal

import msgspec
import pykka

from hermes_actors.actors import RuntimeActor
from hermes_actors.messages import OutboundMessage, decode_outbound
from hermes_actors.store.durable import OutboxRow
from hermes_actors.store.writer import StoreWriter
from platforms.base import ReplySender, SendError, ThreadCreator

__all__ = ["OutboxActor", "OutboxRouter", "RetryTick"]

_log = logging.getLogger(__name__)


class _Deliver(msgspec.Struct, frozen=True, kw_only=True):
    outbox_id: int
    message: OutboundMessage
    attempts: int = 0


class RetryTick(msgspec.Struct, frozen=True, kw_only=True):
    """Timer → outbox: retry chats whose head reply is due again."""


class _Flush(msgspec.Struct, frozen=True, kw_only=True):
    """Self → outbox: send what is queued (after the deliveries already in the mailbox have been queued)."""


_ChatKey = tuple[str, str | None, str | None]
WakeAt = Callable[[str, float, Callable[[], None]], None]  # (name, due_at, callback): TimerService.once


class OutboxActor(RuntimeActor):
    """Sends one platform's replies through its adapter; see the module docstring."""

    use_daemon_thread = True

    def __init__(
        self,
        sender: ReplySender,
        writer: StoreWriter,
        *,
        retry_base_s: float = 1.0,
        retry_max_s: float = 300.0,
        clock: Callable[[], float] = time.time,
        on_result: Callable[[OutboundMessage, str | None], None] | None = None,
        wake_at: WakeAt | None = None,
    ) -> None:
        super().__init__()
        self._on_result = on_result
        self._wake_at = wake_at
        self._sender = sender
        self._writer = writer
        self._retry_base = retry_base_s
        self._retry_max = retry_max_s
        self._clock = clock
        self._chats: dict[_ChatKey, deque[_Deliver]] = {}
        self._retry_at: dict[_ChatKey, float] = {}
        self._failures: dict[_ChatKey, int] = {}
        self._unknown: set[int] = set()
        self._flush_pending = False

    def on_receive(self, message: Any) -> Any:
        match message:
            case _Deliver():
                key = (message.message.account_id, message.message.chat_id, message.message.thread_id)
                self._chats.setdefault(key, deque()).append(message)
                self._schedule_flush()
            case RetryTick():
                now = self._clock()
                for key in [k for k, at in self._retry_at.items() if at <= now]:
                    del self._retry_at[key]
                self._arm_retry()
                self._schedule_flush()
            case _Flush():
                self._flush_pending = False
                self._flush()
            case _:
                raise TypeError(f"OutboxActor got an unknown message {message!r}")
        return None

    def in_flight(self) -> int:
        """Return how many replies can be sent now, not counting chats waiting for a retry (call via proxy)."""
        return sum(len(q) for key, q in self._chats.items() if key not in self._retry_at)

    def _schedule_flush(self) -> None:
        if not self._flush_pending:
            self._flush_pending = True
            self.actor_ref.tell(_Flush())

    def _flush(self) -> None:
        ready = [key for key in self._chats if key not in self._retry_at]
        ids = [item.outbox_id for key in ready for item in self._chats[key]]
        if not ids:
            return
        self._writer.call(lambda store: store.outbox.begin_attempts(ids))
        sent: list[tuple[int, str | None]] = []
        for key in ready:
            queue = self._chats[key]
            while queue:
                outcome, platform_id = self._send(key, queue[0])
                if outcome == "failed":
                    break
                item = queue.popleft()
                if outcome == "sent":
                    sent.append((item.outbox_id, platform_id))
            if not queue:
                del self._chats[key]
        if sent:
            self._writer.submit(lambda store: store.outbox.mark_sent_many(sent))
        self._arm_retry()

    def _arm_retry(self) -> None:
        """Ask for a :class:`RetryTick` when the earliest waiting chat is due (a 429's Retry-After: 1 means 1 s, not
        the next gateway tick)."""
        if self._wake_at is not None and self._retry_at:
            actor = self.actor_ref

            def wake() -> None:
                with contextlib.suppress(pykka.ActorDeadError):  # stopped or replaced (a reload) since
                    actor.tell(RetryTick())

            self._wake_at(f"outbox-retry:{self._sender.platform}", min(self._retry_at.values()), wake)

    def _send(self, key: _ChatKey, item: _Deliver) -> tuple[Literal["sent", "failed", "abandoned"], str | None]:
        """Send one reply whose attempt is already counted; return what happened and the platform's message id."""
        message = msgspec.structs.replace(item.message, outbox_id=item.outbox_id)
        unknown = item.attempts > 0 or item.outbox_id in self._unknown
        if unknown and not self._sender.idempotent_sends and not message.possible_duplicate:
            # An earlier attempt may have reached the platform: it was cut by a crash or timed out.
            message = msgspec.structs.replace(message, possible_duplicate=True)
        try:
            platform_id = self._sender.send(message)
        except SendError as exc:
            if message.no_retry or exc.permanent:
                reason = str(exc)
                _log.warning("outbox %s: reply %d failed and is given up: %s", message.platform, item.outbox_id, reason)
                self._writer.submit(lambda store: store.outbox.abandon(item.outbox_id, reason))
                self._report(message, reason)
                return "abandoned", None  # later replies to the chat go on
            if exc.outcome_unknown:
                self._unknown.add(item.outbox_id)
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
            backoff = min(self._retry_max, self._retry_base * 2 ** (failures - 1))
            delay = exc.retry_after_s if exc.retry_after_s is not None else backoff
            retry_at = self._clock() + delay
            self._retry_at[key] = retry_at
            _log.warning(
                "outbox %s: reply %d failed (%s); retry in %.1f s", message.platform, item.outbox_id, exc, delay
            )
            error = str(exc)
            self._writer.submit(lambda store: store.outbox.mark_failed(item.outbox_id, error, retry_at))
            return "failed", None
        self._failures.pop(key, None)
        self._unknown.discard(item.outbox_id)
        self._report(message, None)
        return "sent", platform_id

    def _report(self, message: OutboundMessage, error: str | None) -> None:
        if self._on_result is not None:
            try:
                self._on_result(message, error)
            except Exception:
                _log.exception("outbox %s: the delivery report failed", message.platform)


class OutboxRouter:
    """The :class:`~hermes_actors.session.OutboxSink` of the runtime: routes replies to their platform's actor."""

    def __init__(self, writer: StoreWriter, **actor_options: Any) -> None:
        self._writer = writer
        self._options = actor_options
        self._actors: dict[str, pykka.ActorRef[Any]] = {}
        self._senders: dict[str, ReplySender] = {}

    def register(self, sender: ReplySender) -> None:
        """Start the outbox actor of ``sender.platform``."""
        self._senders[sender.platform] = sender
        self._actors[sender.platform] = OutboxActor.start(sender, self._writer, **self._options)

    def replace(self, sender: ReplySender, timeout: float = 10.0) -> None:
        """Swap ``sender.platform``'s sender: the old actor finishes what it holds, then the new one takes over.

        Replies still queued in the store for the platform (unsent rows) are picked up by the new actor's retries.
        """
        old = self._actors.pop(sender.platform, None)
        if old is not None:
            old.stop(timeout=timeout)
        self.register(sender)

    def enabled(self, platform: str) -> bool:
        """Return whether replies can be sent to ``platform``."""
        return platform in self._actors

    def create_thread(self, platform: str, chat_id: str, title: str, *, account_id: str = "") -> str | None:
        """Open a thread for a handoff; ``None`` when the platform has no threads. Raises ``SendError``."""
        sender = self._senders.get(platform)
        if sender is None or not isinstance(sender, ThreadCreator):
            return None
        return sender.create_thread(chat_id, title, account_id=account_id)

    def deliver(self, outbox_id: int, message: OutboundMessage) -> None:
        """Queue a committed reply; a platform without an adapter keeps it in the store until one is registered."""
        actor = self._actors.get(message.platform)
        if actor is None:
            _log.warning("no adapter for platform %r; reply %d stays queued in the store", message.platform, outbox_id)
            return
        actor.tell(_Deliver(outbox_id=outbox_id, message=message))

    def redeliver(self, rows: list[OutboxRow]) -> int:
        """Queue unsent rows found at start (in id order); return how many went to an actor."""
        queued = 0
        for row in rows:
            message = decode_outbound(row.payload)
            if message.platform in self._actors:
                self._actors[message.platform].tell(_Deliver(outbox_id=row.id, message=message, attempts=row.attempts))
                queued += 1
        return queued

    def retry_due(self) -> None:
        """Ask every outbox actor to retry what is due."""
        for actor in self._actors.values():
            actor.tell(RetryTick())

    def in_flight(self, timeout: float = 10.0) -> int:
        """Return replies every outbox actor could send now (chats waiting for a retry do not count)."""
        return sum(actor.proxy().in_flight().get(timeout=timeout) for actor in self._actors.values())

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every outbox actor after what it has queued."""
        for actor in self._actors.values():
            actor.stop(timeout=timeout)
        self._actors.clear()
