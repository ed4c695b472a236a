"""Scheduled turns on the shard hosts: found by scanning, fired by the host that holds the job's shard.

A host arms no in-memory timers for jobs (it can lose a shard at any moment). Every ``job_scan_s``
:meth:`ShardJobs.scan` reads the jobs due and fires those whose id hashes to a shard the host holds, each in a
transaction of its own (:func:`~hermes_actors.runtime.job_runs.fire`): the job moves on from the due time read and
its run's row goes to the shard of the session it leads to (:class:`~hermes_actors.cluster.job_runs.ShardRuns`). A
host killed before that commit leaves the job due, and the shard's next holder fires it late (run once or skipped,
as the job says); a host killed after it leaves a pending row, which the target shard's holder pulls. A host that
still thinks it holds a shard another has taken finds nothing to advance: the due time was moved on by the commit
that fired it, so it fires once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import tzinfo

from hermes_actors.cluster.job_runs import ShardRuns
from hermes_actors.lifecycle.schedule import JobsConfig
from hermes_actors.routing import KeyPolicy
from hermes_actors.runtime.events import Events
from hermes_actors.runtime.job_runs import fire
from hermes_actors.store.pg.shards import ShardFence, shard_of
from hermes_actors.store.pg.store import PostgresStore

__all__ = ["ShardJobs"]

_log = logging.getLogger(__name__)


class ShardJobs:
    """Fires the due jobs of the shards ``fence`` holds (see the module docstring)."""

    def __init__(
        self,
        store: PostgresStore,
        fence: ShardFence,
        *,
        policy: KeyPolicy,
        events: Events,
        config: JobsConfig,
        zone: tzinfo | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._fence = fence
        self._queue = ShardRuns(store, fence.shards)
        self._policy = policy
        self._events = events
        self._config = config
        self._zone = zone
        self._clock = clock

    def scan(self) -> int:
        """Fire every due job of a held shard; how many runs were queued."""
        held = self._fence.held()
        if not held:
            return 0
        queued = 0
        for job in self._store.jobs.due(self._clock()):
            if shard_of(job.id, self._fence.shards) not in held or job.next_due_at is None:
                continue
            with self._store.transaction():
                fired = fire(
                    self._store,
                    job,
                    job.next_due_at,
                    now=self._clock(),
                    zone=self._zone,
                    missed_after_s=self._config.missed_after_s,
                    queue=self._queue,
                    policy=self._policy,
                    events=self._events,
                )
            if fired is not None and fired.run is not None:
                queued += 1
                _log.info("job %s fired its due time %.0f (inbox row %d)", job.id, job.next_due_at, fired.run.inbox_id)
        return queued
