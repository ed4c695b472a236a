"""The jobs port: scheduled turns as an entry point sees them (``inbox.jobs``: the API server's ``/api/jobs`` and the
console), as ``hermesctl jobs`` changes them through ``hermesd``, and as the agent's ``schedule`` tool does for its
principal.

A job sends its prompt as a message of a chat at times: once (``in``, ``at``), at an interval (``every``) or by a
cron expression in a zone (``cron``, ``tz``). Its run goes into a named session (``session_id``), into a fresh session
each time (``fresh``), or into the chat's current session (``chat``: ``PLATFORM:CHAT``); the reply goes to the chat.
Every call takes the ``owner`` asking: ``None`` is the operator, who sees every job; anyone else sees only their own,
and another owner's job is as unknown as a missing one.

Errors: :class:`JobError` (a request refused: a schedule that does not parse, a target that does not exist; the
message names the field and the fix), :class:`JobNotFoundError` (no such job for this owner).
"""

from __future__ import annotations

from typing import Protocol

import msgspec

from hermes_actors.errors import HermesError

__all__ = ["OPERATOR_OWNER", "JobBook", "JobError", "JobNotFoundError", "JobSpec", "JobView"]

OPERATOR_OWNER = "operator"
"""The owner of the jobs made by ``hermesctl`` and the operator API."""


class JobError(HermesError):
    """A job request was refused; the message names the field and what to give instead."""


class JobNotFoundError(JobError):
    """No job has that id (for the owner asking)."""


class JobSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A job as asked for. Exactly one of ``in`` (a duration such as ``3s``, ``10m``, ``1h30m``), ``at`` (an ISO 8601
    time, or ``HH:MM`` for the next such local time), ``every`` (a duration) and ``cron`` (five fields, or a macro such
    as ``@daily``) with its zone ``tz`` (an IANA name; by default the gateway's). The target: ``session_id`` (runs in
    that session; replies to its chat, or to ``chat`` when given), ``chat`` (``PLATFORM:CHAT``: its current session),
    and ``fresh`` (a new session per run, in the chat). ``missed``: what a run missed while nothing ran does,
    ``run`` (once, late) or ``skip``."""

    prompt: str
    in_: str | None = msgspec.field(default=None, name="in")
    at: str | None = None
    every: str | None = None
    cron: str | None = None
    tz: str | None = None
    session_id: str | None = None
    chat: str | None = None
    fresh: bool = False
    missed: str = "run"


class JobView(msgspec.Struct, frozen=True, kw_only=True):
    """One job as it stands. ``schedule`` is ``at``, ``every`` or ``cron`` with its ``spec`` (unix seconds, seconds,
    or the expression) and ``tz``; ``describe`` says it in words. ``state`` is ``active``, ``paused`` or ``done`` (a
    one-shot job that ran); ``next_due_at`` is set while active. ``last_inbox_id`` is the inbox row of the latest run
    (``hermesctl messages show ID``)."""

    id: str
    owner: str
    prompt: str
    schedule: str
    spec: str
    tz: str | None
    describe: str
    target: str
    session_id: str | None
    chat: str
    missed: str
    state: str
    next_due_at: float | None
    runs: int
    skipped: int
    last_run_at: float | None
    last_inbox_id: int | None
    created_at: float
    created_by: str


class JobBook(Protocol):
    """The jobs of one gateway (or cluster). ``owner=None`` is the operator; see the module docstring. Every call
    blocks (run it off an event loop)."""

    def add(self, spec: JobSpec, *, owner: str | None = None, created_by: str = "api") -> JobView:
        """Create a job (owned by ``owner``, the operator's when ``None``); :class:`JobError` says what is wrong."""
        ...

    def listed(self, *, owner: str | None = None, limit: int = 100) -> list[JobView]:
        """The jobs of ``owner`` (every job for the operator), newest first."""
        ...

    def get(self, job_id: str, *, owner: str | None = None) -> JobView:
        """One job; :class:`JobNotFoundError` for none."""
        ...

    def pause(self, job_id: str, *, owner: str | None = None) -> JobView:
        """Stop a job's runs until it is resumed."""
        ...

    def resume(self, job_id: str, *, owner: str | None = None) -> JobView:
        """Schedule a paused job again from now (what fell due while it was paused does not run)."""
        ...

    def run(self, job_id: str, *, owner: str | None = None) -> JobView:
        """Run a job once now, beside its schedule (which it does not move)."""
        ...

    def delete(self, job_id: str, *, owner: str | None = None) -> bool:
        """Delete a job; whether there was one."""
        ...
