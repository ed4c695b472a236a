"""``hermesctl db``: check, create and upgrade the state database."""

from __future__ import annotations

import click

from hermes_actors.cli.options import home_option, open_store, reports_errors
from hermes_actors.errors import StoreError
from hermes_actors.store.migrations import SCHEMA_VERSION, schema_version

__all__ = ["db"]


@click.group()
def db() -> None:
    """Inspect and upgrade the state database."""


@db.command("migrate")
@home_option
@reports_errors
def db_migrate(home: str | None) -> None:
    """Create the database or upgrade it to the current schema."""
    with open_store(home, readonly=False) as store:
        click.echo(f"schema version {schema_version(store.connection)} at {store.path}")


@db.command("check")
@home_option
@reports_errors
def db_check(home: str | None) -> None:
    """Check SQLite integrity, foreign keys and both full-text indexes."""
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
