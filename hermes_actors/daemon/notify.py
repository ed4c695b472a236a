"""systemd's notification protocol, spoken by ``hermesd`` when a ``Type=notify`` unit starts it.

systemd names an ``AF_UNIX`` datagram socket in ``$NOTIFY_SOCKET`` (a leading ``@`` is the abstract namespace);
each message is one datagram of ``KEY=value`` lines. ``hermesd`` sends ``READY=1`` once its entry points listen,
``STOPPING=1`` when SIGTERM starts the drain, ``STATUS=`` lines saying what it does, and, when the unit sets
``WatchdogSec=`` (``$WATCHDOG_USEC``, for this process when ``$WATCHDOG_PID`` is unset or names it),
``WATCHDOG=1`` every half period while the gateway answers. Without ``$NOTIFY_SOCKET`` every call does nothing.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

__all__ = ["Notifier"]

_log = logging.getLogger("hermesd")


class Notifier:
    """The notification socket of ``environ`` (``os.environ`` by default), or nothing when none is set."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        name = self._name = env.get("NOTIFY_SOCKET", "")
        self._address: str | bytes | None = None
        if name.startswith("@"):
            self._address = b"\0" + os.fsencode(name[1:])
        elif name.startswith("/"):
            self._address = name
        self.watchdog_interval_s = _watchdog_interval(env)
        self._warned = False

    @property
    def enabled(self) -> bool:
        """Whether a notification socket was given."""
        return self._address is not None

    def ready(self, status: str) -> None:
        """The entry points listen: systemd may start what comes after this unit."""
        self._send(f"READY=1\nSTATUS={status}\nMAINPID={os.getpid()}")

    def stopping(self, status: str) -> None:
        """The shutdown has begun (SIGTERM): what runs now is the drain."""
        self._send(f"STOPPING=1\nSTATUS={status}")

    def reloading(self, status: str) -> None:
        """Say what a reload did (SIGHUP)."""
        self._send(f"STATUS={status}")

    def watchdog(self) -> None:
        """The gateway answered: push systemd's watchdog deadline back."""
        self._send("WATCHDOG=1")

    def _send(self, message: str) -> None:
        if self._address is None:
            return
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto(message.encode(), self._address)
        except OSError as exc:
            if not self._warned:  # systemd gone or the socket wrong: say so once, the daemon runs on
                self._warned = True
                _log.warning("cannot notify systemd at %s: %s", self._name, exc)


def _watchdog_interval(env: Mapping[str, str]) -> float | None:
    """Half of ``$WATCHDOG_USEC`` in seconds, when it is meant for this process; else ``None``."""
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    pid = env.get("WATCHDOG_PID")
    if usec <= 0 or (pid is not None and pid.strip() != str(os.getpid())):
        return None
    return usec / 2 / 1_000_000
