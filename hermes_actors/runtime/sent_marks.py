"""Sent marks: the deliveries an outbox records, many replies in one write of one group commit.

A lane worker whose send returned adds the reply's mark and goes on at once. The first mark added when none is
queued submits one write to the store writer; every mark added until that write runs joins it, so however many
replies left meanwhile, they cost one ``mark_sent_many`` (one job, one savepoint) of the writer's next commit, and
no lane ever waits for a mark (its own or another chat's). The writer runs its queue in order, so a write
submitted after a mark was added commits after it.

A mark the store could not take (a full disk, a closed store) is logged and lost: the reply stays an unsent row
with its attempt counted, which the next start sends again, flagged as a possible duplicate.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING

from hermes_actors.store.writer import StoreWriter, WriterClosedError

if TYPE_CHECKING:
    from hermes_actors.store import StoreInterface

__all__ = ["SentMarks"]

_log = logging.getLogger(__name__)


class SentMarks:
    """The sent marks of one platform's outbox, written together; see the module docstring."""

    __slots__ = ("_lock", "_marks", "_platform", "_queued", "_writer")

    def __init__(self, writer: StoreWriter, platform: str) -> None:
        self._writer = writer
        self._platform = platform
        self._lock = threading.Lock()
        self._marks: list[tuple[int, str | None]] = []
        self._queued = False  # a write is on the writer's queue and has not taken the marks yet

    def add(self, outbox_id: int, platform_message_id: str | None) -> None:
        """Record that reply ``outbox_id`` was sent (as ``platform_message_id``) in the writer's next commit;
        never waits."""
        with self._lock:
            self._marks.append((outbox_id, platform_message_id))
            if self._queued:
                return
            self._queued = True
        try:
            written = self._writer.submit(self._write)
        except WriterClosedError:
            with self._lock:
                lost, self._marks, self._queued = self._marks, [], False
            _log.warning(
                "outbox %s: %d replies were sent after the store closed; the next start sends them again, flagged",
                self._platform,
                len(lost),
            )
            return
        written.add_done_callback(self._written)

    def _write(self, store: StoreInterface) -> int:
        """On the writer thread: take every mark added so far and write them."""
        with self._lock:
            marks, self._marks, self._queued = self._marks, [], False
        if marks:
            store.outbox.mark_sent_many(marks)
        return len(marks)

    def _written(self, written: Future[int]) -> None:
        error = written.exception()
        if error is not None:
            _log.warning(
                "outbox %s: sent replies could not be marked sent (%s); the next start sends them again, flagged",
                self._platform,
                error,
            )
