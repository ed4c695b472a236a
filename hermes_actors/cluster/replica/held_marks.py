"""Sent marks a replica holds before it writes them together: the (outbox row id, platform message id) of replies
already delivered, recorded sent in one statement for many instead of one statement each.

Both senders of a replica hold them: the API server's :class:`~hermes_actors.cluster.replica.api_replies.ApiReplies`
(written every ``mark_every_s``, before each look in the outbox and at its stop) and the
:class:`~hermes_actors.cluster.replica.dispatch.OutboxDispatcher` (written by its next claim, in the claim's own
statement, or apart when no claim comes). A write that fails puts its marks back, first, for the next one. A replica
that dies holding marks leaves those replies unsent in the store: the API's orphans' rule settles its replies, and a
dispatched reply is sent again once its claim runs out, flagged as a possible duplicate.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

__all__ = ["HeldMarks", "Mark"]

_log = logging.getLogger(__name__)

Mark = tuple[int, str | None]
"""A delivered reply: its outbox row id and the platform's id for the message sent (if any)."""


class HeldMarks:
    """The marks held, shared by the threads that deliver and the one that writes."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._marks: list[Mark] = []
        self._since = 0.0  # when the oldest mark held was added (monotonic)

    def hold(self, marks: Iterable[Mark]) -> None:
        """Keep ``marks`` for the next write."""
        with self._lock:
            if not self._marks:
                self._since = self._monotonic()
            self._marks.extend(marks)

    def take(self) -> list[Mark]:
        """Every mark held (none left held): the caller writes them, or :meth:`put_back` if the write failed."""
        with self._lock:
            marks, self._marks = self._marks, []
        return marks

    def flush(self, write: Callable[[list[Mark]], None], what: str) -> None:
        """Write every mark held with ``write`` (one statement for them all); held again, first, if it fails (logged
        with ``what``, the replies they are)."""
        marks = self.take()
        if not marks:
            return
        try:
            write(marks)
        except Exception:
            _log.exception("recording %d %s sent failed; trying again", len(marks), what)
            self.put_back(marks)

    def put_back(self, marks: list[Mark]) -> None:
        """Hold again, first, the marks a failed write took."""
        if not marks:
            return
        with self._lock:
            self._marks[:0] = marks
            self._since = self._monotonic()

    def due_in(self, every_s: float) -> float:
        """Seconds until the marks held are ``every_s`` old (``inf`` with none held)."""
        with self._lock:
            if not self._marks:
                return float("inf")
            return self._since + every_s - self._monotonic()
