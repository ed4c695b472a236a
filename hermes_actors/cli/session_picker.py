"""The numbered picker of ``hermesctl sessions browse``: a conversation chosen by number or narrowed by text."""

from __future__ import annotations

import re
import time

import click

from hermes_actors.cli.session_text import lineage_table
from hermes_actors.store import LineageRow

__all__ = ["pick_lineage"]

_CHOICE = re.compile(r"[0-9]+")


def _ask(text: str) -> str:
    try:
        return str(click.prompt(text, default="", show_default=False))
    except click.Abort:
        click.echo("", err=True)  # end the prompt's line
        raise click.ClickException(
            "no choice was read: standard input ended; run 'hermesctl sessions browse' in a terminal, or use "
            "'hermesctl sessions list' and 'hermesctl sessions show ID'"
        ) from None


def _searchable(row: LineageRow) -> list[str]:
    """What a filter typed in ``browse`` looks in: the tip's title, the preview, the ids of every segment."""
    return [row.tip.title or "", row.preview or "", *row.members]


def pick_lineage(rows: list[LineageRow]) -> LineageRow | None:
    """Show ``rows`` numbered and return the one picked (``None``: quit); text narrows the list to the rows with
    it in their title, preview or the id of any of their segments, an empty line shows all again."""
    shown = rows
    while True:
        for line in lineage_table(shown, now=time.time(), numbered=True):
            click.echo(line)
        answer = _ask("Number to open, text to filter (empty: all), q to quit").strip()
        if answer.lower() in ("q", "quit"):
            return None
        # A short number picks from the list; a long run of digits is part of an id (20261130_...) and filters.
        if _CHOICE.fullmatch(answer) and len(answer) <= max(2, len(str(len(rows)))):
            if 1 <= int(answer) <= len(shown):
                return shown[int(answer) - 1]
            click.echo(f"Pick a number from 1 to {len(shown)}.")
            continue
        needle = answer.casefold()
        matches = [r for r in rows if any(needle in text.casefold() for text in _searchable(r))]
        if not matches:
            click.echo(f"No session here has {answer!r} in its title or id.")
            continue
        shown = matches
