"""``hermesctl db``: check, create, upgrade and optimize the state database."""

from __future__ import annotations

import contextlib
import os

import apsw
import click

from hermes_actors.cli.formatting import format_bytes
from hermes_actors.cli.options import database_path, home_option, open_store, reports_errors, resolve_home
from hermes_actors.errors import StoreError
from hermes_actors.store import Store
from hermes_actors.store.migrations import CJK_GLOB, SCHEMA_VERSION, schema_version

__all__ = ["db"]


@click.group()
def db() -> None:
    """Inspect and upgrade the state database."""


@db.command("migrate")
@home_option
@reports_errors
def db_migrate(home: str | None) -> None:
    """Create the database or upgrade it to the current schema.

    Example: hermesctl db migrate --home ~/.hermes
    """
    with open_store(home, readonly=False) as store:
        click.echo(f"schema version {schema_version(store.connection)} at {store.path}")


@db.command("check")
@home_option
@reports_errors
def db_check(home: str | None) -> None:
    """Check SQLite integrity, foreign keys and both full-text indexes.

    Example: hermesctl db check
    """
    with open_store(home) as store:
        found = schema_version(store.connection)
        if found != SCHEMA_VERSION:
            raise StoreError(f"schema version {found}, expected {SCHEMA_VERSION}; run 'hermesctl db migrate'")
        problems = [str(row[0]) for row in store.connection.execute("PRAGMA integrity_check") if row[0] != "ok"]
        problems += [f"foreign key: {row}" for row in store.connection.execute("PRAGMA foreign_key_check")]
    with open_store(home, readonly=False) as store:
        # rank 1 also compares an index with the messages table; the CJK index holds CJK messages only, so it is
        # checked for internal consistency (rank 0).
        for table, rank in (("messages_fts", 1), ("messages_fts_cjk", 0)):
            try:
                store.connection.execute(f"INSERT INTO {table} ({table}, rank) VALUES ('integrity-check', {rank})")
            except Exception as exc:  # apsw raises CorruptError for a stale index
                problems.append(f"{table}: {exc}; rebuild it with 'hermesctl db optimize'")
    if problems:
        raise StoreError("database check failed:\n" + "\n".join(problems))
    click.echo("ok")


def _file_bytes(path: str) -> int:
    """The database's size on disk: the main file and its WAL."""
    size = 0
    for suffix in ("", "-wal"):
        with contextlib.suppress(OSError):
            size += os.path.getsize(path + suffix)
    return size


def _rebuild_search_indexes(db: apsw.Connection) -> tuple[int, int]:
    """Rebuild both FTS indexes from ``messages``; return how many messages each now holds.

    The word index takes every message, so FTS5's own 'rebuild' fits it. The trigram index holds only messages
    with CJK text (its triggers choose them), and its 'rebuild' would read every message; it is emptied and
    refilled with the rows the triggers would have chosen instead.
    """
    db.execute("INSERT INTO messages_fts (messages_fts) VALUES ('rebuild')")
    db.execute("INSERT INTO messages_fts_cjk (messages_fts_cjk) VALUES ('delete-all')")
    db.execute(
        "INSERT INTO messages_fts_cjk (rowid, content) SELECT id, content FROM messages WHERE content GLOB ?",
        (CJK_GLOB,),
    )
    cjk = db.changes()
    for table in ("messages_fts", "messages_fts_cjk"):
        db.execute(f"INSERT INTO {table} ({table}) VALUES ('optimize')")  # merge the segments into one
    words = int(db.execute("SELECT count(*) FROM messages WHERE content IS NOT NULL").get)
    return words, cjk


@db.command("optimize")
@home_option
@click.option(
    "--wait",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    help="Seconds to wait for another process's write lock before giving up.",
)
@reports_errors
def db_optimize(home: str | None, wait: float) -> None:
    """Rebuild both full-text indexes, refresh the query planner's statistics and compact the file.

    It holds the write lock while it runs, so on a large database stop hermesd first: the daemon's writes wait
    only its own busy timeout.

    Example: hermesctl db optimize --wait 30
    """
    open_store(home).close()  # a missing database is an error naming the fix, not a new empty file
    step = "waiting for the write lock"
    with Store.open(database_path(resolve_home(home)), busy_timeout_ms=round(wait * 1000)) as store:
        db = store.connection
        before = _file_bytes(store.path)
        try:
            db.execute("BEGIN IMMEDIATE")  # the write lock first: a stale read snapshot could not upgrade later
            try:
                step = "rebuilding the search indexes"
                words, cjk = _rebuild_search_indexes(db)
                step = "analyzing"
                db.execute("ANALYZE")
                db.execute("PRAGMA optimize")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            step = "vacuuming"
            db.execute("VACUUM")
            step = "checkpointing"
            readers_in_the_way = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()[0][0]
        except apsw.BusyError as exc:
            raise StoreError(
                f"the database stayed busy for {wait:g} s while {step}: another process (hermesd, a terminal chat) "
                "holds it; stop that process or retry with a longer --wait"
            ) from exc
        after = _file_bytes(store.path)
    click.echo(f"Rebuilt the search indexes ({words} messages, {cjk} with CJK text).")
    click.echo("Analyzed, vacuumed and checkpointed.")
    if readers_in_the_way:
        click.echo("A reader kept the WAL from being emptied; it shrinks at the next checkpoint.")
    click.echo(f"Size: {format_bytes(before)} -> {format_bytes(after)}")
