"""The terms one holder keeps in memory, with their local deadlines: the other half of a lease beside its table
(:class:`~hermes_actors.store.terms.TermTable`, whose module docstring tells the discipline). A shard host's
shards (:class:`~hermes_actors.store.pg.shards.ShardFence`) and a replica's roles
(:class:`~hermes_actors.cluster.replica.roles.RoleTerm`) are kept in one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Generic, TypeVar

__all__ = ["HeldTerms"]

K = TypeVar("K", bound=int | str)


class HeldTerms(Generic[K]):
    """The terms ``holder`` holds (key -> epoch), each with its local deadline, shared by the holder's threads.

    A term granted or renewed by a statement sent at ``asked_at`` (``monotonic``) ends locally ``ttl_s`` later:
    no later than in the database. :meth:`held` forgets the terms past their deadline (counted in ``expired``, and
    told to ``on_expired``); ``enabled=False`` (a test's switch) keeps every term whatever the deadline."""

    def __init__(
        self,
        holder: str,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        on_expired: Callable[[list[K]], None] | None = None,
        enabled: bool = True,
    ) -> None:
        self.holder = holder
        self.enabled = enabled
        self.expired = 0  # terms whose local deadline passed before a renewal
        self._monotonic = monotonic
        self._on_expired: Callable[[list[K]], None] | None = on_expired
        self._lock = threading.Lock()
        self._held: dict[K, tuple[int, float]] = {}  # key -> (epoch, local deadline)

    def grant(self, terms: Mapping[K, int], ttl_s: float, *, asked_at: float) -> None:
        """``terms`` (key -> epoch) were granted or renewed by a statement sent at ``asked_at`` (monotonic)."""
        with self._lock:
            for key, epoch in terms.items():
                self._held[key] = (epoch, asked_at + ttl_s)

    def drop(self, keys: Iterable[K]) -> dict[K, int]:
        """Forget ``keys`` (released, or found lost at renewal); the terms forgotten, key -> epoch, whatever their
        local deadline."""
        with self._lock:
            dropped = {key: self._held.pop(key) for key in keys if key in self._held}
        return {key: epoch for key, (epoch, _) in dropped.items()}

    def held(self) -> dict[K, int]:
        """key -> epoch of every term whose local deadline has not passed (self-fencing forgets the rest)."""
        now = self._monotonic() if self.enabled else float("-inf")
        with self._lock:
            expired = [key for key, (_, deadline) in self._held.items() if deadline <= now]
            for key in expired:
                del self._held[key]
            self.expired += len(expired)
            held = {key: epoch for key, (epoch, _) in self._held.items()}
        if expired and self._on_expired is not None:
            self._on_expired(expired)
        return held

    def epoch(self, key: K) -> int | None:
        """The epoch of ``key``'s term, or ``None`` when not held (or past its local deadline): one key looked up,
        not every term copied (a turn's fence asks once per commit)."""
        now = self._monotonic() if self.enabled else float("-inf")
        with self._lock:
            found = self._held.get(key)
            if found is None:
                return None
            epoch, deadline = found
            if deadline > now:
                return epoch
        self.held()  # forgets it (and any other term past its deadline), telling ``on_expired``
        return None

    def holds_any(self, keys: Iterable[K]) -> bool:
        """Whether any of ``keys`` is held (within its local deadline)."""
        return any(self.epoch(key) is not None for key in keys)
