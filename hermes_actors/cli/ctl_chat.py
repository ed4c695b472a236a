"""``hermesctl chat``: a terminal conversation (source ``cli``).

Through the daemon's control socket when ``hermesd`` runs on the home, otherwise in-process on the same store (the
session lease keeps a daemon started meanwhile from running the same session's turns). Either way each line goes
through the durable inbox and the session's actor, so slash commands (``/new``, ``/title``, ``/resume``, ...) work
as on any platform. Lines come from the terminal, or from stdin when it is a pipe (``echo hello | hermesctl chat``).
"""

from __future__ import annotations

import getpass
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import click
import msgspec

from hermes_actors.cli.ctl_daemon import home_settings
from hermes_actors.cli.options import database_path, home_option, reports_errors, resolve_home
from hermes_actors.daemon.agent import build_agent
from hermes_actors.daemon.config_file import Settings
from hermes_actors.daemon.control import Bind, BindReply, Chat, ChatReply, ControlClient, connect
from hermes_actors.daemon.home import socket_path
from hermes_actors.daemon.terminal import PLATFORM, TerminalChannel
from hermes_actors.errors import SessionNotFoundError
from hermes_actors.lifecycle.recap import recap_lines
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.store import Store
from hermes_actors.store.lineage import lineage_tip

__all__ = ["chat"]

_QUIT = {"/exit", "/quit", "/q"}


class _Backend(Protocol):
    def chat(self, request: Chat) -> ChatReply: ...

    def bind(self, request: Bind) -> BindReply: ...

    def close(self) -> None: ...


class _Remote:
    """Turns run by the daemon."""

    def __init__(self, client: ControlClient) -> None:
        self._client = client

    def chat(self, request: Chat) -> ChatReply:
        return self._client.chat(request)

    def bind(self, request: Bind) -> BindReply:
        return self._client.bind(request)

    def close(self) -> None:
        self._client.close()


class _InProcess:
    """Turns run here, on a gateway that replays only terminal turns and arms no reset timers."""

    def __init__(self, home: Path, settings: Settings) -> None:
        self._channel = TerminalChannel()
        self._gateway = Gateway(
            database_path(home),
            config=settings.runtime,
            agent=build_agent(settings.agent, os.environ),
            senders=[self._channel.waiters],
            recover_platforms={PLATFORM},
            schedule_resets=False,
            sessions=msgspec.structs.replace(settings.sessions, auto_prune=False),  # the daemon prunes, not a chat
        )
        self._channel.attach(self._gateway)

    def chat(self, request: Chat) -> ChatReply:
        return self._channel.chat(request)

    def bind(self, request: Bind) -> BindReply:
        return self._channel.bind(request)

    def close(self) -> None:
        self._gateway.stop()


def _target(home: Path, resume: str | None, continue_: str | None) -> str | None:
    """The session to pick up, following compression to the lineage's newest session."""
    if resume is None and continue_ is None:
        return None
    path = database_path(home)
    if not path.exists() and continue_ == "":
        return None  # a plain --continue on a fresh home: nothing yet, so a new conversation
    if not path.exists():
        raise SessionNotFoundError(f"no database at {path} yet, so nothing to resume; start with 'hermesctl chat'")
    with Store.open(path, readonly=True) as store:
        if resume is not None:
            return lineage_tip(store, store.resolve_session(resume).id)
        if continue_:
            return lineage_tip(store, store.resolve_session(continue_).id)
        recent = store.list_sessions(source=PLATFORM, limit=1)
        return lineage_tip(store, recent[0].id) if recent else None


def _lines(interactive: bool) -> Iterator[str]:
    if not interactive:
        for line in sys.stdin:
            yield line.rstrip("\n")
        return
    while True:
        try:
            yield input("you> ")
        except EOFError:
            click.echo()
            return


def _print_recap(home: Path, session_id: str) -> None:
    with Store.open(database_path(home), readonly=True) as store:
        record = store.get_session(session_id)
        transcript = store.load_transcript(session_id)
    title = f' "{record.title}"' if record.title else ""
    click.echo(f"── resuming {session_id}{title} ({record.message_count} messages) ──")
    for line in recap_lines(transcript):
        click.echo(line)
    click.echo("──")


def _handed_off(reply: ChatReply) -> bool:
    """Whether ``reply`` reports a ``/handoff``: the conversation goes on elsewhere, so the chat ends (its last line
    says how to resume it here), as the reference's terminal does."""
    if reply.handed_off is None:
        return False
    click.echo(f"↻ the conversation is now on {reply.handed_off}; this chat ends here.")
    return True


@click.command("chat")
@home_option
@click.option(
    "-c",
    "--continue",
    "continue_",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[NAME]",
    help="Continue the most recent terminal session, or the one titled NAME.",
)
@click.option("-r", "--resume", metavar="ID|TITLE", default=None, help="Resume a session by id, id prefix or title.")
@click.option("--timeout", default=600.0, show_default=True, help="Seconds to wait for each reply.")
@reports_errors
def chat(home: str | None, continue_: str | None, resume: str | None, timeout: float) -> None:
    """Talk to the agent from the terminal; /exit or Ctrl-D ends, slash commands work.

    \b
    Examples:
      hermesctl chat
      echo 'hello' | hermesctl chat
      hermesctl chat --continue               # the most recent terminal session
      hermesctl chat --resume 'trip planning' # by title (or id, or id prefix)
    """
    if resume is not None and continue_ is not None:
        raise click.UsageError("use --continue or --resume, not both")
    root = resolve_home(home)
    settings = home_settings(root)
    target = _target(root, resume, continue_)
    if continue_ is not None and target is None:
        click.echo("no earlier terminal session; starting a new one", err=True)
    client = connect(socket_path(root, settings))
    backend: _Backend = _Remote(client) if client is not None else _InProcess(root, settings)
    chat_id = f"tty-{uuid.uuid4().hex[:12]}"
    user = getpass.getuser()
    session_id = target
    interactive = sys.stdin.isatty()
    try:
        if target is not None:
            backend.bind(Bind(chat_id=chat_id, user_id=user, session_id=target))
            _print_recap(root, target)
        elif interactive:
            where = "hermesd" if client is not None else "in-process (hermesd is not running)"
            click.echo(f"new conversation via {where}; /exit to leave")
        for line in _lines(interactive):
            text = line.strip()
            if not text:
                continue
            if text in _QUIT:
                break
            request = Chat(
                chat_id=chat_id, user_id=user, text=text, message_id=f"cli-{uuid.uuid4().hex}", timeout_s=timeout
            )
            reply = backend.chat(request)
            session_id = reply.session_id or session_id
            click.echo(reply.text)
            if _handed_off(reply):
                break
    finally:
        backend.close()
    if session_id is not None:
        click.echo(f"session {session_id}; resume it with: hermesctl chat --resume {session_id}")
