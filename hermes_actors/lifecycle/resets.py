"""Idle and daily resets on the timer service.

After every turn that stores messages, the session's deadline (``reset:<session id>``, a durable timer row) moves
to the next reset its policy allows. When a deadline passes, the supervisor runs a save-memory turn, ends the
session with ``idle`` or ``daily``, unbinds its keys and tells the user where the policy says so. At start, every
live session gets its deadline again from its last activity, so sessions without a live actor reset on time too.
A session whose agent reports a background process younger than ``bg_process_max_age_hours`` is not reset; it is
checked again at every idle interval (at most :data:`BG_RECHECK_MAX_S` apart) until the process has ended or got too
old, and at once when the agent reports that the process ended (:meth:`ResetScheduler.background_ended`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from datetime import tzinfo
from typing import Protocol

import msgspec

from hermes_actors.agents.base import background_end_hook, background_probe
from hermes_actors.lifecycle.policy import (
    ResetConfig,
    ResetPolicy,
    bg_process_blocks_reset,
    next_reset,
    should_notify,
)
from hermes_actors.lifecycle.work import EndDue
from hermes_actors.routing import SessionSource
from hermes_actors.store import EndReason, StoreInterface

__all__ = [
    "BG_RECHECK_MAX_S",
    "PREFIX",
    "ResetScheduler",
    "Timers",
    "background_hook",
    "reset_notice",
    "watch_background_ends",
]

PREFIX = "reset:"
BG_RECHECK_MAX_S = 3600.0  # a reset held off by a background process is checked again at least this often
_log = logging.getLogger(__name__)


class _Due(msgspec.Struct, frozen=True, kw_only=True):
    reason: EndReason
    platform: str
    chat_type: str | None
    last_active: float


class Timers(Protocol):
    """The durable named timers the scheduler arms (the runtime's timer service implements it)."""

    def on(self, prefix: str, handler: Callable[[str, bytes | None], None]) -> None:
        """Call ``handler(name, payload)`` when a timer whose name starts with ``prefix`` fires."""
        ...

    def schedule(self, name: str, due_at: float, payload: bytes | None = None) -> None:
        """Arm (or move) timer ``name`` durably to fire at ``due_at``."""
        ...

    def load(self, name: str, due_at: float, payload: bytes | None = None) -> None:
        """Arm timer ``name``, whose deadline is stored already, without writing it again."""
        ...

    def cancel(self, name: str) -> None:
        """Remove timer ``name`` (and its stored deadline)."""
        ...

    def armed(self, name: str) -> bool:
        """Return whether timer ``name`` is armed."""
        ...


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_Due)

_NOTICES = {
    EndReason.IDLE: "This conversation was reset after {minutes} minutes without messages. Your next message "
    "starts a new one; /resume brings this one back.",
    EndReason.DAILY: "This conversation was reset for the day. Your next message starts a new one; /resume brings "
    "this one back.",
}


def _firing_time(deadline: float, reason: EndReason) -> float:
    """Timers fire once the clock reaches their time; an idle reset is due only strictly after its deadline."""
    return math.nextafter(deadline, math.inf) if reason is EndReason.IDLE else deadline


