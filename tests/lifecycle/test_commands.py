from __future__ import annotations

import pytest

from hermes_actors.lifecycle.commands import Command, CommandName, parse_command

CASES = [
    ("/new", Command(name=CommandName.NEW)),
    ("/NEW payments refactor", Command(name=CommandName.NEW, argument="payments refactor")),
    ("/reset", Command(name=CommandName.RESET)),
    ("  /resume 2 ", Command(name=CommandName.RESUME, argument="2")),
    ("/resume@hermes_bot my project", Command(name=CommandName.RESUME, argument="my project")),
    ("/title", Command(name=CommandName.TITLE)),
    ("/title\nmulti word", Command(name=CommandName.TITLE, argument="multi word")),
    ("/compress", Command(name=CommandName.COMPRESS)),
    ("/sessions kubernetes", Command(name=CommandName.SESSIONS, argument="kubernetes")),
    ("/stop", Command(name=CommandName.STOP)),
    ("/sethome", Command(name=CommandName.SETHOME)),
    ("/handoff telegram", Command(name=CommandName.HANDOFF, argument="telegram")),
    ("hello /new", None),
    ("/weather Las Vegas", None),
    ("/newish", None),
    ("", None),
    ("/", None),
]


@pytest.mark.parametrize(("text", "expected"), CASES, ids=[repr(t) for t, _ in CASES])
def test_slash_commands_are_recognised_only_as_the_first_word(text: str, expected: Command | None) -> None:
    assert parse_command(text) == expected


def test_reset_triggers_are_configurable() -> None:
    triggers = ("/new", "/clear")
    assert parse_command("/clear", reset_triggers=triggers) == Command(name=CommandName.RESET)
    assert parse_command("/reset", reset_triggers=triggers) is None
    assert parse_command("/new", reset_triggers=triggers) == Command(name=CommandName.NEW)
