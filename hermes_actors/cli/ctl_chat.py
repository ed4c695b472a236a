"""``hermesctl chat``: a terminal conversation (source ``cli``).

Through the daemon's control socket when ``hermesd`` runs on the home, otherwise in-process on the same store (the
session lease keeps a daemon started meanwhile from running the same session's turns). Either way each line goes
through the durable inbox and the session's actor, so slash commands (``/new``, ``/title``, ``/resume``, ...) work
as on any platform. Lines come from the terminal (with line editing and a history file, :mod:`.chat_input`), or
from stdin when it is a pipe (``echo hello | hermesctl chat``); ``/help`` is answered here. In a terminal the reply
streams as the model writes it, tool calls show on one status line, and Ctrl-C or a ``/stop`` line stops the
running turn (:mod:`.chat_turn`); Ctrl-C at the prompt leaves, as before.

Without a daemon the chat runs the auto-prune gate hermesd runs at its start (``sessions.auto_prune``). When the
daemon stops mid-chat, the line it did not answer is sent again in-process (or to a daemon started meanwhile), and
if that fails too the line is kept at the prompt. Closing the chat (``/exit``, Ctrl-D, the end of piped input)
ends its session with ``user_exit``; ``--resume``/``--continue`` reopen an ended session. A line that reaches the
session after another process ended it (another chat on it closed) is not run: the chat says so and offers to
reopen the session and send the line there (from a pipe it stops, naming the command that reopens it).
"""

from __future__ import annotations

import getpass
import os
import sys
import uuid
from pathlib import Path
from typing import Protocol

import click
import msgspec

from hermes_actors.cli.chat_input import HELP, HISTORY_NAME, QUIT, LineReader, help_text
from hermes_actors.cli.chat_turn import STOP, TurnView, stoppable
from hermes_actors.cli.ctl_daemon import home_settings
from hermes_actors.cli.options import database_path, home_option, reports_errors, resolve_home
from hermes_actors.daemon.agent_bindings import build_roster
from hermes_actors.daemon.config_file import Settings
from hermes_actors.daemon.control import (
    Bind,
    BindReply,
    Chat,
    ChatReply,
    ControlClient,
    ControlError,
    ControlLostError,
    Emit,
    SessionAction,
    SessionAdmin,
    connect,
)
from hermes_actors.daemon.home import socket_path
from hermes_actors.daemon.terminal import (
    PLATFORM,
    TerminalChannel,
    end_at_exit,
    is_terminal_session,
    reopen_to_resume,
)
from hermes_actors.errors import SessionNotFoundError
from hermes_actors.lifecycle.recap import recap_lines
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.store import EndReason, Store  # Store: to open the home's SQLite file by its path
from hermes_actors.store.lineage import lineage_tip

__all__ = ["chat"]

_STOP_TIMEOUT_S = 30.0  # how long a /stop may wait for its answer


class _Backend(Protocol):
    def chat(self, request: Chat, on_event: Emit | None = None) -> ChatReply: ...

    def stop(self, request: Chat) -> None:
        """Send ``request`` (a ``/stop``) from another thread while :meth:`chat` waits for a turn."""

    def bind(self, request: Bind) -> BindReply: ...

    def end_at_exit(self, session_id: str) -> None:
        """End ``session_id`` with ``user_exit`` (its user closed the chat), before :meth:`close`."""

    def close(self) -> None: ...


class _Remote:
    """Turns run by the daemon."""

    def __init__(self, client: ControlClient, database: Path, socket: Path) -> None:
        self._client = client
        self._database = database
        self._socket = socket

    def chat(self, request: Chat, on_event: Emit | None = None) -> ChatReply:
        return self._client.chat(request, on_event)

    def stop(self, request: Chat) -> None:
        """On a connection of its own: this one waits for the turn's reply."""
        client = connect(self._socket)
        if client is None:
            raise ControlLostError("hermesd is not running any more")
        with client:
            client.chat(request)

    def bind(self, request: Bind) -> BindReply:
        return self._client.bind(request)

    def end_at_exit(self, session_id: str) -> None:
        """Through the daemon, so its live actor ends the session (store and actor agree); a terminal session
        only (one of another platform resumed here lives on there)."""
        if not is_terminal_session(self._database, session_id):
            return
        try:
            self._client.admin(
                SessionAdmin(action=SessionAction.END, session_id=session_id, reason=EndReason.USER_EXIT)
            )
        except ControlLostError:  # the daemon went away: no actor of it holds the session any more
            end_at_exit(self._database, session_id)
        except ControlError as exc:  # another live process holds the session (a chat without the daemon)
            click.echo(f"session {session_id} stays live: {exc}", err=True)

    def close(self) -> None:
        self._client.close()


