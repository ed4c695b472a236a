"""Scheduled turns on one machine: :class:`JobRunner` arms each active job's due time on the timer service and fires
it through the store writer.

The durable deadline is the job's row (``jobs.next_due_at``); the timer service holds it in memory only
(``job:<id>``), armed at start from the table and again on every change made through this process (the jobs port,
``hermesctl jobs`` through ``hermesd``, the agent's tool). The tick compares the armed times with the table, so a
change another process made (``hermesctl jobs`` without a daemon, then a daemon start) is armed within a tick.

When a due time passes, one write reads the job, moves it on and commits its run's inbox row
(:func:`~hermes_actors.runtime.job_runs.fire`); after the commit the run goes to the supervisor as a delivery, as
a message accepted by an adapter does. A crash between the commit and the turn leaves a pending inbox row, which the
next start replays (:mod:`~hermes_actors.runtime.recovery`); a crash before the commit leaves the job due, and the
next start fires it late (run once, or skipped, as the job says). Either way the due time fires once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import tzinfo
from typing import TypeVar

from hermes_actors.lifecycle.schedule import JobsConfig
from hermes_actors.routing import KeyPolicy
from hermes_actors.runtime.events import Events
from hermes_actors.runtime.job_book import NoHooks, StoreJobs
from hermes_actors.runtime.job_runs import Fired, JobRun, LocalRuns, fire
from hermes_actors.runtime.job_tool import schedule_tools
from hermes_actors.runtime.protocol import Deliver, Delivery
from hermes_actors.runtime.services import SessionServices
from hermes_actors.runtime.timers import TimerService
from hermes_actors.store import StoreInterface
from hermes_actors.store.jobs import JobState
from hermes_actors.store.readers import ReaderPool
from hermes_actors.store.writer import StoreWriter, WriterClosedError

__all__ = ["PREFIX", "JobRunner", "WriterAccess", "wire_jobs"]

PREFIX = "job:"
T = TypeVar("T")
_log = logging.getLogger(__name__)


class JobRunner:
    """Fires this store's jobs in this process (see the module docstring); a
    :class:`~hermes_actors.runtime.job_book.JobHooks` for the jobs port. ``deliver`` tells the supervisor."""

    def __init__(
        self,
        writer: StoreWriter,
        readers: ReaderPool,
        timers: TimerService,
        deliver: Callable[[Deliver], None],
        *,
        owner: str,
        policy: KeyPolicy,
        events: Events,
        config: JobsConfig | None = None,
        zone: tzinfo | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._writer = writer
        self._readers = readers
        self._timers = timers
        self._deliver = deliver
        self.queue = LocalRuns(owner)
        self._policy = policy
        self._events = events
        self.config = config or JobsConfig()
        self.zone = zone
        self._clock = clock

    def resync(self) -> None:
        """Arm every active job's due time as the table has it, and disarm the others."""
        with self._readers.reader() as store:
            active = dict(store.jobs.active())
        armed = {
            name.removeprefix(PREFIX): due for name, due in self._timers.pending().items() if name.startswith(PREFIX)
        }
        for job_id in armed.keys() - active.keys():
            self._timers.cancel(PREFIX + job_id)
        for job_id, due in active.items():
            if armed.get(job_id) != due:
                self.armed(job_id, due)

    def armed(self, job_id: str, due_at: float | None) -> None:
        """Fire ``job_id`` at ``due_at`` (``None``: not at all)."""
        name = PREFIX + job_id
        if due_at is None:
            self._timers.cancel(name)
        else:
            self._timers.once(name, due_at, lambda: self._due(job_id))

    def ran(self, run: JobRun) -> None:
        """Hand a committed run to the supervisor: a job's own key (a session target) is checked against the route
        its write stored, which the supervisor's cache may not know yet."""
        delivery = Delivery(inbox_id=run.inbox_id, message=run.message)
        route = run.route if run.session_key else None
        self._deliver(
            Deliver(routing_key=run.routing_key, delivery=delivery, check_route=run.session_key, stored_route=route)
        )

    def _due(self, job_id: str) -> None:
        """On the timer thread: fire the job's due time in the writer's next commit (never waits for it)."""

        def work(store: StoreInterface) -> Fired | float | None:
            job = store.jobs.get(job_id)
            if job is None or job.state is not JobState.ACTIVE or job.next_due_at is None:
                return None
            now = self._clock()
            if job.next_due_at > now:
                return job.next_due_at  # moved later meanwhile
            return fire(
                store,
                job,
                job.next_due_at,
                now=now,
                zone=self.zone,
                missed_after_s=self.config.missed_after_s,
                queue=self.queue,
                policy=self._policy,
                events=self._events,
            )

        try:
            future = self._writer.submit(work, then=lambda outcome: self._fired(job_id, outcome))
        except WriterClosedError:  # stopping: the job stays due, and the next start fires it
            return
        future.add_done_callback(lambda done: _log_failure(job_id, done.exception()))

    def _fired(self, job_id: str, outcome: Fired | float | None) -> None:
        """On the writer thread, after the commit: hand the run over and arm the next due time."""
        if outcome is None:  # not due any more (paused, deleted, or run by another process): the tick resyncs
            return
        if isinstance(outcome, float):  # moved later meanwhile
            self.armed(job_id, outcome)
            return
        if outcome.run is not None:
            self.ran(outcome.run)
        else:
            _log.info("job %s skipped its due time %.0f (missed; the job says skip)", outcome.job_id, outcome.due_at)
        self.armed(outcome.job_id, outcome.next_due_at)


def _log_failure(job_id: str, error: BaseException | None) -> None:
    if error is not None:
        _log.error("job %s did not fire (%s); it stays due and is tried again at the next tick", job_id, error)


class WriterAccess:
    """:class:`~hermes_actors.runtime.store_access.StoreAccess` of a runtime: reads on its reader pool, writes through
    its writer."""

    __slots__ = ("_readers", "_timeout", "_writer")

    def __init__(self, writer: StoreWriter, readers: ReaderPool, timeout_s: float) -> None:
        self._writer = writer
        self._readers = readers
        self._timeout = timeout_s

    def read(self) -> AbstractContextManager[StoreInterface]:
        return self._readers.reader()

    def write(self, work: Callable[[StoreInterface], T], *, timeout: float | None = None) -> T:
        return self._writer.call(work, timeout=self._timeout if timeout is None else timeout)


def wire_jobs(
    services: SessionServices,
    timers: TimerService,
    deliver: Callable[[Deliver], None],
    config: JobsConfig | None,
    zone: tzinfo | None,
    run: bool,
) -> StoreJobs:
    """The jobs of a runtime being wired: fired here when ``run`` (a :class:`JobRunner`, armed from the table at start
    and on every tick), and the agent's ``schedule`` tool offered when ``config.agent_tool`` says so."""
    config = config or JobsConfig()
    policy, clock = services.config.key_policy, services.clock
    writer, readers, events, owner = services.writer, services.readers, services.events, services.lease_owner
    runner = JobRunner(
        writer,
        readers,
        timers,
        deliver,
        owner=owner,
        policy=policy,
        events=events,
        config=config,
        zone=zone,
        clock=clock,
    )
    book = StoreJobs(
        WriterAccess(writer, readers, services.config.ask_timeout_s),
        hooks=runner if run else NoHooks(),
        queue=runner.queue,
        policy=policy,
        events=events,
        config=config,
        zone=zone,
        clock=clock,
    )
    if config.agent_tool:
        services.session_tools = schedule_tools(book)
    return book
