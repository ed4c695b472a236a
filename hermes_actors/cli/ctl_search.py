"""``hermesctl sessions search``: full-text search over the store."""

from __future__ import annotations

import click
import msgspec

from hermes_actors.cli.options import home_option, open_store, reports_errors

__all__ = ["search"]


@click.command("search")
@home_option
@click.argument("query")
@click.option("--limit", default=10, show_default=True, help="Most hits to print.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@reports_errors
def search(home: str | None, query: str, limit: int, as_json: bool) -> None:
    """Full-text search over messages (FTS5 syntax: words, "phrases", prefix*, AND/OR/NOT)."""
    with open_store(home) as store:
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
