"""The :class:`~hermes_actors.job_port.JobBook` of a running gateway or a cluster replica: jobs read and changed on
the store, each change told to whoever fires them (:class:`JobHooks`: this process's runner, or nothing in a
replica, whose shard hosts find due jobs by scanning).

A target is resolved once, when the job is made: ``session_id`` (an id, a unique prefix or a title) names the
session and, unless ``chat`` is given too, the chat its replies go to (the session's origin); ``chat``
(``PLATFORM:CHAT``) is the chat as its latest session knows it (account, chat type, user), or a direct chat of that
id when no session has come from it yet.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import tzinfo
from typing import Protocol, TypeVar

import msgspec

from hermes_actors.errors import AmbiguousSessionError, SessionNotFoundError
from hermes_actors.job_port import OPERATOR_OWNER, JobError, JobNotFoundError, JobSpec, JobView
from hermes_actors.lifecycle.schedule import JobsConfig, MissedRun, Schedule, schedule_of, zone_named
from hermes_actors.routing import KeyPolicy, SessionSource
from hermes_actors.runtime.events import Events
from hermes_actors.runtime.job_runs import JobRun, RunQueue, enqueue_run, schedule_of_row
from hermes_actors.runtime.records import source_of
from hermes_actors.runtime.store_access import StoreAccess
from hermes_actors.store import SessionFilter, StoreInterface
from hermes_actors.store.jobs import JobRow, JobState, JobTarget, NewJob

__all__ = ["MAX_PROMPT_CHARS", "JobHooks", "NoHooks", "StoreJobs", "job_view"]

MAX_PROMPT_CHARS = 8000
T = TypeVar("T")


class JobHooks(Protocol):
    """Who fires the jobs, told of every change."""

    def armed(self, job_id: str, due_at: float | None) -> None:
        """Job ``job_id`` is due at ``due_at`` now (``None``: not at all)."""
        ...

    def ran(self, run: JobRun) -> None:
        """A run asked for by hand was committed (hand it to the turns)."""
        ...

    def resync(self) -> None:
        """Look at the jobs table again (at start, and on every tick): a change another process made."""
        ...


class NoHooks:
    """Nobody to tell: the cluster's shard hosts find due jobs and queued runs in the store themselves."""

    def armed(self, job_id: str, due_at: float | None) -> None:
        """Nothing to arm."""

    def ran(self, run: JobRun) -> None:
        """Nothing to hand over: the run's row is in its shard's queue."""

    def resync(self) -> None:
        """Nothing to arm."""


def job_view(row: JobRow) -> JobView:
    """A row as the port shows it."""
    return JobView(
        **{
            **msgspec.structs.asdict(row),
            "describe": schedule_of_row(row).describe(),
            "target": row.target.value,
            "chat": f"{row.chat.platform}:{row.chat.chat_id or ''}",
            "state": row.state.value,
        }
    )


def _chat_source(store: StoreInterface, chat: str) -> SessionSource:
    """The chat ``PLATFORM:CHAT`` as its latest session knows it, or a direct chat of that id."""
    platform, _, chat_id = chat.partition(":")
    if not platform or not chat_id:
        raise JobError(f"chat: {chat!r} must be PLATFORM:CHAT, such as telegram:123456789")
    latest = store.list_sessions(source=platform, visible=SessionFilter(chat_id=chat_id), limit=1)
    if latest:
        return source_of(latest[0])
    return SessionSource(platform=platform, chat_type="dm", chat_id=chat_id)


