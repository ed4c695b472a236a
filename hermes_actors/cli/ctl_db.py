"""``hermesctl db``: check, create, upgrade and optimize the state database (backup and restore: :mod:`.ctl_backup`;
copy into PostgreSQL: :mod:`.ctl_copy`).

``check`` and ``optimize`` run for seconds on a large database; each phase is reported on stderr with its time
(:class:`~hermes_actors.cli.progress.Phases`), the result on stdout.
"""

from __future__ import annotations

import click

from hermes_actors.cli.ctl_backup import db_backup, db_restore
from hermes_actors.cli.ctl_copy import db_copy
from hermes_actors.cli.formatting import format_bytes
from hermes_actors.cli.options import database_path, home_option, open_store, reports_errors, resolve_home
from hermes_actors.cli.progress import Phases
from hermes_actors.errors import StoreBusyError, StoreError, StoreFault
from hermes_actors.store import Store  # Store: to open the home's SQLite file by its path
from hermes_actors.store.migrations import SCHEMA_VERSION

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
        click.echo(f"schema version {store.schema_version()} at {store.path}")


@db.command("check")
@home_option
@reports_errors
def db_check(home: str | None) -> None:
    """Check SQLite integrity, foreign keys and both full-text indexes.

    Example: hermesctl db check
    """
    with open_store(home) as store:
        found = store.schema_version()
        if found != SCHEMA_VERSION:
            raise StoreError(f"schema version {found}, expected {SCHEMA_VERSION}; run 'hermesctl db migrate'")
        with Phases() as phases:
            problems = store.check_integrity(progress=phases)
    with open_store(home, readonly=False) as store, Phases() as phases:
        problems += store.check_search_indexes(progress=phases)
    if problems:
        raise StoreError("database check failed:\n" + "\n".join(problems))
    click.echo("ok")


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
    with Store.open(database_path(resolve_home(home)), busy_timeout_ms=round(wait * 1000)) as store:
        try:
            with Phases() as phases:
                result = store.optimize(progress=phases)
        except StoreBusyError as exc:
            raise StoreError(
                f"the database stayed busy for {wait:g} s while {exc.step}: another process (hermesd, a terminal "
                "chat) holds it; stop that process or retry with a longer --wait",
                fault=StoreFault.BUSY,
            ) from exc
    click.echo(f"Rebuilt the search indexes ({result.messages_indexed} messages, {result.cjk_indexed} with CJK text).")
    click.echo("Analyzed, vacuumed and checkpointed.")
    if result.wal_kept:
        click.echo("A reader kept the WAL from being emptied; it shrinks at the next checkpoint.")
    click.echo(f"Size: {format_bytes(result.bytes_before)} -> {format_bytes(result.bytes_after)}")


db.add_command(db_backup)
db.add_command(db_restore)
db.add_command(db_copy)
