"""The daemon's home directory: where its files are, and the check that its disk can hold them.

``$HERMES_HOME`` (default ``~/.hermes``) holds ``state.db`` (with SQLite's ``-wal`` and ``-shm``), ``hermesd.pid``
(:mod:`hermes_actors.daemon.pid_lock`), ``config.yaml`` (:mod:`hermes_actors.daemon.config_file`) and the control
socket (``daemon.socket``). Every command that works on a home finds the files here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from hermes_actors.errors import HermesError
from hermes_actors.store.connection import StoreUnwritableError, check_disk

if TYPE_CHECKING:
    from hermes_actors.daemon.config_file import Settings

__all__ = ["DATABASE_NAME", "PID_NAME", "HomeUnusableError", "check_home", "database_path", "socket_path"]

DATABASE_NAME = "state.db"
PID_NAME = "hermesd.pid"


class HomeUnusableError(HermesError):
    """The home cannot hold the daemon's state: its disk is full or read-only, or a state file is read-only.

    The message names the file and the fix; ``hermesd`` prints it as one line and exits 2.
    """

    def __init__(self, problem: str) -> None:
        super().__init__(f"{problem}, then start hermesd again")


def database_path(home: Path) -> Path:
    """Return the state database inside ``home``."""
    return home / DATABASE_NAME


def socket_path(home: Path, settings: Settings) -> Path:
    """The control socket of the daemon on ``home``."""
    return home / settings.daemon.socket


def check_home(home: Path) -> None:
    """Raise :class:`HomeUnusableError` if ``home``'s disk is full or mounted read-only (``home`` exists)."""
    try:
        check_disk(home)
    except StoreUnwritableError as exc:
        raise HomeUnusableError(str(exc)) from exc
