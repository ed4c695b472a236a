"""The ingress of cluster mode: an inbound message committed to the PostgreSQL inbox, in its session's shard.

Any number of ``hermesd --cluster`` replicas run it: the row's uniqueness on (platform, account, platform message
id) makes a redelivery to another replica add nothing. The commit sends ``NOTIFY`` with the shard (the holder's
listener wakes); ``poke`` (a Ray call that waits for nothing) is the second, independent wake-up. The turn runs
later, in whichever host holds the shard: the ingress never waits for it.
"""

from __future__ import annotations

from collections.abc import Callable

from hermes_actors.cluster.host_runtime import shard_for_key
from hermes_actors.messages import InboundMessage, encode
from hermes_actors.routing import KeyPolicy, build_session_key
from hermes_actors.store.pg.store import PostgresStore

__all__ = ["ClusterIngress"]


def _no_poke(shard: int) -> None:
    """Rely on ``NOTIFY`` alone."""


class ClusterIngress:
    """Commits inbound messages to the shards of their sessions; ``poke(shard)`` wakes the shard's holder."""

    def __init__(
        self,
        store: PostgresStore,
        *,
        shards: int,
        key_policy: KeyPolicy | None = None,
        poke: Callable[[int], None] = _no_poke,
    ) -> None:
        self._store = store
        self._shards = shards
        self._policy = key_policy or KeyPolicy()
        self._poke = poke

    @property
    def store(self) -> PostgresStore:
        """The store messages are committed to."""
        return self._store

    def accept(self, message: InboundMessage) -> int | None:
        """Commit ``message``; its inbox row id, or ``None`` for a redelivery (the first delivery's row stands)."""
        key = build_session_key(message.source, self._policy)
        shard = shard_for_key(self._store, key, self._shards)
        inbox_id = self._store.shard_queue.add(
            shard,
            platform=message.source.platform,
            account_id=message.source.account_id or "",
            platform_message_id=message.message_id,
            routing_key=key,
            payload=encode(message),
        )
        if inbox_id is not None:
            self._poke(shard)
        return inbox_id
