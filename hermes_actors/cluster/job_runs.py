"""Scheduled turns (and approvals' timeout denials) in a cluster: a run's inbox row goes to the shard of the session
it leads to (:class:`ShardRuns`), where whichever host holds that shard pulls it like any message; the job's own
row is fired by the host holding the job's shard (:mod:`hermes_actors.cluster.host.jobs`) or run by hand through a
replica's jobs port."""

from __future__ import annotations

from hermes_actors.runtime.job_runs import QueuedMessage
from hermes_actors.store import StoreInterface
from hermes_actors.store.pg.shards import shard_for_key
from hermes_actors.store.pg.store import PostgresStore

__all__ = ["ShardRuns"]


class ShardRuns:
    """A :class:`~hermes_actors.runtime.job_runs.RunQueue` into the shard queue of ``store`` (``shards`` shards), for
    a job's run or an approval's timeout denial: the row goes to the shard of the session its key leads to, joins
    the transaction the write holds on this thread, and its shard's holder is notified."""

    __slots__ = ("_shards", "_store")

    def __init__(self, store: PostgresStore, shards: int) -> None:
        self._store = store
        self._shards = shards

    def add(self, store: StoreInterface, queued: QueuedMessage) -> int | None:
        return self._store.shard_queue.add(
            shard_for_key(queued.route, queued.routing_key, self._shards), **queued.row()
        )
