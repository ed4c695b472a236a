"""``hermesctl jobs``: scheduled turns, each a prompt sent as a message of a chat at its times.

``add`` takes the prompt and one schedule: ``--in 10m`` (once, after a delay), ``--at TIME`` (once; ISO 8601, or
``HH:MM`` for the next such time), ``--every 1h`` (an interval) or ``--cron EXPR`` with ``--tz ZONE``; and a target:
``--session ID`` (that session; replies go to its chat), ``--chat PLATFORM:CHAT`` (that chat's current session), or
either with ``--fresh`` (a new session for every run). ``list``, ``show``, ``pause``, ``resume``, ``run`` (once now,
beside the schedule) and ``delete`` name a job by id.

While ``hermesd`` runs on the home, each command goes through its control socket (:class:`DaemonJobs`) and the
daemon's timers follow at once; without one the store is changed directly and the next start arms what it finds (a
``run`` then waits for that start). With ``--dsn`` (or ``$HERMES_CLUSTER_DSN``) the jobs are a cluster's, fired by
its shard hosts.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import click
import msgspec

from hermes_actors.cli.ctl_daemon import home_settings
from hermes_actors.cli.formatting import format_timestamp, one_line, relative_time, render_table, truncate
from hermes_actors.cli.options import dsn_option, home_option, open_writes, reports_errors, resolve_home
from hermes_actors.daemon.control import JobsAction, JobsReply, JobsRequest, connect
from hermes_actors.daemon.home import socket_path
from hermes_actors.job_port import JobBook, JobSpec, JobView
from hermes_actors.lifecycle.schedule import zone_named
from hermes_actors.runtime.events import Events
from hermes_actors.runtime.job_book import NoHooks, StoreJobs
from hermes_actors.runtime.job_runs import LocalRuns, RunQueue
from hermes_actors.runtime.store_access import DirectAccess

__all__ = ["DaemonJobs", "jobs"]

T = TypeVar("T")


class DaemonJobs:
    """The :class:`~hermes_actors.job_port.JobBook` of the ``hermesd`` listening at ``path``, as the operator: one
    control request per call."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def _ask(
        self, action: JobsAction, *, job_id: str | None = None, spec: JobSpec | None = None, limit: int = 100
    ) -> JobsReply:
        client = connect(self._path)
        if client is None:
            raise click.ClickException("hermesd stopped while the command ran; run it again")
        with client:
            return client.jobs(JobsRequest(action=action, job_id=job_id, spec=spec, limit=limit))

    def add(self, spec: JobSpec, *, owner: str | None = None, created_by: str = "cli") -> JobView:
        return self._ask(JobsAction.ADD, spec=spec).jobs[0]

    def listed(self, *, owner: str | None = None, limit: int = 100) -> list[JobView]:
        return self._ask(JobsAction.LIST, limit=limit).jobs

    def get(self, job_id: str, *, owner: str | None = None) -> JobView:
        return self._ask(JobsAction.SHOW, job_id=job_id).jobs[0]

    def pause(self, job_id: str, *, owner: str | None = None) -> JobView:
        return self._ask(JobsAction.PAUSE, job_id=job_id).jobs[0]

    def resume(self, job_id: str, *, owner: str | None = None) -> JobView:
        return self._ask(JobsAction.RESUME, job_id=job_id).jobs[0]

    def run(self, job_id: str, *, owner: str | None = None) -> JobView:
        return self._ask(JobsAction.RUN, job_id=job_id).jobs[0]

    def delete(self, job_id: str, *, owner: str | None = None) -> bool:
        return self._ask(JobsAction.DELETE, job_id=job_id).deleted


