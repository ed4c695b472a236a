"""Sending the replies the shard hosts committed: dispatchers claiming outbox rows in PostgreSQL.

Shard hosts commit replies and leave them in the outbox; any number of :class:`OutboxDispatcher` (in the
``hermesd --cluster`` replicas, which hold the platforms' senders) claim the head of each chat
(:class:`~hermes_actors.store.pg.outbox_claims.OutboxClaims`), send, and mark the row sent or failed (retried with
backoff, as the single-machine outbox does). A dispatcher that dies mid-send leaves a claim that runs out.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from hermes_actors.messages import decode_outbound
from hermes_actors.ports import ReplySender, SendError
from hermes_actors.store.pg.store import PostgresStore

__all__ = ["OutboxDispatcher"]

_log = logging.getLogger(__name__)


class OutboxDispatcher:
    """Claims and sends the replies of the platforms in ``senders``; :meth:`dispatch_once` or a thread."""

    def __init__(
        self,
        store: PostgresStore,
        senders: Mapping[str, ReplySender],
        *,
        name: str,
        retry_base_s: float = 2.0,
        retry_max_s: float = 300.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._clock = clock
        self._store = store
        self._senders = dict(senders)
        self._name = name
        self._retry = (retry_base_s, retry_max_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def dispatch_once(self, limit: int = 100) -> int:
        """Claim and send one round of rows; how many were sent."""
        rows = self._store.outbox_claims.claim(self._name, limit=limit)
        sent = 0
        for row in rows:
            sender = self._senders.get(row.platform)
            if sender is None:  # another replica holds that platform's sender
                self._store.outbox_claims.unclaim(self._name, [row.id])
                continue
            try:
                platform_id = sender.send(decode_outbound(row.payload))
            except SendError as exc:
                base, cap = self._retry
                wait = exc.retry_after_s if exc.retry_after_s is not None else min(cap, base * 2**row.attempts)
                if exc.permanent:
                    self._store.outbox.abandon(row.id, str(exc))
                else:
                    self._store.outbox.mark_failed(row.id, str(exc), self._clock() + wait)
            else:
                self._store.outbox.mark_sent(row.id, platform_id)
                sent += 1
            self._store.outbox_claims.unclaim(self._name, [row.id])
        return sent

    def start(self, interval_s: float = 0.2) -> None:
        """Dispatch on a thread of its own until :meth:`stop`."""
        self._thread = threading.Thread(target=self._run, args=(interval_s,), name=f"dispatch-{self._name}")
        self._thread.daemon = True
        self._thread.start()

    def _run(self, interval_s: float) -> None:
        while not self._stop.is_set():
            try:
                if self.dispatch_once() == 0:
                    self._stop.wait(interval_s)
            except Exception:
                _log.exception("outbox dispatcher %s failed; trying again", self._name)
                self._stop.wait(1.0)

    def stop(self) -> None:
        """Stop the thread (a send under way finishes)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
