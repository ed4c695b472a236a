"""``hermesctl sessions rename/end/delete`` while ``hermesd`` runs: the control socket's :class:`SessionAdmin`.

A rename or end goes to the supervisor, which runs it as a control turn of the session's actor (activating one
when the session has none): the actor's title and state change with the store's, so a bare ``/title`` afterwards
shows the new title and ``/compress`` numbers the child after it. An end cancels the running turn, as ``/new``
does, without a save-memory turn, and the session's chats get a fresh session with their next message. A delete
ends a live session that way first (the user confirmed), then deletes it on a connection of its own under its
lease (:mod:`hermes_actors.runtime.admin`). A session another live process holds (a terminal chat started before
hermesd) is refused, naming that process.
"""

from __future__ import annotations

import concurrent.futures
from concurrent.futures import Future
from pathlib import Path
from typing import TypeVar

from hermes_actors.daemon.control import ADMIN_TIMEOUT_S, SessionAction, SessionAdmin, SessionAdminReply
from hermes_actors.errors import HermesError, SessionBusyError
from hermes_actors.runtime.admin import busy_text, delete_in_store
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.leases import lease_owner_alive, new_lease_owner
from hermes_actors.runtime.protocol import AdminChange, EndSession, SetTitle
from hermes_actors.store import EndReason, SessionRecord, Store

__all__ = ["SessionAdministration"]

T = TypeVar("T")

_ADMIN_ENDS = (EndReason.OPERATOR, EndReason.USER_EXIT)  # hermesctl sessions end; a terminal chat its user closed


class SessionAdministration:
    """Applies :class:`SessionAdmin` requests on a running gateway whose database is ``database``."""

    def __init__(self, gateway: Gateway, database: Path, *, timeout_s: float = ADMIN_TIMEOUT_S) -> None:
        self._gateway = gateway
        self._database = database
        self._timeout = timeout_s

    def handle(self, request: SessionAdmin) -> SessionAdminReply:
        """Apply ``request``; raise :class:`HermesError` saying why nothing changed."""
        record = self._check(request.session_id)
        match request.action:
            case SessionAction.RENAME:
                done: Future[str | None] = Future()
                self._apply(record.id, SetTitle(text=request.title or "", done=done))
                return SessionAdminReply(session_id=record.id, title=self._wait(done, record.id))
            case SessionAction.END:
                if request.reason not in _ADMIN_ENDS:
                    raise HermesError(
                        f"an end through hermesd takes reason {' or '.join(_ADMIN_ENDS)}, not {request.reason!r}"
                    )
                return SessionAdminReply(session_id=record.id, ended=self._end(record, request.reason))
            case SessionAction.DELETE:
                ended = self._end(record)
                if not ended and self._held_here(record.id):  # an ended session an actor of ours still holds
                    self._retire(record)
                with Store.open(self._database) as store:
                    deleted = delete_in_store(store, record.id, new_lease_owner())
                return SessionAdminReply(session_id=record.id, ended=ended, deleted=deleted)

    def _check(self, session_id: str) -> SessionRecord:
        """The session's record; refuse one another live process holds (this daemon's own lease is fine)."""
        with self._gateway.read() as store:
            record = store.get_session(session_id)
            holder = store.leases.holder(session_id)
        if holder is not None and holder != self._gateway.lease_owner and lease_owner_alive(holder):
            raise SessionBusyError(busy_text(session_id, holder))
        return record

    def _held_here(self, session_id: str) -> bool:
        with self._gateway.read() as store:
            return store.leases.holder(session_id) == self._gateway.lease_owner

    def _retire(self, record: SessionRecord) -> None:
        """Have the actor holding ``record`` (ended) let it go: an end keeps the first reason, unbinds and retires."""
        done: Future[None] = Future()
        self._apply(record.id, EndSession(reason=EndReason.OPERATOR, done=done))
        self._wait(done, record.id)

    def _end(self, record: SessionRecord, reason: EndReason = EndReason.OPERATOR) -> bool:
        """End a live session through its actor; return whether it was live."""
        if not record.is_live:
            return False
        done: Future[None] = Future()
        self._apply(record.id, EndSession(reason=reason, done=done))
        self._wait(done, record.id)
        return True

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
