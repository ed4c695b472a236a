"""What ``hermesd`` prints once it runs: where everything is and how to talk to it."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from hermes_actors.daemon.home import database_path

__all__ = ["banner", "version"]


def banner(*, home: Path, config_path: Path, agent: str, entry_points: Iterable[str], control_socket: Path) -> str:
    """The banner of the daemon on ``home``: the files, the agent, one line per ``entry_points`` line (each
    adapter's ``describe()``), the control socket and the commands to use it."""
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
        "  talk to it:     hermesctl chat        (or: echo hello | hermesctl chat)",
        "  state:          hermesctl status      stop: Ctrl-C or kill -TERM " + str(pid),
    ]
    return "\n".join(lines)


def version() -> str:
    """The installed hermes-actors version, ``(source)`` when running from a checkout without metadata."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("hermes-actors")
    except PackageNotFoundError:
        return "(source)"
