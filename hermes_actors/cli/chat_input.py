"""What ``hermesctl chat`` does at the terminal itself: line editing with a history file, and ``/help``.

In a terminal, lines are read with :mod:`readline` (arrow keys edit and recall, Ctrl-R searches), and every line
is added to ``chat_history`` in the home: created private (0600) and cut to :data:`HISTORY_LENGTH` lines at each
start. ``/help`` is answered here, never sent to the agent: the commands the gateway handles (the reset triggers of
the home's configuration among them) and the chat's own.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType

import click

from hermes_actors.lifecycle.commands import CommandName

__all__ = ["HELP", "HISTORY_LENGTH", "HISTORY_NAME", "QUIT", "LineReader", "help_text"]

HISTORY_NAME = "chat_history"
HISTORY_LENGTH = 1000
HELP = {"/help", "/?"}
QUIT = {"/exit", "/quit", "/q"}

# What each command the gateway handles does, in the order /help lists them (reset triggers come first).
_GATEWAY_COMMANDS: dict[CommandName, tuple[str, str]] = {
    CommandName.RESUME: ("/resume [N|id|title]", "list your titled sessions, or continue one"),
    CommandName.TITLE: ("/title [text]", "show this session's title, or set it"),
    CommandName.COMPRESS: ("/compress", "summarise the conversation into a continuation session"),
    CommandName.SESSIONS: ("/sessions [query]", "list or search your sessions"),
    CommandName.STOP: ("/stop", "stop the turn that is running (so does Ctrl-C while it runs)"),
    CommandName.SETHOME: ("/sethome", "make this chat the home channel for handoffs and notices"),
    CommandName.HANDOFF: ("/handoff <platform>", "continue this session in that platform's home chat"),
    CommandName.SAVE: ("/save", "the conversation as a Markdown document"),
    CommandName.APPROVE: ("/approve ID", "let the tool call the agent asked about run"),
    CommandName.DENY: ("/deny ID [reason]", "refuse the tool call the agent asked about"),
}


def help_text(reset_triggers: Sequence[str]) -> str:
    """The answer to ``/help``: the gateway's commands (``reset_triggers`` as configured) and the chat's own."""
    rows = [
        (f"{t} [title]" if t == "/new" else t, "end this session; the next message starts a new one")
        for t in reset_triggers
    ]
    rows += list(_GATEWAY_COMMANDS.values())
    rows += [
        ("/help", "this list (answered here, not sent to the agent)"),
        ("/exit, /quit, /q, Ctrl-D", "leave; the session ends and 'hermesctl chat --resume ID' reopens it"),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [f"  {name.ljust(width)}  {what}" for name, what in rows]
    return "Commands:\n" + "\n".join(lines) + "\nAnything else is a message to the agent."


def _readline() -> ModuleType | None:
    try:
        import readline  # importing it is what turns line editing on for input()
    except ImportError:  # a Python built without it: plain input()
        return None
    return readline


def _private_file(path: Path) -> None:
    """Create ``path`` with mode 0600 if it is missing; make an existing one 0600."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    os.chmod(path, 0o600)


class LineReader:
    """The chat's lines: from the terminal with line editing and history, or from a pipe as they come.

    ``history`` is the history file (``None``: none is kept); it is only used in a terminal.
    """

    def __init__(self, *, interactive: bool, history: Path | None) -> None:
        self.interactive = interactive
        self._readline = _readline() if interactive else None
        self._history = history if self._readline is not None else None
        self._retry: str | None = None
        self._queued: list[str] = []
        self._ended = False

    def _load_history(self) -> None:
        if self._readline is None or self._history is None:
            return
        _private_file(self._history)
        with contextlib.suppress(OSError):
            self._readline.read_history_file(self._history)
        self._readline.set_history_length(HISTORY_LENGTH)
        with contextlib.suppress(OSError):
            self._readline.write_history_file(self._history)  # cut to HISTORY_LENGTH lines

    def _remember(self, line: str) -> None:
        if self._readline is None or self._history is None or not line.strip():
            return
        with contextlib.suppress(OSError):
            self._readline.append_history_file(1, self._history)

    def keep(self, line: str) -> None:
        """Offer ``line`` again at the next prompt, ready to edit or send (it was not answered)."""
        self._retry = line

    def queue(self, lines: Sequence[str], *, ended: bool = False) -> None:
        """Yield ``lines`` (typed while a turn ran) before prompting again; ``ended``: the input ended after them."""
        self._queued.extend(lines)
        self._ended = self._ended or ended

    def lines(self) -> Iterator[str]:
        """Yield lines until the end of input."""
        if not self.interactive:
            for line in sys.stdin:
                yield line.rstrip("\n")
            return
        self._load_history()
        while True:
            while self._queued:
                line = self._queued.pop(0)
                click.echo(f"you> {line}")
                if self._readline is not None:
                    self._readline.add_history(line)
                self._remember(line)
                yield line
            if self._ended:
                click.echo()
                return
            retry, self._retry = self._retry, None
            if retry is not None and self._readline is not None:
                self._readline.set_startup_hook(lambda text=retry: self._insert(text))
            try:
                line = input("you> ")
            except EOFError:
                click.echo()
                return
            finally:
                if self._readline is not None:
                    self._readline.set_startup_hook(None)
            self._remember(line)
            yield line

    def _insert(self, text: str) -> None:
        if self._readline is not None:
            self._readline.insert_text(text)
