"""Delivery of committed replies: one outbox actor per platform, one lane per chat.

The actor keeps a queue (a lane) per chat, keyed by (account, chat, thread), and hands the head of each lane to
its :class:`~hermes_actors.runtime.lanes.LaneWorkers`: at most one send per chat at a time, so replies reach a chat in
the order they were committed, and as many chats at once as there are workers, so a chat whose send is slow or
paced by the platform's rate limit holds up only itself. Senders are therefore called from several threads at
once, never twice at once for one chat.

Each attempt is counted in the store before its send begins. A turn's reply is committed with its first attempt
counted ahead (``SendReply.counted``), in the turn's own transaction, so its first send goes at once; any other
send (a retry, a reply found unsent at start) counts its attempt on its worker first and waits for that commit.
Right after a send returns, the reply's mark joins the platform's :class:`~hermes_actors.runtime.sent_marks.SentMarks`
(written with the marks of every reply sent meanwhile, never waited for). After a crash a row with attempts but no
``sent_at`` is one whose outcome is unknown: it is sent once more with ``possible_duplicate`` set (unless the
adapter says sends are idempotent), and every reply marked sent stays sent; a stopping actor takes back the counts
ahead of the replies it never began to send, so the next start sends those unflagged. The count only serves that
flag, so an adapter whose sends are idempotent (a waiting HTTP request, say) gets its reply even when the store
cannot count the attempt (a full disk): it is not held until the store writes again. A failed send is retried with
exponential backoff or after the platform's ``retry_after``; later replies to the chat wait behind it, other
chats do not. A permanent failure gives the reply up with the reason (through ``give_up``, which records the dead
letters of what it answered: :mod:`hermes_actors.runtime.dead_letters`) and the chat goes on. A sender raising
something other than :class:`~hermes_actors.ports.SendError` is logged and treated as a failure of unknown outcome.

The :class:`~hermes_actors.runtime.outbox_router.OutboxRouter` starts one actor per platform and routes replies to
it.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import msgspec
import pykka

from hermes_actors.messages import OutboundMessage
from hermes_actors.ports import ReplySender
from hermes_actors.runtime.actors import RuntimeActor
from hermes_actors.runtime.lanes import Gauge, LaneWorkers
from hermes_actors.runtime.metrics import Metrics
from hermes_actors.runtime.outbox_attempt import Attempt
from hermes_actors.runtime.protocol import (
    ChatKey,
    HandOver,
    OutboxMessage,
    ReleaseOutbox,
    ReplyFailed,
    ReplySent,
    RetryDue,
    SendReply,
    StopOutbox,
)
from hermes_actors.runtime.sent_marks import SentMarks
from hermes_actors.store.writer import StoreWriter, WriterClosedError

if TYPE_CHECKING:
    from hermes_actors.store import StoreInterface

__all__ = ["LANES_PER_PLATFORM", "RELEASE_TIMEOUT_S", "GiveUp", "OutboxActor", "abandon", "tick_outbox"]

_log = logging.getLogger(__name__)

LANES_PER_PLATFORM = 16  # sends in progress at once per platform: chats beyond that wait for a free worker
RELEASE_TIMEOUT_S = 5.0  # how long replace() waits for the old actor to hand over what it holds

WakeAt = Callable[[str, float, Callable[[], None]], None]  # (name, due_at, callback): TimerService.once
GiveUp = Callable[["StoreInterface", int, OutboundMessage, str], int]
"""Inside a write: give row ``outbox_id`` (its message, why) up; how many messages that dead-lettered."""


def abandon(store: StoreInterface, outbox_id: int, message: OutboundMessage, reason: str) -> int:
    """The :data:`GiveUp` that only marks the row given up (dead-lettering nothing)."""
    store.outbox.abandon(outbox_id, reason)
    return 0


class OutboxActor(RuntimeActor):
    """Sends one platform's replies through its adapter; see the module docstring.

    ``gauge`` counts the replies that can be sent now or are being sent, plus messages on their way to the actor;
    ``held`` actors queue what they get and send nothing until their :class:`HandOver` arrives.
    """

    use_daemon_thread = True

    def __init__(
        self,
        sender: ReplySender,
        writer: StoreWriter,
        *,
        gauge: Gauge | None = None,
        lanes: int = LANES_PER_PLATFORM,
        held: bool = False,
        retry_base_s: float = 1.0,
        retry_max_s: float = 300.0,
        clock: Callable[[], float] = time.time,
        on_result: Callable[[OutboundMessage, str | None], None] | None = None,
        wake_at: WakeAt | None = None,
        metrics: Metrics | None = None,
        give_up: GiveUp = abandon,
    ) -> None:
        super().__init__()
        self._metrics = metrics
        self._give_up = give_up
        if metrics is not None:  # the platform's series exist from the start, at 0
            metrics.retried.labels(sender.platform)
            metrics.given_up.labels(sender.platform)
        self.gauge = gauge if gauge is not None else Gauge()
        self._sender = sender
        self._writer = writer
        self._marks = SentMarks(writer, sender.platform)
        self._workers = LaneWorkers(f"outbox-{sender.platform}", lanes)
        self._held = held
        self._retry_base = retry_base_s
        self._retry_max = retry_max_s
        self._clock = clock
        self._on_result = on_result
        self._wake_at = wake_at
        self._chats: dict[ChatKey, deque[SendReply]] = {}
        self._ready: deque[ChatKey] = deque()  # lanes whose head waits for a worker, longest waiting first
        self._waiting: set[ChatKey] = set()  # the keys in _ready
        self._busy: set[ChatKey] = set()  # lanes whose head is being sent
        self._retry_at: dict[ChatKey, float] = {}
        self._failures: dict[ChatKey, int] = {}
        self._suspect: set[int] = set()  # replies an attempt of which may have reached the platform
        self._stopping: Future[list[SendReply]] | None = None
        self._finished = False  # what was held has been handed to whoever stopped the actor

    def on_receive(self, message: OutboxMessage) -> None:
        try:
            self._handle(message)
        except Exception:
            # The mailbox goes on: replies this lost track of are still unsent rows, which the next start sends.
            _log.exception("outbox %s: handling %s failed", self._sender.platform, type(message).__name__)

    def on_stop(self) -> None:
        self._workers.close()

    def _handle(self, message: OutboxMessage) -> None:
        if self._finished:
            return  # what arrives between the hand-over and the stop: the store has it
        match message:
            case SendReply():
                self._queue(message)
            case ReplySent():
                self._done(message.key)
                self._suspect.discard(message.outbox_id)
                self._report(message.message, None)
                self._advance(message.key)
            case ReplyFailed():
                self._done(message.key)
                self._failed(message)
            case RetryDue():
                self._retry_due()
                self.gauge.add(-1)  # after the due chats are counted again, so the gauge never dips between
            case HandOver():
                self._take_over(message.items)
            case StopOutbox():
                self._stopping = message.done
                self._uncount_ahead()
            case ReleaseOutbox():
                heads = [lane[0] for key, lane in self._chats.items() if key in self._busy]
                self._suspect.update(item.outbox_id for item in heads)  # counted, outcome unknown
                self._busy.clear()
                self._resolve(message.done)
            case _:
                raise TypeError(f"OutboxActor got an unknown message {message!r}")
        if self._stopping is None:
            self._pump()
        elif not self._busy and not self._finished:
            self._resolve(self._stopping)

    # -- lanes ---------------------------------------------------------------------------------------------------

    def _queue(self, item: SendReply) -> None:
        key = (item.message.account_id, item.message.chat_id, item.message.thread_id)
        self._chats.setdefault(key, deque()).append(item)
        if self._stopping is not None:
            self._uncount_ahead()
        if key in self._retry_at:
            self.gauge.add(-1)  # it waits for the chat's retry, which counts it again
        else:
            self._enqueue(key)

    def _enqueue(self, key: ChatKey) -> None:
        if key not in self._waiting and key not in self._busy and key not in self._retry_at and key in self._chats:
            self._waiting.add(key)
            self._ready.append(key)

    def _pump(self) -> None:
        """Hand the heads of waiting lanes to free workers."""
        while not self._held and self._ready and len(self._busy) < self._workers.size:
            key = self._ready.popleft()
            self._waiting.discard(key)
            lane = self._chats[key]
            item = lane[0]
            if item.counted:  # this send uses the count made ahead; a later one counts its own
                lane[0] = msgspec.structs.replace(item, counted=False)
            message = msgspec.structs.replace(item.message, outbox_id=item.outbox_id)
            suspect = item.suspect or item.outbox_id in self._suspect
            if suspect and not self._sender.idempotent_sends and not message.possible_duplicate:
                # An earlier attempt may have reached the platform: it was cut by a crash or timed out.
                message = msgspec.structs.replace(message, possible_duplicate=True)
            self._busy.add(key)
            try:
                self._workers.run(
                    Attempt(
                        self.actor_ref,
                        self._sender,
                        self._writer,
                        self._marks,
                        key,
                        item.outbox_id,
                        message,
                        count=not item.counted,
                    )
                )
            except RuntimeError:
                self._busy.discard(key)
                raise

    def _done(self, key: ChatKey) -> None:
        self._busy.discard(key)

    def _advance(self, key: ChatKey) -> None:
        """The head of ``key`` left (sent or given up, its write submitted): the next reply of the chat waits for a
        worker."""
        lane = self._chats[key]
        lane.popleft()
        self.gauge.add(-1)
        self._failures.pop(key, None)
        if lane:
            self._enqueue(key)  # behind the lanes already waiting: a long backlog takes turns with the others
        else:
            del self._chats[key]

    def _failed(self, failure: ReplyFailed) -> None:
        key, outbox_id, message = failure.key, failure.outbox_id, failure.message
        platform = self._sender.platform
        if message.no_retry or failure.permanent:
            reason = failure.error
            _log.warning("outbox %s: reply %d failed and is given up: %s", platform, outbox_id, reason)
            if self._metrics is not None:
                self._metrics.given_up.labels(platform).inc()
            give_up = self._give_up
            self._submit(lambda store: give_up(store, outbox_id, message, reason), then=self._dead_lettered)
            self._suspect.discard(outbox_id)
            self._report(message, reason)
            self._advance(key)  # later replies to the chat go on
            return
        if failure.unknown:
            self._suspect.add(outbox_id)
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        backoff = min(self._retry_max, self._retry_base * 2 ** (failures - 1))
        delay = failure.retry_after_s if failure.retry_after_s is not None else backoff
        retry_at = self._clock() + delay
        self._retry_at[key] = retry_at
        _log.warning("outbox %s: reply %d failed (%s); retry in %.1f s", platform, outbox_id, failure.error, delay)
        if self._metrics is not None:
            self._metrics.retried.labels(platform).inc()
        error = failure.error
        self._submit(lambda store: store.outbox.mark_failed(outbox_id, error, retry_at))
        self.gauge.add(-len(self._chats[key]))  # the chat's replies wait for the retry (after the write: wait_idle)
        self._arm_retry()

    def _retry_due(self) -> None:
        now = self._clock()
        for key in [k for k, at in self._retry_at.items() if at <= now]:
            del self._retry_at[key]
            if key in self._chats:
                self.gauge.add(len(self._chats[key]))
                self._enqueue(key)
        self._arm_retry()

    def _arm_retry(self) -> None:
        """Ask for a retry tick when the earliest waiting chat is due (a 429's Retry-After: 1 means 1 s, not the
        next gateway tick)."""
        if self._wake_at is None or not self._retry_at or self._stopping is not None:
            return
        actor, gauge = self.actor_ref, self.gauge

        def wake() -> None:
            tick_outbox(actor, gauge)

        try:
            self._wake_at(f"outbox-retry:{self._sender.platform}", min(self._retry_at.values()), wake)
        except Exception:
            _log.exception(
                "outbox %s: arming the retry timer failed; the gateway's tick retries", self._sender.platform
            )

    # -- hand-over and stop --------------------------------------------------------------------------------------

    def _uncount_ahead(self) -> None:
        """Stopping, nothing more is sent here: take back the counts ahead of the replies held, none of which
        began its send (one handed over is counted again by the actor that sends it)."""
        ids: list[int] = []
        for lane in self._chats.values():
            for n, item in enumerate(lane):
                if item.counted:
                    lane[n] = msgspec.structs.replace(item, counted=False)
                    ids.append(item.outbox_id)
        if ids:
            self._submit(lambda store: store.outbox.uncount_attempts(ids))

    def _take_over(self, items: list[SendReply]) -> None:
        """Put the replies of the actor this one replaces before the ones delivered here since."""
        later = self._chats
        self._chats = {}
        self._ready.clear()
        self._waiting.clear()
        for item in [*items, *(item for lane in later.values() for item in lane)]:
            key = (item.message.account_id, item.message.chat_id, item.message.thread_id)
            self._chats.setdefault(key, deque()).append(item)
            self._enqueue(key)
        self._held = False

    def _resolve(self, done: Future[list[SendReply]]) -> None:
        """Give what is held (oldest first) to whoever stopped this actor, and stop."""
        self._finished = True
        items = sorted(
            (
                msgspec.structs.replace(item, suspect=item.suspect or item.outbox_id in self._suspect)
                for lane in self._chats.values()
                for item in lane
            ),
            key=lambda item: item.outbox_id,
        )
        if not done.done():
            done.set_result(items)
        self.stop()

    # -- helpers -------------------------------------------------------------------------------------------------

    def _submit(self, work: Callable[[StoreInterface], Any], then: Callable[[Any], object] | None = None) -> None:
        try:
            self._writer.submit(work, then=then)
        except WriterClosedError:
            _log.warning("outbox %s: the store is closed; the reply's state is not recorded", self._sender.platform)

    def _dead_lettered(self, count: int) -> None:
        """After a give-up committed (on the writer's thread): count the messages it dead-lettered."""
        if self._metrics is not None:
            self._metrics.messages_ended("dead_lettered", count)

    def _report(self, message: OutboundMessage, error: str | None) -> None:
        if self._on_result is not None:
            try:
                self._on_result(message, error)
            except Exception:
                _log.exception("outbox %s: the delivery report failed", message.platform)


def tick_outbox(actor: pykka.ActorRef[Any], gauge: Gauge) -> None:
    """Tell ``actor`` to retry what is due, counted in ``gauge`` until it has looked."""
    gauge.add(1)
    try:
        actor.tell(RetryDue())
    except pykka.ActorDeadError:  # stopped or replaced (a reload) since
        gauge.add(-1)
