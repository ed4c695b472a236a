"""``hermesctl sessions``: list, show, export, rename, delete, prune and count sessions."""

from __future__ import annotations

import click
import msgspec

from hermes_actors.cli.options import home_option, open_store, reports_errors

__all__ = ["sessions"]


@click.group()
def sessions() -> None:
    """List, search and count sessions."""


@sessions.command("stats")
@home_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@reports_errors
def sessions_stats(home: str | None, as_json: bool) -> None:
    """Print totals, per-source counts and the database size."""
    with open_store(home) as store:
        stats = store.stats()
    if as_json:
        click.echo(msgspec.json.encode(stats).decode())
        return
    click.echo(f"Total sessions: {stats.sessions}")
    click.echo(f"Total messages: {stats.messages}")
    for count in stats.by_source:
        click.echo(f"  {count.source}: {count.sessions} sessions")
    click.echo(f"Database size: {stats.database_bytes / 1_000_000:.1f} MB")
