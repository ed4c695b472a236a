"""An operator's changes to a session (``hermesctl sessions rename/end/delete``) when no live actor applies them.

With ``hermesd`` running, a rename or end goes to the session's actor (a control turn, see
:meth:`LifecycleCommands.admin <hermes_actors.lifecycle.handlers.LifecycleCommands.admin>`). Without it, the change
is made on the store under the session's lease, the one a daemon or terminal chat running the session would hold:
:func:`admin_lease` takes it (a dead holder's at once) or refuses naming the process that has it and what to do,
and gives it back afterwards. A deletion always runs this way, on a connection of its own, so the media files of
the deleted messages are removed once the deletion has committed.

Who holds a lease is said by :func:`describe_holder` (hermesd with its pid, a terminal chat, another process),
never by the internal owner string alone.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from hermes_actors.errors import HermesError, SessionBusyError
from hermes_actors.runtime.leases import lease_owner_alive, wait_for_lease
from hermes_actors.runtime.protocol import RunTurn
from hermes_actors.runtime.services import SessionServices
from hermes_actors.store import EndReason, SessionRecord, StoreInterface

__all__ = [
    "admin_lease",
    "busy_text",
    "delete_in_store",
    "describe_holder",
    "end_in_store",
    "process_kind",
    "rename_in_store",
    "settle_unanswered",
]

ADMIN_LEASE_TTL_S = 60.0  # long enough for a deletion of a large session; released as soon as it is done


def process_kind(argv: list[str]) -> str:
    """``hermesd``, ``chat`` (``hermesctl chat``), ``hermesctl`` or ``other``, from a process's command line."""
    words = [Path(a).name for a in argv[:4]]
    if any(w == "hermesd" or w.endswith("cli.hermesd") for w in words):
        return "hermesd"
    if any(w == "hermesctl" or w.endswith("cli.hermesctl") for w in words):
        return "chat" if "chat" in argv[1:] else "hermesctl"
    return "other"


def _command_line(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [os.fsdecode(part) for part in raw.split(b"\0") if part]


def describe_holder(owner: str) -> tuple[str, str]:
    """Say which process holds a lease (``hermesd (pid 42)``, ``a terminal chat (hermesctl chat, pid 42)``, ...)
    and what to do about it, from the lease's owner string (``host:pid:start-ms``)."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return (
            f"a process (pid {pid_text or '?'}) on host {host}",
            "stop it there, or wait until its lease expires, then try again",
        )
    argv = _command_line(int(pid_text))
    match process_kind(argv):
        case "hermesd":
            return (
                f"hermesd (pid {pid_text})",
                "it holds a live session's lease until the session goes idle; run this command where it reaches "
                "hermesd's control socket (the same --home and daemon.socket), or stop hermesd and try again",
            )
        case "chat":
            return f"a terminal chat (hermesctl chat, pid {pid_text})", "leave that chat with /exit, then try again"
        case "hermesctl":
            return f"another hermesctl command (pid {pid_text})", "wait until it has finished, then try again"
    name = f" ({Path(argv[0]).name})" if argv else ""
    return f"process {pid_text}{name}", "stop that process, or wait until its lease expires, then try again"


def busy_text(session_id: str, owner: str) -> str:
    """``session S is open in <process>, so nothing was changed; <what to do>``: a refusal naming the holder the
    way a user knows it."""
    what, fix = describe_holder(owner)
    return f"session {session_id} is open in {what}, so nothing was changed; {fix}"


@contextlib.contextmanager
def admin_lease(
    store: StoreInterface, session_id: str, owner: str, *, owner_alive: Callable[[str], bool] = lease_owner_alive
) -> Iterator[None]:
    """Hold ``session_id``'s lease for ``owner`` around the block; raise :class:`SessionBusyError` (with
    :func:`busy_text`) when a live process holds it. A lease whose holder is not alive by ``owner_alive`` (a dead
    process of this host; in a shard host, anyone but the host) is taken over."""
    holder = wait_for_lease(
        lambda: store.leases.acquire(session_id, owner, ADMIN_LEASE_TTL_S),
        lambda dead: store.leases.release(session_id, dead),
        wait_s=0.0,
        owner_alive=owner_alive,
    )
    if holder is not None:
        raise SessionBusyError(busy_text(session_id, holder))
    try:
        yield
    finally:
        store.leases.release(session_id, owner)


def rename_in_store(store: StoreInterface, session_id: str, title: str | None, owner: str) -> str | None:
    """Set (blank or ``None``: clear) the title under the session's lease; return what was stored."""
    with admin_lease(store, session_id, owner):
        return store.set_title(session_id, title)


def end_in_store(store: StoreInterface, session_id: str, owner: str) -> SessionRecord:
    """End the session as an operator (:attr:`EndReason.OPERATOR`) under its lease and unbind its routing keys, so
    its chats start a fresh session; a session that ended already keeps its first reason. Return its record."""
    with admin_lease(store, session_id, owner), store.transaction():
        record = store.end_session(session_id, EndReason.OPERATOR)
        store.unbind_session(session_id)
    return record


def delete_in_store(
    store: StoreInterface, session_id: str, owner: str, *, owner_alive: Callable[[str], bool] = lease_owner_alive
) -> bool:
    """Delete the session under its lease (its media files go once the deletion committed); return whether it
    existed."""
    with admin_lease(store, session_id, owner, owner_alive=owner_alive):
        return store.delete_session(session_id)


def settle_unanswered(services: SessionServices, session_id: str, request: RunTurn) -> None:
    """After an operator's control turn that will not run again: if its future is still open (the turn did not
    apply it: another process holds the lease, or it failed), answer it with why."""
    done: Future[Any] | None = getattr(request.control, "done", None)
    if done is None or done.done():
        return
    try:
        with services.readers.reader() as store:
            holder = store.leases.holder(session_id)
    except Exception:  # the answer must go out whatever the store does; the log has the failure
        holder = None
    error = (
        SessionBusyError(busy_text(session_id, holder))
        if holder is not None and holder != services.lease_owner
        else HermesError(f"the change to session {session_id} failed; hermesd's log says why")
    )
    with contextlib.suppress(Exception):  # answered meanwhile
        done.set_exception(error)