@contextlib.contextmanager
def _jobs_of(home: str | None, dsn: str | None) -> Iterator[tuple[JobBook, bool]]:
    """The jobs port this command uses, and whether a daemon serves it (see the module docstring)."""
    root = resolve_home(home)
    settings = home_settings(root)
    if dsn is None:
        path = socket_path(root, settings)
        client = connect(path)
        if client is not None:
            client.close()
            yield DaemonJobs(path), True
            return
    with open_writes(home, dsn) as store:
        queue: RunQueue = LocalRuns("hermesctl")  # no live owner: the next start's recovery runs it
        if dsn is not None:
            from hermes_actors.cluster.admin_requests import shard_count
            from hermes_actors.cluster.job_runs import ShardRuns
            from hermes_actors.store.pg import PostgresStore

            assert isinstance(store, PostgresStore)
            queue = ShardRuns(store, shard_count(store))
        book = StoreJobs(
            DirectAccess(store),
            hooks=NoHooks(),
            queue=queue,
            policy=settings.runtime.key_policy,
            events=Events(settings.events),
            config=settings.jobs,
            zone=zone_named(settings.daemon.timezone, None),
        )
        yield book, dsn is not None


def _when(instant: float | None, now: float) -> str:
    if instant is None:
        return "-"
    ahead = instant - now
    if ahead <= 0:
        return f"{format_timestamp(instant)} (due)"
    if ahead < 3600:
        return f"{format_timestamp(instant)} (in {int(ahead // 60)}m {int(ahead % 60)}s)"
    return format_timestamp(instant)


def _target(job: JobView) -> str:
    if job.target == "session":
        return f"session {job.session_id} (replies to {job.chat})"
    if job.target == "fresh":
        return f"a new session each run in {job.chat}"
    return f"{job.chat}'s current session"


def _echo(job: JobView, *, as_json: bool) -> None:
    if as_json:
        click.echo(msgspec.json.encode(job).decode())
        return
    now = time.time()
    click.echo(f"{job.id}  {job.state}  {job.describe}")
    click.echo(f"  prompt:   {one_line(job.prompt)}")
    click.echo(f"  runs in:  {_target(job)}; a missed run is {'run once, late' if job.missed == 'run' else 'skipped'}")
    click.echo(f"  next run: {_when(job.next_due_at, now)}")
    last = "never" if job.last_run_at is None else relative_time(job.last_run_at, now=now)
    trail = "" if job.last_inbox_id is None else f" (inbox row {job.last_inbox_id}: hermesctl messages show ID)"
    click.echo(f"  runs:     {job.runs}, skipped {job.skipped}; last {last}{trail}")
    click.echo(f"  owner:    {job.owner} (made by {job.created_by}, {format_timestamp(job.created_at)})")


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


@click.group("jobs")
def jobs() -> None:
    """Scheduled turns: a prompt sent as a message of a chat at its times (the reply goes to the chat)."""


