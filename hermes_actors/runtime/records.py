"""Helpers of the turn logic: where a session came from, which deliveries are still pending, what a new session
starts with and what its first commit created."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import msgspec

from hermes_actors.errors import HermesError
from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.prefix import FrozenPrefix
from hermes_actors.runtime.protocol import Delivery, RunTurn
from hermes_actors.store import MessageRecord, NewMessage, SessionRecord, StoreInterface
from hermes_actors.store.readers import ReaderPool

_log = logging.getLogger(__name__)

__all__ = [
    "CreatedRow",
    "NewSession",
    "answered",
    "appended",
    "create_session_row",
    "looked_up_again",
    "record_attachments",
    "source_of",
    "still_pending",
]


def source_of(record: SessionRecord) -> SessionSource:
    """Return the source a session was opened from."""
    return SessionSource(
        platform=record.source,
        account_id=record.account_id,
        scope_id=record.scope_id,
        chat_type=record.chat_type or "dm",
        chat_id=record.chat_id,
        thread_id=record.thread_id,
        user_id=record.user_id,
        chat_name=record.chat_name,
        user_name=record.user_name,
    )


def answered(deliveries: Sequence[Delivery]) -> tuple[str, ...]:
    """The platform message ids a reply to ``deliveries`` answers."""
    return tuple(d.message.message_id for d in deliveries)


def appended(session_id: str, ids: Sequence[int], new: Sequence[NewMessage], now: float) -> list[MessageRecord]:
    """The messages ``new`` as a commit stored them under ``ids`` at ``now`` (for the session's cached transcript)."""
    return [
        MessageRecord(
            id=i,
            session_id=session_id,
            role=m.role.value,
            content=m.content,
            created_at=now,
            tool_calls=m.tool_calls,
            tool_name=m.tool_name,
            tool_call_id=m.tool_call_id,
            token_count=m.token_count,
            platform_message_id=m.platform_message_id,
        )
        for i, m in zip(ids, new, strict=True)
    ]


def record_attachments(store: StoreInterface, deliveries: Sequence[Delivery], ids: Sequence[int], now: float) -> None:
    """Commit the attachment rows of each delivery's user message (the first ``len(deliveries)`` of ``ids``)."""
    for delivery, message_id in zip(deliveries, ids, strict=False):
        for attachment in delivery.message.attachments:
            store.attachments.add(message_id, attachment, at=now)


def looked_up_again(turn: RunTurn) -> RunTurn:
    """``turn`` to run again after a refused or failed commit, each delivery looked up first (:func:`still_pending`):
    while it waited, another process may have taken the session and answered some."""
    deliveries = tuple(d if d.replayed else msgspec.structs.replace(d, replayed=True) for d in turn.deliveries)
    return msgspec.structs.replace(turn, deliveries=deliveries)


def still_pending(readers: ReaderPool, deliveries: Sequence[Delivery]) -> list[Delivery]:
    """The deliveries whose inbox rows no turn has completed yet (a replay may find some done already).

    Only replayed deliveries are looked up, and only they can be dropped: a fresh one was committed by this process
    just now, and the commit refuses a row that is not pending anyway (:class:`StaleTurnError`). A turn can batch
    both kinds (a redelivery queued behind the replay of its chat's older messages).
    """
    ids = [d.inbox_id for d in deliveries if d.inbox_id > 0 and d.replayed]
    if not ids:
        return list(deliveries)
    with readers.reader() as store:
        pending = store.inbox.pending_among(ids)
    return [d for d in deliveries if d.inbox_id <= 0 or not d.replayed or d.inbox_id in pending]


class NewSession(msgspec.Struct, frozen=True, kw_only=True):
    """A session its first turn creates: where it comes from, the routing key that leads to it, and the agent its
    first message asked for (the API's ``model``; ``None``: the bindings choose)."""

    source: SessionSource
    routing_key: str
    agent: str | None = None

    @classmethod
    def of(cls, routing_key: str, message: InboundMessage) -> NewSession:
        """The session ``message`` starts under ``routing_key``."""
        agent = message.agent if isinstance(message.agent, str) else None
        return cls(source=message.source, routing_key=routing_key, agent=agent)


class CreatedRow(msgspec.Struct, frozen=True, kw_only=True):
    """What a session's first commit created: its row, and the lease epoch (``None``: another process holds it)."""

    record: SessionRecord
    epoch: int | None


def create_session_row(
    store: StoreInterface,
    session_id: str,
    create_with: NewSession,
    *,
    title: str | None,
    prefix: FrozenPrefix,
    model: str | None,
    agent: str,
    lease_owner: str,
    lease_ttl_s: float,
) -> CreatedRow:
    """Inside a session's first commit: its row (with ``title`` when it is free; the agent's name, its model and the
    frozen prefix recorded as the session starts), its route and its lease. Changes nothing but the store, so the
    commit may be rolled back and run again; the caller adopts the result once it is durable."""
    source, routing_key = create_with.source, create_with.routing_key

    def create(title: str | None = None) -> SessionRecord:
        return store.create_session(
            source,
            session_id=session_id,
            routing_key=routing_key,
            model=model,
            system_prompt=prefix.system_prompt,
            title=title,
            agent=agent,
            tools=prefix.tools,
        )

    try:
        record = create(title)
    except HermesError as exc:
        if title is None:
            raise
        _log.info("session %s: title %r not applied: %s", session_id, title, exc)
        record = create()
    store.set_route(routing_key, session_id)
    granted = store.leases.grant(session_id, lease_owner, lease_ttl_s, new=True)
    return CreatedRow(record=record, epoch=granted if isinstance(granted, int) else None)
