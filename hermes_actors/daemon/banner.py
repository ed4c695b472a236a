"""What ``hermesd`` prints once it runs: where everything is and how to talk to it."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path

from hermes_actors.daemon.home import database_path

__all__ = ["banner", "ctl_command", "version"]


def banner(
    *,
    home: Path,
    config_path: Path,
    agent: str,
    entry_points: Iterable[str],
    control_socket: Path,
    operator_api: bool = False,
) -> str:
    """The banner of the daemon on ``home``: the files, the agent, one line per ``entry_points`` line (each
    adapter's ``describe()``), the control socket and the commands to use it (with ``operator_api``, the one that
    prints the operator API's key)."""
    pid = os.getpid()
    lines = [
        f"hermesd {version()} running (pid {pid})",
        f"  home:     {home}",
        f"  database: {database_path(home)}",
        f"  config:   {config_path}",
        f"  agent:    {agent}",
    ]
    lines += [f"  {line}" for line in entry_points]
    lines += [
        f"  control socket: {control_socket}",
        f"  talk to it:     {ctl_command(home, 'chat')}   (or: echo hello | {ctl_command(home, 'chat')})",
        f"  state:          {ctl_command(home, 'status')}   stop: Ctrl-C or kill -TERM {pid}",
    ]
    if operator_api:
        lines.append(f"  operator key:   {ctl_command(home, 'admin-key')}   (opens the API's /api/sessions)")
    return "\n".join(lines)


def ctl_command(home: Path, command: str) -> str:
    """``hermesctl COMMAND`` as another terminal must type it: the ``hermesctl`` installed beside this interpreter
    by its path when the shell would not find that one (a virtualenv not activated), and ``--home`` unless the
    home is the default ``~/.hermes`` (a new shell has no ``$HERMES_HOME``)."""
    beside = Path(sys.executable).parent / "hermesctl"
    tool = "hermesctl"
    found = shutil.which("hermesctl")
    if beside.exists() and (found is None or Path(found).resolve() != beside.resolve()):
        tool = shlex.quote(str(beside))
    line = f"{tool} {command}"
    if home.expanduser().resolve() != Path("~/.hermes").expanduser().resolve():
        line += f" --home {shlex.quote(str(home))}"
    return line


def version() -> str:
    """The installed hermes-actors version, ``(source)`` when running from a checkout without metadata."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("hermes-actors")
    except PackageNotFoundError:
        return "(source)"
