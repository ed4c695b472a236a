"""``hermesctl sessions rename``, ``end`` and ``delete``: an operator's changes to one session.

The live actor and the store always agree: when ``hermesd`` runs on the home (its control socket answers) the change
goes to it, and the session's actor applies it (see :mod:`hermes_actors.daemon.admin`), so a live conversation sees
a new title at once and an ended one starts afresh with its next message. Without a daemon the change is made on
the store under the session's lease, the one a daemon or terminal chat running the session would hold; while
another live process holds it the command is refused, naming that process and what to do.

With ``--dsn`` (or ``$HERMES_CLUSTER_DSN``) the session is in a cluster's PostgreSQL store, and its live actor in
whichever shard host holds its shard: the change is committed as a row of that shard's inbox and applied by the
holding host through the same admin path, under the shard's fenced lease
(:mod:`hermes_actors.cluster.admin_requests`); the command waits for the host's outcome and prints what it prints
without a cluster. What can be checked first (the reference, a title's length) is checked before the row is
committed.

Each command names one session by id, unique id prefix or exact title (:meth:`Store.resolve_session` with
``unique=True``): a reference that fits several sessions is refused listing them, and nothing changes. ``delete``
asks first unless ``--yes`` (its question goes to stderr); a session live in hermesd is ended before it is deleted.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

import click

from hermes_actors.cli.ctl_daemon import home_settings
from hermes_actors.cli.formatting import plural
from hermes_actors.cli.options import (
    confirm,
    dsn_option,
    home_option,
    open_reads,
    open_writable,
    reports_errors,
    resolve_home,
)
from hermes_actors.cli.session_text import lineage_text, status_text, title_text
from hermes_actors.daemon.control import ControlClient, SessionAction, SessionAdmin, connect
from hermes_actors.daemon.home import socket_path
from hermes_actors.errors import SessionBusyError
from hermes_actors.runtime.admin import busy_text, delete_in_store, end_in_store, rename_in_store
from hermes_actors.runtime.leases import lease_owner_alive, new_lease_owner
from hermes_actors.store import EndReason, SessionRecord
from hermes_actors.titles import sanitize_title

if TYPE_CHECKING:
    from hermes_actors.cluster.admin_requests import AdminOutcome

__all__ = ["sessions_delete", "sessions_end", "sessions_rename"]


def _resolve(home: str | None, dsn: str | None, reference: str) -> tuple[SessionRecord, str | None]:
    """The one session ``reference`` names (refusing one that names several) and its lease holder, if any; a
    lineage member is said to be one (on stderr), so nobody deletes a segment thinking it is the conversation."""
    with open_reads(home, dsn) as store:
        record = store.resolve_session(reference, unique=True)
        lineage = lineage_text(store, record)
        if lineage is not None:
            click.echo(f"Session {record.id} is {lineage}.", err=True)
        return record, store.leases.holder(record.id)


def _daemon(root: Path) -> ControlClient | None:
    """A connection to the hermesd of ``root``, or ``None`` when none runs there."""
    return connect(socket_path(root, home_settings(root)))


def _in_cluster(dsn: str, op: str, session_id: str, title: str | None = None) -> AdminOutcome:
    """Have the shard host holding ``session_id`` apply ``op`` (``rename``, ``end``, ``delete``); its outcome."""
    from hermes_actors.cluster.admin_requests import AdminOp, request_change
    from hermes_actors.store.pg import PostgresStore

    with PostgresStore.open(dsn, pool_size=1, migrate_schema=False) as store:
        return request_change(store, AdminOp(op), session_id, title=title)


@click.command("rename")
@home_option
@dsn_option
@click.argument("reference", metavar="ID|PREFIX|TITLE")
@click.argument("words", metavar="TITLE...", nargs=-1, required=True)
@reports_errors
def sessions_rename(home: str | None, dsn: str | None, reference: str, words: tuple[str, ...]) -> None:
    """Set a session's title (the words joined by spaces); a blank title clears it. Titles are unique.

    While hermesd runs the session's live conversation takes the new title at once (/title shows it, /compress
    numbers the next part after it).

    Example: hermesctl sessions rename 20261102_1403 deploy notes
    """
    title = " ".join(words)
    record, _ = _resolve(home, dsn, reference)
    client = _daemon(resolve_home(home)) if dsn is None else None
    if dsn is not None:
        sanitize_title(title)  # an over-long title is refused here, before any host is asked
        stored = _in_cluster(dsn, "rename", record.id, title).title
    elif client is not None:
        with client:
            stored = client.admin(SessionAdmin(action=SessionAction.RENAME, session_id=record.id, title=title)).title
    else:
        with open_writable(home) as store:
            stored = rename_in_store(store, record.id, title, new_lease_owner())
    if stored is None:
        click.echo(f"Cleared the title of session {record.id}.")
    else:
        click.echo(f"Session {record.id} is now titled '{stored}'.")


@click.command("end")
@home_option
@dsn_option
@click.argument("reference", metavar="ID|PREFIX|TITLE")
@reports_errors
def sessions_end(home: str | None, dsn: str | None, reference: str) -> None:
    """End a session as an operator (end reason "operator"); its chats start a new session with their next message.

    While hermesd runs the session's running turn, if any, is cancelled; no save-memory turn runs. The transcript
    stays: resume it with /resume or 'hermesctl chat --resume'.

    Example: hermesctl sessions end 'deploy notes'
    """
    record, _ = _resolve(home, dsn, reference)
    if not record.is_live:
        click.echo(f"Session {record.id} has already ended ({record.end_reason}); nothing to do.")
        return
    client = _daemon(resolve_home(home)) if dsn is None else None
    if dsn is not None:
        ended = _in_cluster(dsn, "end", record.id).ended
    elif client is not None:
        with client:
            ended = client.admin(SessionAdmin(action=SessionAction.END, session_id=record.id)).ended
    else:
        with open_writable(home) as store:
            ended = end_in_store(store, record.id, new_lease_owner()).end_reason == EndReason.OPERATOR
    if not ended:
        click.echo(f"Session {record.id} ended meanwhile; nothing to do.")
        return
    click.echo(f"Ended session {record.id}; its chats start a new session with their next message.")


def _pid(owner: str) -> str:
    return owner.split(":")[1] if owner.count(":") >= 2 else ""


@click.command("delete")
@home_option
@dsn_option
@click.argument("reference", metavar="ID|PREFIX|TITLE")
@click.option("--yes", "-y", is_flag=True, help="Delete without asking (a live session is ended first).")
@reports_errors
def sessions_delete(home: str | None, dsn: str | None, reference: str, yes: bool) -> None:
    """Delete a session and its messages; sessions it started stay, without a parent.

    A session live in hermesd (used in the last minutes) is ended first, once you confirm.

    Example: hermesctl sessions delete 20261102_140312_ab12cd34 --yes
    """
    record, holder = _resolve(home, dsn, reference)
    client = _daemon(resolve_home(home)) if dsn is None else None
    with contextlib.ExitStack() as stack:
        daemon_pid = None
        if client is not None:
            stack.enter_context(client)
            daemon_pid = str(client.status().pid)
        # In a cluster the shard host holding the session applies the delete, whoever holds the session's lease.
        if dsn is None and holder is not None and lease_owner_alive(holder) and _pid(holder) != daemon_pid:
            raise SessionBusyError(busy_text(record.id, holder))
        if client is not None and record.is_live:
            click.echo(f"Session {record.id} is live in hermesd (pid {daemon_pid}): deleting ends it first.", err=True)
        if dsn is not None and record.is_live:
            click.echo(f"Session {record.id} is live in the cluster: deleting ends it first.", err=True)
        title = f"'{title_text(record)}'" if record.title else "(untitled)"
        messages = plural(record.message_count, "message")
        if not confirm(f"Delete session {record.id} {title} ({messages}, {status_text(record)})?", yes=yes):
            click.echo("Nothing deleted.")
            return
        if dsn is not None:
            outcome = _in_cluster(dsn, "delete", record.id)
            ended, deleted = outcome.ended, outcome.deleted
        elif client is not None:
            reply = client.admin(SessionAdmin(action=SessionAction.DELETE, session_id=record.id))
            ended, deleted = reply.ended, reply.deleted
        else:
            with open_writable(home) as store:
                ended, deleted = False, delete_in_store(store, record.id, new_lease_owner())
    if ended:
        click.echo(f"Ended session {record.id} first (it was live).")
    if not deleted:
        click.echo(f"Session {record.id} was already gone.")
        return
    click.echo(f"Deleted session {record.id} and {messages}.")