class _InProcess:
    """Turns run here, on a gateway that replays only terminal turns and arms no reset timers; it opens the store
    with the same auto-prune gate as hermesd. ``expecting`` is a line a stopped daemon may have taken."""

    def __init__(self, home: Path, settings: Settings, *, expecting: str | None = None) -> None:
        self._channel = TerminalChannel()
        self._database = database_path(home)
        self._end_at_exit: str | None = None
        if expecting is not None:
            self._channel.expect_early(expecting)
        self._gateway = Gateway(
            database_path(home),
            config=settings.runtime,
            agents=build_roster(settings.agent, settings.agents, settings.bindings, os.environ),
            senders=[self._channel.waiters],
            recover_platforms={PLATFORM},
            schedule_resets=False,
            sessions=settings.sessions,
        )
        self._channel.attach(self._gateway)

    def chat(self, request: Chat, on_event: Emit | None = None) -> ChatReply:
        return self._channel.chat(request, on_event)

    def stop(self, request: Chat) -> None:
        self._channel.chat(request)

    def bind(self, request: Bind) -> BindReply:
        return self._channel.bind(request)

    def end_at_exit(self, session_id: str) -> None:
        """After the gateway stops (at :meth:`close`): its actors are gone, so the store alone holds the session."""
        self._end_at_exit = session_id

    def close(self) -> None:
        self._gateway.stop()
        if self._end_at_exit is not None:
            end_at_exit(self._database, self._end_at_exit)
            self._end_at_exit = None


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


def _after_daemon(home: Path, settings: Settings, request: Chat) -> _Backend:
    """The backend once the daemon's connection is lost: a daemon listening again, else in-process."""
    client = connect(socket_path(home, settings))
    if client is not None:
        click.echo("hermesd went away; sending the line again to the hermesd now running", err=True)
        return _Remote(client, database_path(home), socket_path(home, settings))
    click.echo("hermesd stopped; carrying on in-process on the store, starting with your line", err=True)
    return _InProcess(home, settings, expecting=request.message_id)


def _turn(
    home: Path, settings: Settings, backend: _Backend, request: Chat, on_event: Emit | None
) -> tuple[ChatReply, _Backend]:
    """Run ``request``; when the daemon went away, run it again on :func:`_after_daemon`'s backend."""
    try:
        return backend.chat(request, on_event), backend
    except ControlLostError:
        backend.close()
    backend = _after_daemon(home, settings, request)
    try:
        return backend.chat(request, on_event), backend
    except ControlError as exc:
        raise _Unanswered(str(exc), backend) from exc


def _stop_turn(backend: _Backend, stop: Chat, view: TurnView | None) -> None:
    """Send ``stop`` (``/stop``) for the turn that runs; say so (on the turn's view when it streams)."""
    if view is not None:
        view.stopping()
    else:
        click.echo("stopping the turn…", err=True)
    try:
        backend.stop(stop)
    except ControlError as exc:
        click.echo(f"Error: the turn could not be stopped: {exc}", err=True)


class _Unanswered(ControlError):
    """A line no backend answered, and the backend to use for the next one."""

    def __init__(self, message: str, backend: _Backend) -> None:
        super().__init__(message)
        self.backend = backend


def _print_recap(home: Path, session_id: str) -> None:
    with Store.open(database_path(home), readonly=True) as store:
        record = store.get_session(session_id)
        transcript = store.load_transcript(session_id)
    title = f' "{record.title}"' if record.title else ""
    click.echo(f"── resuming {session_id}{title} ({record.message_count} messages) ──")
    for line in recap_lines(transcript):
        click.echo(line)
    click.echo("──")


def _interactive() -> bool:
    """Whether the chat reads a terminal (not a pipe)."""
    return sys.stdin.isatty()


