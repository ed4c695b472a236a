"""Scheduled turns in a cluster: a run's inbox row goes to the shard of the session it leads to
(:class:`ShardRuns`), where whichever host holds that shard pulls it like any message; the job's own row is fired by
the host holding the job's shard (:mod:`hermes_actors.cluster.host.jobs`) or run by hand through a replica's jobs
port."""

from __future__ import annotations

from hermes_actors.store import StoreInterface
from hermes_actors.store.pg.shards import shard_for_key
from hermes_actors.store.pg.store import PostgresStore

__all__ = ["ShardRuns"]


class ShardRuns:
    """A :class:`~hermes_actors.runtime.job_runs.RunQueue` into the shard queue of ``store`` (``shards`` shards): the
    row joins the transaction the run's write holds on this thread, and its shard's holder is notified."""

    __slots__ = ("_shards", "_store")

    def __init__(self, store: PostgresStore, shards: int) -> None:
        self._store = store
        self._shards = shards

    def add(
        self,
        store: StoreInterface,
        *,
        platform: str,
        account_id: str,
        message_id: str,
        routing_key: str,
        payload: bytes,
        route: str | None,
    ) -> int | None:
        return self._store.shard_queue.add(
            shard_for_key(route, routing_key, self._shards),
            platform=platform,
            account_id=account_id,
            platform_message_id=message_id,
            routing_key=routing_key,
            payload=payload,
        )
