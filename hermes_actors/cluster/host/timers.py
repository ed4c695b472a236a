"""Idle and daily resets in cluster mode: found by scanning the shards a host holds, run as inbox rows.

A shard host arms no in-memory reset timers (a host can lose a shard at any moment, and its timers with it).
Instead :meth:`ShardTimers.scan` (every ``timer_scan_s``) reads the live sessions of the shards the host holds that
were last active before :func:`reset_cutoff` (no session active since can be due under any policy of the
configuration; the store filters by shard too) and, for each whose reset is due by its policy and not held off by a
background process younger than ``bg_process_max_age_hours`` (:mod:`hermes_actors.cluster.host.background`), commits an
inbox row of kind :attr:`~hermes_actors.store.records.InboxKind.TIMER` into the session's shard, deduplicated by
session and deadline.
Whichever host holds the shard pulls the row like any other and tells its supervisor
:class:`~hermes_actors.lifecycle.work.EndDue`: the end is a control turn of the session, committed under the same
shard fence as every turn. The row is completed once the session has ended (or is active again, which moved its
deadline), so a reset lost with a host is pulled again by the next holder; a row whose session got a young
background process since the scan stays pending until the process has ended or got too old.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import tzinfo

import msgspec

from hermes_actors.lifecycle.policy import (
    ResetConfig,
    ResetMode,
    ResetPolicy,
    bg_process_blocks_reset,
    daily_deadline,
    next_reset,
)
from hermes_actors.lifecycle.resets import reset_notice
from hermes_actors.lifecycle.work import EndDue
from hermes_actors.store import EndReason, InboxState
from hermes_actors.store.pg.shards import ShardFence, shard_of
from hermes_actors.store.pg.store import PostgresStore
from hermes_actors.store.records import InboxKind, InboxRow, SessionRecord

__all__ = ["ResetDue", "ShardTimers", "reset_cutoff"]

_log = logging.getLogger(__name__)


class ResetDue(msgspec.Struct, frozen=True, kw_only=True):
    """The payload of a reset's inbox row: the session, why, what its users are told, the deadline it met."""

    session_id: str
    reason: EndReason
    notice: str | None
    due_at: float


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(ResetDue)
_NO_SUCH = "\x00"  # a platform or chat type no override names


def _policies(config: ResetConfig) -> list[ResetPolicy]:
    """Every policy ``config`` can give a session: each named platform and chat type, and neither."""
    chat_types = {*config.chat_types, *(c for p in config.platforms.values() for c in p.chat_types)}
    return [
        config.policy_for(platform, chat_type)
        for platform in [*config.platforms, _NO_SUCH]
        for chat_type in [*chat_types, _NO_SUCH, None]
    ]


def _latest_daily_boundary(policy: ResetPolicy, now: float, tz: tzinfo | None) -> float:
    """The last local ``at_hour:00`` at or before ``now``: a session last active before it is due a daily reset."""
    boundary = after = now - 3 * 86400
    while (deadline := daily_deadline(after, policy, tz)) <= now:
        boundary = after = deadline
    return boundary


def reset_cutoff(config: ResetConfig, now: float, tz: tzinfo | None = None) -> float | None:
    """The latest last activity from which some policy of ``config`` has a reset due at ``now`` (``None``: no policy
    resets at all): a session active after it is not due, whatever its platform and chat type."""
    cutoffs: list[float] = []
    for policy in _policies(config):
        if policy.mode in (ResetMode.IDLE, ResetMode.BOTH):
            cutoffs.append(now - policy.idle_minutes * 60)
        if policy.mode in (ResetMode.DAILY, ResetMode.BOTH):
            cutoffs.append(_latest_daily_boundary(policy, now, tz))
    return max(cutoffs) if cutoffs else None


class ShardTimers:
    """Turns due resets of the sessions in ``fence``'s shards into inbox rows; settles them once done.

    ``background_started_at`` answers, for some sessions, since when each has a background process (see
    :class:`~hermes_actors.cluster.host.background.BackgroundWatch`); without it no reset is held off.
    """

    def __init__(
        self,
        store: PostgresStore,
        fence: ShardFence,
        config: ResetConfig,
        *,
        tz: tzinfo | None = None,
        clock: Callable[[], float] = time.time,
        background_started_at: Callable[[Sequence[str]], dict[str, float]] | None = None,
    ) -> None:
        self._store = store
        self._fence = fence
        self._config = config
        self._tz = tz
        self._clock = clock
        self._background = background_started_at

    def _due(self, record: SessionRecord | None, now: float) -> ResetDue | None:
        """The reset of ``record`` due at ``now`` by its policy, background processes aside."""
        if record is None or not record.is_live:
            return None
        policy = self._config.policy_for(record.source, record.chat_type or "dm")
        upcoming = next_reset(policy, record.last_active_at, self._tz)
        if upcoming is None or upcoming[0] > now:
            return None
        due_at, reason = upcoming
        return ResetDue(
            session_id=record.id, reason=reason, notice=reset_notice(policy, record.source, reason), due_at=due_at
        )

    def _held_off(self, records: Sequence[SessionRecord], now: float) -> set[str]:
        """Those of ``records`` whose background process is young enough to keep them from resetting now."""
        if self._background is None or not records:
            return set()
        started = self._background([record.id for record in records])
        held = set()
        for record in records:
            policy = self._config.policy_for(record.source, record.chat_type or "dm")
            if bg_process_blocks_reset(started.get(record.id), now, policy):
                held.add(record.id)
                _log.info(
                    "session %s keeps a background process; its reset waits for the next scan",
                    record.id,
                    extra={"session_id": record.id, "platform": record.source},
                )
        return held

    def scan(self) -> int:
        """Commit a reset row for every session of a held shard whose reset is due; how many rows were new."""
        held = self._fence.held()
        now = self._clock()
        cutoff = reset_cutoff(self._config, now, self._tz)
        if cutoff is None or not held:
            return 0
        candidates = self._store.reset_scan.candidates(sorted(held), self._fence.shards, cutoff)
        due = {record.id: reset for record in candidates if (reset := self._due(record, now)) is not None}
        blocked = self._held_off([record for record in candidates if record.id in due], now)
        added = 0
        for session_id, reset in due.items():
            if session_id in blocked:
                continue
            inbox_id = self._store.shard_queue.add(
                shard_of(session_id, self._fence.shards),
                kind=InboxKind.TIMER,
                platform="",
                account_id="",
                platform_message_id=f"reset:{session_id}:{reset.due_at:.0f}",
                routing_key=f"reset:{session_id}",
                payload=_encoder.encode(reset),
            )
            added += inbox_id is not None
        return added

    def take(self, row: InboxRow) -> EndDue | None:
        """The end a pending reset row asks for, or ``None``: when the row is settled (the session ended or its
        deadline moved: the row is completed, under the host's shard fence), or when a background process holds
        the reset off (the row stays pending and is taken again by a later pull)."""
        due = _decoder.decode(row.payload)
        record = self._store.find_session(due.session_id)
        now = self._clock()
        current = self._due(record, now)
        if current is None or current.due_at != due.due_at:
            with self._store.transaction():
                self._store.inbox.complete(row.id, session_id=due.session_id, state=InboxState.DONE)
            return None
        assert record is not None
        if self._held_off([record], now):
            return None
        return EndDue(session_id=due.session_id, reason=due.reason, notice=due.notice)

    @staticmethod
    def shard_of_row(row: InboxRow, shards: int) -> int:
        """The shard a reset row belongs to: its session's."""
        return shard_of(_decoder.decode(row.payload).session_id, shards)
