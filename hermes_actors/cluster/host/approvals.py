"""Approval deadlines on the shard hosts: found by scanning, denied by the host that holds the session's shard.

On one machine each pending request's deadline is an armed timer (:mod:`~hermes_actors.runtime.approval_timeouts`);
a shard host arms none (it can lose a shard at any moment). With the due jobs, every ``job_scan_s``,
:meth:`ShardApprovals.scan` reads the pending requests whose deadline has passed and whose timer row
(``approval:<id>``) is still set, and for those of sessions in a shard the host holds commits, each in a
transaction of its own under the shard fence, the cancellation of that timer and the denial as an inbox message
of the chat asked (``/deny ID ...``, :func:`~hermes_actors.runtime.approval_timeouts.deny_overdue`) in the shard of
the session its key leads to (:class:`~hermes_actors.cluster.job_runs.ShardRuns`). Whichever host holds that shard
then runs it like any message: the paused turn continues with the denial.

The timer's deletion is the claim: a second scanner (a host that still believes it holds the shard) finds the
request no longer, and one racing the first waits on the timer's row and deletes nothing, so it queues nothing.
A host killed before its commit leaves the timer, and the shard's next holder denies the request. A request
answered in time is no longer pending (and the turn that continued cancelled its timer).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from hermes_actors.cluster.job_runs import ShardRuns
from hermes_actors.errors import ShardLostError
from hermes_actors.routing import KeyPolicy
from hermes_actors.runtime.approval_requests import TIMER_PREFIX, timer_name
from hermes_actors.runtime.approval_timeouts import deny_overdue
from hermes_actors.store.pg.shards import ShardFence, shard_of
from hermes_actors.store.pg.store import PostgresStore

__all__ = ["ShardApprovals"]

_log = logging.getLogger(__name__)
_SCAN_LIMIT = 500  # overdue requests one scan reads; the next scan reads on


class ShardApprovals:
    """Denies the overdue requests of the sessions in the shards ``fence`` holds (see the module docstring)."""

    def __init__(
        self,
        store: PostgresStore,
        fence: ShardFence,
        *,
        policy: KeyPolicy,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._fence = fence
        self._queue = ShardRuns(store, fence.shards)
        self._policy = policy
        self._clock = clock

    def scan(self) -> int:
        """Deny every overdue request of a held shard's session; how many denials were queued."""
        held = self._fence.held()
        if not held:
            return 0
        denied = 0
        for row in self._store.approvals.overdue(self._clock(), timer_prefix=TIMER_PREFIX, limit=_SCAN_LIMIT):
            if shard_of(row.session_id, self._fence.shards) not in held:
                continue
            try:
                with self._store.transaction():
                    self._fence.check(self._store.shards, row.session_id)
                    if not self._store.timers.cancel(timer_name(row.id)):
                        continue  # another host claimed it first
                    queued = deny_overdue(self._store, row.id, policy=self._policy, queue=self._queue)
            except ShardLostError as exc:
                _log.info("approval %d: not denied here (%s)", row.id, exc)
                continue
            if queued is not None:
                denied += 1
                _log.info("approval %d: nobody answered in time; denial queued (inbox row %d)", row.id, queued[0])
        return denied
