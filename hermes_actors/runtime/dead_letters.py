"""Dead letters: what the runtime could not do, recorded with why (never left pending or dropped unseen), and their
replays.

- A turn that fails unexpectedly (a bug in a step; an agent's failure is answered, not this) dead-letters its
  messages (:func:`fail_turn`): their inbox rows are completed as refused, so no start runs them again by itself,
  each gets a dead letter with the error, the sender is told, and ``message.dead_lettered`` is emitted.
- A reply the outbox gives up (:func:`give_up`: a permanent failure, or a failed reply that may not be retried)
  dead-letters the messages it answers, with the reply named; an event delivery given up is a dead letter of its
  own, with no event (it would go the way of the one that failed).
- :class:`Replays` does the replays ``hermesctl`` asks for, on the runtime's tick and at start: a given-up reply
  or delivery goes to the outbox again, a failed message to the supervisor as a replayed delivery.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import msgspec

from hermes_actors.config import EVENTS_PLATFORM, EventKind
from hermes_actors.messages import OutboundError, OutboundMessage, decode_inbound
from hermes_actors.runtime.events import Events, EventSweep
from hermes_actors.runtime.protocol import Deliver, Delivery, RunTurn
from hermes_actors.runtime.records import answered
from hermes_actors.runtime.services import SessionServices, queue_reply, reply_for
from hermes_actors.store import InboxState, StoreInterface
from hermes_actors.store.dead_letters import Revived
from hermes_actors.store.readers import ReaderPool
from hermes_actors.store.records import InboxKind, OutboxRow
from hermes_actors.store.writer import StoreWriter, WriterClosedError

__all__ = ["GiveUp", "Replays", "dead_letter", "fail_turn", "give_up"]

_log = logging.getLogger(__name__)

GiveUp = Callable[[StoreInterface, int, OutboundMessage, str], int]
"""Inside a write: give the outbox row up (``outbox_id``, its message, why); how many messages that dead-lettered."""


def _known(store: StoreInterface, session_id: str | None) -> str | None:
    return session_id if session_id is not None and store.find_session(session_id) is not None else None


def dead_letter(
    store: StoreInterface,
    events: Events,
    *,
    inbox_id: int,
    message_id: str,
    platform: str,
    session_id: str | None,
    reason: str,
    outbox_id: int | None = None,
) -> None:
    """Inside a write: record that message ``inbox_id`` could not be answered, and emit ``message.dead_lettered``."""
    session_id = _known(store, session_id)
    letter = store.dead_letters.add(
        platform=platform, reason=reason, inbox_id=inbox_id, outbox_id=outbox_id, session_id=session_id
    )
    data = {
        "dead_letter_id": letter,
        "inbox_id": inbox_id,
        "message_id": message_id,
        "platform": platform,
        "session_id": session_id,
        "reply_outbox_id": outbox_id,
        "reason": reason,
    }
    events.emit(store, EventKind.MESSAGE_DEAD_LETTERED, data, session_id=session_id)


def give_up(events: Events, store: StoreInterface, outbox_id: int, message: OutboundMessage, reason: str) -> int:
    """Inside a write: the outbox gives row ``outbox_id`` up (see the module docstring); how many messages that
    dead-lettered. ``functools.partial(give_up, events)`` is a :data:`GiveUp`."""
    store.outbox.abandon(outbox_id, reason)
    if message.platform == EVENTS_PLATFORM:
        session_id = _known(store, message.session_id)
        store.dead_letters.add(platform=message.platform, reason=reason, outbox_id=outbox_id, session_id=session_id)
        return 0
    count = 0
    for message_id in message.answers:
        row = store.inbox.find(message.platform, message.account_id, message_id)
        if row is None:
            continue
        why = f"its reply (outbox row {outbox_id}) could not be delivered: {reason}"
        dead_letter(
            store,
            events,
            inbox_id=row.id,
            message_id=message_id,
            platform=message.platform,
            session_id=row.session_id or message.session_id,
            reason=why,
            outbox_id=outbox_id,
        )
        count += 1
    return count


def fail_turn(services: SessionServices, session_id: str, request: RunTurn, error: str) -> int:
    """After a turn failed unexpectedly: dead-letter its messages still pending and tell their sender; how many.
    A store that refuses this too leaves them pending, for the next start (logged)."""
    deliveries = [d for d in request.deliveries if d.inbox_id > 0]
    if not deliveries:
        return 0
    reason = f"the turn failed: {error}"
    first = deliveries[0].message
    text = (
        "Your message could not be answered: the gateway failed while handling it. The operator can see why and run "
        "it again (hermesctl messages dead-letters)."
    )
    notice = reply_for(first.source, session_id, text, first.message_id, answers=answered(deliveries))
    notice = msgspec.structs.replace(notice, error=OutboundError.AGENT_FAILED)
    events = services.events

    def write(store: StoreInterface) -> tuple[int, int | None]:
        pending = store.inbox.pending_among([d.inbox_id for d in deliveries])
        failed = [d for d in deliveries if d.inbox_id in pending]
        known = _known(store, session_id)
        for delivery in failed:
            store.inbox.complete(delivery.inbox_id, session_id=known, state=InboxState.REJECTED)
            dead_letter(
                store,
                events,
                inbox_id=delivery.inbox_id,
                message_id=delivery.message.message_id,
                platform=delivery.message.source.platform,
                session_id=known,
                reason=reason,
            )
        return len(failed), queue_reply(store, notice) if failed else None

    try:
        count, outbox_id = services.writer.call(write)
    except Exception:
        _log.exception(
            "session %s: its failed turn's messages could not be dead-lettered; they stay pending", session_id
        )
        return 0
    if outbox_id is not None:
        services.outbox.deliver(outbox_id, notice)
    services.metrics.messages_ended("dead_lettered", count)
    return count


class Replays:
    """Does the replays asked for in the store (``hermesctl messages replay``, ``hermesctl events replay``):
    :meth:`run` looks on a reader whether any waits and takes them in one write; once it has committed, it sends
    replies and deliveries again (``redeliver``; event deliveries through ``sweep``) and hands messages to the
    supervisor (``deliver``)."""

    __slots__ = ("_deliver", "_owner", "_readers", "_redeliver", "_sweep", "_writer")

    def __init__(
        self,
        writer: StoreWriter,
        *,
        owner: str,
        deliver: Callable[[Deliver], None],
        redeliver: Callable[[list[OutboxRow]], int],
        sweep: EventSweep | None,
        readers: ReaderPool | None = None,
    ) -> None:
        self._writer = writer
        self._readers = readers
        self._owner = owner
        self._deliver = deliver
        self._redeliver = redeliver
        self._sweep = sweep

    def run(self) -> None:
        """Take the replays asked for (never waits for the commit; writes nothing when none waits)."""
        if self._readers is not None:
            with self._readers.reader() as store:
                if not store.dead_letters.replays_asked():
                    return
        owner = self._owner
        try:
            self._writer.submit(lambda store: store.dead_letters.take_replays(owner), then=self._revived)
        except WriterClosedError:  # stopping: the next start takes them
            return

    def _revived(self, revived: Revived) -> None:
        replies = [row for row in revived.sends if row.platform != EVENTS_PLATFORM]
        if replies:
            self._redeliver(replies)
        if self._sweep is not None:  # on this (the writer's) thread, before any sweep could take them as new
            self._sweep.hand_over([row for row in revived.sends if row.platform == EVENTS_PLATFORM])
        for row in revived.messages:
            if row.kind is not InboxKind.MESSAGE:
                continue
            delivery = Delivery(inbox_id=row.id, message=decode_inbound(row.payload), replayed=True)
            self._deliver(Deliver(routing_key=row.routing_key, delivery=delivery))
        if revived.sends or revived.messages:
            _log.info(
                "replaying %d dead-lettered messages and sending %d given-up replies or deliveries again",
                len(revived.messages),
                len(revived.sends),
            )
