"""Scheduled turns: the ``jobs`` table (:class:`Jobs`), written once over the database seam for both stores.

A job's ``next_due_at`` is its durable deadline. :meth:`Jobs.advance` moves it on only from the value the caller
read (``WHERE next_due_at = ?``), inside the transaction that commits the run's inbox row: whichever process or
cluster host gets there first runs the due time, any other finds nothing to advance and writes nothing, so a due
time fires once across crashes, restarts and failovers. A job's chat is the :class:`~hermes_actors.routing.
SessionSource` its runs come from and its replies go to, kept as JSON.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from hermes_actors.routing import SessionSource
from hermes_actors.store.sql import SqlTable

__all__ = ["JobRow", "JobState", "JobTarget", "Jobs", "NewJob"]

_ACTIVE = "active"
_source = msgspec.json.Decoder(SessionSource)


class JobState(enum.StrEnum):
    """Where a job stands (``jobs.state``)."""

    ACTIVE = "active"  # due at next_due_at
    PAUSED = "paused"  # no runs until resumed
    DONE = "done"  # a one-shot job that ran (or was skipped)


class JobTarget(enum.StrEnum):
    """Which session a job's runs go into (``jobs.target``)."""

    CHAT = "chat"  # the chat's current session, as a message from the chat would
    SESSION = "session"  # a named session (its newest segment); once it has ended, its chat's current session
    FRESH = "fresh"  # a new session for every run, in the chat


class _JobFields(msgspec.Struct, frozen=True, kw_only=True):
    """What a job is made of; ``schedule`` and ``spec`` as :class:`~hermes_actors.lifecycle.schedule.Schedule`
    keeps them."""

    id: str
    owner: str
    prompt: str
    schedule: str
    spec: str
    tz: str | None
    target: JobTarget
    session_id: str | None
    chat: SessionSource
    missed: str
    created_by: str


class NewJob(_JobFields, frozen=True, kw_only=True):
    """A job to store, due first at ``next_due_at``."""

    next_due_at: float


class JobRow(_JobFields, frozen=True, kw_only=True):
    """One row of ``jobs``."""

    state: JobState
    next_due_at: float | None
    runs: int
    skipped: int
    last_run_at: float | None
    last_inbox_id: int | None
    created_at: float


_COLUMNS = ", ".join(JobRow.__struct_fields__)
_NEW_COLUMNS = (*NewJob.__struct_fields__, "state", "created_at")


def _row(values: tuple[Any, ...]) -> JobRow:
    fields = dict(zip(JobRow.__struct_fields__, values, strict=True))
    next_due = fields["next_due_at"]
    return JobRow(
        **{
            **fields,
            "target": JobTarget(fields["target"]),
            "chat": _source.decode(fields["chat"]),
            "state": JobState(fields["state"]),
            "next_due_at": None if next_due is None else float(next_due),
            "runs": int(fields["runs"]),
            "skipped": int(fields["skipped"]),
            "last_inbox_id": None if fields["last_inbox_id"] is None else int(fields["last_inbox_id"]),
        }
    )


def _owned(owner: str | None) -> tuple[str, tuple[Any, ...]]:
    """The condition limiting a statement to ``owner``'s jobs (none for the operator's ``None``)."""
    return ("", ()) if owner is None else (" AND owner = ?", (owner,))


