"""The ingress of cluster mode: an inbound message committed to the PostgreSQL inbox, in its session's shard.

Any number of ``hermesd --cluster`` replicas run it: the row's uniqueness on (platform, account, platform message
id) makes a redelivery to another replica add nothing. The commit sends ``NOTIFY`` with the shard (the holder's
listener wakes); ``poke`` (a Ray call that waits for nothing) is the second, independent wake-up. The turn runs
later, in whichever host holds the shard: the ingress never waits for it.

A long-poll adapter's batch and its poll cursor commit together (:meth:`ClusterIngress.accept_batch`): every row in
its session's shard and the cursor in one transaction, which first runs the guard of the adapter's platform (its
role lease, :meth:`ClusterIngress.guard`), so a replica whose term ended cannot move the cursor.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from hermes_actors.cluster.host_runtime import shard_for_key
from hermes_actors.messages import InboundMessage, encode
from hermes_actors.ports import PollCursor
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
        self._guards_lock = threading.Lock()
        self._guards: dict[str, Callable[[], None]] = {}

    @property
    def store(self) -> PostgresStore:
        """The store messages are committed to."""
        return self._store

    def accept(self, message: InboundMessage) -> int | None:
        """Commit ``message``; its inbox row id, or ``None`` for a redelivery (the first delivery's row stands)."""
        shard, inbox_id = self._add(message)
        if inbox_id is not None:
            self._poke(shard)
        return inbox_id

    def guard(self, platform: str, check: Callable[[], None] | None) -> None:
        """From now on, run ``check`` first in the transaction of every batch of ``platform``'s messages or with a
        cursor of ``platform`` (or ``platform:<anything>``); it raises to refuse the commit (``None``: no check)."""
        with self._guards_lock:
            if check is None:
                self._guards.pop(platform, None)
            else:
                self._guards[platform] = check

    def poll_cursor(self, platform: str, account_id: str = "") -> str | None:
        """The poll position last committed for (``platform``, ``account_id``), or ``None``."""
        return self._store.kv.get_cursor(platform, account_id)

    def accept_batch(self, batch: Sequence[InboundMessage], *, cursor: PollCursor | None) -> list[int | None]:
        """Commit ``batch`` (each row in its session's shard) and ``cursor`` in one transaction, after the guards of
        their platforms; the row ids (``None``: a redelivery). Pokes each shard that got a row, once committed."""
        platforms = {message.source.platform for message in batch}
        if cursor is not None:
            platforms.add(cursor.platform.split(":", 1)[0])
        with self._guards_lock:
            checks = [self._guards[p] for p in sorted(platforms) if p in self._guards]
        with self._store.transaction():
            for check in checks:
                check()
            added = [self._add(message) for message in batch]
            if cursor is not None:
                self._store.kv.set_cursor(cursor.platform, cursor.cursor, cursor.account_id)
        for shard in sorted({shard for shard, inbox_id in added if inbox_id is not None}):
            self._poke(shard)
        return [inbox_id for _, inbox_id in added]

    def _add(self, message: InboundMessage) -> tuple[int, int | None]:
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
        return shard, inbox_id
