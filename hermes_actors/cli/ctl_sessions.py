"""``hermesctl sessions``: list, browse, show, prune and count sessions (rename, end and delete are in
:mod:`hermes_actors.cli.ctl_sessions_admin`, export and import in :mod:`hermes_actors.cli.ctl_sessions_io`).

Each command is a thin shell over the store. Wherever one session is meant, it may be named by id, unique id
prefix or title (:meth:`Store.resolve_session`). Destructive commands ask first unless ``--yes``; their questions
and progress bars go to stderr, so stdout carries only the listing or JSON a script asked for. With ``--dsn`` (or
``$HERMES_CLUSTER_DSN``) every command works on a cluster's PostgreSQL store instead of the home's SQLite store.
"""

from __future__ import annotations

import sys
import time

import click
import msgspec

from hermes_actors.cli.ages import DEFAULT_PRUNE_AGE, Age, AgeType, parse_age
from hermes_actors.cli.ctl_sessions_admin import sessions_delete, sessions_end, sessions_rename
from hermes_actors.cli.ctl_sessions_io import sessions_export, sessions_import
from hermes_actors.cli.formatting import (
    format_bytes,
    plural,
)
from hermes_actors.cli.options import (
    confirm,
    dsn_option,
    home_option,
    open_reads,
    open_writes,
    reports_errors,
    resolve_home,
)
from hermes_actors.cli.session_picker import pick_lineage
from hermes_actors.cli.session_text import (
    PREVIEW_WIDTH,
    lineage_json,
    lineage_table,
    listing_note,
    load_details,
    segment_table,
    summary_lines,
    transcript_lines,
)
from hermes_actors.config import RuntimeConfig
from hermes_actors.daemon.config_file import CONFIG_NAME, load_settings
from hermes_actors.errors import ConfigError
from hermes_actors.store.prune import PruneFilter, PruneResult

__all__ = ["DEFAULT_PRUNE_AGE", "Age", "AgeType", "parse_age", "sessions"]


def _model_cap(home: str | None) -> int:
    """``runtime.model_message_cap_chars`` of the home's config (the default when the file is broken, with a
    warning: ``show`` only reads)."""
    try:
        return load_settings(resolve_home(home) / CONFIG_NAME).runtime.model_message_cap_chars
    except ConfigError as exc:
        default = RuntimeConfig().model_message_cap_chars
        click.echo(f"Warning: {exc}; marking messages capped at the default {default:,} characters", err=True)
        return default


@click.group()
def sessions() -> None:
    """List, browse, show, export, import, rename, end, delete, prune, search and count sessions."""


# Commands of their own modules: ctl_sessions_admin (changes through the live actor) and ctl_sessions_io.
for _command in (sessions_export, sessions_import, sessions_rename, sessions_end, sessions_delete):
    sessions.add_command(_command)


@sessions.command("list")
@home_option
@dsn_option
@click.option("--source", metavar="PLATFORM", help="Only sessions from this platform (cli, telegram, ...).")
@click.option("--limit", type=click.IntRange(min=0), default=20, show_default=True, help="Most to list; 0: all.")
@click.option("--segments", is_flag=True, help="List every segment of each conversation, marked with its lineage.")
@click.option("--json", "as_json", is_flag=True, help="Print the full records, with their lineages, as a JSON array.")
@reports_errors
def sessions_list(
    home: str | None, dsn: str | None, source: str | None, limit: int, segments: bool, as_json: bool
) -> None:
    """List conversations, most recently active first: one row per compression lineage, shown by its newest
    segment, with the lineage's message total, its compressions and a preview of its first user message.

    Example: hermesctl sessions list --source telegram --limit 5
    """
    with open_reads(home, dsn) as store:
        page = store.list_lineages(source=source, limit=limit or None, preview_chars=PREVIEW_WIDTH * 4)
        members = (
            {r.id: r for r in store.find_sessions([m for row in page.rows for m in row.members])} if segments else {}
        )
    if as_json:
        click.echo(
            msgspec.json.encode([lineage_json(row, members if segments else None) for row in page.rows]).decode()
        )
        return
    if not page.rows:
        click.echo("No sessions" + (f" from {source}" if source else "") + ".")
        return
    table = (
        segment_table(page.rows, members, now=time.time()) if segments else lineage_table(page.rows, now=time.time())
    )
    note = listing_note(page)
    for line in [*table, *([note] if note else [])]:
        click.echo(line)