class StoreJobs:
    """The jobs on ``access``; see the module docstring. ``queue`` takes the rows of runs asked for by hand."""

    def __init__(
        self,
        access: StoreAccess,
        *,
        hooks: JobHooks,
        queue: RunQueue,
        policy: KeyPolicy,
        events: Events,
        config: JobsConfig | None = None,
        zone: tzinfo | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._access = access
        self.hooks = hooks
        self._queue = queue
        self._policy = policy
        self._events = events
        self.config = config or JobsConfig()
        self.zone = zone
        self.clock = clock

    def add(self, spec: JobSpec, *, owner: str | None = None, created_by: str = "api") -> JobView:
        """Create a job as ``spec`` asks (see :class:`~hermes_actors.job_port.JobSpec`)."""
        now = self.clock()
        schedule = schedule_of(
            in_=spec.in_, at=spec.at, every=spec.every, cron=spec.cron, tz=spec.tz, default_zone=self.zone, now=now
        )

        def resolve(store: StoreInterface) -> tuple[JobTarget, str | None, SessionSource]:
            if spec.session_id is not None:
                try:
                    record = store.resolve_session(spec.session_id, unique=True)
                except (SessionNotFoundError, AmbiguousSessionError) as exc:
                    raise JobError(f"session_id: {exc}") from None
                chat = _chat_source(store, spec.chat) if spec.chat is not None else source_of(record)
                return (JobTarget.FRESH if spec.fresh else JobTarget.SESSION), record.id, chat
            if spec.chat is None:
                raise JobError("target: give session_id (a session) or chat (PLATFORM:CHAT) for the job's runs")
            return (JobTarget.FRESH if spec.fresh else JobTarget.CHAT), None, _chat_source(store, spec.chat)

        with self._access.read() as store:
            target, session_id, chat = resolve(store)
        return self.add_resolved(
            spec.prompt,
            schedule,
            target=target,
            session_id=session_id,
            chat=chat,
            missed=spec.missed,
            owner=owner or OPERATOR_OWNER,
            created_by=created_by,
        )

    def add_resolved(
        self,
        prompt: str,
        schedule: Schedule,
        *,
        target: JobTarget,
        session_id: str | None,
        chat: SessionSource,
        missed: str,
        owner: str,
        created_by: str,
    ) -> JobView:
        """Create a job whose target is known (the agent's tool gives its own chat)."""
        if not prompt.strip():
            raise JobError("prompt: is empty; give the text each run sends")
        if len(prompt) > MAX_PROMPT_CHARS:
            raise JobError(f"prompt: is {len(prompt)} characters; at most {MAX_PROMPT_CHARS}")
        if missed not in set(MissedRun):
            raise JobError(f"missed: {missed!r} must be run (once, late) or skip")
        due = schedule.first_due(self.clock(), zone_named(schedule.tz, self.zone))
        job = NewJob(
            id=f"job_{uuid.uuid4().hex[:12]}",
            owner=owner,
            prompt=prompt,
            schedule=schedule.kind.value,
            spec=schedule.spec,
            tz=schedule.tz,
            target=target,
            session_id=session_id,
            chat=msgspec.structs.replace(chat, message_id=None),  # each run has its own
            missed=missed,
            next_due_at=due,
            created_by=created_by,
        )
        row = self._access.write(lambda store: store.jobs.add(job))
        self.hooks.armed(row.id, row.next_due_at)
        return job_view(row)

    def listed(self, *, owner: str | None = None, limit: int = 100) -> list[JobView]:
        """The jobs of ``owner`` (all of them for the operator), newest first."""
        with self._access.read() as store:
            return [job_view(row) for row in store.jobs.listed(owner=owner, limit=limit)]

    def count_open(self, owner: str) -> int:
        """How many of ``owner``'s jobs are active or paused."""
        with self._access.read() as store:
            return store.jobs.count_open(owner)

    def get(self, job_id: str, *, owner: str | None = None) -> JobView:
        """One job."""
        with self._access.read() as store:
            return job_view(_found(store.jobs.get(job_id, owner=owner), job_id))

    def pause(self, job_id: str, *, owner: str | None = None) -> JobView:
        """Pause a job (one paused or done already stays as it is)."""
        row = _found(self._access.write(lambda store: store.jobs.pause(job_id, owner=owner)), job_id)
        if row.state is JobState.PAUSED:
            self.hooks.armed(row.id, None)
        return job_view(row)

    def resume(self, job_id: str, *, owner: str | None = None) -> JobView:
        """Schedule a paused job again from now."""

        def resume(store: StoreInterface) -> JobRow | None:
            row = store.jobs.get(job_id, owner=owner)
            if row is None or row.state is not JobState.PAUSED:
                return row
            due = schedule_of_row(row).first_due(self.clock(), zone_named(row.tz, self.zone))
            return store.jobs.resume(job_id, due, owner=owner)

        row = _found(self._access.write(resume), job_id)
        if row.state is JobState.ACTIVE:
            self.hooks.armed(row.id, row.next_due_at)
        return job_view(row)

    def run(self, job_id: str, *, owner: str | None = None) -> JobView:
        """Run a job once now, beside its schedule."""
        run_key = f"now-{uuid.uuid4().hex[:12]}"

        def run(store: StoreInterface) -> tuple[JobRow, JobRun | None]:
            row = _found(store.jobs.get(job_id, owner=owner), job_id)
            queued = enqueue_run(
                store,
                row,
                run_key=run_key,
                now=self.clock(),
                queue=self._queue,
                policy=self._policy,
                events=self._events,
            )
            return _found(store.jobs.get(job_id), job_id), queued

        row, queued = self._access.write(run)
        if queued is not None:
            self.hooks.ran(queued)
        return job_view(row)

    def delete(self, job_id: str, *, owner: str | None = None) -> bool:
        """Delete a job; whether there was one."""
        deleted = self._access.write(lambda store: store.jobs.delete(job_id, owner=owner))
        if deleted:
            self.hooks.armed(job_id, None)
        return deleted


def _found(row: JobRow | None, job_id: str) -> JobRow:
    if row is None:
        raise JobNotFoundError(f"no job {job_id!r}; 'hermesctl jobs list' (or GET /api/jobs) shows the jobs")
    return row
