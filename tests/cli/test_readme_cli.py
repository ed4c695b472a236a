"""README's hermesctl table names every command the tool has, and only options those commands take."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click

from hermes_actors.cli.hermesctl import main

README = Path(__file__).resolve().parents[2] / "README.md"


def leaf_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from leaf_commands(command, (*prefix, name))
        else:
            yield (*prefix, name), command


def readme_rows() -> list[str]:
    text = README.read_text(encoding="utf-8")
    block = text.split("<!-- cli-commands:start -->", 1)[1].split("<!-- cli-commands:end -->", 1)[0]
    return [line for line in block.splitlines() if line.startswith("| `hermesctl ")]


def documented(row: str) -> tuple[list[tuple[str, ...]], list[str]]:
    """The command paths a row names (``db migrate\\|check`` is two) and the options it shows."""
    usage = row.split("`", 2)[1].replace("\\|", "|")
    words = usage.split()[1:]
    path: list[str] = []
    for word in words:
        if not re.fullmatch(r"[a-z][a-z|-]*", word):
            break
        path.append(word)
    *parents, last = path
    return [(*parents, name) for name in last.split("|")], re.findall(r"--[a-z][a-z-]*", usage)


def test_the_readme_table_lists_every_hermesctl_command_and_no_other() -> None:
    tree = dict(leaf_commands(main))
    named = [path for row in readme_rows() for path in documented(row)[0]]
    assert sorted(named) == sorted(tree), "README's hermesctl table and the commands differ"
    for row in readme_rows():
        paths, options = documented(row)
        for path in paths:
            known = {opt for param in tree[path].params for opt in getattr(param, "opts", [])}
            assert set(options) <= known, f"README shows {sorted(set(options) - known)} for hermesctl {' '.join(path)}"
