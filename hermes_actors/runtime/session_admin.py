"""An operator's changes to a session on a running gateway: rename, end and delete through the session's actor.

``hermesctl sessions rename/end/delete`` with ``hermesd`` running (over the control socket) and the API server's
operator routes both come here. A rename or end goes to the supervisor, which runs it as a control turn of the
session's actor (activating one when the session has none): the actor's title and state change with the store's, so
a bare ``/title`` afterwards shows the new title and ``/compress`` numbers the child after it. An end cancels the
running turn, as ``/new`` does, without a save-memory turn, and the session's chats get a fresh session with their
next message. A delete ends a live session that way first, then deletes it on a connection of its own under its
lease (:func:`~hermes_actors.runtime.admin.delete_in_store`). A session another live process holds (a terminal
chat started before hermesd) is refused with :class:`SessionBusyError`, naming that process. In cluster mode a
shard host applies ``hermesctl sessions ... --dsn`` changes the same way (:mod:`hermes_actors.cluster.host.admin`):
what :class:`LiveAdmin` needs of its runtime is the :class:`AdminSite` protocol.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import AbstractContextManager
from typing import Protocol, TypeVar

from hermes_actors.errors import HermesError, SessionBusyError
from hermes_actors.runtime.admin import busy_text
from hermes_actors.runtime.leases import lease_owner_alive
from hermes_actors.runtime.protocol import AdminChange, EndSession, SetTitle
from hermes_actors.store import EndReason, SessionRecord, StoreInterface

__all__ = ["ADMIN_TIMEOUT_S", "AdminSite", "LiveAdmin"]

T = TypeVar("T")

ADMIN_TIMEOUT_S = 120.0  # how long to wait for a session's actor to apply a change (after a running turn)


class AdminSite(Protocol):
    """A running runtime whose sessions :class:`LiveAdmin` changes: hermesd's
    :class:`~hermes_actors.runtime.gateway.Gateway`, or a shard host (:mod:`hermes_actors.cluster.host.admin`)."""

    @property
    def lease_owner(self) -> str:
        """The owner string of this runtime's session leases."""
        ...

    def read(self) -> AbstractContextManager[StoreInterface]:
        """Borrow a store to read."""
        ...

    def admin(self, change: AdminChange) -> None:
        """Queue a rename or end as a control turn of the session's actor."""
        ...

    def delete_session(self, session_id: str) -> bool:
        """Delete a session under its lease; whether it existed."""
        ...


class LiveAdmin:
    """Applies an operator's changes on ``gateway``; ``owner_alive`` says whether another lease holder still runs
    (a shard host: nobody but itself, its shard lease decides)."""

    def __init__(
        self,
        gateway: AdminSite,
        *,
        timeout_s: float = ADMIN_TIMEOUT_S,
        owner_alive: Callable[[str], bool] = lease_owner_alive,
    ) -> None:
        self._gateway = gateway
        self._timeout = timeout_s
        self._owner_alive = owner_alive

    def check(self, session_id: str) -> SessionRecord:
        """The session's record; :class:`SessionBusyError` for one another live process holds (this process's own
        lease is fine), :class:`~hermes_actors.errors.SessionNotFoundError` for none."""
        with self._gateway.read() as store:
            record = store.get_session(session_id)
            holder = store.leases.holder(session_id)
        if holder is not None and holder != self._gateway.lease_owner and self._owner_alive(holder):
            raise SessionBusyError(busy_text(session_id, holder))
        return record

    def rename(self, record: SessionRecord, title: str) -> str | None:
        """Set (blank: clear) ``record``'s title through its actor; return the title stored."""
        done: Future[str | None] = Future()
        self._apply(record.id, SetTitle(text=title, done=done))
        return self._wait(done, record.id)

    def end(self, record: SessionRecord, reason: EndReason = EndReason.OPERATOR) -> bool:
        """End a live session through its actor with ``reason``; return whether it was live."""
        if not record.is_live:
            return False
        done: Future[None] = Future()
        self._apply(record.id, EndSession(reason=reason, done=done))
        self._wait(done, record.id)
        return True

    def delete(self, record: SessionRecord) -> tuple[bool, bool]:
        """End ``record`` if it is live, then delete it; return (it was ended, it was deleted)."""
        ended = self.end(record)
        if not ended and self._held_here(record.id):  # an ended session an actor of ours still holds
            self._retire(record)
        return ended, self._gateway.delete_session(record.id)

    def _held_here(self, session_id: str) -> bool:
        with self._gateway.read() as store:
            return store.leases.holder(session_id) == self._gateway.lease_owner

    def _retire(self, record: SessionRecord) -> None:
        """Have the actor holding ``record`` (ended) let it go: an end keeps the first reason, unbinds and retires."""
        done: Future[None] = Future()
        self._apply(record.id, EndSession(reason=EndReason.OPERATOR, done=done))
        self._wait(done, record.id)

    def _apply(self, session_id: str, control: SetTitle | EndSession) -> None:
        self._gateway.admin(AdminChange(session_id=session_id, control=control))

    def _wait(self, done: Future[T], session_id: str) -> T:
        try:
            return done.result(timeout=self._timeout)
        except concurrent.futures.TimeoutError:
            raise HermesError(
                f"session {session_id} did not take the change within {self._timeout:.0f} s: a turn of it is still "
                "running. The change is queued and applies when that turn ends; check with 'hermesctl sessions show'"
            ) from None
