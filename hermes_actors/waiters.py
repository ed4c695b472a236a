"""Replies for request/response platforms: an HTTP request or a terminal waits for its own turn's reply.

The reply still goes the durable way (outbox row, then ``send``); :class:`ReplyWaiters` is the platform's
:class:`~platforms.base.ReplySender` and hands each reply to whoever waits for one of the inbound ids it answers.
A reply nobody waits for any more (the client went away, or a restart replayed the turn) is logged and marked
sent: it is in the transcript, where the client finds it when it comes back.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Iterable

from hermes_actors.messages import OutboundMessage

__all__ = ["ReplyWaiters"]

_log = logging.getLogger(__name__)


class ReplyWaiters:
    """A reply sender that completes futures keyed by inbound platform message id."""

    idempotent_sends = True  # nothing leaves the process: a repeated send completes nothing twice

    def __init__(self, platform: str) -> None:
        self.platform = platform
        self._lock = threading.Lock()
        self._waiting: dict[str, list[concurrent.futures.Future[OutboundMessage]]] = {}

    def expect(self, message_id: str) -> concurrent.futures.Future[OutboundMessage]:
        """Register interest in the reply to inbound ``message_id``; call before accepting the message."""
        future: concurrent.futures.Future[OutboundMessage] = concurrent.futures.Future()
        with self._lock:
            self._waiting.setdefault(message_id, []).append(future)
        return future

    def forget(self, message_id: str, future: concurrent.futures.Future[OutboundMessage] | None = None) -> None:
        """Stop waiting for ``message_id`` (the client gave up): that ``future``'s wait, or every wait on it."""
        with self._lock:
            waits = self._waiting.get(message_id, [])
            if future is not None and future in waits:
                waits.remove(future)
            if future is None or not waits:
                self._waiting.pop(message_id, None)

    def waits_for(self, message_ids: Iterable[str]) -> bool:
        """Whether a request here waits for the reply to one of ``message_ids``."""
        with self._lock:
            return any(self._waiting.get(message_id) for message_id in message_ids)

    def send(self, message: OutboundMessage) -> str | None:
        """Complete every waiter the reply answers; return the first answered id, or ``None`` if none waited."""
        answered: str | None = None
        with self._lock:
            futures = [(i, self._waiting.pop(i, [])) for i in message.answers]
        for message_id, waits in futures:
            for future in waits:
                if not future.done():
                    future.set_result(message)
                    answered = answered or message_id
        if answered is None:
            _log.info(
                "%s: reply for session %s has no waiting client (kept in the transcript)",
                self.platform,
                message.session_id,
            )
        return answered

    def waiting(self) -> int:
        """How many requests wait for a reply now."""
        with self._lock:
            return sum(len(waits) for waits in self._waiting.values())
