"""One shard host's runtime: the supervisor and session actors of ``hermesd`` on a PostgreSQL store, restricted to
the shards the host holds.

:class:`HostRuntime` opens a :class:`~hermes_actors.store.pg.PostgresStore` whose every turn transaction is fenced
by the host's :class:`~hermes_actors.store.pg.shards.ShardFence`, wires the ordinary runtime on it
(:func:`~hermes_actors.runtime.assembly.wire` with :class:`~hermes_actors.store.pg.writer.PgWriter`), keeps its
shards with a :class:`~hermes_actors.cluster.host.keeper.ShardKeeper`, and hands the pending inbox rows of its
shards to the supervisor (:class:`~hermes_actors.cluster.host.handover.Handover`): a message whose ``NOTIFY``
brought it whole at once, without reading it back; and by a pull when a notification of a shard it holds came
without a row, when poked, when its listener connected again (a notification sent while it reconnected is lost),
when new terms begin and ``look_again_s`` after (a row added while its shard changed hands notified the host giving
it up, and may commit just after the first of those pulls read), and every ``pull_interval_s`` whatever happened.
Control rows (their ``kind``) go elsewhere: resets to :class:`~hermes_actors.cluster.host.timers.ShardTimers`, an
operator's changes to :class:`~hermes_actors.cluster.host.admin.ShardAdmin`.

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
from collections.abc import Callable
from pathlib import Path

from hermes_actors.agents.base import Agent
from hermes_actors.cluster.host.admin import ShardAdmin
from hermes_actors.cluster.host.approvals import ShardApprovals
from hermes_actors.cluster.host.background import BackgroundWatch
from hermes_actors.cluster.host.handover import Handover
from hermes_actors.cluster.host.jobs import ShardJobs
from hermes_actors.cluster.host.keeper import ShardKeeper
from hermes_actors.cluster.host.outage import Outages
from hermes_actors.cluster.host.settings import HostSettings, HostStatus
from hermes_actors.cluster.host.timers import ShardTimers
from hermes_actors.cluster.host_stats import HostStats, encode_stats, oldest_handed, turn_outcomes
from hermes_actors.cluster.turn_relay import EventRelay
from hermes_actors.config import RuntimeConfig
from hermes_actors.ids import SessionKind
from hermes_actors.media import MediaStore
from hermes_actors.runtime.agent_roster import AgentRoster
from hermes_actors.runtime.assembly import GatewayOptions, Runtime, wire
from hermes_actors.runtime.metrics import Metrics
from hermes_actors.runtime.protocol import TurnOutcome
from hermes_actors.store.pg.shard_queue import InboxListener, ShardRow
from hermes_actors.store.pg.shards import ShardFence, new_session_id_in, shard_of
from hermes_actors.store.pg.store import PostgresStore
from hermes_actors.store.pg.writer import PgReaders, PgWriter

__all__ = ["HostRuntime"]

_log = logging.getLogger(__name__)


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
        self._wake = threading.Event()
        self._asked = threading.Lock()  # over the two below, which wake-ups add to and the puller takes
        self._pull_wanted = True  # the next wake-up pulls (else it hands over only the rows notified whole)
        self._look_again_at: float | None = None  # when to pull again after new terms (monotonic)
        self._notified: list[ShardRow] = []  # rows of held shards their notifications brought, not handed yet
        self._epochs: dict[int, int] = {}  # their shards' holders' epochs when they were added (Notices.epochs)
        self._handing = threading.Lock()  # held while rows are pulled or handed over: one thread at a time, in order
        self._stopped = threading.Event()
        self._listener = InboxListener(settings.postgres_dsn, holder=settings.name)
        self._relay = EventRelay(settings.postgres_dsn)
        self.handover = Handover(
            settings,
            self.store,
            self.fence,
            self.keeper,
            self.runtime,
            timers=self.timers,
            admin=self.admin,
            relay=self._relay,
            settle=lambda: self._writer.call(lambda store: None),
        )
        self._threads = [
            threading.Thread(target=self._listen, name=f"{settings.name}-listen", daemon=True),
            threading.Thread(target=self._pull_loop, name=f"{settings.name}-pull", daemon=True),
        ]

    def _new_id(self, kind: SessionKind, near: str) -> str:
        """A new session id in the shard of ``near`` (a routing key or a parent session): the key's next message
        and the parent's pending rows are in that shard, so the same host runs them in order."""
        return new_session_id_in(shard_of(near, self.settings.shards), self.settings.shards, kind)

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
        self._pull_soon()

    def _gained(self, shards: set[int]) -> None:
        """New terms: rows handed over under an earlier term of these shards are handed over again; a pull now and
        another ``look_again_s`` later."""
        self.handover.forget(shards)
        self._look_again_at = time.monotonic() + self.settings.look_again_s
        self._pull_soon()

    def _pull_soon(self) -> None:
        with self._asked:
            self._pull_wanted = True
        self._wake.set()

    def start(self) -> None:
        """Take the home shards, start the timers, the heartbeat, the listener and the puller."""
        self.runtime.timers.start()
        self.keeper.start()
        for thread in self._threads:
            thread.start()
        self._pull_soon()

    def poke(self) -> None:
        """Pull now (an ingress committed a row of one of this host's shards)."""
        self._pull_soon()

    def _listen(self) -> None:
        connections = self._listener.connections
        while not self._stopped.is_set():
            try:
                notified = self._listener.wait(1.0, wanted=self._held)
            except Exception as exc:
                if self._stopped.is_set():
                    return
                self.outages.failed("listening for new rows (the periodic pull goes on)", exc)
                self._stopped.wait(1.0)
                continue
            self.outages.worked("listening for new rows (the periodic pull goes on)")
            rows = [row for row in notified.rows if self._held(row[0])]
            # A new connection missed what was notified before it: a pull reads such rows before any newer one is
            # handed over whole (a conversation's messages go in order). A row of a shard not held is another
            # host's, or one this host pulls when it takes the shard (_gained).
            missed, connections = self._listener.connections != connections, self._listener.connections
            pull = missed or self.fence.holds_any(notified.shards)
            if rows or pull:
                with self._asked:
                    self._notified.extend(rows)
                    self._epochs.update(notified.epochs)
                    self._pull_wanted = self._pull_wanted or pull
                if not self._handed_here():
                    self._wake.set()

    def _handed_here(self) -> bool:
        """Hand the rows notified whole over on the listener's thread (a thread hop fewer a message); ``False`` when
        the puller has to, which takes them, in order, at its next wake-up: it is pulling or handing over now, a
        pull is wanted, a second look is due, a backlog waits, or a recheck."""
        if not self._handing.acquire(blocking=False):
            return False
        try:
            with self._asked:
                if self._pull_wanted or self._recheck or self.handover.backlog or self._look_due():
                    return False
                notified, self._notified = self._notified, []
                epochs, self._epochs = self._epochs, {}
            try:
                self.handover.hand(notified, epochs)
            except Exception as exc:
                self._pull_failed(exc)
                return False
            self.outages.worked("pulling the inbox")
            return True
        finally:
            self._handing.release()

    def _held(self, shard: int) -> bool:
        return self.fence.epoch(shard) is not None

    def _pull_wait_s(self) -> float:
        """How long the puller sleeps unless woken: the periodic pull's interval, or less until a second look."""
        again = self._look_again_at
        if again is None:
            return self.settings.pull_interval_s
        return min(self.settings.pull_interval_s, max(0.0, again - time.monotonic()))

    def _pull_loop(self) -> None:
        while not self._stopped.is_set():
            woken = self._wake.wait(self._pull_wait_s())
            self._wake.clear()
            if self._stopped.is_set():
                return
            with self._handing:
                look = self._look_due()  # the second look after new terms: a pull
                if look:
                    self._look_again_at = None
                self._pull_once(woken, look)

    def _look_due(self) -> bool:
        """Whether the second look after new terms is due (a pull, not a hand-over, must come next)."""
        again = self._look_again_at
        return again is not None and time.monotonic() >= again

    def _pull_failed(self, exc: Exception) -> None:
        """A pull or a hand-over failed: what it took may be unread, and no row is handed whole before a pull
        reads it."""
        with self._asked:
            self._pull_wanted = True
        self.outages.failed("pulling the inbox", exc)

    def _pull_once(self, woken: bool, look: bool) -> None:
        """One round of the puller (under ``_handing``): the scans that are due, then the rows notified whole
        handed over, or a pull."""
        # Taken before a pull reads: a row notified before then is pending when it reads, and read by it.
        with self._asked:
            notified, self._notified = self._notified, []
            epochs, self._epochs = self._epochs, {}
            wanted, self._pull_wanted = self._pull_wanted, False
        try:
            recheck, self._recheck = self._recheck, False
            if recheck or time.monotonic() - self._scanned_at >= self.settings.timer_scan_s:
                self._scanned_at = time.monotonic()
                self.timers.scan()
            if time.monotonic() - self._jobs_scanned_at >= self.settings.job_scan_s:
                self._jobs_scanned_at = time.monotonic()
                self.jobs.scan()  # a run's row notifies its shard's holder (this host, too)
                self.approvals.scan()  # so does a timeout's denial
            if woken and notified and not (wanted or recheck or look or self.handover.backlog):
                self.handover.hand(notified, epochs)
            else:
                self.handover.pull(recheck=recheck or not woken)
            if not woken and self.handover.lost_again():
                self._pull_soon()
        except Exception as exc:
            self._pull_failed(exc)
        else:
            self.outages.worked("pulling the inbox")

    def status(self) -> HostStatus:
        """A snapshot of this host."""
        with self.handover.lock:
            dispatched = len(self.handover.dispatched)
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
            pulls=self.handover.pulls,
            rows_read=self.handover.rows_read,
            rows_notified=self.handover.rows_notified,
            sums=sums,
        )

    def stats(self) -> HostStats:
        """What this host publishes with its heartbeat (:class:`~hermes_actors.cluster.host_stats.HostStats`)."""
        with self.handover.lock:
            handed = dict(self.handover.dispatched)
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

    def handovers(self) -> list[tuple[int, float]]:
        """:meth:`Handover.handovers`."""
        return self.handover.handovers()

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
