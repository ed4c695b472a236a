"""``hermesctl sessions``: list, browse, show, rename, delete, prune and count sessions (export and import are in
:mod:`.ctl_sessions_io`).

Each command is a thin shell over the store. Wherever one session is meant, it may be named by id, unique id
prefix or title (:meth:`Store.resolve_session`). Destructive commands ask first unless ``--yes``; their questions
and progress bars go to stderr, so stdout carries only the listing or JSON a script asked for.
"""

from __future__ import annotations

import re
import sys
import time

import click
import msgspec

from hermes_actors.cli.ages import DEFAULT_PRUNE_AGE, Age, AgeType, parse_age
from hermes_actors.cli.ctl_sessions_io import sessions_export, sessions_import
from hermes_actors.cli.formatting import (
    format_bytes,
    plural,
)
from hermes_actors.cli.options import home_option, open_store, reports_errors, resolve_home
from hermes_actors.cli.session_text import (
    load_details,
    session_table,
    status_text,
    summary_lines,
    title_text,
    transcript_lines,
)
from hermes_actors.config import RuntimeConfig
from hermes_actors.daemon.config_file import CONFIG_NAME, load_settings
from hermes_actors.errors import ConfigError, SessionBusyError
from hermes_actors.store import SessionRecord, Store
from hermes_actors.store.prune import PruneFilter, PruneResult

__all__ = ["DEFAULT_PRUNE_AGE", "Age", "AgeType", "parse_age", "sessions"]

_CHOICE = re.compile(r"[0-9]+")


def _open_writable(home: str | None) -> Store:
    open_store(home).close()  # a missing database is an error naming the fix, not a new empty file
    return open_store(home, readonly=False)


def _ask(text: str) -> str:
    try:
        return str(click.prompt(text, default="", show_default=False))
    except click.Abort:
        click.echo("", err=True)  # end the prompt's line
        raise click.ClickException(
            "no choice was read: standard input ended; run 'hermesctl sessions browse' in a terminal, or use "
            "'hermesctl sessions list' and 'hermesctl sessions show ID'"
        ) from None


def _confirm(question: str, *, yes: bool) -> bool:
    if yes:
        return True
    try:
        return click.confirm(question, default=False, err=True)
    except click.Abort:
        click.echo("", err=True)
        raise click.ClickException(
            "no answer was read from standard input; pass --yes to go ahead without asking"
        ) from None


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
    """List, browse, show, export, rename, delete, prune, search and count sessions."""


@sessions.command("list")
@home_option
@click.option("--source", metavar="PLATFORM", help="Only sessions from this platform (cli, telegram, ...).")
@click.option("--limit", type=click.IntRange(min=0), default=20, show_default=True, help="Most to list; 0: all.")
@click.option("--json", "as_json", is_flag=True, help="Print the full records as a JSON array.")
@reports_errors
def sessions_list(home: str | None, source: str | None, limit: int, as_json: bool) -> None:
    """List sessions, most recently active first.

    Example: hermesctl sessions list --source telegram --limit 5
    """
    with open_store(home) as store:
        records = store.list_sessions(source=source, limit=limit or None)
    if as_json:
        click.echo(msgspec.json.encode(records).decode())
    elif not records:
        click.echo("No sessions" + (f" from {source}" if source else "") + ".")
    else:
        for line in session_table(records, now=time.time()):
            click.echo(line)


def _pick(records: list[SessionRecord]) -> SessionRecord | None:
    shown = records
    while True:
        for line in session_table(shown, now=time.time(), numbered=True):
            click.echo(line)
        answer = _ask("Number to open, text to filter (empty: all), q to quit").strip()
        if answer.lower() in ("q", "quit"):
            return None
        # A short number picks from the list; a long run of digits is part of an id (20261130_...) and filters.
        if _CHOICE.fullmatch(answer) and len(answer) <= max(2, len(str(len(records)))):
            if 1 <= int(answer) <= len(shown):
                return shown[int(answer) - 1]
            click.echo(f"Pick a number from 1 to {len(shown)}.")
            continue
        needle = answer.casefold()
        matches = [r for r in records if needle in r.id.casefold() or needle in (r.title or "").casefold()]
        if not matches:
            click.echo(f"No session here has {answer!r} in its title or id.")
            continue
        shown = matches


