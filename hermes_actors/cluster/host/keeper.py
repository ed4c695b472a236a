"""A shard host's heartbeat: renew the shards it holds, take the ones it should, give back the ones whose home
host has returned.

Each :meth:`ShardKeeper.tick` (every third of the term) records the host as live, renews its terms (a term that
could not be renewed is dropped from the :class:`~hermes_actors.store.pg.shards.ShardFence` at once), and takes
free shards: its **home** shards (rendezvous hashing over the configured hosts) as soon as they are free, any other
shard once it has been free for the grace period and this host is that shard's next choice among the live hosts.
A shard held away from home is given back when its home host is live again: first it stops being pulled
(:meth:`ShardKeeper.leaving`), a tick later, its turns drained, it is released.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Sequence

from hermes_actors.cluster.host.outage import Outages
from hermes_actors.store.pg.shards import ShardFence, home_shards
from hermes_actors.store.pg.store import PostgresStore

__all__ = ["ShardKeeper"]

_log = logging.getLogger(__name__)


def _next_choice(shard: int, candidates: set[str]) -> str | None:
    """The host rendezvous hashing picks for ``shard`` among ``candidates``."""
    if not candidates:
        return None
    return max(sorted(candidates), key=lambda name: hashlib.sha256(f"{shard}\x00{name}".encode()).digest())


class ShardKeeper:
    """Keeps ``fence``'s shards for the host ``fence.holder`` among ``hosts``; ``on_gained`` hears of new terms.
    Each heartbeat names the host's ``incarnation`` and carries what ``stats`` returns (``shard_hosts.stats``)."""

    def __init__(
        self,
        store: PostgresStore,
        fence: ShardFence,
        hosts: Sequence[str],
        *,
        ttl_s: float,
        grace_s: float,
        on_gained: Callable[[set[int]], None] = lambda shards: None,
        incarnation: str = "",
        stats: Callable[[], bytes | None] = lambda: None,
        outages: Outages | None = None,
    ) -> None:
        self._store = store
        self._fence = fence
        self._holder = fence.holder
        self._ttl = ttl_s
        self._grace = grace_s
        self._on_gained = on_gained
        self._incarnation = incarnation
        self._stats = stats
        self._outages = outages or Outages(_log, fence.holder)
        self.taken = 0  # terms taken since start
        self.lost = 0  # terms found lost at renewal (those run out locally first: ShardFence.expired)
        self._home: dict[int, str] = {}
        for host in hosts:
            for shard in home_shards(host, hosts, fence.shards):
                self._home[shard] = host
        self._leaving: set[int] = set()
        self.stall_renewals = False  # the fault test's switch: the host keeps working but stops renewing
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        store.shards.ensure(fence.shards)

    @property
    def home(self) -> set[int]:
        """This host's home shards."""
        return {shard for shard, host in self._home.items() if host == self._holder}

    def leaving(self) -> set[int]:
        """Shards held away from home whose home host is back: not pulled any more, released at the next tick."""
        return set(self._leaving)

    def tick(self) -> set[int]:
        """One heartbeat; the shards gained."""
        shards = self._store.shards
        asked = time.monotonic()
        if self.stall_renewals:
            return set()
        shards.beat(self._holder, incarnation=self._incarnation, stats=self._stats())
        held = self._fence.held()
        renewed = shards.renew(self._holder, held, self._ttl)
        self._fence.grant(renewed, self._ttl, asked_at=asked)
        lost = set(held) - set(renewed)
        if lost:
            _log.warning("%s: lost shards %s (their terms ended)", self._holder, sorted(lost))
            self._fence.drop(lost)
            self.lost += len(lost)
        live = {host for host, age in shards.hosts().items() if age < self._ttl}
        self._give_back(renewed, live)
        wanted = []
        for lease in shards.leases():
            if lease.remaining_s > 0 or lease.shard in renewed:
                continue
            home = self._home.get(lease.shard, self._holder)
            orphaned = lease.remaining_s <= -self._grace  # free for the grace period: its home host is not taking it
            if home == self._holder or (orphaned and _next_choice(lease.shard, live - {home}) == self._holder):
                wanted.append(lease.shard)
        gained = shards.acquire(self._holder, wanted, self._ttl)
        if gained:
            self.taken += len(gained)
            self._fence.grant(gained, self._ttl, asked_at=asked)
            _log.info("%s: took shards %s", self._holder, sorted(gained))
            self._on_gained(set(gained))
        return set(gained)

    def _give_back(self, renewed: dict[int, int], live: set[str]) -> None:
        """Release the shards marked leaving at the last tick; mark those whose home host is live now."""
        going = {s: e for s, e in renewed.items() if s in self._leaving}
        if going:
            self._fence.drop(going)
            self._store.shards.release(self._holder, going)
            _log.info("%s: gave shards %s back to their home hosts", self._holder, sorted(going))
        self._leaving = {
            shard
            for shard in renewed
            if shard not in going
            and self._home.get(shard, self._holder) not in (self._holder, None)
            and self._home[shard] in live
        }

    def start(self) -> None:
        """Tick now and then every third of the term, on a thread of its own."""
        self.tick()
        self._thread = threading.Thread(target=self._run, name=f"shard-keeper-{self._holder}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._ttl / 3):
            try:
                self.tick()
            except Exception as exc:  # the database is away: the terms run out and the fence stops the turns
                self._outages.failed("the shard heartbeat", exc)
            else:
                self._outages.worked("the shard heartbeat")

    def stop(self, *, release: bool = True) -> None:
        """Stop ticking and (``release``) give every shard up at once, for the next holder."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if release:
            held = self._fence.held()
            self._fence.drop(held)
            self._store.shards.release(self._holder, held)
