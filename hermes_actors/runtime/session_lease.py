"""One session's lease, as its turns hold it: taken before a turn, checked in every commit, given up at stop.

The lease (a ``leases`` row) says which process runs the session's turns; its epoch is the tenure of this
process's hold, so a commit made after another process took the session over is refused
(:meth:`Leases.fence <hermes_actors.store.leases.Leases.fence>` raises :class:`~hermes_actors.errors.LeaseLostError`).
"""

from __future__ import annotations

from collections.abc import Sequence

from hermes_actors.runtime.leases import wait_for_lease
from hermes_actors.runtime.services import SessionServices
from hermes_actors.store import StoreInterface
from hermes_actors.store.term_guard import FencedWrite

__all__ = ["SessionLease"]


class SessionLease:
    """Whether this process holds ``session_id``'s lease, and the epoch of that hold."""

    def __init__(self, session_id: str, services: SessionServices) -> None:
        self.session_id = session_id
        self._services = services
        self.held = False
        self._epoch = 0  # the tenure of this process's lease: every commit checks it
        # The database version at which a committed check saw the hold (Leases.fence), and the one the last
        # check returned, which becomes it once that check's commit is durable (confirm). A check relies on it for
        # half the lease's time, so a session that keeps turning keeps its lease extended by its turns as well as
        # by the supervisor's heartbeat.
        self._seen: int | None = None
        self._seen_until = 0.0
        self._checked: int | None = None
        self._checked_until = 0.0

    def acquire(self) -> str | None:
        """Take the lease, waiting up to ``lease_wait_s``; return the other holder when it stays busy."""
        services = self._services
        config = services.config
        writer = services.writer
        granted: list[int] = []

        def try_acquire() -> str | None:
            result = writer.call(
                lambda store: store.leases.grant(self.session_id, services.lease_owner, config.lease_ttl_s)
            )
            if isinstance(result, str):
                return result
            granted.append(result)
            return None

        holder = wait_for_lease(
            try_acquire,
            lambda dead: writer.call(lambda store: store.leases.release(self.session_id, dead)),
            wait_s=config.lease_wait_s,
            owner_alive=services.owner_alive,
        )
        self.held = holder is None
        self._seen = self._checked = None
        if self.held:
            self._epoch = granted[-1]
        return holder

    def adopt(self, epoch: int | None) -> None:
        """The session's first commit granted the lease at ``epoch`` (``None``: another process holds it)."""
        self.held = epoch is not None
        self._epoch = epoch or 0
        self._seen = self._checked = None

    def fence(self, store: StoreInterface, then: Sequence[FencedWrite] = ()) -> None:
        """Inside a commit: raise :class:`~hermes_actors.errors.LeaseLostError` unless the hold still stands;
        ``then``: the commit's first writes under it (:meth:`~hermes_actors.store.leases.Leases.fence`)."""
        self._checked = None
        services = self._services
        ttl = services.config.lease_ttl_s
        now = services.clock()
        seen = self._seen if now < self._seen_until else None
        self._checked = store.leases.fence(
            self.session_id, services.lease_owner, self._epoch, ttl, seen=seen, then=then
        )
        if self._checked != seen:
            self._checked_until = now + ttl / 2
        else:
            self._checked_until = self._seen_until

    def confirm(self) -> None:
        """The commit whose :meth:`fence` ran last is durable: later checks may rely on what it saw."""
        if self._checked is not None:
            self._seen, self._seen_until = self._checked, self._checked_until

    def forget(self) -> None:
        """The lease ended with a commit (released in it) or was taken over: the next turn takes it anew."""
        self.held = False
        self._seen = self._checked = None

    def release(self) -> None:
        """Give the lease up without waiting for the commit (the actor is stopping)."""
        self._seen = self._checked = None
        if self.held:
            self.held = False
            owner = self._services.lease_owner
            self._services.writer.submit(lambda store: store.leases.release(self.session_id, owner))