class ResetScheduler:
    """Arms, moves and fires the reset deadlines of sessions; see the module docstring."""

    def __init__(
        self,
        config: ResetConfig,
        timers: Timers,
        end: Callable[[EndDue], None],
        *,
        clock: Callable[[], float],
        tz: tzinfo | None = None,
        background_started_at: Callable[[str], float | None] | None = None,
    ) -> None:
        self._config = config
        self._timers = timers
        self._end = end
        self._clock = clock
        self._tz = tz
        self._background = background_started_at
        self._held: dict[str, bytes] = {}  # session id -> payload of its reset held off by a background process
        # The policy per (platform, chat type), kept: building one validates it, and every turn touches.
        self._policies: dict[tuple[str, str | None], ResetPolicy] = {}
        timers.on(PREFIX, self._fire)

    def _policy_for(self, platform: str, chat_type: str | None) -> ResetPolicy:
        policy = self._policies.get((platform, chat_type))
        if policy is None:
            policy = self._policies[(platform, chat_type)] = self._config.policy_for(platform, chat_type)
        return policy

    def touch(self, session_id: str, origin: SessionSource | None, last_active: float | None = None) -> None:
        """Move the session's deadline after activity at ``last_active`` (default: now)."""
        if origin is None:
            return
        self._held.pop(session_id, None)
        policy = self._policy_for(origin.platform, origin.chat_type)
        when = self._clock() if last_active is None else last_active
        upcoming = next_reset(policy, when, self._tz)
        name = PREFIX + session_id
        if upcoming is None:
            if self._timers.armed(name):
                self._timers.cancel(name)
            return
        due_at, reason = upcoming
        payload = _Due(reason=reason, platform=origin.platform, chat_type=origin.chat_type, last_active=when)
        self._timers.schedule(name, _firing_time(due_at, reason), _encoder.encode(payload))

    def forget(self, session_id: str) -> None:
        """Drop the deadline of a session that ended."""
        self._held.pop(session_id, None)
        if self._timers.armed(PREFIX + session_id):
            self._timers.cancel(PREFIX + session_id)

    def rebuild(self, store: StoreInterface) -> int:
        """Arm a deadline for every live session from its last activity (at start); return how many were armed."""
        armed = 0
        for record in store.list_sessions(ended=False, limit=None):
            origin = SessionSource(platform=record.source, chat_type=record.chat_type or "dm")
            policy = self._policy_for(origin.platform, origin.chat_type)
            upcoming = next_reset(policy, record.last_active_at, self._tz)
            if upcoming is None:
                continue
            due_at, reason = upcoming
            payload = _Due(
                reason=reason, platform=origin.platform, chat_type=origin.chat_type, last_active=record.last_active_at
            )
            self._timers.load(PREFIX + record.id, _firing_time(due_at, reason), _encoder.encode(payload))
            armed += 1
        return armed

    def reconfigure(self, config: ResetConfig, store: StoreInterface) -> int:
        """Switch to ``config`` and re-arm (or cancel) every live session's deadline; return how many are armed."""
        self._config = config
        self._policies = {}
        live = store.list_sessions(ended=False, limit=None)
        for record in live:
            origin = SessionSource(platform=record.source, chat_type=record.chat_type or "dm")
            self.touch(record.id, origin, record.last_active_at)
        return sum(self._timers.armed(PREFIX + record.id) for record in live)

    def _fire(self, name: str, payload: bytes | None) -> None:
        session_id = name.removeprefix(PREFIX)
        if payload is None:
            _log.warning("reset timer %s has no payload; dropped", name)
            return
        due = _decoder.decode(payload)
        policy = self._policy_for(due.platform, due.chat_type)
        now = self._clock()
        started = self._background(session_id) if self._background is not None else None
        if bg_process_blocks_reset(started, now, policy):
            assert started is not None
            too_old_at = started + policy.bg_process_max_age_hours * 3600
            retry_at = min(too_old_at, now + min(policy.idle_minutes * 60, BG_RECHECK_MAX_S))
            _log.info(
                "session %s keeps a background process; its reset is checked again at %.0f",
                session_id,
                retry_at,
                extra={"session_id": session_id, "platform": due.platform},  # on the timer's thread
            )
            self._held[session_id] = payload
            self._timers.schedule(name, retry_at, payload)
            return
        self._held.pop(session_id, None)
        notice = reset_notice(policy, due.platform, due.reason)
        self._end(EndDue(session_id=session_id, reason=due.reason, notice=notice))

    def background_ended(self, session_id: str) -> None:
        """The agent reports that the background process of ``session_id`` ended: a reset it held off is checked
        again now (any thread may call this)."""
        payload = self._held.pop(session_id, None)
        if payload is not None:
            self._timers.schedule(PREFIX + session_id, self._clock(), payload)


def reset_notice(policy: ResetPolicy, platform: str, reason: EndReason) -> str | None:
    """What a user on ``platform`` is told when the policy resets their session for ``reason`` (``None``: nothing)."""
    if not should_notify(policy, platform):
        return None
    return _NOTICES[reason].format(minutes=policy.idle_minutes)


def background_hook(agent: object) -> Callable[[str], float | None] | None:
    """Return the agent's ``background_started_at(session_id)`` method, if it has one."""
    return background_probe(agent)


def watch_background_ends(agent: object, scheduler: ResetScheduler) -> None:
    """Have ``agent`` tell ``scheduler`` when a background process ends, if it can report that."""
    hook = background_end_hook(agent)
    if hook is not None:
        hook(scheduler.background_ended)
