"""The agent's ``schedule`` tool (``jobs.agent_tool``): jobs of the asking principal, in its own chat.

Each session gets its own tool (:func:`schedule_tools`, through ``SessionServices.session_tools``), bound to the
session's origin: a job it adds is owned by the origin's principal (:func:`owner_of`) and runs in the origin's
chat (its current session, this session, or a fresh one each time); ``list`` and ``cancel`` see only that
principal's jobs, so another user's job is as unknown as a missing one. ``jobs.agent_tool_max_jobs`` bounds how many
a principal keeps, ``jobs.agent_tool_min_interval_s`` how often one may run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

import msgspec

from hermes_actors.agents.tools import Tool, error_json
from hermes_actors.job_port import JobError, JobView
from hermes_actors.lifecycle.schedule import schedule_of, zone_named
from hermes_actors.principal import Principal
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.job_book import StoreJobs
from hermes_actors.store.jobs import JobTarget

__all__ = ["SCHEDULE", "owner_of", "schedule_tools"]

SCHEDULE = "schedule"

_DESCRIPTION = (
    "Schedule a message to yourself in this chat for later, list the scheduled ones, or cancel one. At each time the "
    "prompt arrives as a message of this chat and you answer it there, as if the user had sent it then. action=add "
    "takes prompt and exactly one of: in (a delay such as 30s, 10m, 2h), at (ISO 8601 such as 2026-12-01T09:00, or "
    "HH:MM for the next such time), every (an interval), cron (five fields such as '30 8 * * 1-5', with tz, an IANA "
    "zone); where: chat (this chat's current conversation, the default), this_session, or fresh (a new conversation "
    "each time). action=list shows your jobs; action=cancel takes job_id. Times are answered in ISO 8601 (UTC)."
)

_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["add", "list", "cancel"]},
        "prompt": {"type": "string", "description": "What arrives at each time (add)."},
        "in": {"type": "string", "description": "Run once after this delay: 30s, 10m, 2h, 1d (add)."},
        "at": {"type": "string", "description": "Run once at this time: 2026-12-01T09:00 or 09:00 (add)."},
        "every": {"type": "string", "description": "Run at this interval: 1h, 1d (add)."},
        "cron": {"type": "string", "description": "Run at the times of this cron expression (add)."},
        "tz": {"type": "string", "description": "The zone of at or cron, such as Europe/Berlin (add)."},
        "where": {"type": "string", "enum": ["chat", "this_session", "fresh"], "description": "Where it runs (add)."},
        "job_id": {"type": "string", "description": "The job to cancel (cancel)."},
    },
    "required": ["action"],
    "additionalProperties": False,
}


class _Arguments(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    action: Literal["add", "list", "cancel"]
    prompt: str | None = None
    in_: str | None = msgspec.field(default=None, name="in")
    at: str | None = None
    every: str | None = None
    cron: str | None = None
    tz: str | None = None
    where: Literal["chat", "this_session", "fresh"] = "chat"
    job_id: str | None = None


_TARGETS = {"chat": JobTarget.CHAT, "this_session": JobTarget.SESSION, "fresh": JobTarget.FRESH}


def owner_of(origin: SessionSource) -> str:
    """The owner of the jobs a session of ``origin`` makes: its principal's key (its chat's, without a participant)."""
    key = Principal.of(origin).memory_key
    return key if key is not None else f"{origin.platform}~{origin.account_id or ''}:chat:{origin.chat_id or ''}"


def _iso(instant: float | None) -> str | None:
    return None if instant is None else datetime.fromtimestamp(instant, UTC).isoformat(timespec="seconds")


def _shown(job: JobView) -> dict[str, Any]:
    return {
        "job_id": job.id,
        "prompt": job.prompt,
        "schedule": job.describe,
        "where": {"chat": "chat", "session": "this_session", "fresh": "fresh"}[job.target],
        "state": job.state,
        "next_run": _iso(job.next_due_at),
        "runs": job.runs,
    }


def _tool(book: StoreJobs, session_id: str, origin: SessionSource) -> Tool:
    owner = owner_of(origin)
    config = book.config

    def add(args: _Arguments) -> dict[str, Any]:
        if not args.prompt:
            raise JobError("prompt: give the text that arrives at each time")
        now = book.clock()
        schedule = schedule_of(
            in_=args.in_, at=args.at, every=args.every, cron=args.cron, tz=args.tz, default_zone=book.zone, now=now
        )
        interval = schedule.interval_s(now, zone_named(schedule.tz, book.zone))
        if interval is not None and interval < config.agent_tool_min_interval_s:
            raise JobError(
                f"a job may run at most every {config.agent_tool_min_interval_s:g} s; choose a longer interval"
            )
        if book.count_open(owner) >= config.agent_tool_max_jobs:
            raise JobError(f"you have {config.agent_tool_max_jobs} jobs already; cancel one first")
        target = _TARGETS[args.where]
        job = book.add_resolved(
            args.prompt,
            schedule,
            target=target,
            session_id=session_id if target is JobTarget.SESSION else None,
            chat=origin,
            missed="run",
            owner=owner,
            created_by="agent",
        )
        return {"added": _shown(job)}

    def handle(arguments: dict[str, Any]) -> str:
        try:
            args = msgspec.convert(arguments, _Arguments)
        except msgspec.ValidationError as exc:
            return error_json(f"bad arguments for {SCHEDULE}: {exc}; see the parameter schema")
        try:
            if args.action == "add":
                result = add(args)
            elif args.action == "list":
                result = {"jobs": [_shown(job) for job in book.listed(owner=owner)]}
            elif args.job_id is None:
                return error_json("cancel takes job_id (from action=list)")
            elif book.delete(args.job_id, owner=owner):
                result = {"cancelled": args.job_id}
            else:
                return error_json(f"you have no job {args.job_id!r}; action=list shows yours")
        except JobError as exc:
            return error_json(str(exc))
        return msgspec.json.encode(result).decode()

    return Tool(name=SCHEDULE, description=_DESCRIPTION, parameters=_PARAMETERS, handler=handle)


def schedule_tools(book: StoreJobs) -> Callable[[str, SessionSource], Sequence[Tool]]:
    """``SessionServices.session_tools`` offering every session its ``schedule`` tool over ``book``."""

    def tools(session_id: str, origin: SessionSource) -> Sequence[Tool]:
        return (_tool(book, session_id, origin),)

    return tools