@jobs.command("add")
@click.argument("words", metavar="PROMPT...", nargs=-1, required=True)
@click.option("--in", "in_", metavar="DURATION", default=None, help="Run once after this delay (3s, 10m, 1h30m).")
@click.option("--at", metavar="TIME", default=None, help="Run once at this time (2026-12-01T09:00, or 09:30).")
@click.option("--every", metavar="DURATION", default=None, help="Run at this interval (1h, 1d).")
@click.option("--cron", metavar="EXPR", default=None, help="Run at the times of a cron expression ('30 2 * * *').")
@click.option("--tz", metavar="ZONE", default=None, help="The zone of --cron or --at (default: daemon.timezone).")
@click.option("--session", "session", metavar="ID", default=None, help="Run in this session (id, prefix or title).")
@click.option("--chat", metavar="PLATFORM:CHAT", default=None, help="Run in this chat's current session.")
@click.option("--fresh", is_flag=True, help="Run each time in a new session of the chat.")
@click.option(
    "--missed",
    type=click.Choice(["run", "skip"]),
    default="run",
    show_default=True,
    help="A run missed while nothing ran (hermesd stopped): run it once, late, or skip it.",
)
@json_option
@home_option
@dsn_option
@reports_errors
def jobs_add(
    words: tuple[str, ...],
    in_: str | None,
    at: str | None,
    every: str | None,
    cron: str | None,
    tz: str | None,
    session: str | None,
    chat: str | None,
    fresh: bool,
    missed: str,
    as_json: bool,
    home: str | None,
    dsn: str | None,
) -> None:
    """Schedule PROMPT (the words joined by spaces) as a message of a chat.

    Examples: hermesctl jobs add --in 10m --chat telegram:123456789 'stand up and stretch';
    hermesctl jobs add --cron '30 8 * * 1-5' --tz Europe/Berlin --session 'daily notes' 'what is on today?'
    """
    schedules = [name for name, value in (("--in", in_), ("--at", at), ("--every", every), ("--cron", cron)) if value]
    if len(schedules) != 1:
        raise click.UsageError(f"give one of --in, --at, --every or --cron (got {', '.join(schedules) or 'none'})")
    if session is None and chat is None:
        raise click.UsageError("give --session ID or --chat PLATFORM:CHAT: where the job's runs go")
    spec = JobSpec(
        prompt=" ".join(words),
        in_=in_,
        at=at,
        every=every,
        cron=cron,
        tz=tz,
        session_id=session,
        chat=chat,
        fresh=fresh,
        missed=missed,
    )
    with _jobs_of(home, dsn) as (book, live):
        job = book.add(spec, created_by="cli")
    if not as_json:
        click.echo(f"Added job {job.id}: {job.describe}, next run {_when(job.next_due_at, time.time())}.")
        if not live:
            click.echo("hermesd is not running here: the job runs once it starts.", err=True)
    else:
        _echo(job, as_json=True)


@jobs.command("list")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True, help="At most this many.")
@json_option
@home_option
@dsn_option
@reports_errors
def jobs_list(limit: int, as_json: bool, home: str | None, dsn: str | None) -> None:
    """The jobs, newest first, with their state, schedule and next run."""
    with _jobs_of(home, dsn) as (book, _):
        listed = book.listed(limit=limit)
    if as_json:
        click.echo(msgspec.json.encode(listed).decode())
        return
    if not listed:
        click.echo("No jobs. Add one with 'hermesctl jobs add'.")
        return
    now = time.time()
    rows = [
        [
            job.id,
            job.state,
            job.describe,
            _when(job.next_due_at, now),
            str(job.runs),
            truncate(one_line(job.prompt), 40),
        ]
        for job in listed
    ]
    for line in render_table(["ID", "STATE", "SCHEDULE", "NEXT RUN", "RUNS", "PROMPT"], rows, right_aligned=[4]):
        click.echo(line)


def _one(action: str, help_text: str) -> click.Command:
    """The command ``action ID`` over the jobs port."""

    @click.command(action, help=help_text)
    @click.argument("job_id", metavar="ID")
    @json_option
    @home_option
    @dsn_option
    @reports_errors
    def command(job_id: str, as_json: bool, home: str | None, dsn: str | None) -> None:
        with _jobs_of(home, dsn) as (book, live):
            if action == "delete":
                if not book.delete(job_id):
                    raise click.ClickException(f"no job {job_id!r}; 'hermesctl jobs list' shows the jobs")
                click.echo(f"Deleted job {job_id}.")
                return
            job = {"show": book.get, "pause": book.pause, "resume": book.resume, "run": book.run}[action](job_id)
        if action == "show" or as_json:
            _echo(job, as_json=as_json)
        elif action == "run":
            click.echo(f"Job {job.id} runs now (inbox row {job.last_inbox_id}).")
            if not live:
                click.echo("hermesd is not running here: the run waits for its start.", err=True)
        else:
            click.echo(f"Job {job.id} is {job.state}; next run {_when(job.next_due_at, time.time())}.")

    return command


for _action, _help in (
    ("show", "One job: its schedule, target, next run and latest run."),
    ("pause", "Stop a job's runs until it is resumed."),
    ("resume", "Schedule a paused job again from now (what fell due meanwhile does not run)."),
    ("run", "Run a job once now, beside its schedule (which it does not move)."),
    ("delete", "Delete a job."),
):
    jobs.add_command(_one(_action, _help))
