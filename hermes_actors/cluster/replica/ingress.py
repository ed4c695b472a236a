"""The ingress of cluster mode: an inbound message committed to the PostgreSQL inbox, in its session's shard.

Any number of ``hermesd --cluster`` replicas run it: the row's uniqueness on (platform, account, platform message
id) makes a redelivery to another replica add nothing. The commit notifies the shard's holder (its listener wakes;
:mod:`~hermes_actors.store.pg.shard_queue`), which also pulls its shards' pending rows periodically. The turn runs
later, in whichever host holds the shard: the ingress never waits for it. ``poke`` is a second wake-up a caller may
add (the tests wake a host of their own process with it); ``hermesd --cluster`` adds none: a Ray call per message
(at most four a second per host, as it was) cost the replica, the host and Ray more CPU than the rest of the
message's way through the cluster but the turn, and woke a host that its notification had woken already.

A long-poll adapter's batch and its poll cursor commit together (:meth:`ClusterIngress.accept_batch`): every row in
its session's shard and the cursor in one transaction, which first runs the adapter's check (its account's role
lease), so a replica whose term ended cannot move the cursor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hermes_actors.messages import InboundMessage, encode
from hermes_actors.ports import PollCursor
from hermes_actors.routing import KeyPolicy, build_session_key
from hermes_actors.store.pg.store import PostgresStore

__all__ = ["ClusterIngress"]


def _no_poke(shard: int) -> None:
    """Rely on the holder's notification (and its periodic pull) alone."""


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

    @property
    def shards(self) -> int:
        """How many shards the cluster has."""
        return self._shards

    def accept(self, message: InboundMessage) -> int | None:
        """Commit ``message``; its inbox row id, or ``None`` for a redelivery (the first delivery's row stands)."""
        shard, inbox_id = self._add(message)
        if inbox_id is not None:
            self._poke(shard)
        return inbox_id

    def poll_cursor(self, platform: str, account_id: str = "") -> str | None:
        """The poll position last committed for (``platform``, ``account_id``), or ``None``."""
        return self._store.kv.get_cursor(platform, account_id)

    def accept_batch(
        self,
        batch: Sequence[InboundMessage],
        *,
        cursor: PollCursor | None,
        check: Callable[[], None] | None = None,
    ) -> list[int | None]:
        """Commit ``batch`` (each row in its session's shard) and ``cursor`` in one transaction, which first runs
        ``check`` (it raises to refuse the commit: a leased adapter's role lease); the row ids (``None``: a
        redelivery). Pokes each shard that got a row, once committed."""
        with self._store.transaction():
            if check is not None:
                check()
            added = [self._add(message) for message in batch]
            if cursor is not None:
                self._store.kv.set_cursor(cursor.platform, cursor.cursor, cursor.account_id)
        for shard in sorted({shard for shard, inbox_id in added if inbox_id is not None}):
            self._poke(shard)
        return [inbox_id for _, inbox_id in added]

    def _add(self, message: InboundMessage) -> tuple[int, int | None]:
        """The row in the shard of the session its key leads to (the route read by the same statement, one round
        trip); (shard, row id), the row id ``None`` for a redelivery (its shard then unknown, -1: nobody is poked)."""
        key = build_session_key(message.source, self._policy)
        added = self._store.shard_queue.add_routed(
            self._shards,
            platform=message.source.platform,
            account_id=message.source.account_id or "",
            platform_message_id=message.message_id,
            routing_key=key,
            payload=encode(message),
        )
        return (-1, None) if added is None else (added[1], added[0])
