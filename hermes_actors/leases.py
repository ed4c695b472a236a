"""Lease owners: which process holds a session's turns.

An owner string is ``host:pid:start-ms``. A lease whose owner is a process of this host that no longer exists
is dead and may be taken over at once; other leases end when they expire.
"""

from __future__ import annotations

import os
import socket
import time

__all__ = ["describe_owner", "lease_owner_alive", "new_lease_owner"]


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
