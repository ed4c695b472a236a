"""Start-up recovery: replay what an earlier process left, and the rows another live process leaves later.

A pending inbox row is replayed here only if this process may run it: its owner (the process that accepted it) is
gone, and the session it leads to is not leased by another live process; this process then claims the row and
takes that lease in the same transaction. Rows of a live owner are deferred: looked at again every tick
(:meth:`Recovery.replay_released`), so a turn is never run by two processes. Unsent outbox rows are queued before
any replayed turn, so a replayed turn's new reply to a chat never overtakes an old one (event deliveries are left to
the :class:`~hermes_actors.runtime.events.EventSweep`, which sends them at start).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Collection, Sequence

from hermes_actors.config import EVENTS_PLATFORM
from hermes_actors.messages import decode_inbound
from hermes_actors.runtime.leases import lease_owner_alive
from hermes_actors.runtime.outbox_router import OutboxRouter
from hermes_actors.runtime.protocol import Deliver, DeliverBatch, Delivery
from hermes_actors.store import StoreInterface
from hermes_actors.store.records import InboxRow, OutboxRow
from hermes_actors.store.writer import StoreWriter, WriterClosedError

__all__ = ["Recovery"]

_log = logging.getLogger(__name__)


class Recovery:
    """Replays pending inbox rows this process may run, through ``deliver`` (a tell to the supervisor of each
    replay's rows as one :class:`DeliverBatch`)."""

    def __init__(
        self,
        writer: StoreWriter,
        outbox: OutboxRouter,
        deliver: Callable[[DeliverBatch], None],
        *,
        lease_owner: str,
        lease_ttl_s: float,
        timeout_s: float,
        platforms: Collection[str] | None = None,
    ) -> None:
        self._writer = writer
        self._outbox = outbox
        self._deliver = deliver
        self._owner = lease_owner
        self._ttl = lease_ttl_s
        self._timeout = timeout_s
        self._platforms = None if platforms is None else frozenset(platforms)
        self._deferred: dict[int, InboxRow] = {}  # pending rows of another live process, by id
        self._lock = threading.Lock()  # replay_released runs on the timer thread, recover on the starting one
        self.stopped = threading.Event()

    def recover(self) -> None:
        """Replay unanswered inbox rows (in id order) and queue unsent replies (older ones first)."""
        platforms = self._platforms

        def pending_work(store: StoreInterface) -> tuple[tuple[list[InboxRow], dict[int, InboxRow]], list[OutboxRow]]:
            for holder in store.leases.owners():
                if not lease_owner_alive(str(holder)):
                    store.leases.release_all(str(holder))
            outbox = [row for row in store.outbox.unsent(limit=1_000_000) if row.platform != EVENTS_PLATFORM]
            if platforms is not None:
                outbox = [row for row in outbox if row.platform in platforms]
            return self._claim_pending(store), outbox

        with self._lock:
            (inbox, deferred), outbox = self._writer.call(pending_work)
            self._deferred = deferred
        queued = self._outbox.redeliver(outbox)
        self._replay(inbox)
        if inbox or outbox:
            _log.info("recovery: replaying %d inbound messages, delivering %d replies", len(inbox), queued)
        if deferred:
            _log.info("recovery: %d inbound messages belong to another live process; left to it", len(deferred))

    def replay_released(self) -> None:
        """Replay deferred rows whose owner has finished them, died or released the session (a timer calls this)."""
        with self._lock:
            if not self._deferred or self.stopped.is_set():
                return
            ids = list(self._deferred)

            def claim(store: StoreInterface) -> tuple[list[InboxRow], dict[int, InboxRow]]:
                if not store.inbox.pending_among(ids):
                    return [], {}
                return self._claim_pending(store)

            with contextlib.suppress(WriterClosedError, TimeoutError):
                rows, self._deferred = self._writer.call(claim, timeout=self._timeout)
                if rows:
                    _log.info("replaying %d inbound messages another process left", len(rows))
                self._replay(rows)

    def _claim_pending(self, store: StoreInterface) -> tuple[list[InboxRow], dict[int, InboxRow]]:
        """Inside a write: claim the pending rows this process may run; return them and the deferred ones.

        It changes nothing of this object (the write may be rolled back and run again); the caller keeps the
        deferred rows once the commit is durable.
        """
        owner, ttl = self._owner, self._ttl
        claimed: list[InboxRow] = []
        deferred: dict[int, InboxRow] = {}
        blocked: set[str] = set()  # routing keys with a deferred row: later rows of theirs wait too (order)
        for row in store.inbox.pending():
            if self._platforms is not None and row.platform not in self._platforms:
                continue
            if row.owner == owner:
                continue  # accepted by this process: already queued
            mine = row.owner is None or not lease_owner_alive(row.owner)
            session_id = store.get_route(row.routing_key)
            if mine and session_id is not None and store.find_session(session_id) is not None:
                granted = store.leases.grant(session_id, owner, ttl)
                if isinstance(granted, str) and not lease_owner_alive(granted):
                    store.leases.release(session_id, granted)
                    granted = store.leases.grant(session_id, owner, ttl)
                mine = isinstance(granted, int)
            if not mine or row.routing_key in blocked:
                deferred[row.id] = row
                blocked.add(row.routing_key)
                continue
            store.inbox.claim(row.id, owner)
            claimed.append(row)
        return claimed, deferred

    def _replay(self, rows: Sequence[InboxRow]) -> None:
        """Hand ``rows`` to the supervisor in one batch: a session's replayed messages arrive together."""
        delivers = tuple(
            Deliver(
                routing_key=row.routing_key,
                delivery=Delivery(inbox_id=row.id, message=decode_inbound(row.payload), replayed=True),
            )
            for row in rows
        )
        if delivers:
            self._deliver(DeliverBatch(delivers=delivers))
