"""A scheduled job's run: the inbox row that carries its prompt, committed in the transaction that moves the job on.

A run is an ordinary message of the job's chat (kind ``message``, the chat's platform and account, message id
``job-<job id>-<run key>``): it goes the way a message from the chat goes, and its turn is an ordinary turn of its
session (the prompt stability rule holds), answered to the chat. Which session:

- a ``chat`` target: the chat's current session (the routing key a message from the chat has);
- a ``session`` target: the named session's newest segment, through a key of the job's own (``job:<job id>``)
  pointed at it in the same transaction; once that session has ended, its chat's current session;
- a ``fresh`` target: a key of the run's own (``job:<job id>:<run key>``), so each run opens a new session.

:func:`fire` runs inside a write: :meth:`~hermes_actors.store.jobs.Jobs.advance` moves the job on from the due time
read (nothing is written when another process got there first), then the run's row is queued (:class:`RunQueue`:
this process's inbox, or a cluster shard's) and ``job.fired`` is emitted. A due time later than ``missed_after_s``
is a missed one: it runs once, late, or is skipped, as the job says; the times missed in between are not run.
"""

from __future__ import annotations

from datetime import tzinfo
from typing import Protocol, TypedDict

import msgspec

from hermes_actors.config import EventKind
from hermes_actors.lifecycle.schedule import MissedRun, Schedule, ScheduleKind, zone_named
from hermes_actors.messages import InboundMessage, encode
from hermes_actors.routing import KeyPolicy, build_session_key
from hermes_actors.runtime.events import Events
from hermes_actors.store import StoreInterface
from hermes_actors.store.jobs import JobRow, JobTarget

__all__ = [
    "Fired",
    "InboxFields",
    "JobRun",
    "LocalRuns",
    "QueuedMessage",
    "RunQueue",
    "enqueue_run",
    "fire",
    "schedule_of_row",
]


class InboxFields(TypedDict):
    """The columns of a message's inbox row."""

    platform: str
    account_id: str
    platform_message_id: str
    routing_key: str
    payload: bytes


class QueuedMessage(msgspec.Struct, frozen=True, kw_only=True):
    """A message the runtime sends itself (a job's run, the denial of an approval nobody answered in time) as its
    inbox row gets it: the routing key it goes by, and the session that key leads to now (``route``; ``None``: a
    session its turn creates)."""

    message: InboundMessage
    routing_key: str
    route: str | None

    def row(self) -> InboxFields:
        """The inbox row's columns (the store's ``inbox.add`` and the cluster's ``shard_queue.add`` take them)."""
        source = self.message.source
        return {
            "platform": source.platform,
            "account_id": source.account_id or "",
            "platform_message_id": self.message.message_id,
            "routing_key": self.routing_key,
            "payload": encode(self.message),
        }


class RunQueue(Protocol):
    """Where the inbox row of a message the runtime sends itself goes (this process's inbox, or a cluster
    shard's)."""

    def add(self, store: StoreInterface, queued: QueuedMessage) -> int | None:
        """Inside the write that sends it: add the row; its id, or ``None`` when a row of that message id exists
        already."""
        ...


class LocalRuns:
    """Rows in this process's inbox, owned by its lease owner: its turn is this process's to run (recovery
    replays it after a crash)."""

    __slots__ = ("_owner",)

    def __init__(self, owner: str) -> None:
        self._owner = owner

    def add(self, store: StoreInterface, queued: QueuedMessage) -> int | None:
        return store.inbox.add(**queued.row(), owner=self._owner)


class JobRun(msgspec.Struct, frozen=True, kw_only=True):
    """A run committed: its inbox row and message, the routing key it goes by and the session that key led to when
    it was committed (``route``; ``None``: a session the run's turn creates)."""

    job_id: str
    inbox_id: int
    routing_key: str
    message: InboundMessage
    route: str | None
    session_key: bool  # the key is the job's own, pointed at ``route`` by the run's write


