"""The pid lock: one daemon per home.

An exclusive ``flock`` on ``$HERMES_HOME/hermesd.pid``: a crashed daemon's lock dies with it, so a stale file never
blocks a start, and a live one refuses the second daemon by pid.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from hermes_actors.daemon.home import PID_NAME
from hermes_actors.errors import HermesError

__all__ = ["DaemonRunningError", "PidLock", "lock_holder"]


class DaemonRunningError(HermesError):
    """Another process holds this home's pid lock: a running hermesd, or ``hermesctl db restore`` (``holder`` names
    which, ``pid`` its process id as the pid file has it)."""

    def __init__(self, message: str, *, pid: str, holder: str) -> None:
        super().__init__(message)
        self.pid = pid
        self.holder = holder


def _holder(pid: str) -> str:
    """What process ``pid`` runs, as its command line names it (``hermesctl db restore``), or ``hermesd`` when that
    cannot be read (another machine's /proc, a process gone meanwhile)."""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return "hermesd"
    names = [Path(word.decode(errors="replace")).name for word in words if word]
    for index, name in enumerate(names[:3]):  # hermesctl, or python .../hermesctl
        if name == "hermesctl":
            return " ".join(names[index : index + 3])
    return "hermesd"


class PidLock:
    """An exclusive ``flock`` on ``home/hermesd.pid`` that holds the daemon's pid for as long as it lives."""

    def __init__(self, home: Path) -> None:
        self.path = home / PID_NAME
        self._handle: IO[str] | None = None

    def acquire(self) -> None:
        """Take the lock or raise :class:`DaemonRunningError` naming the running daemon's pid.

        The file is 0600 whatever the umask (an older install's is tightened); ``OSError`` if it cannot be made.
        """
        descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        handle = os.fdopen(descriptor, "a+", encoding="ascii")
        try:
            if os.fstat(descriptor).st_mode & 0o077:
                os.fchmod(descriptor, 0o600)
        except OSError:
            handle.close()
            raise
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            pid = handle.read().strip() or "unknown"
            handle.close()
            holder = _holder(pid)
            home = self.path.parent
            if holder == "hermesd":
                why = (
                    f"another hermesd (pid {pid}) is running on {home}; stop it with 'kill -TERM {pid}' "
                    "or start this one with a different --home"
                )
            else:
                why = (
                    f"'{holder}' (pid {pid}) holds {home} while it works; let it finish (or answer its question), "
                    "then start again"
                )
            raise DaemonRunningError(why, pid=pid, holder=holder) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._handle = handle

    def release(self) -> None:
        """Remove the pid file and drop the lock."""
        if self._handle is None:
            return
        self.path.unlink(missing_ok=True)
        self._handle.close()
        self._handle = None


def lock_holder(home: Path) -> str | None:
    """The pid in ``home``'s pid file while a process holds its lock, else ``None`` (no file, or a crashed daemon's).

    A probe: it takes a shared lock for an instant (never creating the file), which a daemon starting at that very
    instant would see as held."""
    try:
        with open(home / PID_NAME, encoding="ascii") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return handle.read().strip() or "unknown"
            fcntl.flock(handle, fcntl.LOCK_UN)
    except FileNotFoundError:
        pass
    return None
