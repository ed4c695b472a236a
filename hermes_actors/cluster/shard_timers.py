"""Idle and daily resets in cluster mode: found by scanning the shards a host holds, run as inbox rows.

A shard host arms no in-memory reset timers (a host can lose a shard at any moment, and its timers with it).
Instead :meth:`ShardTimers.scan` (every ``timer_scan_s``) looks at the live sessions of the shards the host holds
and, for each whose reset is due by its policy, commits an inbox row of platform :data:`TIMER_PLATFORM` into the
session's shard, deduplicated by session and deadline. Whichever host holds the shard pulls the row like any other
and tells its supervisor :class:`~hermes_actors.lifecycle.work.EndDue`: the end is a control turn of the session,
committed under the same shard fence as every turn. The row is completed once the session has ended (or is active
again, which moved its deadline), so a reset lost with a host is pulled again by the next holder.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import tzinfo

import msgspec

from hermes_actors.lifecycle.policy import ResetConfig, next_reset
from hermes_actors.lifecycle.resets import reset_notice
from hermes_actors.lifecycle.work import EndDue
from hermes_actors.store import EndReason, InboxState
from hermes_actors.store.pg.shards import ShardFence, shard_of
from hermes_actors.store.pg.store import PostgresStore
from hermes_actors.store.records import InboxRow

__all__ = ["TIMER_PLATFORM", "ResetDue", "ShardTimers"]

TIMER_PLATFORM = "hermes-timer"
"""The ``platform`` of inbox rows that are resets, not messages."""


class ResetDue(msgspec.Struct, frozen=True, kw_only=True):
    """The payload of a reset's inbox row: the session, why, what its users are told, the deadline it met."""

    session_id: str
    reason: EndReason
    notice: str | None
    due_at: float


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(ResetDue)


class ShardTimers:
    """Turns due resets of the sessions in ``fence``'s shards into inbox rows; settles them once done."""

    def __init__(
        self,
        store: PostgresStore,
        fence: ShardFence,
        config: ResetConfig,
        *,
        tz: tzinfo | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._fence = fence
        self._config = config
        self._tz = tz
        self._clock = clock

    def _due(self, session_id: str) -> tuple[float, EndReason, str | None] | None:
        record = self._store.find_session(session_id)
        if record is None or not record.is_live:
            return None
        policy = self._config.policy_for(record.source, record.chat_type or "dm")
        upcoming = next_reset(policy, record.last_active_at, self._tz)
        if upcoming is None or upcoming[0] > self._clock():
            return None
        return upcoming[0], upcoming[1], reset_notice(policy, record.source, upcoming[1])

    def scan(self) -> int:
        """Commit a reset row for every session of a held shard whose reset is due; how many rows were new."""
        held = set(self._fence.held())
        added = 0
        for record in self._store.list_sessions(ended=False, limit=None):
            shard = shard_of(record.id, self._fence.shards)
            if shard not in held:
                continue
            due = self._due(record.id)
            if due is None:
                continue
            due_at, reason, notice = due
            payload = _encoder.encode(ResetDue(session_id=record.id, reason=reason, notice=notice, due_at=due_at))
            inbox_id = self._store.shard_queue.add(
                shard,
                platform=TIMER_PLATFORM,
                account_id="",
                platform_message_id=f"reset:{record.id}:{due_at:.0f}",
                routing_key=f"{TIMER_PLATFORM}:{record.id}",
                payload=payload,
            )
            added += inbox_id is not None
        return added

    def take(self, row: InboxRow) -> EndDue | None:
        """The end a pending reset row asks for, or ``None`` when it is settled: the session ended or its deadline
        moved (the row is completed then, under the host's shard fence)."""
        due = _decoder.decode(row.payload)
        current = self._due(due.session_id)
        if current is None or current[0] != due.due_at:
            with self._store.transaction():
                self._store.inbox.complete(row.id, session_id=due.session_id, state=InboxState.DONE)
            return None
        return EndDue(session_id=due.session_id, reason=due.reason, notice=due.notice)

    @staticmethod
    def shard_of_row(row: InboxRow, shards: int) -> int:
        """The shard a reset row belongs to: its session's."""
        return shard_of(_decoder.decode(row.payload).session_id, shards)
