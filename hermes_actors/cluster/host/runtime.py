"""One shard host's runtime: the supervisor and session actors of ``hermesd`` on a PostgreSQL store, restricted to
the shards the host holds.

:class:`HostRuntime` opens a :class:`~hermes_actors.store.pg.PostgresStore` whose every turn transaction is fenced
by the host's :class:`~hermes_actors.store.pg.shards.ShardFence`, wires the ordinary runtime on it
(:func:`~hermes_actors.runtime.assembly.wire` with :class:`~hermes_actors.store.pg.writer.PgWriter`), keeps its
shards with a :class:`~hermes_actors.cluster.host.keeper.ShardKeeper`, and pulls the pending inbox rows of its shards
into the supervisor: when ``NOTIFY`` says a shard it holds has a new row, when poked, and every
``pull_interval_s`` whatever happened (a notification sent while the listener reconnected is lost). Control rows
(their ``kind``) go elsewhere: resets to :class:`~hermes_actors.cluster.host.timers.ShardTimers`, an operator's
changes to :class:`~hermes_actors.cluster.host.admin.ShardAdmin`.

A session's lease is bookkeeping here: the shard lease decides, so the host takes over a session lease held by
any other owner at once (``owner_alive`` says no other owner is alive) and the lease's epoch still refuses a
commit of a turn computed before another host took the session.
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from hermes_actors.agents.base import Agent
from hermes_actors.cluster.host.admin import ShardAdmin
from hermes_actors.cluster.host.approvals import ShardApprovals
from hermes_actors.cluster.host.background import BackgroundWatch
from hermes_actors.cluster.host.jobs import ShardJobs
from hermes_actors.cluster.host.keeper import ShardKeeper
from hermes_actors.cluster.host.outage import Outages
from hermes_actors.cluster.host.settings import HostSettings, HostStatus
from hermes_actors.cluster.host.timers import ShardTimers
from hermes_actors.cluster.host_stats import HostStats, encode_stats, oldest_handed, turn_outcomes
from hermes_actors.cluster.turn_relay import EventRelay
from hermes_actors.config import RuntimeConfig
from hermes_actors.ids import SessionKind, new_session_id
from hermes_actors.media import MediaStore
from hermes_actors.messages import decode_inbound
from hermes_actors.runtime.agent_roster import AgentRoster
from hermes_actors.runtime.assembly import GatewayOptions, Runtime, wire
from hermes_actors.runtime.metrics import Metrics
from hermes_actors.runtime.protocol import Deliver, Delivery, TurnOutcome
from hermes_actors.store.pg.shard_queue import InboxListener
from hermes_actors.store.pg.shards import ShardFence, shard_for_key, shard_of
from hermes_actors.store.pg.store import PostgresStore
from hermes_actors.store.pg.writer import PgReaders, PgWriter
from hermes_actors.store.records import InboxKind, InboxRow

__all__ = ["HostRuntime"]

_log = logging.getLogger(__name__)
_PULL_LIMIT = 2000  # pending rows a pull reads
_SETTLE_S = 5.0  # a row handed over this long ago, in a supervisor holding nothing, was lost on the way


class HostRuntime:
    """The runtime of one shard host (see the module docstring); :meth:`start`, :meth:`poke`, :meth:`stop`."""

    def __init__(
        self,
        settings: HostSettings,
        *,
        agent: Agent | None = None,
        agents: AgentRoster | None = None,
        on_turn: Callable[[TurnOutcome], None] | None = None,
    ) -> None:
        self.settings = settings
        self.store = PostgresStore.open(settings.postgres_dsn, pool_size=8)
        self.fence = ShardFence(settings.name, settings.shards, enabled=settings.fencing)
        self.store.fence_shards(self.fence)
        owner = f"{settings.name}:{os.getpid()}:{int(time.time() * 1000)}"
        self._turns = 0
        self._pulls = self._rows_read = 0
        self._on_turn = on_turn
        options: GatewayOptions = {
            "config": RuntimeConfig(
                max_concurrent_agent_calls=settings.max_concurrent_agent_calls,
                pending_soft_limit=settings.pending_soft_limit,
                pending_hard_limit=settings.pending_hard_limit,
            ),
            "agent": agent,
            "agents": agents,
            "on_turn": self._turn_done,
            "schedule_resets": False,
            "replies_sent_elsewhere": True,
            "events": settings.events,  # emitted in its fenced commits; the replicas' dispatchers deliver them
            "jobs": settings.jobs,  # the agent's schedule tool; the jobs are fired by scanning (ShardJobs)
            "busy": settings.busy,
        }
        media = MediaStore(Path(tempfile.gettempdir()) / f"hermes-media-{settings.name}")
        metrics = Metrics()
        self._writer = PgWriter(self.store, observer=metrics.committed)
        self.outages = Outages(_log, settings.name)
        self.runtime: Runtime = wire(
            self._writer,
            PgReaders(self.store),
            media,
            options,
            metrics=metrics,
            lease_owner=owner,
            owner_alive=lambda holder: holder == owner,
            new_id=self._new_id,
        )
        self.keeper = ShardKeeper(
            self.store,
            self.fence,
            settings.hosts,
            ttl_s=settings.lease_ttl_s,
            grace_s=settings.grace_s,
            on_gained=self._gained,
            incarnation=f"{socket.gethostname()}:{os.getpid()}:{int(time.time())}",
            stats=lambda: encode_stats(self.stats()),
            outages=self.outages,
        )
        self.background = BackgroundWatch(
            self.store, self.runtime.services.agent, owner, on_ended=self._background_ended
        )
        self.timers = ShardTimers(
            self.store, self.fence, settings.reset, background_started_at=self.background.started_at
        )
        self.admin = ShardAdmin(self.store, self.fence, self.runtime, name=settings.name)
        services = self.runtime.services
        self.jobs = ShardJobs(
            self.store, self.fence, policy=services.config.key_policy, events=services.events, config=settings.jobs
        )
        self.approvals = ShardApprovals(self.store, self.fence, policy=services.config.key_policy)
        self._scanned_at = self._jobs_scanned_at = 0.0
        self._recheck = False  # the next pull looks at every pending row again (a background process ended)
        self._waiting: set[int] = set()  # reset rows left pending: held off by a background process, or settled
        self._lock = threading.Lock()
        # inbox id -> (shard, monotonic time), handed to the supervisor and still pending
        self._dispatched: dict[int, tuple[int, float]] = {}
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._listener = InboxListener(settings.postgres_dsn)
        self._relay = EventRelay(settings.postgres_dsn)
        self._relayed: dict[int, str] = {}  # inbox id -> message id, watched by the relay while pending
        self._handed: deque[tuple[int, float]] = deque(maxlen=20_000)  # (inbox id, when handed over), the latest
        self._threads = [
            threading.Thread(target=self._listen, name=f"{settings.name}-listen", daemon=True),
            threading.Thread(target=self._pull_loop, name=f"{settings.name}-pull", daemon=True),
        ]

    def _new_id(self, kind: SessionKind, near: str) -> str:
        """A new session id in the shard of ``near`` (a routing key or a parent session): the key's next message
        and the parent's pending rows are in that shard, so the same host runs them in order."""
        target = shard_of(near, self.settings.shards)
        while True:
            session_id = new_session_id(kind)
            if shard_of(session_id, self.settings.shards) == target:
                return session_id

    def _turn_done(self, outcome: TurnOutcome) -> None:
        self._turns += 1
        try:  # on the supervisor's thread; writes only when the session's background process came or went
            if outcome.ended:
                self.background.forget(outcome.session_id)
            else:
                self.background.observe(outcome.session_id)
        except Exception:
            _log.exception("%s: recording the background process of %s failed", self.settings.name, outcome.session_id)
        if self._on_turn is not None:
            self._on_turn(outcome)

    def _background_ended(self, session_id: str) -> None:
        """A background process of this host's agent ended: scan and look at the held-off resets again now."""
        self._scanned_at = 0.0
        self._recheck = True
        self._wake.set()

    def _gained(self, shards: set[int]) -> None:
        """New terms: rows handed over under an earlier term of these shards are handed over again."""
        with self._lock:
            for inbox_id in [i for i, (s, _) in self._dispatched.items() if s in shards]:
                del self._dispatched[inbox_id]
        self._wake.set()

    def start(self) -> None:
        """Take the home shards, start the timers, the heartbeat, the listener and the puller."""
        self.runtime.timers.start()
        self.keeper.start()
        for thread in self._threads:
            thread.start()
        self._wake.set()

    def poke(self) -> None:
        """Pull now (an ingress committed a row of one of this host's shards)."""
        self._wake.set()

    def _listen(self) -> None:
        while not self._stopped.is_set():
            try:
                notified = self._listener.wait(1.0)
            except Exception as exc:
                if self._stopped.is_set():
                    return
                self.outages.failed("listening for new rows (the periodic pull goes on)", exc)
                self._stopped.wait(1.0)
                continue
            self.outages.worked("listening for new rows (the periodic pull goes on)")
            if self.fence.holds_any(notified):
                self._wake.set()

    def _pull_loop(self) -> None:
        while not self._stopped.is_set():
            woken = self._wake.wait(self.settings.pull_interval_s)
            self._wake.clear()
            if self._stopped.is_set():
                return
            try:
                recheck, self._recheck = self._recheck, False
                if recheck or time.monotonic() - self._scanned_at >= self.settings.timer_scan_s:
                    self._scanned_at = time.monotonic()
                    self.timers.scan()
                if time.monotonic() - self._jobs_scanned_at >= self.settings.job_scan_s:
                    self._jobs_scanned_at = time.monotonic()
                    self.jobs.scan()  # a run's row notifies its shard's holder (this host, too)
                    self.approvals.scan()  # so does a timeout's denial
                self.pull(recheck=recheck or not woken)
                if not woken:
                    self._hand_lost_again()
            except Exception as exc:
                self.outages.failed("pulling the inbox", exc)
            else:
                self.outages.worked("pulling the inbox")

    def _hand_lost_again(self) -> None:
        """Hand over again the rows the supervisor lost on the way (an actor that died holding a turn, a delivery
        it failed to route while the store was away): handed over, still pending, and no longer held by the
        supervisor. That is known only while the supervisor holds nothing (no turn running or queued): every row
        handed to it before it answered has then finished, and once what it submitted has committed (the writer's
        next commit), a row still pending was not answered."""
        asked = time.monotonic()
        with self._lock:
            if not any(at < asked - _SETTLE_S for _, at in self._dispatched.values()):
                return
        held = self.runtime.supervisor.statistics()
        if held.running or held.queued_messages:
            return
        self._writer.call(lambda store: None)
        pending = set(self.store.shard_queue.pending_ids(sorted(self.fence.held()), limit=_PULL_LIMIT))
        with self._lock:
            lost = sorted(i for i, (_, at) in self._dispatched.items() if at < asked and i in pending)
            for inbox_id in lost:
                del self._dispatched[inbox_id]
        if lost:
            _log.warning(
                "%s: rows %s were lost on the way to their sessions; handing them over again",
                self.settings.name,
                lost[:20],
            )
            self._wake.set()

    def pull(self, *, recheck: bool = True) -> int:
        """Hand the pending rows of the shards held (and not leaving) to the supervisor, each once; how many.

        Rows handed over already are looked at again only with ``recheck`` (the periodic pull, not a wake-up per
        message): a reset row settled since, or a row whose key now leads to a session of another shard (a
        ``/resume`` after it was handed over: its turn is refused here, and the row moves to that shard)."""
        terms = self.fence.held()
        shards = set(terms) - self.keeper.leaving()
        with self._lock:
            handed_over = set() if recheck else set(self._dispatched) | self._waiting
        # One statement: every pending id, and only the rows not handed over yet whole (with their key's route),
        # unless rechecking. A row handed over after ``handed_over`` was taken is read whole and skipped below.
        ids, rows = self.store.shard_queue.pull(sorted(shards), known=handed_over, limit=_PULL_LIMIT)
        handed = 0
        with self._lock:
            pending = set(ids)
            for inbox_id in [i for i in self._dispatched if i not in pending]:
                del self._dispatched[inbox_id]
            for inbox_id in [i for i in self._relayed if i not in pending]:
                self.runtime.services.watch.unwatch(self._relayed.pop(inbox_id))
            self._waiting &= pending
        self._pulls += 1
        self._rows_read += len(rows)
        for shard, row, route in rows:
            if row.kind is InboxKind.TIMER:
                handed += self._reset(row)
                continue
            if row.kind is InboxKind.ADMIN:  # an operator's rename, end or delete (hermesctl sessions --dsn)
                handed += self.admin.submit(row)
                continue
            target = shard_for_key(route, row.routing_key, self.settings.shards)
            if target != shard:  # its key leads to a session of another shard now (a /resume, say)
                self.store.shard_queue.reshard(row.id, target)
                continue
            with self._lock:
                if row.id in self._dispatched:
                    continue
                self._dispatched[row.id] = (shard, time.monotonic())
            message = decode_inbound(row.payload)
            delivery = Delivery(inbox_id=row.id, message=message, replayed=True, term=terms.get(shard, 0))
            if row.platform in self.settings.relay_platforms:
                self._watch_for_relay(row.id, delivery.message.message_id)
            # The supervisor checks its cached route against the stored one: another host may have moved the key
            # (a /resume, /new or reset while it held the shard).
            deliver = Deliver(routing_key=row.routing_key, delivery=delivery, check_route=True, stored_route=route)
            self.runtime.supervisor.tell(deliver)
            self._handed.append((row.id, time.time()))
            handed += 1
        return handed

    def _watch_for_relay(self, inbox_id: int, message_id: str) -> None:
        """Relay the turn of ``message_id`` to the replica whose client waits on it (an API request)."""
        with self._lock:
            self._relayed[inbox_id] = message_id
        self.runtime.services.watch.watch(message_id, self._relay.events(message_id))

    def _reset(self, row: InboxRow) -> int:
        """A reset row: settle it, or hand its end to the supervisor once; how many were handed."""
        end = self.timers.take(row)
        with self._lock:
            if end is None:
                self._waiting.add(row.id)  # only the periodic pull looks at it again
                return 0
            self._waiting.discard(row.id)
            if row.id in self._dispatched:
                return 0
            self._dispatched[row.id] = (shard_of(end.session_id, self.settings.shards), time.monotonic())
        self.runtime.supervisor.tell(end)
        return 1

    def handovers(self) -> list[tuple[int, float]]:
        """The latest messages handed to the supervisor (at most 20,000): inbox id and the wall-clock time, for
        telling a message's wait for its pull from its wait in the runtime (``bench/cluster.py --profile``)."""
        return list(self._handed)

    def status(self) -> HostStatus:
        """A snapshot of this host."""
        with self._lock:
            dispatched = len(self._dispatched)
        sums: dict[str, float] = {}
        metrics = self.runtime.metrics
        for histogram in (metrics.turn_seconds, metrics.agent_seconds, metrics.commit_seconds, metrics.commit_batch):
            for family in histogram.collect():
                for sample in family.samples:
                    if sample.name.endswith(("_count", "_sum")):
                        sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
        return HostStatus(
            name=self.settings.name,
            pid=os.getpid(),
            shards=self.fence.held(),
            dispatched=dispatched,
            turns=self._turns,
            outcomes=turn_outcomes(metrics),
            pulls=self._pulls,
            rows_read=self._rows_read,
            sums=sums,
        )

    def stats(self) -> HostStats:
        """What this host publishes with its heartbeat (:class:`~hermes_actors.cluster.host_stats.HostStats`)."""
        with self._lock:
            handed = dict(self._dispatched)
        return HostStats(
            pid=os.getpid(),
            shards=len(self.fence.held()),
            turns=turn_outcomes(self.runtime.metrics),
            fence_refusals=self.fence.refusals,
            shards_taken=self.keeper.taken,
            shards_lost=self.keeper.lost + self.fence.expired,
            unknown_commits=self._writer.unknown_commits,
            handed_over=len(handed),
            oldest_handed=oldest_handed(handed, time.monotonic()),
            store_errors=self.outages.errors,
        )

    def stop(self, *, release: bool = True) -> None:
        """Stop pulling, stop the runtime (its actors finish or are stopped), give the shards up, close the store
        (once: a second call does nothing)."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._wake.set()
        self._listener.close()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout=5)
        self.keeper.stop(release=False)
        self.admin.stop()
        self.runtime.close(time.monotonic() + 2.0, 5.0)
        self._relay.close()
        if release:
            held = self.fence.held()
            self.fence.drop(held)
            self.store.shards.release(self.settings.name, held)
        self.store.close()
