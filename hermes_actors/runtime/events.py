"""Events: what happened, told to the operator's webhooks (``events.webhooks``) through the durable outbox.

:meth:`Events.emit` runs inside the write that makes its fact true (a turn's commit, a session's end, a dead
letter): it adds one outbox row per webhook subscribed to the event's kind, so the event commits with its fact,
is rolled back with it, and after a crash is still there to send. A row's message is addressed to the webhook by
name (platform :data:`~hermes_actors.config.EVENTS_PLATFORM`, account and chat the webhook's name: one lane per
webhook, so one webhook's deliveries go in order and a failing receiver holds up only itself), carries the event's
id (``reply_to``, the ``webhook-id`` of every attempt) and its JSON body (``text``: ``{type, timestamp, data}``),
never a URL: the sender posts only to the URL configured for the name.

Committed rows reach the outbox through :class:`EventSweep`: an emit asks for a sweep, which reads the unsent rows
in the writer's next transaction and hands the new ones to the outbox once that has committed (so a row rolled
back is never sent); the runtime's tick sweeps too, and the start sends what an earlier process left. Where this
process sends them (one machine), a row is committed with its first attempt counted ahead, as a turn's reply is,
so its first send waits for no other commit; a cluster's dispatchers count their own.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import msgspec

from hermes_actors.config import EVENTS_PLATFORM, EventKind, EventsConfig
from hermes_actors.lifecycle.work import Delivery
from hermes_actors.messages import OutboundMessage, decode_outbound, encode
from hermes_actors.store import StoreInterface
from hermes_actors.store.records import OutboxRow
from hermes_actors.store.writer import StoreWriter, WriterClosedError

__all__ = ["RUN_PREFIX", "EventOutbox", "EventSweep", "Events", "event_body"]

RUN_PREFIX = "run_"
"""The message ids of the API's runs (``POST /v1/runs``): a turn answering one is also a ``run.completed``."""
_API_PLATFORM = "api_server"
_SWEEP_LIMIT = 1_000_000  # every unsent delivery: what was handed over is told apart by id


class EventOutbox(Protocol):
    """What :class:`EventSweep` hands deliveries to: the outbox router."""

    def deliver(self, outbox_id: int, message: OutboundMessage, *, counted: bool = False) -> None:
        """Send one row (``counted``: committed with its first attempt counted ahead)."""
        ...

    def redeliver(self, rows: list[OutboxRow]) -> int:
        """Send rows left unsent (their earlier attempts flag them); how many went to a sender."""
        ...


def event_body(kind: EventKind, at: float, data: Mapping[str, Any]) -> str:
    """The JSON body of an event: ``{"type", "timestamp" (ISO 8601, UTC), "data"}``."""
    stamp = datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return msgspec.json.encode({"type": str(kind), "timestamp": stamp, "data": data}).decode()


