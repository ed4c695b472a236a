"""The composition root: builds and wires one process's runtime, starts it and shuts it down.

:func:`assemble` opens the store (auto-prune first, before the writer owns the connection), then builds the
writer, the reader pool, the outbox router, the agent pool, the session services, the timer service, the reset
scheduler, the supervisor and the recovery, and wires the callbacks between them (reset deadlines tell the
supervisor, the outbox's delivery reports end handoffs, the outbox's give-ups record dead letters, the timers drive
passivation, retries, queue pruning, deferred replays, event deliveries and dead letters' replays).
:meth:`Runtime.start` replays what an earlier process left and starts the timers; :meth:`Runtime.close` stops
everything in order. The :class:`~hermes_actors.runtime.gateway.Gateway` is the edge in
front of it. One :class:`~hermes_actors.runtime.metrics.Metrics` per runtime is fed by the parts that count
(the store writer through its commit observer) and reads the queues and actors when scraped.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import Future
from datetime import tzinfo
from pathlib import Path
from typing import TypedDict

from hermes_actors.agents.base import Agent, EchoAgent
from hermes_actors.config import BusyConfig, EventsConfig, RuntimeConfig, SessionsConfig
from hermes_actors.lifecycle.policy import ResetConfig
from hermes_actors.lifecycle.resets import ResetScheduler, watch_background_ends
from hermes_actors.lifecycle.schedule import JobsConfig
from hermes_actors.media import Describe, MediaConfig, MediaStore
from hermes_actors.messages import OutboundMessage
from hermes_actors.ports import ReplySender
from hermes_actors.runtime.agent_health import AgentProbeConfig
from hermes_actors.runtime.agent_pool import AgentPool
from hermes_actors.runtime.agent_roster import AgentRoster
from hermes_actors.runtime.approval_timeouts import wire_approvals
from hermes_actors.runtime.dead_letters import Replays, give_up
from hermes_actors.runtime.events import Events, EventSweep
from hermes_actors.runtime.job_book import StoreJobs
from hermes_actors.runtime.jobs import wire_jobs
from hermes_actors.runtime.leases import lease_owner_alive, new_lease_owner
from hermes_actors.runtime.metrics import Metrics
from hermes_actors.runtime.outbox_router import OutboxRouter
from hermes_actors.runtime.protocol import EndDue, HandoffResult, PassivationTick, TurnOutcome
from hermes_actors.runtime.recovery import Recovery
from hermes_actors.runtime.scrape import RuntimeCollector
from hermes_actors.runtime.services import NewSessionId, SessionServices, default_session_id
from hermes_actors.runtime.supervisor_ref import Supervisor
from hermes_actors.runtime.timers import TimerService
from hermes_actors.store import Store, StoreInterface, Synchronous  # Store: to open the home's SQLite file by its path
from hermes_actors.store.attachments import MEDIA_DIR_NAME, media_dir_for
from hermes_actors.store.prune import PruneResult, auto_prune
from hermes_actors.store.readers import ReaderPool
from hermes_actors.store.writer import StoreWriter, WriterClosedError

__all__ = ["QUEUE_PRUNE_CHUNK", "QUEUE_PRUNE_INTERVAL_S", "GatewayOptions", "Runtime", "assemble", "wire"]

_log = logging.getLogger(__name__)

QUEUE_PRUNE_INTERVAL_S = 3600.0
QUEUE_PRUNE_CHUNK = 5000


class GatewayOptions(TypedDict, total=False):
    """The keyword options of :class:`~hermes_actors.runtime.gateway.Gateway` (all optional).

    ``recover_platforms`` limits start-up replay to those platforms' rows (``hermesctl chat`` without a daemon
    replays only terminal turns); ``schedule_resets=False`` arms no reset timers (a short-lived in-process gateway
    must not end other platforms' sessions). ``media`` limits attachments and ``describe_media`` replaces its
    ``describe`` step. ``on_turn`` hears every finished turn (on the supervisor's thread). ``replies_sent_elsewhere``:
    the replies of platforms without a sender here are sent by another process (a cluster's dispatchers).
    ``agent_probe`` says how health checks probe the default agent (:mod:`hermes_actors.runtime.agent_health`).
    ``agents`` are the named agents and their bindings (:mod:`hermes_actors.runtime.agent_roster`); without them
    ``agent`` (by default the echo agent) answers every session. ``events`` are the webhooks told what happens
    (:mod:`hermes_actors.runtime.events`; their sender is one of ``senders``). ``busy`` says what happens to a
    message that arrives while its session runs a turn (:mod:`hermes_actors.runtime.busy`).
    """

    config: RuntimeConfig | None
    agent: Agent | None
    agents: AgentRoster | None
    senders: Iterable[ReplySender]
    synchronous: Synchronous | str
    on_turn: Callable[[TurnOutcome], None] | None
    clock: Callable[[], float]
    tick_interval_s: float
    reset: ResetConfig | None
    tz: tzinfo | None
    sessions: SessionsConfig | None
    recover_platforms: Collection[str] | None
    schedule_resets: bool
    media: MediaConfig | None
    describe_media: Describe | None
    replies_sent_elsewhere: bool
    agent_probe: AgentProbeConfig | None
    events: EventsConfig | None
    jobs: JobsConfig | None  # the scheduled turns (runtime.jobs), fired where resets are scheduled
    busy: BusyConfig | None


class Runtime:
    """The parts of one process's runtime, as :func:`assemble` built and wired them."""

    __slots__ = (
        "agent_pool",
        "clock",
        "config",
        "events",
        "jobs",
        "lease_owner",
        "media",
        "metrics",
        "outbox",
        "pruned",
        "readers",
        "recovery",
        "replays",
        "resets",
        "schedule_resets",
        "services",
        "supervisor",
        "sweep",
        "timers",
        "writer",
    )

    def __init__(
        self,
        *,
        config: RuntimeConfig,
        clock: Callable[[], float],
        media: MediaStore,
        pruned: PruneResult | None,
        writer: StoreWriter,
        readers: ReaderPool,
        outbox: OutboxRouter,
        agent_pool: AgentPool,
        services: SessionServices,
        timers: TimerService,
        resets: ResetScheduler,
        supervisor: Supervisor,
        recovery: Recovery,
        schedule_resets: bool,
        metrics: Metrics,
        sweep: EventSweep | None = None,
        replays: Replays | None = None,
    ) -> None:
        self.config = config
        self.events = services.events
        self.sweep = sweep  # None where another process sends the replies (a cluster's shard host)
        self.replays = replays
        self.jobs: StoreJobs | None = None  # set by wire
        self.metrics = metrics
        self.clock = clock
        self.media = media
        self.pruned = pruned
        self.writer = writer
        self.readers = readers
        self.outbox = outbox
        self.agent_pool = agent_pool
        self.services = services
        self.lease_owner = services.lease_owner
        self.timers = timers
        self.resets = resets
        self.supervisor = supervisor
        self.recovery = recovery
        self.schedule_resets = schedule_resets

    def start(self) -> None:
        """Replay what an earlier process left (and the dead letters asked to be replayed), send the event
        deliveries it left, arm every live session's reset deadline, start the timers."""
        self.recovery.recover()
        self._sweep_and_replay(start=True)
        if self.schedule_resets:
            with self.readers.reader() as store:
                self.resets.rebuild(store)
        self.timers.start()

    def tick(self) -> None:
        """Passivate idle actors, renew leases, retry due replies, send event deliveries not yet handed over and do
        the replays asked for."""
        self.supervisor.tell(PassivationTick())
        self.outbox.retry_due()
        self._sweep_and_replay()

    def _sweep_and_replay(self, *, start: bool = False) -> None:
        """Sweep the event deliveries (at start always: an earlier process may have left some; then while webhooks
        are configured) and take the replays asked for."""
        if self.sweep is not None and (start or self.events.enabled):
            self.sweep.sweep()
        if self.replays is not None:
            self.replays.run()
        if self.jobs is not None:  # at start, and on every tick: what another process changed
            self.jobs.hooks.resync()

    def prune_queues(self) -> None:
        """Delete answered inbox rows and finished outbox rows older than ``runtime.queue_retention_days``, in
        chunks of :data:`QUEUE_PRUNE_CHUNK` (each its own commit, so a large backlog never holds up turns for long).
        """
        before = self.clock() - self.config.queue_retention_days * 86400

        def prune(store: StoreInterface) -> int:
            inbox = store.inbox.prune_completed(before, limit=QUEUE_PRUNE_CHUNK)
            outbox = store.outbox.prune_finished(before, limit=QUEUE_PRUNE_CHUNK)
            if inbox or outbox:
                _log.info("pruned %d answered inbox rows and %d finished replies", inbox, outbox)
            return max(inbox, outbox)

        def again(done: Future[int]) -> None:
            if not done.cancelled() and done.exception() is None and done.result() == QUEUE_PRUNE_CHUNK:
                self._submit_quietly(prune, again)

        self._submit_quietly(prune, again)

    def _submit_quietly(self, work: Callable[[StoreInterface], int], then: Callable[[Future[int]], None]) -> None:
        with contextlib.suppress(WriterClosedError):  # stopping: the next start prunes
            future = self.writer.submit(work)
            future.add_done_callback(then)  # before tracking: the next chunk is counted before this one ends
            self.services.background.track(future)

    def report_delivery(self, message: OutboundMessage, error: str | None) -> None:
        """Tell the supervisor how a handoff's first message went (other deliveries need no report)."""
        if message.session_id is not None and self.services.handoffs.take(message.reply_to):
            self.supervisor.tell(
                HandoffResult(
                    session_id=message.session_id, error=error, chat_id=message.chat_id, thread_id=message.thread_id
                )
            )

    def close(self, drain_deadline: float, closing_s: float) -> None:
        """Stop the timers, the supervisor (and its session actors, giving up the agent calls still running once the
        stop is queued: :meth:`AgentPool.abandon`) and the outbox (whose sends get until ``drain_deadline``, a
        ``time.monotonic`` value), release this process's leases and close the store. Each actor stop gets
        ``closing_s`` seconds."""
        self.recovery.stopped.set()  # Gateway.stop sets it first; setting it twice is harmless
        self.timers.stop()
        self.supervisor.stop(timeout=closing_s, queued=self.agent_pool.abandon)
        self.outbox.stop(timeout=max(drain_deadline - time.monotonic(), 0.0))
        owner = self.lease_owner
        self.writer.call(lambda store: store.leases.release_all(owner))
        self.readers.close()  # before the writer: the last connection to close checkpoints, and readers cannot
        self.writer.stop(closing_s)


def assemble(path: str | Path, options: GatewayOptions) -> Runtime:
    """Build and wire the runtime of the store at ``path``; :meth:`Runtime.start` starts it."""
    clock = options.get("clock", time.time)
    sessions = options.get("sessions")
    media = MediaStore(
        media_dir_for(path) or Path(path).parent / MEDIA_DIR_NAME,
        options.get("media"),
        describe=options.get("describe_media"),
    )
    store = Store.open(path, synchronous=options.get("synchronous", Synchronous.NORMAL), clock=clock)
    pruned = None
    if sessions is not None and sessions.auto_prune:
        # Before the writer owns the connection: a prune commits in batches, outside any group commit.
        pruned = auto_prune(
            store,
            enabled=True,
            retention_days=sessions.retention_days,
            vacuum_after_prune=sessions.vacuum_after_prune,
            min_interval_hours=sessions.min_interval_hours,
            now=clock(),
        )
        if pruned is not None:
            _log.info("auto-prune removed %d ended sessions", pruned.sessions_deleted)
    metrics = Metrics()
    writer = StoreWriter(store, observer=metrics.committed)
    return wire(writer, ReaderPool(path), media, options, metrics=metrics, pruned=pruned)


def wire(
    writer: StoreWriter,
    readers: ReaderPool,
    media: MediaStore,
    options: GatewayOptions,
    *,
    metrics: Metrics,
    pruned: PruneResult | None = None,
    lease_owner: str | None = None,
    owner_alive: Callable[[str], bool] = lease_owner_alive,
    new_id: NewSessionId = default_session_id,
) -> Runtime:
    """Build and wire a runtime on an opened store's ``writer`` and ``readers`` (a shard host's are PostgreSQL's:
    :mod:`hermes_actors.cluster.host.runtime`); :meth:`Runtime.start` starts it."""
    config = options.get("config") or RuntimeConfig()
    clock = options.get("clock", time.time)
    sessions = options.get("sessions")
    runtime: Runtime | None = None  # the callbacks below run only once it is set
    events = Events(options.get("events"), clock=clock)
    sent_elsewhere = options.get("replies_sent_elsewhere", False)

    def report(message: OutboundMessage, error: str | None) -> None:
        assert runtime is not None
        runtime.report_delivery(message, error)

    timers = TimerService(writer=writer, clock=clock)
    outbox = OutboxRouter(
        writer,
        retry_base_s=config.outbox_retry_base_s,
        retry_max_s=config.outbox_retry_max_s,
        clock=clock,
        on_result=report,
        wake_at=timers.once,
        metrics=metrics,
        sent_elsewhere=sent_elsewhere,
        give_up=functools.partial(give_up, events),
    )
    for sender in options.get("senders", ()):
        outbox.register(sender)
    agent_pool = AgentPool(config.max_concurrent_agent_calls)
    roster = options.get("agents") or AgentRoster.single(options.get("agent") or EchoAgent())
    services = SessionServices(
        writer=writer,
        readers=readers,
        agent=roster.default.agent,
        agents=roster,
        agent_pool=agent_pool,
        outbox=outbox,
        config=config,
        lease_owner=lease_owner or new_lease_owner(),
        owner_alive=owner_alive,
        clock=clock,
        sessions=sessions,
        metrics=metrics,
        new_id=new_id,
        events=events,
        busy=options.get("busy"),
    )
    supervisor: Supervisor | None = None

    def end_due(due: EndDue) -> None:
        assert supervisor is not None
        supervisor.tell(due)

    resets = ResetScheduler(
        options.get("reset") or ResetConfig(),
        timers,
        end_due,
        clock=clock,
        tz=options.get("tz"),
        background_started_at=roster.background_hook(),
    )
    for named in roster.agents:
        watch_background_ends(named.agent, resets)
    supervisor = Supervisor.start(
        services, on_turn=options.get("on_turn"), on_activity=resets.touch, on_end=resets.forget
    )
    recovery = Recovery(
        writer,
        outbox,
        supervisor.tell,
        lease_owner=services.lease_owner,
        lease_ttl_s=config.lease_ttl_s,
        timeout_s=config.ask_timeout_s,
        platforms=options.get("recover_platforms"),
    )
    sweep = replays = None
    if not sent_elsewhere:  # a shard host's deliveries and replays are the cluster's (its dispatchers)
        events.sweep = sweep = EventSweep(writer, outbox)
    if not sent_elsewhere and options.get("recover_platforms") is None:  # a whole runtime, not a terminal chat's
        replays = Replays(
            writer,
            owner=services.lease_owner,
            deliver=supervisor.tell,
            redeliver=outbox.redeliver,
            sweep=sweep,
            readers=readers,
        )
    runtime = Runtime(
        config=config,
        clock=clock,
        media=media,
        pruned=pruned,
        writer=writer,
        readers=readers,
        outbox=outbox,
        agent_pool=agent_pool,
        services=services,
        timers=timers,
        resets=resets,
        supervisor=supervisor,
        recovery=recovery,
        schedule_resets=options.get("schedule_resets", True),
        metrics=metrics,
        sweep=sweep,
        replays=replays,
    )
    metrics.register(RuntimeCollector(readers, supervisor.statistics, outbox.platforms, clock))
    interval = options.get("tick_interval_s", 5.0)
    timers.every("passivation", interval, runtime.tick)
    timers.every("queue-prune", QUEUE_PRUNE_INTERVAL_S, runtime.prune_queues)
    timers.every("inbox-released", interval, recovery.replay_released)
    runtime.jobs = wire_jobs(
        services, timers, supervisor.tell, options.get("jobs"), options.get("tz"), runtime.schedule_resets
    )
    wire_approvals(services, timers, supervisor.tell, armed=runtime.schedule_resets)
    return runtime