@sessions.command("browse")
@home_option
@dsn_option
@click.option("--source", metavar="PLATFORM", help="Only sessions from this platform.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True, help="Most sessions to offer.")
@reports_errors
def sessions_browse(home: str | None, dsn: str | None, source: str | None, limit: int) -> None:
    """Pick a conversation from a numbered list and print how to resume it (its newest segment).

    Type a number to pick, other text to filter by title, id or preview, an empty line to see all again, q to
    quit.

    Example: hermesctl sessions browse --source cli
    """
    with open_reads(home, dsn) as store:
        rows = store.list_lineages(source=source, limit=limit, preview_chars=PREVIEW_WIDTH * 4).rows
        if not rows:
            click.echo("No sessions" + (f" from {source}" if source else "") + ".")
            return
        picked = pick_lineage(rows)
        if picked is None:
            return
        details = load_details(store, store.get_session(picked.tip.id))
    click.echo("")
    for line in summary_lines(details, now=time.time()):
        click.echo(line)
    click.echo("")
    if dsn is None:
        click.echo(f"Resume it with: hermesctl chat --resume {picked.tip.id}")
    else:  # a terminal chat runs on a home, not in a cluster: a platform's chat resumes it
        click.echo(f"Resume it from a chat with: /resume {picked.tip.id}")


@sessions.command("show")
@home_option
@dsn_option
@click.argument("reference", metavar="ID|PREFIX|TITLE")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Show only the last N messages.")
@click.option("--json", "as_json", is_flag=True, help="Print the session, its lineage and messages as JSON.")
@reports_errors
def sessions_show(home: str | None, dsn: str | None, reference: str, limit: int | None, as_json: bool) -> None:
    """Show a session's details and transcript; name it by id, unique id prefix or title.

    A message longer than runtime.model_message_cap_chars (config.yaml) is marked [capped for the model at N
    chars]: the model is sent its head and tail only. A compression summary is marked [summary].

    Example: hermesctl sessions show 20261102_1403 --limit 20
    """
    with open_reads(home, dsn) as store:
        record = store.resolve_session(reference)
        details = load_details(store, record)
        messages = store.load_transcript(record.id)
    omitted = max(0, len(messages) - limit) if limit is not None else 0
    messages = messages[omitted:]
    cap = _model_cap(home)
    if as_json:
        view = {
            "session": record,
            "lineage": details.lineage,
            "children": details.children,
            "running_in": details.running_in,
            "omitted_messages": omitted,
            "model_message_cap_chars": cap,  # a longer message's content is cut when sent to the model
            "messages": messages,
        }
        click.echo(msgspec.json.encode(view).decode())
        return
    for line in summary_lines(details, now=time.time()):
        click.echo(line)
    click.echo("")
    for line in transcript_lines(messages, omitted, cap) or ["(no messages)"]:
        click.echo(line)


def _prune_scope(count: int | None, *, source: str | None, age: Age | None) -> str:
    """``3 ended cli sessions older than 90d``; without a count, ``ended cli sessions older than 90d``."""
    noun = f"ended {source + ' ' if source else ''}session"
    return (plural(count, noun) if count is not None else noun + "s") + (f" older than {age.text}" if age else "")


def _echo_prune_preview(preview: PruneResult, scope: str) -> None:
    click.echo(f"Would delete {scope} ({plural(preview.messages_deleted, 'message')}).")
    for session_id in preview.session_ids:
        click.echo(f"  {session_id}")
    if preview.sessions_deleted > len(preview.session_ids):
        click.echo(f"  … and {preview.sessions_deleted - len(preview.session_ids)} more")


def _echo_prune_result(result: PruneResult, scope: str, free_bytes: int, *, postgres: bool) -> None:
    click.echo(f"Deleted {scope} and {plural(result.messages_deleted, 'message')}.")
    if result.vacuumed and postgres:
        # VACUUM (ANALYZE) makes the space reusable without locking the tables; VACUUM FULL would give it back to
        # the disk but locks each table while the hosts run turns on it.
        size = format_bytes(result.bytes_after)
        click.echo(
            f"Vacuumed and analyzed the pruned tables; the database is {size}, and PostgreSQL reuses the freed "
            "space for new rows."
        )
    elif result.vacuumed:
        freed = max(0, result.bytes_before - result.bytes_after)
        before, after = format_bytes(result.bytes_before), format_bytes(result.bytes_after)
        click.echo(f"Freed {format_bytes(freed)}: the database went from {before} to {after}.")
    elif free_bytes:
        click.echo(
            f"{format_bytes(free_bytes)} of free pages stay in the file for new data; "
            "'hermesctl db optimize' or 'prune --vacuum' gives them back to the disk."
        )


@sessions.command("prune")
@home_option
@dsn_option
@click.option(
    "--older-than", "age", type=AgeType(), default=None, help="Only sessions that ended AGE ago: 12h, 90d or 90 (days)."
)
@click.option("--source", metavar="PLATFORM", help="Only sessions from this platform.")
@click.option("--dry-run", is_flag=True, help="Print what would be deleted and change nothing.")
@click.option(
    "--vacuum",
    is_flag=True,
    help="Compact the file afterwards (holds the write lock while it runs); PostgreSQL: VACUUM ANALYZE the tables.",
)
@click.option("--yes", "-y", is_flag=True, help="Delete without asking.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@reports_errors
def sessions_prune(
    home: str | None,
    dsn: str | None,
    age: Age | None,
    source: str | None,
    dry_run: bool,
    vacuum: bool,
    yes: bool,
    as_json: bool,
) -> None:
    """Delete ended sessions and their messages; live sessions are never pruned.

    With no filter it deletes sessions that ended more than 90 days ago. Any filter replaces that default:
    --source cli alone deletes every ended cli session, whatever its age.

    Example: hermesctl sessions prune --older-than 30d --source telegram --dry-run
    """
    if age is None and source is None:
        age = DEFAULT_PRUNE_AGE
    criteria = PruneFilter(older_than_days=age.days if age else 0, source=source)
    now = time.time()  # the preview and the prune judge ages against the same moment
    with open_reads(home, dsn) if dry_run else open_writes(home, dsn) as store:
        preview = store.prune_sessions(criteria, dry_run=True, now=now)
        if dry_run or preview.sessions_deleted == 0:
            if as_json:
                click.echo(msgspec.json.encode(preview).decode())
            elif preview.sessions_deleted == 0:
                click.echo(f"No {_prune_scope(None, source=source, age=age)} to delete.")
            else:
                _echo_prune_preview(preview, _prune_scope(preview.sessions_deleted, source=source, age=age))
            return
        scope = _prune_scope(preview.sessions_deleted, source=source, age=age)
        question = f"Delete {scope} ({plural(preview.messages_deleted, 'message')})?"
        if not confirm(question, yes=yes):
            click.echo("Nothing deleted.", err=as_json)
            return
        with click.progressbar(length=preview.sessions_deleted, label="Pruning", file=sys.stderr) as bar:
            result = store.prune_sessions(
                criteria, now=now, vacuum=vacuum, progress=lambda done, _total: bar.update(done - bar.pos)
            )
        free_bytes = store.free_bytes()
    if as_json:
        click.echo(msgspec.json.encode(result).decode())
    else:
        scope = _prune_scope(result.sessions_deleted, source=source, age=age)
        _echo_prune_result(result, scope, free_bytes, postgres=dsn is not None)


@sessions.command("stats")
@home_option
@dsn_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@reports_errors
def sessions_stats(home: str | None, dsn: str | None, as_json: bool) -> None:
    """Print totals, per-source counts and the database size.

    Example: hermesctl sessions stats --json
    """
    with open_reads(home, dsn) as store:
        stats = store.stats()
    if as_json:
        click.echo(msgspec.json.encode(stats).decode())
        return
    click.echo(f"Total sessions: {stats.sessions}")
    click.echo(f"Total messages: {stats.messages}")
    for count in stats.by_source:
        click.echo(f"  {count.source}: {count.sessions} sessions")
    click.echo(f"Live sessions: {stats.live_sessions} ({stats.sessions - stats.live_sessions} ended)")
    click.echo(f"Database size: {stats.database_bytes / 1_000_000:.1f} MB")
