"""The API server's replies in cluster mode: each reaches the replica where its request waits.

An API request waits in the ``hermesd --cluster`` replica that took it, while its turn runs in a shard host. The
host relays the turn's events (:mod:`hermes_actors.cluster.turn_relay`) and commits the reply to the outbox, which
notifies ``hermes_outbox``. :class:`ApiReplies`, in every replica serving the API, listens on both channels
(:class:`~hermes_actors.store.pg.turn_relay.RelayListener`):

- a relayed event goes to the watcher registered for its message in this replica (``watch``), if any;
- a reply notification that carries its row (:func:`~hermes_actors.store.pg.turn_relay.reply_notice`) is handed
  to the request waiting here for it, if any, without reading the outbox, and marked sent with the other replies
  handed within ``mark_every_s`` (one statement for them all, written before the outbox is read and when the
  replies stop; a replica killed before it wrote them leaves them to the orphans' rule below);
- on a reply notification without its row, and every ``poll_s`` anyway (a notification sent while the listener
  reconnected is lost), it reads the unsent replies of the platform, hands those answering a request waiting here
  to its :class:`~hermes_actors.waiters.ReplyWaiters` and marks them sent. A reply nobody waits for in any replica (the
  client left, or its replica died) is marked sent once it is ``orphan_after_s`` old: it stays in the transcript,
  where an idempotent retry finds it (:meth:`Inbox.stored_answer <hermes_actors.ports.Inbox.stored_answer>`), as on
  a single machine.

The replica's :class:`~hermes_actors.cluster.replica.dispatch.OutboxDispatcher` listens through it (``on_outbox``:
the platforms of the replies each wake brought, or ``None`` after a reconnect): one listening connection per replica,
so each ``NOTIFY`` wakes one backend less in PostgreSQL and each reply's notice is read once here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection

from hermes_actors.cluster.replica.held_marks import HeldMarks, Mark
from hermes_actors.cluster.turn_relay import decode_event
from hermes_actors.messages import decode_outbound
from hermes_actors.runtime.turn_watch import TurnWatch
from hermes_actors.store.pg.store import PostgresStore
from hermes_actors.store.pg.turn_relay import EVENTS_CHANNEL, NotifiedReply, RelayListener, reply_notice
from hermes_actors.waiters import ReplyWaiters

__all__ = ["ApiReplies"]

_log = logging.getLogger(__name__)


class ApiReplies:
    """Hands relayed events and committed replies of ``waiters.platform`` to this replica's waiting requests."""

    def __init__(
        self,
        dsn: str,
        store: PostgresStore,
        waiters: ReplyWaiters,
        watch: TurnWatch,
        *,
        poll_s: float = 1.0,
        mark_every_s: float = 0.5,
        orphan_after_s: float = 120.0,
        clock: Callable[[], float] = time.time,
        on_outbox: Callable[[Collection[str] | None], None] | None = None,
    ) -> None:
        self._dsn = dsn
        self._on_outbox = on_outbox
        self._store = store
        self._waiters = waiters
        self._watch = watch
        self._poll_s = poll_s
        self._mark_every_s = mark_every_s
        self._marks = HeldMarks()  # replies handed to their requests, not marked sent yet
        self._orphan_after_s = orphan_after_s
        self._clock = clock
        self._stop = threading.Event()
        self._listener = RelayListener(dsn)
        self._thread = threading.Thread(target=self._run, name=f"replies-{waiters.platform}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        looked_at = 0.0
        while not self._stop.is_set():
            try:
                notes = self._listener.wait(self._wait_s(looked_at))
            except Exception:
                if self._stop.is_set():
                    return
                _log.exception("listening for turn events and replies failed; connecting again")
                self._stop.wait(1.0)
                self._reconnect()
                self._tell(None)  # what was queued meanwhile was notified to no one
                continue
            replied = False
            brought: list[NotifiedReply] = []
            queued: set[str] = set()
            for channel, payload in notes:
                if channel == EVENTS_CHANNEL:
                    self._relay(payload)
                    continue
                platform, reply = reply_notice(payload)
                queued.add(platform)
                if platform != self._waiters.platform:
                    continue
                if reply is None:
                    replied = True
                else:
                    brought.append(reply)
            if queued:
                self._tell(queued)
            if brought and not replied:
                try:
                    self._hand(brought)
                except Exception:
                    _log.exception("delivering %s replies failed; the outbox is read next", self._waiters.platform)
                    replied = True
            if replied or time.monotonic() - looked_at >= self._poll_s:
                looked_at = time.monotonic()
                try:
                    self.deliver()
                except Exception:
                    _log.exception("delivering %s replies failed; trying again", self._waiters.platform)
            elif self._marks_due() <= 0.0:
                self._write_marks()

    def _wait_s(self, looked_at: float) -> float:
        """How long the listener may wait: until the next look in the outbox, or the next write of sent marks."""
        return max(0.0, min(looked_at + self._poll_s - time.monotonic(), self._marks_due()))

    def _marks_due(self) -> float:
        """Seconds until the sent marks held here are due (``inf`` with none)."""
        return self._marks.due_in(self._mark_every_s)

    def _hold_marks(self, settled: list[Mark]) -> None:
        """Keep the sent marks of replies handed by their notices for the next write of them all."""
        if settled:
            self._marks.hold(settled)

    def _write_marks(self) -> None:
        """Mark the replies handed since the last write sent, in one statement; kept for the next try if it fails."""
        self._marks.flush(
            lambda marks: self._store.outbox_claims.sent(None, marks), f"{self._waiters.platform} replies"
        )

    def _tell(self, platforms: Collection[str] | None) -> None:
        """Pass the platforms of the replies queued on to ``on_outbox`` (the replica's dispatcher)."""
        if self._on_outbox is not None:
            try:
                self._on_outbox(platforms)
            except Exception:
                _log.exception("telling the dispatcher of queued replies failed; it finds them at its next look")

    def _reconnect(self) -> None:
        try:
            self._listener.close()
            self._listener = RelayListener(self._dsn)
        except Exception:
            _log.exception("reconnecting the reply listener failed")

    def _relay(self, payload: str) -> None:
        event = decode_event(payload)
        if event is None:
            return
        events = self._watch.events_for([event.m])
        if events is None:
            return  # a turn watched in another replica, or no longer watched
        if event.k == "s":
            events.started(event.s)
        elif event.k == "t":
            events.text(event.t)
        elif event.k == "p":
            events.stopped()
        else:
            events.tool(event.n, event.c, event.st, event.d)

    def _hand(self, replies: list[NotifiedReply]) -> None:
        """Hand the replies their notices brought to the requests waiting here for them, marking those sent (a
        reply another replica's request waits for is left to that replica)."""
        settled: list[Mark] = []
        try:
            for reply in replies:
                message = decode_outbound(reply.payload)
                if self._waiters.waits_for(message.answers):
                    self._waiters.send(message)
                    settled.append((reply.id, message.answers[0] if message.answers else None))
        finally:
            self._hold_marks(settled)

    def deliver(self) -> int:
        """Hand the unsent replies answering requests waiting here to them, marking them sent; settle the orphans.
        How many were handed. The marks of replies handed by their notices are written first, so the look does not
        find them."""
        self._write_marks()
        handed = 0
        now = self._clock()
        settled: list[Mark] = []
        try:
            for row in self._store.outbox.unsent(self._waiters.platform):
                message = decode_outbound(row.payload)
                if self._waiters.waits_for(message.answers):
                    self._waiters.send(message)
                    settled.append((row.id, message.answers[0] if message.answers else None))
                    handed += 1
                elif now - row.created_at >= self._orphan_after_s:
                    _log.info(
                        "%s: reply for session %s has no waiting client in any replica (kept in the transcript)",
                        self._waiters.platform,
                        message.session_id,
                    )
                    settled.append((row.id, None))
        finally:  # every reply handed is marked sent, in one statement
            self._store.outbox_claims.sent(None, settled)
        return handed

    def close(self) -> None:
        """Stop listening, and write the sent marks held here."""
        self._stop.set()
        self._listener.close()
        self._thread.join(timeout=5)
        self._write_marks()