class Jobs(SqlTable):
    """The scheduled jobs; ``owner`` arguments limit a call to one owner's jobs (``None``: every job)."""

    def add(self, job: NewJob) -> JobRow:
        """Store a new active job, due at its ``next_due_at``."""
        fields = {
            **msgspec.structs.asdict(job),
            "target": job.target.value,
            "chat": msgspec.json.encode(job.chat).decode(),
            "state": _ACTIVE,
            "created_at": self._clock(),
        }
        rows = self._db.execute(
            f"INSERT INTO jobs ({', '.join(_NEW_COLUMNS)}) VALUES ({', '.join('?' * len(_NEW_COLUMNS))}) "
            f"RETURNING {_COLUMNS}",
            tuple(fields[name] for name in _NEW_COLUMNS),
        )
        return _row(rows[0])

    def get(self, job_id: str, *, owner: str | None = None) -> JobRow | None:
        """One job, or ``None``."""
        where, params = _owned(owner)
        rows = self._db.execute(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?{where}", (job_id, *params))
        return _row(rows[0]) if rows else None

    def listed(self, *, owner: str | None = None, limit: int = 100) -> list[JobRow]:
        """The jobs (of ``owner``), newest first."""
        where, params = _owned(owner)
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM jobs WHERE 1 = 1{where} ORDER BY created_at DESC, id DESC LIMIT ?",
            (*params, limit),
        )
        return [_row(r) for r in rows]

    def count_open(self, owner: str) -> int:
        """How many of ``owner``'s jobs are active or paused."""
        return int(self._db.value("SELECT count(*) FROM jobs WHERE owner = ? AND state != 'done'", (owner,)) or 0)

    def active(self) -> list[tuple[str, float]]:
        """Every active job's id and due time, earliest first."""
        rows = self._db.execute(
            "SELECT id, next_due_at FROM jobs WHERE state = ? AND next_due_at IS NOT NULL ORDER BY next_due_at, id",
            (_ACTIVE,),
        )
        return [(str(job_id), float(due)) for job_id, due in rows]

    def due(self, now: float, *, limit: int = 500) -> list[JobRow]:
        """The active jobs due at or before ``now``, earliest first."""
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM jobs WHERE state = ? AND next_due_at <= ? ORDER BY next_due_at, id LIMIT ?",
            (_ACTIVE, now, limit),
        )
        return [_row(r) for r in rows]

    def advance(self, job_id: str, due_at: float, *, next_due_at: float | None, ran: bool, at: float) -> bool:
        """Inside a run's transaction: move an active job due at ``due_at`` on to ``next_due_at`` (``None``: it is
        done), counting a run (``ran``) or a skip; whether it was still due at ``due_at`` (see the module
        docstring)."""
        state = JobState.DONE.value if next_due_at is None else _ACTIVE
        counted, params = ("runs = runs + 1, last_run_at = ?", (at,)) if ran else ("skipped = skipped + 1", ())
        changed = self._db.count(
            f"UPDATE jobs SET next_due_at = ?, state = ?, {counted} WHERE id = ? AND state = ? AND next_due_at = ?",
            (next_due_at, state, *params, job_id, _ACTIVE, due_at),
        )
        return changed > 0

    def ran(self, job_id: str, inbox_id: int | None, *, at: float, counted: bool = False) -> None:
        """Record the inbox row of a job's latest run (``counted``: and count the run, one asked for by hand)."""
        count = ", runs = runs + 1, last_run_at = ?" if counted else ""
        params: tuple[Any, ...] = (inbox_id, *((at,) if counted else ()), job_id)
        self._db.execute(f"UPDATE jobs SET last_inbox_id = coalesce(?, last_inbox_id){count} WHERE id = ?", params)

    def pause(self, job_id: str, *, owner: str | None = None) -> JobRow | None:
        """Pause an active job (a done or paused one stays as it is); the job, or ``None`` for none."""
        where, params = _owned(owner)
        self._db.execute(
            f"UPDATE jobs SET state = 'paused', next_due_at = NULL WHERE id = ? AND state = ?{where}",
            (job_id, _ACTIVE, *params),
        )
        return self.get(job_id, owner=owner)

    def resume(self, job_id: str, next_due_at: float, *, owner: str | None = None) -> JobRow | None:
        """Make a paused job active again, due at ``next_due_at``; the job, or ``None`` for none."""
        where, params = _owned(owner)
        self._db.execute(
            f"UPDATE jobs SET state = ?, next_due_at = ? WHERE id = ? AND state = 'paused'{where}",
            (_ACTIVE, next_due_at, job_id, *params),
        )
        return self.get(job_id, owner=owner)

    def delete(self, job_id: str, *, owner: str | None = None) -> bool:
        """Delete a job; whether there was one."""
        where, params = _owned(owner)
        return self._db.count(f"DELETE FROM jobs WHERE id = ?{where}", (job_id, *params)) > 0
