"""Slash commands: recognised on every platform before the agent sees a message.

``parse_command`` turns a message text into a :class:`Command` or ``None`` (ordinary text, or an unknown slash
command, which goes to the agent as text). The reset triggers are configurable (default ``/new`` and ``/reset``).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import msgspec

__all__ = ["DEFAULT_RESET_TRIGGERS", "Command", "CommandName", "parse_command"]

DEFAULT_RESET_TRIGGERS = ("/new", "/reset")


class CommandName(enum.StrEnum):
    """The commands the runtime handles itself."""

    NEW = "new"
    RESET = "reset"
    RESUME = "resume"
    TITLE = "title"
    COMPRESS = "compress"
    SESSIONS = "sessions"
    STOP = "stop"
    SETHOME = "sethome"
    HANDOFF = "handoff"


class Command(msgspec.Struct, frozen=True, kw_only=True):
    """A parsed slash command; ``argument`` is the rest of the line, stripped ('' when absent)."""

    name: CommandName
    argument: str = ""


_FIXED = {
    "/resume": CommandName.RESUME,
    "/title": CommandName.TITLE,
    "/compress": CommandName.COMPRESS,
    "/sessions": CommandName.SESSIONS,
    "/stop": CommandName.STOP,
    "/sethome": CommandName.SETHOME,
    "/handoff": CommandName.HANDOFF,
}


def parse_command(text: str, *, reset_triggers: Sequence[str] = DEFAULT_RESET_TRIGGERS) -> Command | None:
    """Return the command ``text`` starts with, or ``None``.

    A trigger matches case-insensitively as the first word; Telegram's ``/cmd@botname`` form is accepted. Of the
    reset triggers, ``/new`` is ``new`` (end reason ``new_session``), any other is ``reset`` (``session_reset``).
    """
    stripped = text.strip()
    if not stripped.startswith("/"):
        return None
    word, _, rest = stripped.partition(" ")
    if "\n" in word:
        word, _, more = word.partition("\n")
        rest = more + (" " + rest if rest else "")
    word = word.split("@", 1)[0].lower()
    argument = rest.strip()
    triggers = [t.lower() for t in reset_triggers]
    if word in triggers:
        name = CommandName.NEW if word == "/new" else CommandName.RESET
        return Command(name=name, argument=argument)
    fixed = _FIXED.get(word)
    return None if fixed is None else Command(name=fixed, argument=argument)
