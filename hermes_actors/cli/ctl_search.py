"""``hermesctl sessions search``: discovery over the store, the same search the agent's tool runs."""

from __future__ import annotations

import time
from typing import cast

import click
import msgspec

from hermes_actors.cli.options import dsn_option, home_option, open_reads, reports_errors
from hermes_actors.search import MAX_LIMIT, SearchHit, Sort, session_search
from hermes_actors.store import Role

__all__ = ["search"]


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at))


def _describe(hit: SearchHit) -> str:
    title = f'  "{hit.title}"' if hit.title else ""
    where = "title" if hit.matched == "title" else f"#{hit.match_message_id} {hit.role}"
    return f"{hit.session_id}{title}  {hit.source}  {_when(hit.last_active_at)}  ({where})"


@click.command("search")
@home_option
@dsn_option
@click.argument("query")
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_LIMIT),
    default=MAX_LIMIT,
    show_default=True,
    help="Most conversations to show (one hit per conversation).",
)
@click.option(
    "--sort",
    type=click.Choice(["relevance", "newest", "oldest"]),
    default="relevance",
    show_default=True,
    help="Order of the hits.",
)
@click.option(
    "--role",
    "roles",
    multiple=True,
    type=click.Choice([r.value for r in Role]),
    help="Search messages of this role (repeatable; default: user and assistant).",
)
@click.option("--source", default=None, help="Only sessions from this platform (telegram, slack, cli, ...).")
@click.option("--json", "as_json", is_flag=True, help="Print the whole result (windows, bookends) as JSON.")
@reports_errors
def search(
    home: str | None,
    dsn: str | None,
    query: str,
    limit: int,
    sort: str,
    roles: tuple[str, ...],
    source: str | None,
    as_json: bool,
) -> None:
    """Find conversations by title and message text: title matches first, then messages, one hit per lineage.

    QUERY is FTS5 syntax: words (all must match), "exact phrases", prefix*, AND/OR/NOT and parentheses.
    Chinese, Japanese and Korean text matches at any length. A malformed query prints what is wrong and a
    quoted version to try, and exits 1.

    \b
    Examples:
      hermesctl sessions search docker
      hermesctl sessions search '"deploy the image"' --sort newest
      hermesctl sessions search 'deploy* NOT staging' --limit 3
      hermesctl sessions search 'python OR rust' --role user --source telegram
      hermesctl sessions search 数据库 --json
    """
    if not query.strip():
        # session_search would browse instead; on the command line a blank query is a mistake.
        raise click.ClickException("the query is empty; give at least one word (list sessions with 'sessions list')")
    with open_reads(home, dsn) as store:
        result = session_search(
            store,
            query=query,
            role_filter=roles or None,
            sort=cast(Sort, sort),
            limit=limit,
            source=source,
        )
    if as_json:
        click.echo(msgspec.json.encode(result).decode())
        if result.error is not None:
            raise click.exceptions.Exit(1)
        return
    if result.error is not None:
        hint = f" (try: {result.suggestion})" if result.suggestion else ""
        raise click.ClickException(result.error + hint)
    for hit in result.hits:
        click.echo(_describe(hit))
        click.echo(f"    {' '.join(hit.snippet.split())}")
    if not result.hits:
        click.echo("no matches")
    if result.note:
        click.echo(f"note: {result.note}")
