"""A shard host's side of an operator's change (:mod:`hermes_actors.cluster.admin_requests`): applied through the
supervisor's ordinary admin path, under the shard fence, its outcome recorded in the completed row.

The host hands each pending admin row of the shards it holds to :meth:`ShardAdmin.submit`. A worker thread takes
the row (:meth:`~hermes_actors.store.pg.shard_queue.ShardQueue.take`: from then on the sender no longer withdraws
it) and applies it with :class:`~hermes_actors.runtime.session_admin.LiveAdmin`, as hermesd's control socket does:
a rename or end runs as a control turn of the session's actor (activated for it when it has none), committed under
the session's fenced lease, so the actor's title and state change with the store's; a delete ends a live session
that way first, then deletes it under its lease, the shard re-checked in the deleting transaction. The row is then
completed (``done``, or ``rejected`` with the error's text) in a transaction that re-checks the shard too: a host
that lost the shard meanwhile completes nothing, and the next holder applies the row again (a rename or end applied
twice changes nothing more; a second delete finds the session gone). A row found in a shard other than its
session's (moved there by a host that took it for a message) is moved back, and a payload that is not a change is
refused once.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager

import msgspec

from hermes_actors.cluster.admin_requests import AdminOp, AdminOutcome, AdminRequest, decode_request, encode_request
from hermes_actors.errors import HermesError
from hermes_actors.runtime.admin import admin_lease
from hermes_actors.runtime.assembly import Runtime
from hermes_actors.runtime.protocol import AdminChange
from hermes_actors.runtime.session_admin import LiveAdmin
from hermes_actors.store import EndReason, InboxState, StoreInterface
from hermes_actors.store.pg.shards import ShardFence, shard_of
from hermes_actors.store.pg.store import PostgresStore
from hermes_actors.store.records import InboxRow

__all__ = ["HOST_ADMIN_TIMEOUT_S", "ShardAdmin"]

_log = logging.getLogger(__name__)

HOST_ADMIN_TIMEOUT_S = 20.0
"""How long a host waits for a session's actor to apply a change; less than ``hermesctl``'s wait, so a change held
up by a running turn is reported as such rather than as a host that never answered."""


class ShardAdmin:
    """Applies the admin rows of a host's shards on its runtime (see the module docstring)."""

    def __init__(
        self,
        store: PostgresStore,
        fence: ShardFence,
        runtime: Runtime,
        *,
        name: str,
        timeout_s: float = HOST_ADMIN_TIMEOUT_S,
        workers: int = 4,
    ) -> None:
        self._store = store
        self._fence = fence
        self._runtime = runtime
        self._name = name
        self._admin = LiveAdmin(self, timeout_s=timeout_s, owner_alive=runtime.services.owner_alive)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"{name}-admin")
        self._lock = threading.Lock()
        self._running: set[int] = set()

    # -- the AdminSite LiveAdmin works on ------------------------------------------------------------------------

    @property
    def lease_owner(self) -> str:
        """The host runtime's lease owner."""
        return self._runtime.lease_owner

    def read(self) -> AbstractContextManager[StoreInterface]:
        """The host's store, to read."""
        return self._runtime.readers.reader()

    def admin(self, change: AdminChange) -> None:
        """Queue a rename or end as a control turn of the session's actor."""
        self._runtime.supervisor.admin(change)

    def delete_session(self, session_id: str) -> bool:
        """Delete the session under its lease, the shard re-checked in the deleting transaction."""
        owner = f"{self._name}:admin:{int(time.time() * 1000)}"
        alive = self._runtime.services.owner_alive
        with admin_lease(self._store, session_id, owner, owner_alive=alive), self._store.transaction():
            self._fence.check(self._store.shards, session_id)
            return self._store.delete_session(session_id)

    # -- rows ----------------------------------------------------------------------------------------------------

    def submit(self, row: InboxRow) -> int:
        """Apply ``row`` on a worker unless it is being applied already; how many were handed over (0 or 1)."""
        with self._lock:
            if row.id in self._running:
                return 0
            self._running.add(row.id)
        try:
            self._pool.submit(self._run, row)
        except RuntimeError:  # stopping
            with self._lock:
                self._running.discard(row.id)
            return 0
        return 1

    def _run(self, row: InboxRow) -> None:
        try:
            try:
                request = decode_request(row.payload)
            except msgspec.DecodeError as exc:  # not written by hermesctl: refused once, not retried every pull
                _log.warning("%s: inbox row %d is not an operator's change (%s); refused", self._name, row.id, exc)
                self._store.inbox.complete(row.id, session_id=None, state=InboxState.REJECTED)
                return
            shard = shard_of(request.session_id, self._fence.shards)
            if shard not in self._fence.held():  # moved off its session's shard (a host that knows no admin rows)
                self._store.shard_queue.reshard(row.id, shard)
                return
            if not self._store.shard_queue.take(row.id, self.lease_owner):
                return  # withdrawn by its sender, or completed meanwhile
            outcome = self._outcome(request)
            with self._store.transaction():
                state = InboxState.DONE if outcome.error is None else InboxState.REJECTED
                self._store.inbox.complete(row.id, session_id=request.session_id, state=state)
                self._store.shard_queue.record(
                    row.id, encode_request(msgspec.structs.replace(request, outcome=outcome))
                )
        except Exception:  # the row stays pending: applied again by the next pull here or by the shard's next holder
            _log.exception("%s: applying the operator's change of inbox row %d failed", self._name, row.id)
        finally:
            with self._lock:
                self._running.discard(row.id)

    def _outcome(self, request: AdminRequest) -> AdminOutcome:
        """Apply ``request``; what was done, or why nothing was (an expected refusal, or a failure's text)."""
        try:
            record = self._admin.check(request.session_id)
            match request.op:
                case AdminOp.RENAME:
                    return AdminOutcome(host=self._name, title=self._admin.rename(record, request.title or ""))
                case AdminOp.END:
                    reason = request.reason or EndReason.OPERATOR
                    return AdminOutcome(host=self._name, ended=self._admin.end(record, reason))
                case AdminOp.DELETE:
                    ended, deleted = self._admin.delete(record)
                    return AdminOutcome(host=self._name, ended=ended, deleted=deleted)
        except HermesError as exc:
            return AdminOutcome(host=self._name, error=str(exc))

    def stop(self) -> None:
        """Apply nothing more (a change being applied finishes or times out on its own)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
