"""``hermesctl db copy``: a home's SQLite store into an empty PostgreSQL database (:mod:`hermes_actors.store.pg.copy`).

The PostgreSQL store is optional (``pip install 'hermes-actors[cluster]'``): psycopg is imported when the command
runs, never when ``hermesctl`` starts. Progress goes to stderr, one counter per table; the counts to stdout.
"""

from __future__ import annotations

import click

from hermes_actors.cli.formatting import plural
from hermes_actors.cli.options import home_option, open_store, reports_errors
from hermes_actors.cli.progress import PageMeter
from hermes_actors.errors import StoreError

__all__ = ["db_copy"]

DSN_ENV = "HERMES_POSTGRES_DSN"


@click.command("copy")
@home_option
@click.option(
    "--to",
    "dsn",
    required=True,
    envvar=DSN_ENV,
    help=f"The empty PostgreSQL database: a postgresql:// URL or a key=value string (or ${DSN_ENV}).",
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=2000,
    show_default=True,
    help="Rows read and written per batch.",
)
@reports_errors
def db_copy(home: str | None, dsn: str, batch_size: int) -> None:
    """Copy the home's store into an empty PostgreSQL database, ids and all, in one transaction.

    The target gets the current PostgreSQL schema first; a database that already holds rows is refused. hermesd
    may keep running: the copy reads one consistent snapshot of the SQLite file.

    Example: hermesctl db copy --to postgresql://hermes@db.internal/hermes
    """
    try:
        from hermes_actors.store.pg import PostgresStore
        from hermes_actors.store.pg.copy import copy_store
    except ImportError as exc:
        raise StoreError(str(exc)) from exc
    meters: dict[str, PageMeter] = {}

    def progress(table: str, done: int, total: int) -> None:
        meter = meters.setdefault(table, PageMeter(f"copying {table}", unit="rows"))
        meter(done, total)

    with open_store(home) as source, PostgresStore.open(dsn) as target:
        counts = copy_store(source, target, batch_size=batch_size, progress=progress)
        where = target.path
    copied = ", ".join(f"{table} {count:,}" for table, count in counts.tables.items())
    click.echo(f"Copied {plural(counts.tables['sessions'], 'session')} to {where}.")
    click.echo(f"Rows per table: {copied}.")
