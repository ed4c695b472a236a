"""The daemon's home directory: where its files are, and the check that its disk can hold them.

``$HERMES_HOME`` (default ``~/.hermes``) holds ``state.db`` (with SQLite's ``-wal`` and ``-shm``), ``hermesd.pid``
(:mod:`hermes_actors.daemon.pid_lock`), ``config.yaml`` (:mod:`hermes_actors.daemon.config_file`) and the control
socket (``daemon.socket``). Every command that works on a home finds the files here.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import TYPE_CHECKING

from hermes_actors.errors import HermesError, StoreError, StoreFault
from hermes_actors.store.connection import StoreUnwritableError, check_disk, read_only_problem

if TYPE_CHECKING:
    from hermes_actors.daemon.config_file import Settings

__all__ = [
    "DATABASE_NAME",
    "PID_NAME",
    "HomeError",
    "HomeUnusableError",
    "check_home",
    "database_path",
    "make_home",
    "socket_path",
    "start_refusal",
]

DATABASE_NAME = "state.db"
PID_NAME = "hermesd.pid"


class HomeUnusableError(HermesError):
    """The home cannot hold the daemon's state: its disk is full or read-only, or a state file is read-only.

    The message names the file and the fix; ``hermesd`` prints it as one line and exits 2.
    """

    def __init__(self, problem: str) -> None:
        super().__init__(f"{problem}, then start hermesd again")


class HomeError(HermesError):
    """The home cannot be created or entered: a file is in its place, or this user may not create or open it.

    The message is one line naming the path, the cause and the fix; ``hermesd`` and ``hermesctl`` exit 2 on it.
    """


_ELSEWHERE = "choose another home with --home DIR or HERMES_HOME=DIR"


def make_home(home: Path) -> None:
    """Create ``home`` (mode 0700, with its parents) unless it exists; raise :class:`HomeError` naming the fix when
    it cannot be created (a home that exists but is read-only is :func:`check_home`'s and the start's to name)."""
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise HomeError(
            f"the home {home} cannot be a directory: {_blocking_file(home)} is a file; move that file away or "
            + _ELSEWHERE
        ) from None
    except PermissionError:
        parent = _existing_parent(home)
        raise HomeError(
            f"cannot create the home {home}: this user (uid {os.getuid()}) may not write in {parent}; create it "
            f"for this user (sudo install -d -m 700 -o $USER {home}) or {_ELSEWHERE}"
        ) from None
    except OSError as exc:
        if exc.errno == errno.EROFS:
            problem = f"{_existing_parent(home)} is on a read-only filesystem"
        else:
            problem = exc.strerror or str(exc)
        raise HomeError(f"cannot create the home {home}: {problem}; {_ELSEWHERE}") from None


def _blocking_file(home: Path) -> Path:
    """The first path from the root down to ``home`` that exists and is not a directory."""
    for path in [*reversed(home.parents), home]:
        if path.exists() and not path.is_dir():
            return path
    return home


def _existing_parent(home: Path) -> Path:
    return next((path for path in home.parents if path.exists()), Path("/"))


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


def start_refusal(exc: BaseException, home: Path) -> HomeUnusableError | None:
    """The start-up refusal a failure during start amounts to (a full disk, a read-only file), or ``None``."""
    if isinstance(exc, HomeUnusableError):
        return exc
    if isinstance(exc, StoreUnwritableError):
        return HomeUnusableError(str(exc))
    if isinstance(exc, StoreError) and exc.fault in (StoreFault.FULL, StoreFault.READ_ONLY):
        try:
            check_disk(home)
        except StoreUnwritableError as disk:
            return HomeUnusableError(str(disk))
        if exc.fault is StoreFault.READ_ONLY:
            return HomeUnusableError(read_only_problem(database_path(home)))
        return HomeUnusableError(f"the disk holding {home} is full ({exc}); free space on it")
    if not isinstance(exc, OSError):
        return None
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
        try:
            check_disk(home)
        except StoreUnwritableError as disk:
            return HomeUnusableError(str(disk))
        if exc.errno == errno.EROFS:
            return HomeUnusableError(
                f"{home} is on a read-only filesystem; remount it read-write (mount -o remount,rw)"
            )
        return HomeUnusableError(f"the disk holding {home} is full ({exc.strerror}); free space on it")
    if exc.errno in (errno.EACCES, errno.EPERM) and exc.filename is not None:
        path = Path(exc.filename)
        return HomeUnusableError(read_only_problem(path if path.exists() else path.parent))
    if exc.errno == errno.EFBIG:
        return HomeUnusableError(
            f"{exc.filename or home} may not grow past this process's file size limit; raise the limit "
            "(ulimit -f unlimited)"
        )
    return None