def _terminal_fd() -> int | None:
    """Standard input's descriptor when it is a terminal (lines typed during a turn are read from it)."""
    try:
        fd = sys.stdin.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by a stream without a descriptor
        return None
    return fd if os.isatty(fd) else None


def _reopen(database: Path, reply: ChatReply, *, interactive: bool) -> bool:
    """The line reached session ``reply.ended`` after it had ended, and was not run: in a terminal, offer to reopen
    it and return whether it was; from a pipe, stop with the command that reopens it."""
    session_id = reply.ended
    assert session_id is not None
    if not interactive:
        raise click.ClickException(f"{reply.text} To continue it instead: hermesctl chat --resume {session_id}")
    click.echo(reply.text)
    if not click.confirm(f"Reopen session {session_id} and send your line there?", default=True):
        click.echo("(your next line starts a new conversation)")
        return False
    reopen_to_resume(database, session_id)
    return True


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
    if target is not None:
        reopen_to_resume(database_path(root), target)  # before the gateway opens: live, so no prune takes it
    client = connect(socket_path(root, settings))
    backend: _Backend = (
        _Remote(client, database_path(root), socket_path(root, settings))
        if client is not None
        else _InProcess(root, settings)
    )
    chat_id = f"tty-{uuid.uuid4().hex[:12]}"
    user = getpass.getuser()
    session_id = target
    interactive = _interactive()
    streams = interactive and sys.stdout.isatty()  # a pipe gets each reply whole, as before
    reader = LineReader(interactive=interactive, history=root / HISTORY_NAME)
    handed_off = False
    try:
        if target is not None:
            backend.bind(Bind(chat_id=chat_id, user_id=user, session_id=target))
            _print_recap(root, target)
        elif interactive:
            where = "hermesd" if client is not None else "in-process (hermesd is not running)"
            click.echo(f"new conversation via {where}; /help lists the commands, /exit leaves")
        for line in reader.lines():
            text = line.strip()
            if not text:
                continue
            if text in QUIT:
                break
            if text in HELP:
                click.echo(help_text(settings.runtime.reset_triggers))
                continue
            request = Chat(
                chat_id=chat_id,
                user_id=user,
                text=text,
                message_id=f"cli-{uuid.uuid4().hex}",
                timeout_s=timeout,
                stream=streams,
            )
            view = TurnView() if streams else None
            stop = msgspec.structs.replace(
                request, text=STOP, message_id=f"cli-{uuid.uuid4().hex}", stream=False, timeout_s=_STOP_TIMEOUT_S
            )

            def stop_turn(stop: Chat = stop, view: TurnView | None = view) -> None:
                _stop_turn(backend, stop, view)  # noqa: B023 - the backend of the moment (the daemon's may have gone)

            try:
                with stoppable(stop_turn, stdin_fd=_terminal_fd() if interactive else None) as typed:
                    reply, backend = _turn(root, settings, backend, request, view.show if view else None)
                if typed is not None:
                    reader.queue(typed.lines, ended=typed.ended)
                if reply.ended is not None:  # another process ended the session before the line ran
                    if not _reopen(database_path(root), reply, interactive=interactive):
                        continue
                    backend.bind(Bind(chat_id=chat_id, user_id=user, session_id=reply.ended))
                    again = msgspec.structs.replace(request, message_id=f"cli-{uuid.uuid4().hex}", stream=False)
                    reply, backend = _turn(root, settings, backend, again, None)
                    view = None
            except ControlError as exc:
                if isinstance(exc, _Unanswered):
                    backend = exc.backend
                if not interactive:
                    raise
                click.echo(f"Error: {exc}", err=True)
                click.echo("(the line is kept: edit it, or press Enter to send it again)", err=True)
                reader.keep(line)
                continue
            session_id = reply.session_id or session_id
            if view is not None:
                view.finish(reply)
            else:
                click.echo(reply.text)
            if _handed_off(reply):
                handed_off = True
                break
        if session_id is not None and not handed_off:  # the user closed it (a handed-off one goes on elsewhere)
            backend.end_at_exit(session_id)
    finally:
        backend.close()
    if session_id is not None:
        click.echo(f"session {session_id}; resume it with: hermesctl chat --resume {session_id}")
