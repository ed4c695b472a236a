"""The deadlines of requests for approval: no answer in time is a denial.

A pausing turn's commit stores its request's deadline as a durable timer (``approval:<id>``, the ``timers`` table the
resets use) and the session arms it here (:meth:`ApprovalTimeouts.arm`); at start every pending request's deadline
is armed again from the ``approvals`` table (:meth:`ApprovalTimeouts.rebuild`), so a restart loses none. When one
passes, the denial is committed as an inbox message of the chat that was asked (``/deny ID ...``, one per request:
:func:`~hermes_actors.lifecycle.approvals.timeout_decision`) and delivered like any message, so it runs in order with
the session's other turns and is replayed after a crash like them. A request of a session that has ended is closed
instead, without a message. Both are :func:`deny_overdue`, which the shard hosts of a cluster run too (they arm no
timers: :mod:`hermes_actors.cluster.host.approvals` scans for the deadlines passed).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from hermes_actors.lifecycle.approvals import TIMEOUT, timeout_decision
from hermes_actors.routing import KeyPolicy, build_session_key
from hermes_actors.runtime.approval_requests import TIMER_PREFIX, timer_name
from hermes_actors.runtime.job_runs import LocalRuns, QueuedMessage, RunQueue
from hermes_actors.runtime.protocol import Deliver, Delivery
from hermes_actors.runtime.services import SessionServices
from hermes_actors.runtime.timers import TimerService
from hermes_actors.store import StoreInterface
from hermes_actors.store.approvals import ApprovalState
from hermes_actors.store.writer import StoreWriter, WriterClosedError

__all__ = ["ApprovalTimeouts", "deny_overdue", "wire_approvals"]

_log = logging.getLogger(__name__)


class ApprovalTimeouts:
    """Arms the deadlines of pending requests and denies those that pass (see the module docstring); ``deliver``
    hands the supervisor a committed message."""

    __slots__ = ("_deliver", "_policy", "_queue", "_timers", "_writer")

    def __init__(
        self,
        writer: StoreWriter,
        timers: TimerService,
        deliver: Callable[[Deliver], None],
        *,
        key_policy: KeyPolicy,
        owner: str,
    ) -> None:
        self._writer = writer
        self._timers = timers
        self._deliver = deliver
        self._policy = key_policy
        self._queue = LocalRuns(owner)
        timers.on(TIMER_PREFIX, self._fire)

    def arm(self, approval_id: int, due_at: float) -> None:
        """Arm the deadline of a request whose commit stored its timer."""
        self._timers.load(timer_name(approval_id), due_at)

    def rebuild(self, store: StoreInterface) -> int:
        """At start: arm the deadline of every pending request; how many."""
        pending = store.approvals.pending(limit=1_000_000)
        for row in pending:
            self.arm(row.id, row.expires_at)
        return len(pending)

    def _fire(self, name: str, payload: bytes | None) -> None:
        approval_id = int(name.removeprefix(TIMER_PREFIX))
        policy, queue = self._policy, self._queue

        def deny(store: StoreInterface) -> Deliver | None:
            denied = deny_overdue(store, approval_id, policy=policy, queue=queue)
            if denied is None:
                return None
            inbox_id, queued = denied
            return Deliver(routing_key=queued.routing_key, delivery=Delivery(inbox_id=inbox_id, message=queued.message))

        def then(due: Deliver | None) -> None:
            if due is not None:
                _log.info("approval %d: nobody answered in time; denied", approval_id)
                self._deliver(due)

        with contextlib.suppress(WriterClosedError):  # stopping: the next start arms it again
            self._writer.submit(deny, then=then)


def deny_overdue(
    store: StoreInterface, approval_id: int, *, policy: KeyPolicy, queue: RunQueue
) -> tuple[int, QueuedMessage] | None:
    """Inside a write, once request ``approval_id``'s deadline has passed: queue its denial as a message of the chat
    asked (``queue``: this process's inbox, or a cluster shard's); the inbox row's id and the message, or ``None``
    (answered in time, denied before, or its session ended: then it is closed without a message)."""
    row = store.approvals.get(approval_id)
    if row is None or row.state is not ApprovalState.PENDING:
        return None  # answered in time (or gone with its session)
    record = store.find_session(row.session_id)
    if record is None or not record.is_live:
        store.approvals.decide(approval_id, approved=False, by=TIMEOUT, reason="the conversation ended")
        store.approvals.resume(approval_id)
        return None
    # The deadline was set by the session's clock, created_at by the store's, a moment apart: 30 s, not 29.99998.
    message = timeout_decision(row, round(row.expires_at - row.created_at, 1))
    key = build_session_key(message.source, policy)
    queued = QueuedMessage(message=message, routing_key=key, route=store.get_route(key))
    inbox_id = queue.add(store, queued)
    return None if inbox_id is None else (inbox_id, queued)  # None: denied before (a timer that fired twice)


def wire_approvals(
    services: SessionServices, timers: TimerService, deliver: Callable[[Deliver], None], *, armed: bool
) -> ApprovalTimeouts | None:
    """Give a runtime's sessions the deadlines of their requests (``armed``: the whole runtime, not a terminal
    chat's in-process one, which leaves other chats' requests to the daemon), and arm the pending ones now."""
    if not armed:
        return None
    timeouts = ApprovalTimeouts(
        services.writer, timers, deliver, key_policy=services.config.key_policy, owner=services.lease_owner
    )
    services.arm_approval = timeouts.arm
    with services.readers.reader() as store:
        timeouts.rebuild(store)
    return timeouts
