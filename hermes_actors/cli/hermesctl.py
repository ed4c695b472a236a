"""``hermesctl``: administer the state database.

Each command is a thin shell over one store call; library errors become ``Error: ...`` with exit status 1.
"""

from __future__ import annotations

import click
import msgspec

from hermes_actors.cli.options import database_path, home_option, reports_errors, resolve_home
from hermes_actors.errors import StoreError
from hermes_actors.store import Store
from hermes_actors.store.migrations import SCHEMA_VERSION, schema_version

__all__ = ["main"]


def _open(home: str | None, *, readonly: bool = True) -> Store:
    path = database_path(resolve_home(home))
    if not readonly:
        path.parent.mkdir(parents=True, exist_ok=True)
    elif not path.exists():
        raise StoreError(f"no database at {path}; run 'hermesd' or 'hermesctl db migrate' to create it")
    return Store.open(path, readonly=readonly)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Administer hermes-actors sessions and the state database."""


@main.group()
def db() -> None:
    """Inspect and upgrade the state database."""


@db.command("migrate")
@home_option
@reports_errors
def db_migrate(home: str | None) -> None:
    """Create the database or upgrade it to the current schema."""
    with _open(home, readonly=False) as store:
        click.echo(f"schema version {schema_version(store.connection)} at {store.path}")


@db.command("check")
@home_option
@reports_errors
def db_check(home: str | None) -> None:
    """Check SQLite integrity, foreign keys and both full-text indexes."""
    with _open(home) as store:
        found = schema_version(store.connection)
        if found != SCHEMA_VERSION:
            raise StoreError(f"schema version {found}, expected {SCHEMA_VERSION}; run 'hermesctl db migrate'")
        problems = [str(row[0]) for row in store.connection.execute("PRAGMA integrity_check") if row[0] != "ok"]
        problems += [f"foreign key: {row}" for row in store.connection.execute("PRAGMA foreign_key_check")]
    with _open(home, readonly=False) as store:
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


@main.group()
def sessions() -> None:
    """List, search and count sessions."""


@sessions.command("stats")
@home_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@reports_errors
def sessions_stats(home: str | None, as_json: bool) -> None:
    """Print totals, per-source counts and the database size."""
    with _open(home) as store:
        stats = store.stats()
    if as_json:
        click.echo(msgspec.json.encode(stats).decode())
        return
    click.echo(f"Total sessions: {stats.sessions}")
    click.echo(f"Total messages: {stats.messages}")
    for count in stats.by_source:
        click.echo(f"  {count.source}: {count.sessions} sessions")
    click.echo(f"Database size: {stats.database_bytes / 1_000_000:.1f} MB")


@sessions.command("search")
@home_option
@click.argument("query")
@click.option("--limit", default=10, show_default=True, help="Most hits to print.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@reports_errors
def sessions_search(home: str | None, query: str, limit: int, as_json: bool) -> None:
    """Full-text search over messages (FTS5 syntax: words, "phrases", prefix*, AND/OR/NOT)."""
    with _open(home) as store:
        result = store.fts_query(query, limit=limit)
    if as_json:
        click.echo(msgspec.json.encode(result).decode())
        return
    if result.error is not None:
        hint = f" (try: {result.suggestion})" if result.suggestion else ""
        raise click.ClickException(result.error + hint)
    for hit in result.hits:
        click.echo(f"{hit.session_id}  #{hit.message_id}  {hit.role:<9}  {hit.snippet}")
    if not result.hits:
        click.echo("no matches")
