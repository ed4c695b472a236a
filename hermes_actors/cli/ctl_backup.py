"""``hermesctl db backup`` and ``hermesctl db restore``: a home's database and media files, out and back.

A backup is two things beside each other: ``DEST``, one self-contained SQLite file (no ``-wal`` to copy with it),
and ``DEST.media/``, the home's attachment files (:mod:`hermes_actors.store.backup_media`). It is taken while
hermesd runs. A restore needs hermesd stopped: it holds the home's pid lock throughout, so no daemon starts midway,
keeps the database it replaces under a timestamped name, and prints how to undo it.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import click

from hermes_actors.cli.formatting import format_bytes, plural
from hermes_actors.cli.options import confirm, database_path, home_option, open_store, reports_errors, resolve_home
from hermes_actors.cli.progress import PageMeter
from hermes_actors.daemon.pid_lock import DaemonRunningError, PidLock
from hermes_actors.errors import StoreError
from hermes_actors.runtime.leases import describe_owner, lease_owner_alive
from hermes_actors.store import SCHEMA_VERSION
from hermes_actors.store.attachments import MEDIA_DIR_NAME
from hermes_actors.store.backup import DatabaseSummary, check_destination
from hermes_actors.store.backup_media import MediaCopy, copy_media, media_backup_dir
from hermes_actors.store.restore import ReplacedDatabase, inspect_database, read_replaced, restore_database

__all__ = ["db_backup", "db_restore"]


def _counts(summary: DatabaseSummary) -> str:
    return f"{plural(summary.sessions, 'session')}, {plural(summary.messages, 'message')}"


def _media_line(media: MediaCopy, source: Path) -> str:
    kept = f", {plural(media.kept, 'file')} already there" if media.kept else ""
    return (
        f"Media: {plural(media.copied, 'file')} ({format_bytes(media.bytes)}) copied from {source} "
        f"to {media.directory}{kept}."
    )


@click.command("backup")
@home_option
@click.argument("dest", type=click.Path(path_type=Path))
@click.option("--force", is_flag=True, help="Replace DEST (and add to DEST.media) if they exist.")
@reports_errors
def db_backup(home: str | None, dest: Path, force: bool) -> None:
    """Copy the database into the file DEST and the media files into DEST.media/, while hermesd runs.

    DEST is one self-contained file: copy it alone (with DEST.media/ for the attachments' files). The copy is
    checked with SQLite's quick_check; pages copied are shown on stderr.

    Example: hermesctl db backup ~/backups/hermes-$(date +%F).db
    """
    root = resolve_home(home)
    media_dest = media_backup_dir(dest)
    try:
        check_destination(dest, overwrite=force)
        if media_dest.exists() and not force:
            raise StoreError(f"{media_dest} already exists; choose another name, or pass --force to add to it")
    except StoreError as exc:
        raise click.BadParameter(str(exc), param_hint="DEST") from None
    with open_store(home) as store:
        result = store.backup(dest, overwrite=force, progress=PageMeter("copying the database"))
    copy = result.copy
    click.echo(
        f"Backed up {database_path(root)} to {dest}: {_counts(copy)}, {format_bytes(result.bytes)}, "
        f"in {result.seconds:.1f} s."
    )
    if result.problems:
        raise StoreError(
            f"the copy at {dest} fails SQLite's quick_check ({'; '.join(result.problems[:3])}), so the database "
            "itself is likely damaged; run 'hermesctl db check' on the home"
        )
    click.echo("quick_check of the copy: ok")
    media_source = root / MEDIA_DIR_NAME
    if not media_source.is_dir() and not result.media_paths:
        click.echo(f"Media: none (no files in {media_source}).")
    else:
        media = copy_media(
            media_source, media_dest, expected=result.media_paths, progress=PageMeter("copying media", "files")
        )
        click.echo(_media_line(media, media_source))
        if media.missing:
            click.echo(
                f"Warning: {plural(len(media.missing), 'attachment file')} the copy names "
                f"{'is' if len(media.missing) == 1 else 'are'} in neither {media_source} nor {media_dest} "
                f"(deleted, or never saved), e.g. {media.missing[0]}.",
                err=True,
            )
    click.echo(f"To restore: hermesctl db restore {dest} --home {root}")


def _refuse_other_holders(target: Path, current: ReplacedDatabase) -> None:
    """Refuse when a live process of this host holds a session of the database (a terminal chat run without
    hermesd keeps it open): it would go on writing to the file moved aside."""
    host = socket.gethostname()
    for owner in current.lease_owners:
        if owner.partition(":")[0] == host and lease_owner_alive(owner):
            raise StoreError(
                f"{describe_owner(owner)} (a terminal chat?) has {target} open; close it, then restore again"
            )


def _question(src: Path, incoming: DatabaseSummary, target: Path, current: ReplacedDatabase | None) -> str:
    if current is None:
        return f"Restore {src} ({_counts(incoming)}) into {target.parent}, which has no database yet?"
    if current.problem is not None:
        now = f"which cannot be read: {current.problem}"
    else:
        now = f"{plural(current.sessions or 0, 'session')}, {plural(current.messages or 0, 'message')}"
    return f"Replace {target} ({now}) with {src} ({_counts(incoming)})? The current database is kept beside it."


def _undo_lines(target: Path, moved: list[tuple[str, str]]) -> list[str]:
    lines = [f"  rm -f {target} {target}-wal {target}-shm"]
    lines += [f"  mv {new} {old}" for old, new in moved]
    return lines


@click.command("restore")
@home_option
@click.argument("src", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--yes", "-y", is_flag=True, help="Restore without asking.")
@reports_errors
def db_restore(home: str | None, src: Path, yes: bool) -> None:
    """Replace the home's database with the backup SRC and copy SRC.media/ into the home's media; hermesd must
    be stopped.

    The database replaced is kept beside it as state.db.before-restore-<UTC time>; the command prints how to put
    it back.

    Example: hermesctl db restore ~/backups/hermes-2026-12-01.db
    """
    root = resolve_home(home)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = database_path(root)
    lock = PidLock(root)
    try:
        lock.acquire()
    except DaemonRunningError as exc:
        if exc.holder != "hermesd":
            raise StoreError(str(exc)) from None
        raise StoreError(
            f"hermesd (pid {exc.pid}) is running on {root}; stop it first (kill -TERM {exc.pid}), then restore again"
        ) from None
    try:
        current = read_replaced(target) if target.exists() else None
        if current is not None:
            _refuse_other_holders(target, current)
        incoming = inspect_database(src)
        if not confirm(_question(src, incoming, target, current), yes=yes):
            click.echo("Nothing restored.")
            return
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        result = restore_database(src, target, stamp=stamp, progress=PageMeter("copying the database"))
        media_source = media_backup_dir(src)
        media = copy_media(media_source, root / MEDIA_DIR_NAME) if media_source.is_dir() else None
    finally:
        lock.release()
    click.echo(f"Restored {src} to {target}: {_counts(result.restored)}.")
    if result.restored.schema_version < SCHEMA_VERSION:
        click.echo(
            f"It has schema version {result.restored.schema_version}; hermesd upgrades it to {SCHEMA_VERSION} "
            "when it starts (or run 'hermesctl db migrate')."
        )
    for old, new in result.moved_aside:
        click.echo(f"Moved aside: {old} -> {new}")
    if media is not None:
        click.echo(_media_line(media, media_source))
    else:
        click.echo(f"Media: no {media_source} beside the backup; {root / MEDIA_DIR_NAME} was left as it was.")
    click.echo("To undo, with hermesd stopped:")
    click.echo("\n".join(_undo_lines(target, result.moved_aside)))
    click.echo(f"Start hermesd on it: hermesd --home {root}")
