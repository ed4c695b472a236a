"""Lease owners: which process holds a session's turns.

An owner string is ``host:pid:start-ms``. A lease whose owner is a process of this host that no longer exists
is dead and may be taken over at once; other leases end when they expire.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from hermes_actors.errors import SessionBusyError

if TYPE_CHECKING:
    from hermes_actors.store import StoreInterface

__all__ = ["describe_owner", "hold_lease", "lease_owner_alive", "new_lease_owner", "wait_for_lease"]


def new_lease_owner() -> str:
    """Return a lease owner string for this process."""
    return f"{socket.gethostname()}:{os.getpid()}:{int(time.time() * 1000)}"


def describe_owner(owner: str) -> str:
    """Return ``process N on host`` for an owner string."""
    host, _, rest = owner.partition(":")
    return f"process {rest.partition(':')[0]} on {host}"


def lease_owner_alive(owner: str) -> bool:
    """Return False only when ``owner`` is a process of this host that no longer exists."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return True
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_log = logging.getLogger(__name__)


def wait_for_lease(
    try_acquire: Callable[[], str | None],
    release_dead: Callable[[str], object],
    *,
    wait_s: float,
    owner_alive: Callable[[str], bool] = lease_owner_alive,
) -> str | None:
    """Call ``try_acquire`` until it succeeds (``None``) or ``wait_s`` passes; return the holder that stayed.

    A holder that is a dead process of this host is released with ``release_dead`` and the lease taken at once.
    """
    deadline = time.monotonic() + wait_s
    pause = 0.02
    while True:
        holder = try_acquire()
        if holder is None:
            return None
        if not owner_alive(holder):
            _log.info("taking over a lease held by %s, which is no longer running", describe_owner(holder))
            release_dead(holder)
            continue
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return holder
        threading.Event().wait(min(pause, remaining))
        pause = min(pause * 2, 0.5)


def hold_lease(
    store: StoreInterface, session_id: str, owner: str, *, ttl_s: float = 30.0, wait_s: float = 10.0
) -> None:
    """Take ``session_id``'s lease for ``owner`` through ``store`` (a process without the daemon).

    Raises :class:`SessionBusyError` naming the holder when it stays busy for ``wait_s``.
    """
    holder = wait_for_lease(
        lambda: store.leases.acquire(session_id, owner, ttl_s),
        lambda dead: store.leases.release(session_id, dead),
        wait_s=wait_s,
    )
    if holder is not None:
        raise SessionBusyError(
            f"session {session_id} is busy in {describe_owner(holder)}; "
            "wait for it to finish, or talk to the session through that process"
        )
