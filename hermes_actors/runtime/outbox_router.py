"""The outbox router: one :class:`~hermes_actors.runtime.outbox.OutboxActor` per platform, and the runtime's
:class:`~hermes_actors.runtime.services.OutboxSink`.

It routes each committed reply to its platform's actor, replaces an actor when its adapter is reloaded (the old one
hands over what it holds, which goes before anything delivered since) and stops them all at shutdown.
``in_flight`` is answered from each actor's :class:`~hermes_actors.runtime.lanes.Gauge`, never by asking the actor,
and ``stop`` and ``replace`` wait for the sends in progress only up to their timeout.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import pykka

from hermes_actors.messages import OutboundMessage, decode_outbound
from hermes_actors.ports import ReplySender, ThreadCreator
from hermes_actors.runtime.lanes import Gauge
from hermes_actors.runtime.outbox import RELEASE_TIMEOUT_S, OutboxActor, tick_outbox
from hermes_actors.runtime.protocol import HandOver, ReleaseOutbox, SendReply, StopOutbox
from hermes_actors.store.records import OutboxRow
from hermes_actors.store.writer import StoreWriter

__all__ = ["OutboxRouter"]

_log = logging.getLogger(__name__)


class OutboxRouter:
    """The :class:`~hermes_actors.runtime.services.OutboxSink` of the runtime: routes replies to their platform's
    actor."""

    def __init__(self, writer: StoreWriter, *, sent_elsewhere: bool = False, **actor_options: Any) -> None:
        self._writer = writer
        self._sent_elsewhere = sent_elsewhere  # a cluster's shard host: dispatchers send its replies
        self._options = actor_options
        self._actors: dict[str, tuple[pykka.ActorRef[Any], Gauge]] = {}
        self._senders: dict[str, ReplySender] = {}
        self._lock = threading.Lock()  # a reply is told to the actor that is current when it is routed
        # The deliveries each thread inside held() holds, by thread id: an entry lives only as long as its block
        # (a threading.local would keep one per session thread for the thread's life).
        self._held: dict[int, list[SendReply]] = {}

    def register(self, sender: ReplySender) -> None:
        """Start the outbox actor of ``sender.platform``."""
        with self._lock:
            self._senders[sender.platform] = sender
            self._actors[sender.platform] = self._start(sender, held=False)

    def replace(self, sender: ReplySender, timeout: float = 10.0) -> None:
        """Swap ``sender.platform``'s sender (an adapter reloaded by SIGHUP).

        The new actor takes replies at once and sends them after the ones the old actor still holds, which it
        gets once the old one's sends in progress return (up to ``timeout``; a send still hanging then is left to
        finish, and its reply is handed over flagged as a possible duplicate).
        """
        with self._lock:
            old = self._actors.get(sender.platform)
            fresh = self._start(sender, held=old is not None)
            self._senders[sender.platform] = sender
            self._actors[sender.platform] = fresh
        if old is None:
            return
        items = self._drain(sender.platform, old[0], time.monotonic() + timeout)
        actor, gauge = fresh
        gauge.add(len(items))
        try:
            actor.tell(HandOver(items=items))
        except pykka.ActorDeadError:
            gauge.add(-len(items))

    def enabled(self, platform: str) -> bool:
        """Return whether replies can be sent to ``platform``."""
        return platform in self._actors

    def counts_ahead(self, platform: str) -> bool:
        """Whether this process sends ``platform``'s replies as they are delivered, so a turn commits its reply with
        the first attempt counted (its send then waits for no other commit)."""
        return platform in self._actors and not self._sent_elsewhere

    def create_thread(self, platform: str, chat_id: str, title: str, *, account_id: str = "") -> str | None:
        """Open a thread for a handoff; ``None`` when the platform has no threads. Raises ``SendError``."""
        sender = self._senders.get(platform)
        if sender is None or not isinstance(sender, ThreadCreator):
            return None
        return sender.create_thread(chat_id, title, account_id=account_id)

    def deliver(self, outbox_id: int, message: OutboundMessage, *, counted: bool = False) -> None:
        """Queue a committed reply (``counted``: committed with its first attempt counted ahead); a platform without
        an adapter keeps it in the store until one is registered. Inside :meth:`held` on this thread, it waits for
        the block to end."""
        item = SendReply(outbox_id=outbox_id, message=message, counted=counted)
        waiting = self._held.get(threading.get_ident()) if self._held else None
        if waiting is not None:
            waiting.append(item)
            return
        if not self._tell(item) and not self._sent_elsewhere:
            _log.warning("no adapter for platform %r; reply %d stays queued in the store", message.platform, outbox_id)

    def held(self) -> _Held:
        """Hold this thread's deliveries until the block ends, then deliver them in order.

        A session actor runs each turn inside it and tells the supervisor the turn finished before the block
        ends: whoever reads the reply and answers (a ``/handoff``, say) finds the supervisor knowing the turn is
        over, however late the actor's thread ran. The rows are committed already, so nothing is lost meanwhile.
        """
        return _Held(self)

    def _hold(self) -> bool:
        """Start holding this thread's deliveries; ``False`` when it holds them already (the outer block
        delivers)."""
        thread = threading.get_ident()
        if thread in self._held:
            return False
        self._held[thread] = []
        return True

    def _release(self) -> None:
        """Deliver, in order, what this thread held."""
        for item in self._held.pop(threading.get_ident()):
            self.deliver(item.outbox_id, item.message, counted=item.counted)

    def redeliver(self, rows: list[OutboxRow]) -> int:
        """Queue unsent rows found at start (in id order); return how many went to an actor."""
        queued = 0
        for row in rows:
            queued += self._tell(
                SendReply(outbox_id=row.id, message=decode_outbound(row.payload), suspect=row.attempts > 0)
            )
        return queued

    def notify(self, message: OutboundMessage) -> None:
        """Send ``message`` once, on a thread of its own, without an outbox row (the store could not take one: a
        notice that a turn was not saved). A failure is logged, not retried."""
        sender = self._senders.get(message.platform)
        if sender is None:
            return

        def send() -> None:
            try:
                sender.send(message)
            except Exception as exc:
                _log.warning("outbox %s: a notice could not be sent: %s", message.platform, exc)

        threading.Thread(target=send, name=f"hermes-notice-{message.platform}", daemon=True).start()

    def retry_due(self) -> None:
        """Ask every outbox actor to retry what is due."""
        for actor, gauge in list(self._actors.values()):
            tick_outbox(actor, gauge)

    def platforms(self) -> list[str]:
        """The platforms with a sender."""
        with self._lock:
            return sorted(self._senders)

    def in_flight(self) -> int:
        """Return the replies being sent or that can be sent now (chats waiting for a retry do not count); never
        waits for an actor."""
        return sum(gauge.value() for _, gauge in list(self._actors.values()))

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every outbox actor: nothing more is sent, and sends in progress get up to ``timeout`` to return.

        Replies not sent stay queued in the store for the next start; one whose send was still in progress has
        its attempt counted, so it goes again flagged as a possible duplicate.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            actors = list(self._actors.items())
            self._actors.clear()
        stopping = [(platform, actor, self._ask_stop(actor)) for platform, (actor, _) in actors]
        for platform, actor, done in stopping:
            if done is None:
                continue
            items = self._wait(platform, done, deadline)
            if items is None:
                actor.stop(block=False)
            elif items:
                _log.info("outbox %s: %d replies stay queued in the store for the next start", platform, len(items))

    # -- helpers -------------------------------------------------------------------------------------------------

    def _start(self, sender: ReplySender, *, held: bool) -> tuple[pykka.ActorRef[Any], Gauge]:
        gauge = Gauge()
        return OutboxActor.start(sender, self._writer, gauge=gauge, held=held, **self._options), gauge

    def _tell(self, item: SendReply) -> bool:
        with self._lock:
            current = self._actors.get(item.message.platform)
            if current is None:
                return False
            actor, gauge = current
            gauge.add(1)
            try:
                actor.tell(item)
            except pykka.ActorDeadError:
                gauge.add(-1)
                return False
        return True

    def _ask_stop(self, actor: pykka.ActorRef[Any]) -> Future[list[SendReply]] | None:
        done: Future[list[SendReply]] = Future()
        try:
            actor.tell(StopOutbox(done=done))
        except pykka.ActorDeadError:
            return None
        return done

    def _wait(self, platform: str, done: Future[list[SendReply]], deadline: float) -> list[SendReply] | None:
        """What a stopping actor held, or ``None`` when its sends in progress outlast ``deadline``."""
        try:  # a moment even past the deadline: an idle actor answers at once and is not reported as sending
            return done.result(timeout=max(0.05, deadline - time.monotonic()))
        except FutureTimeout:
            _log.warning(
                "outbox %s: sends still in progress at the stop are left to finish; their replies stay queued and "
                "go again, flagged, at the next start",
                platform,
            )
            return None

    def _drain(self, platform: str, actor: pykka.ActorRef[Any], deadline: float) -> list[SendReply]:
        """Stop ``actor`` and return the replies it held, its sends in progress included after ``deadline``."""
        done = self._ask_stop(actor)
        if done is None:
            return []
        items = self._wait(platform, done, deadline)
        if items is not None:
            return items
        released: Future[list[SendReply]] = Future()
        with contextlib.suppress(pykka.ActorDeadError):  # its last send returned meanwhile: ``done`` has it all
            actor.tell(ReleaseOutbox(done=released))
        finished, _ = wait([done, released], timeout=RELEASE_TIMEOUT_S, return_when=FIRST_COMPLETED)
        for future in (done, released):
            if future in finished:
                return future.result()
        _log.error("outbox %s: the old actor handed nothing over; its replies go at the next start", platform)
        actor.stop(block=False)
        return []


class _Held:
    """The block of :meth:`OutboxRouter.held` (a class, not a generator: every turn enters one)."""

    __slots__ = ("_outer", "_router")

    def __init__(self, router: OutboxRouter) -> None:
        self._router = router
        self._outer = False

    def __enter__(self) -> None:
        self._outer = self._router._hold()

    def __exit__(self, *exc: object) -> None:
        if self._outer:
            self._router._release()