class Events:
    """Emits events into the outbox for the webhooks of ``config`` (none: every emit is a no-op); ``sweep`` is told
    of each emit (it hands the rows over after the commit)."""

    __slots__ = ("_clock", "_subscribers", "sweep")

    def __init__(self, config: EventsConfig | None = None, *, clock: Callable[[], float] = time.time) -> None:
        config = config or EventsConfig()
        self._subscribers = {kind: config.subscribers(kind) for kind in EventKind}
        self._clock = clock
        self.sweep: EventSweep | None = None

    @property
    def enabled(self) -> bool:
        """Whether any webhook is configured."""
        return any(self._subscribers.values())

    def wanted(self, kind: EventKind) -> bool:
        """Whether any webhook subscribes to ``kind``."""
        return bool(self._subscribers[kind])

    def emit(
        self, store: StoreInterface, kind: EventKind, data: Mapping[str, Any], *, session_id: str | None = None
    ) -> str | None:
        """Inside a write: queue the event for every webhook subscribed to ``kind``; its id (``None``: nobody wants
        it). ``data`` is what the body's ``data`` holds (JSON-encodable)."""
        names = self._subscribers[kind]
        if not names:
            return None
        event_id = f"evt_{uuid.uuid4().hex}"
        body = event_body(kind, self._clock(), data)
        if session_id is not None and store.find_session(session_id) is None:
            session_id = None  # a session deleted meanwhile: the row refers to none
        ahead = 1 if self.sweep is not None else 0  # this process sends it: its first attempt is counted now
        for name in names:
            message = OutboundMessage(
                platform=EVENTS_PLATFORM, account_id=name, chat_id=name, session_id=session_id, text=body
            )
            store.outbox.add(
                session_id=session_id,
                platform=EVENTS_PLATFORM,
                account_id=name,
                chat_id=name,
                thread_id=None,
                payload=encode(msgspec.structs.replace(message, reply_to=event_id)),
                attempts=ahead,
            )
        if self.sweep is not None:
            self.sweep.after_commit()
        return event_id

    def turn_completed(
        self,
        store: StoreInterface,
        session_id: str,
        deliveries: Sequence[Delivery],
        reply: OutboundMessage | None,
        cancelled: bool,
    ) -> None:
        """Inside a turn's commit: ``turn.completed``, and ``run.completed`` for each API run it answers (a turn
        paused for approval: outcome ``paused``, the run's status ``requires_approval``)."""
        if not (self.wanted(EventKind.TURN_COMPLETED) or self.wanted(EventKind.RUN_COMPLETED)):
            return
        outcome = "cancelled" if cancelled else "failed" if reply is None or reply.error is not None else "ok"
        if outcome == "ok" and reply is not None and reply.approval is not msgspec.UNSET:
            outcome = "paused"  # on tool calls waiting for a person's approval (approval.requested says which)
        text = reply.text if reply is not None and not cancelled else None
        first = deliveries[0].message.source if deliveries else None
        self.emit(
            store,
            EventKind.TURN_COMPLETED,
            {
                "session_id": session_id,
                "outcome": outcome,
                "platform": first.platform if first else None,
                "account_id": first.account_id if first else None,
                "chat_id": first.chat_id if first else None,
                "message_ids": [d.message.message_id for d in deliveries],
                "reply": text,
            },
            session_id=session_id,
        )
        status = {"ok": "completed", "failed": "failed", "cancelled": "cancelled", "paused": "requires_approval"}[
            outcome
        ]
        for delivery in deliveries:
            message = delivery.message
            if message.source.platform == _API_PLATFORM and message.message_id.startswith(RUN_PREFIX):
                data = {"run_id": message.message_id, "session_id": session_id, "status": status, "output": text}
                self.emit(store, EventKind.RUN_COMPLETED, data, session_id=session_id)

    def session_ended(self, store: StoreInterface, session_id: str, reason: str) -> None:
        """Inside the commit that ends a session: ``session.ended``."""
        if self.wanted(EventKind.SESSION_ENDED):
            data = {"session_id": session_id, "reason": reason}
            self.emit(store, EventKind.SESSION_ENDED, data, session_id=session_id)


class EventSweep:
    """Hands committed event deliveries to the outbox (see the module docstring), on the writer's thread.

    What was handed over and is still unsent is not handed again: the outbox holds it (sending, or waiting for a
    retry). A row this process emitted (past the newest unsent row of its first sweep) and never handed over goes
    with its attempt counted ahead; any other (left by an earlier process, replayed) as a row found unsent.
    """

    __slots__ = ("_boundary", "_handed", "_outbox", "_scheduled", "_writer")

    def __init__(self, writer: StoreWriter, outbox: EventOutbox) -> None:
        self._writer = writer
        self._outbox = outbox
        self._handed: set[int] = set()  # unsent rows the outbox holds (writer thread only)
        self._scheduled = False  # a sweep is queued on the writer (writer thread only)
        self._boundary: int | None = None  # rows past it were emitted by this process (after its first sweep)

    def after_commit(self) -> None:
        """Inside a write (an emit): sweep once the write has committed; one sweep serves every emit before it."""
        if not self._scheduled:
            self._scheduled = True
            self.sweep()

    def sweep(self) -> None:
        """Read the unsent deliveries in the writer's next transaction and hand the new ones over after it."""
        try:
            self._writer.submit(self._unsent, then=self._handover)
        except WriterClosedError:  # stopping: the next start sends them
            self._scheduled = False

    def _unsent(self, store: StoreInterface) -> list[OutboxRow]:
        self._scheduled = False  # an emit from here on needs a sweep of its own
        return store.outbox.unsent(EVENTS_PLATFORM, limit=_SWEEP_LIMIT)

    def _handover(self, rows: list[OutboxRow]) -> None:
        fresh = [row for row in rows if row.id not in self._handed]
        self._handed = {row.id for row in rows}  # sent and given-up rows are no longer unsent: forgotten
        if self._boundary is None:
            self._boundary = max((row.id for row in rows), default=0)
            self.hand_over(fresh)
            return
        ahead = [row for row in fresh if row.id > self._boundary and row.attempts == 1]
        counted = {row.id for row in ahead}
        self.hand_over([row for row in fresh if row.id not in counted])
        for row in ahead:
            self._outbox.deliver(row.id, decode_outbound(row.payload), counted=True)

    def hand_over(self, rows: list[OutboxRow]) -> None:
        """On the writer's thread: send ``rows`` as found unsent (a replay's, an earlier process's); they are not
        handed over again while unsent."""
        self._handed.update(row.id for row in rows)
        if rows and self._outbox.redeliver(rows) == 0:  # no sender (yet): the next sweep offers them again
            self._handed.difference_update(row.id for row in rows)