class Fired(msgspec.Struct, frozen=True, kw_only=True):
    """What a due time did: a run (``run``), or a skip (``run`` is ``None``); the job's next due time (``None``:
    it is done)."""

    job_id: str
    due_at: float
    next_due_at: float | None
    run: JobRun | None


def schedule_of_row(job: JobRow) -> Schedule:
    """The schedule a row keeps."""
    return Schedule(kind=ScheduleKind(job.schedule), spec=job.spec, tz=job.tz)


def _target(store: StoreInterface, job: JobRow, run_key: str, policy: KeyPolicy) -> tuple[str, str | None, bool]:
    """The routing key of a run of ``job``, the session it leads to (``None``: none yet), and whether the key is
    the job's own (pointed at the session here)."""
    if job.target is JobTarget.FRESH:
        return f"job:{job.id}:{run_key}", None, False
    if job.target is JobTarget.SESSION and job.session_id is not None:
        tip = store.find_session(store.lineage_tip(job.session_id)) if store.find_session(job.session_id) else None
        if tip is not None and tip.is_live:
            key = f"job:{job.id}"
            if store.get_route(key) != tip.id:
                store.set_route(key, tip.id)
            return key, tip.id, True
        if tip is not None and tip.routing_key:
            return tip.routing_key, store.get_route(tip.routing_key), False
    key = build_session_key(job.chat, policy)
    return key, store.get_route(key), False


def enqueue_run(
    store: StoreInterface,
    job: JobRow,
    *,
    run_key: str,
    now: float,
    queue: RunQueue,
    policy: KeyPolicy,
    events: Events,
    due_at: float | None = None,
) -> JobRun | None:
    """Inside a write: queue a run of ``job`` (``due_at``: the due time it is for; ``None``: asked for by hand) and
    emit ``job.fired``; the run, or ``None`` when a run of that key was queued before."""
    key, route, own = _target(store, job, run_key, policy)
    message_id = f"job-{job.id}-{run_key}"
    chat = msgspec.structs.replace(job.chat, message_id=message_id)
    message = InboundMessage(source=chat, text=job.prompt, message_id=message_id, received_at=now)
    inbox_id = queue.add(store, QueuedMessage(message=message, routing_key=key, route=route))
    if inbox_id is None:
        return None
    store.jobs.ran(job.id, inbox_id, at=now, counted=due_at is None)
    data = {
        "job_id": job.id,
        "message_id": message_id,
        "inbox_id": inbox_id,
        "due_at": due_at,
        "late_s": None if due_at is None else max(0.0, now - due_at),
        "platform": chat.platform,
        "account_id": chat.account_id,
        "chat_id": chat.chat_id,
        "session_id": route,
        "prompt": job.prompt,
    }
    events.emit(store, EventKind.JOB_FIRED, data, session_id=route)
    return JobRun(job_id=job.id, inbox_id=inbox_id, routing_key=key, message=message, route=route, session_key=own)


def fire(
    store: StoreInterface,
    job: JobRow,
    due_at: float,
    *,
    now: float,
    zone: tzinfo | None,
    missed_after_s: float,
    queue: RunQueue,
    policy: KeyPolicy,
    events: Events,
) -> Fired | None:
    """Inside a write: deal with ``job``'s due time ``due_at`` at ``now`` (see the module docstring); ``None`` when
    the job was no longer due at ``due_at`` (another process ran it, or it was paused, moved or deleted)."""
    schedule = schedule_of_row(job)
    following = schedule.following(due_at, now, zone_named(job.tz, zone))
    skip = now - due_at > missed_after_s and job.missed == MissedRun.SKIP
    if not store.jobs.advance(job.id, due_at, next_due_at=following, ran=not skip, at=now):
        return None
    if skip:
        return Fired(job_id=job.id, due_at=due_at, next_due_at=following, run=None)
    run = enqueue_run(
        store,
        job,
        run_key=f"{due_at * 1000:.0f}",
        now=now,
        queue=queue,
        policy=policy,
        events=events,
        due_at=due_at,
    )
    return Fired(job_id=job.id, due_at=due_at, next_due_at=following, run=run)