@sessions.command("browse")
@home_option
@click.option("--source", metavar="PLATFORM", help="Only sessions from this platform.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True, help="Most sessions to offer.")
@reports_errors
def sessions_browse(home: str | None, source: str | None, limit: int) -> None:
    """Pick a session from a numbered list and print how to resume it.

    Type a number to pick, other text to filter by title or id, an empty line to see all again, q to quit.

    Example: hermesctl sessions browse --source cli
    """
    with open_store(home) as store:
        records = store.list_sessions(source=source, limit=limit)
        if not records:
            click.echo("No sessions" + (f" from {source}" if source else "") + ".")
            return
        picked = _pick(records)
        if picked is None:
            return
        details = load_details(store, store.get_session(picked.id))
    click.echo("")
    for line in summary_lines(details, now=time.time()):
        click.echo(line)
    click.echo("")
    click.echo(f"Resume it with: hermesctl chat --resume {picked.id}")


@sessions.command("show")
@home_option
@click.argument("reference", metavar="ID|PREFIX|TITLE")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Show only the last N messages.")
@click.option("--json", "as_json", is_flag=True, help="Print the session, its lineage and messages as JSON.")
@reports_errors
def sessions_show(home: str | None, reference: str, limit: int | None, as_json: bool) -> None:
    """Show a session's details and transcript; name it by id, unique id prefix or title.

    A message longer than runtime.model_message_cap_chars (config.yaml) is marked [capped for the model at N
    chars]: the model is sent its head and tail only. A compression summary is marked [summary].

    Example: hermesctl sessions show 20261102_1403 --limit 20
    """
    with open_store(home) as store:
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


@sessions.command("delete")
@home_option
@click.argument("reference", metavar="ID")
@click.option("--yes", "-y", is_flag=True, help="Delete without asking.")
@reports_errors
def sessions_delete(home: str | None, reference: str, yes: bool) -> None:
    """Delete a session and its messages; sessions it started stay, without a parent.

    Example: hermesctl sessions delete 20261102_140312_ab12cd34 --yes
    """
    with _open_writable(home) as store:
        record = store.resolve_session(reference)
        holder = store.leases.holder(record.id)
        if holder is not None:
            raise SessionBusyError(
                f"session {record.id} is running in {holder}; stop that process or end the session first"
            )
        title = f"'{title_text(record)}'" if record.title else "(untitled)"
        messages = plural(record.message_count, "message")
        question = f"Delete session {record.id} {title} ({messages}, {status_text(record)})?"
        if not _confirm(question, yes=yes):
            click.echo("Nothing deleted.")
            return
        if not store.delete_session(record.id):
            click.echo(f"Session {record.id} was already gone.")
            return
    click.echo(f"Deleted session {record.id} and {plural(record.message_count, 'message')}.")


@sessions.command("rename")
@home_option
@click.argument("reference", metavar="ID")
@click.argument("words", metavar="TITLE...", nargs=-1, required=True)
@reports_errors
def sessions_rename(home: str | None, reference: str, words: tuple[str, ...]) -> None:
    """Set a session's title (the words joined by spaces); a blank title clears it. Titles are unique.

    Example: hermesctl sessions rename 20261102_1403 deploy notes
    """
    with _open_writable(home) as store:
        record = store.resolve_session(reference)
        stored = store.set_title(record.id, " ".join(words))
    if stored is None:
        click.echo(f"Cleared the title of session {record.id}.")
    else:
        click.echo(f"Session {record.id} is now titled '{stored}'.")


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


def _echo_prune_result(result: PruneResult, scope: str, free_bytes: int) -> None:
    click.echo(f"Deleted {scope} and {plural(result.messages_deleted, 'message')}.")
    if result.vacuumed:
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
@click.option(
    "--older-than", "age", type=AgeType(), default=None, help="Only sessions that ended AGE ago: 12h, 90d or 90 (days)."
)
@click.option("--source", metavar="PLATFORM", help="Only sessions from this platform.")
@click.option("--dry-run", is_flag=True, help="Print what would be deleted and change nothing.")
@click.option("--vacuum", is_flag=True, help="Compact the file afterwards (holds the write lock while it runs).")
@click.option("--yes", "-y", is_flag=True, help="Delete without asking.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@reports_errors
def sessions_prune(
    home: str | None, age: Age | None, source: str | None, dry_run: bool, vacuum: bool, yes: bool, as_json: bool
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
    with open_store(home) if dry_run else _open_writable(home) as store:
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
        if not _confirm(question, yes=yes):
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
        _echo_prune_result(result, _prune_scope(result.sessions_deleted, source=source, age=age), free_bytes)


@sessions.command("stats")
@home_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@reports_errors
def sessions_stats(home: str | None, as_json: bool) -> None:
    """Print totals, per-source counts and the database size.

    Example: hermesctl sessions stats --json
    """
    with open_store(home) as store:
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


sessions.add_command(sessions_export)
sessions.add_command(sessions_import)
