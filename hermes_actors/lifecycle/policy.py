"""Session reset policy: when an idle or daily reset is due, and the ``session_reset:`` section that sets it.

Everything here is pure: no I/O and no clock reads. Times are unix seconds; "local" time is the ``tz`` argument,
or the system's local zone when it is ``None``. The supervisor asks :func:`next_reset` where to arm a session's
timer, :func:`reset_due` whether a reset is due when it fires (or when the next message arrives), and
:func:`bg_process_blocks_reset` whether a background process pins the session anyway.
"""

from __future__ import annotations

import enum
import math
import os
import time as system_time
from datetime import date, datetime, time, timedelta, tzinfo
from typing import Annotated

import msgspec
from msgspec import Meta

from hermes_actors.constraints import Rule, check_section, decode_section
from hermes_actors.errors import ConfigError
from hermes_actors.store.records import EndReason

__all__ = [
    "PlatformResetOverride",
    "ResetConfig",
    "ResetMode",
    "ResetOverride",
    "ResetPolicy",
    "bg_process_blocks_reset",
    "daily_deadline",
    "decode_reset_config",
    "first_instant",
    "idle_deadline",
    "is_idle_expired",
    "next_reset",
    "reset_due",
    "should_notify",
]

_SECTION = "session_reset"
_IdleMinutes = Annotated[int, Rule(Meta(ge=1), "must be at least 1 (minutes of inactivity)")]
_AtHour = Annotated[int, Rule(Meta(ge=0, le=23), "must be 0..23 (an hour of the local day)")]
_MaxAgeHours = Annotated[float, Rule(Meta(ge=0), "must be a non-negative number of hours")]


class ResetMode(enum.StrEnum):
    """Which automatic resets a session gets; ``both`` means whichever comes first."""

    NONE = "none"
    IDLE = "idle"
    DAILY = "daily"
    BOTH = "both"


class ResetPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """The reset rules of one session, after overrides (see :meth:`ResetConfig.policy_for`)."""

    mode: ResetMode = ResetMode.NONE
    idle_minutes: _IdleMinutes = 1440
    at_hour: _AtHour = 4
    notify: bool = True
    notify_exclude_platforms: tuple[str, ...] = ("api_server", "webhook")
    bg_process_max_age_hours: _MaxAgeHours = 24.0

    def __post_init__(self) -> None:
        check_section(self, _SECTION)


class ResetOverride(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Some of :class:`ResetPolicy`'s fields; those left unset keep the value of the less specific level."""

    mode: ResetMode | msgspec.UnsetType = msgspec.UNSET
    idle_minutes: _IdleMinutes | msgspec.UnsetType = msgspec.UNSET
    at_hour: _AtHour | msgspec.UnsetType = msgspec.UNSET
    notify: bool | msgspec.UnsetType = msgspec.UNSET
    notify_exclude_platforms: tuple[str, ...] | msgspec.UnsetType = msgspec.UNSET
    bg_process_max_age_hours: _MaxAgeHours | msgspec.UnsetType = msgspec.UNSET

    def apply(self, policy: ResetPolicy) -> ResetPolicy:
        """Return ``policy`` with the fields this override sets replaced."""
        changes = {field: getattr(self, field) for field in _POLICY_FIELDS}
        changes = {field: value for field, value in changes.items() if value is not msgspec.UNSET}
        return msgspec.structs.replace(policy, **changes) if changes else policy


class PlatformResetOverride(ResetOverride, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A platform's override, with further overrides for chat types on that platform."""

    chat_types: dict[str, ResetOverride] = {}


_POLICY_FIELDS = tuple(field.name for field in msgspec.structs.fields(ResetPolicy))


class ResetConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``session_reset:`` section: base rules plus partial overrides per chat type and per platform.

    ::

        session_reset:
          mode: idle                  # none | idle | daily | both
          idle_minutes: 1440
          at_hour: 4
          notify: true
          notify_exclude_platforms: [api_server, webhook]
          bg_process_max_age_hours: 24
          chat_types:                 # any chat type, on every platform
            group: {mode: none}
          platforms:
            telegram:
              mode: daily
              chat_types:             # this chat type on this platform only
                group: {mode: both, idle_minutes: 120}

    An override holds any of the six base fields and changes only those. :meth:`policy_for` applies, most
    specific last: the base, ``chat_types[chat_type]``, ``platforms[platform]``,
    ``platforms[platform].chat_types[chat_type]``.
    """

    mode: ResetMode = ResetMode.NONE
    idle_minutes: _IdleMinutes = 1440
    at_hour: _AtHour = 4
    notify: bool = True
    notify_exclude_platforms: tuple[str, ...] = ("api_server", "webhook")
    bg_process_max_age_hours: _MaxAgeHours = 24.0
    chat_types: dict[str, ResetOverride] = {}
    platforms: dict[str, PlatformResetOverride] = {}

    def __post_init__(self) -> None:
        check_section(self, _SECTION)  # and the overrides inside it

    @property
    def base(self) -> ResetPolicy:
        """The policy of a platform and chat type that no override names."""
        return ResetPolicy(**{field: getattr(self, field) for field in _POLICY_FIELDS})

    def policy_for(self, platform: str, chat_type: str | None) -> ResetPolicy:
        """Return the policy of sessions on ``platform`` in chats of ``chat_type`` (``None``: no chat type)."""
        platform_override = self.platforms.get(platform)
        layers = [
            None if chat_type is None else self.chat_types.get(chat_type),
            platform_override,
            None if chat_type is None or platform_override is None else platform_override.chat_types.get(chat_type),
        ]
        policy = self.base
        for layer in layers:
            if layer is not None:
                policy = layer.apply(policy)
        return policy


def decode_reset_config(obj: object, *, path: str = _SECTION) -> ResetConfig:
    """Decode the ``session_reset:`` section from plain data (parsed YAML or JSON; ``None`` means all defaults).

    Raises :class:`ConfigError` naming the field (``session_reset.platforms.telegram.mode``) for an unknown
    field, a value of the wrong type, or a value out of range; ``path`` is the section's own path.
    """
    try:
        return decode_section(obj, ResetConfig, path)
    except ConfigError as exc:  # a rule of __post_init__, which only knows the default section path
        if path == _SECTION or not exc.path.startswith(_SECTION):
            raise
        message = str(exc)[len(exc.path) + 2 :]
        raise ConfigError(path + exc.path[len(_SECTION) :], message) from None


def idle_deadline(last_active: float, policy: ResetPolicy) -> float:
    """Return the instant after which a session last active at ``last_active`` is idle-expired."""
    return last_active + policy.idle_minutes * 60


def is_idle_expired(now: float, last_active: float, policy: ResetPolicy) -> bool:
    """Return whether ``now`` is strictly after the idle deadline (whatever the policy's mode)."""
    return now > idle_deadline(last_active, policy)


def daily_deadline(last_active: float, policy: ResetPolicy, tz: tzinfo | None = None) -> float:
    """Return the first local ``at_hour:00`` strictly after ``last_active``.

    Activity before today's ``at_hour`` resets at it; activity at or after it resets tomorrow. On a day when
    ``at_hour:00`` falls in a daylight-saving gap the reset is at the end of the gap (the transition instant);
    on a day when it occurs twice, at its first occurrence.
    """
    day = _wall(last_active, tz).date()
    while True:
        deadline = _first_instant_at(day, policy.at_hour, tz)
        if deadline > last_active:
            return deadline
        day += timedelta(days=1)


def next_reset(policy: ResetPolicy, last_active: float, tz: tzinfo | None = None) -> tuple[float, EndReason] | None:
    """Return when the session resets if nothing happens before, and why; ``None`` when its mode is ``none``.

    With ``both``, the earlier deadline wins (the idle one on a tie).
    """
    idle = (idle_deadline(last_active, policy), EndReason.IDLE)
    if policy.mode == ResetMode.IDLE:
        return idle
    if policy.mode == ResetMode.NONE:
        return None
    daily = (daily_deadline(last_active, policy, tz), EndReason.DAILY)
    if policy.mode == ResetMode.DAILY:
        return daily
    return idle if idle[0] <= daily[0] else daily


def reset_due(now: float, last_active: float, policy: ResetPolicy, tz: tzinfo | None = None) -> EndReason | None:
    """Return why the session must reset at ``now``, or ``None`` if it need not.

    Idle is due strictly after its deadline, daily from its deadline on; with ``both``, idle wins if both are due.
    The background-process guard is separate: see :func:`bg_process_blocks_reset`.
    """
    if policy.mode in (ResetMode.IDLE, ResetMode.BOTH) and is_idle_expired(now, last_active, policy):
        return EndReason.IDLE
    if policy.mode in (ResetMode.DAILY, ResetMode.BOTH) and now >= daily_deadline(last_active, policy, tz):
        return EndReason.DAILY
    return None


def bg_process_blocks_reset(process_started_at: float | None, now: float, policy: ResetPolicy) -> bool:
    """Return whether a background process started at ``process_started_at`` keeps the session from resetting.

    It does while it is younger than ``bg_process_max_age_hours``; ``None`` means the session has none.
    """
    if process_started_at is None:
        return False
    return now - process_started_at < policy.bg_process_max_age_hours * 3600


def should_notify(policy: ResetPolicy, platform: str) -> bool:
    """Return whether users on ``platform`` are told that their session was reset."""
    return policy.notify and platform not in policy.notify_exclude_platforms


def _wall(instant: float, tz: tzinfo | None) -> datetime:
    """Return the naive local wall time of ``instant``."""
    return datetime.fromtimestamp(instant, tz).replace(tzinfo=None)


_INSTANTS: dict[tuple[date, int, object], float] = {}  # (day, hour, zone) -> _first_instant_at, for touch()
_INSTANTS_MAX = 4096


def _zone_key(tz: tzinfo | None) -> object:
    """What the wall clock of ``tz`` depends on; for local time (``None``), what ``TZ`` and ``time.tzset()`` set."""
    if tz is not None:
        return tz
    return ("local", os.environ.get("TZ"), system_time.timezone, system_time.altzone, system_time.tzname)


def _first_instant_at(day: date, hour: int, tz: tzinfo | None) -> float:
    """Return the first instant whose local wall time is ``day`` at ``hour:00`` or, in a gap, just past it.

    Remembered per (day, hour, zone): every turn of a session with a daily reset asks for today's or tomorrow's.
    """
    key = (day, hour, _zone_key(tz))
    instant = _INSTANTS.get(key)
    if instant is None:
        if len(_INSTANTS) >= _INSTANTS_MAX:
            _INSTANTS.clear()
        instant = _INSTANTS[key] = _compute_first_instant_at(day, hour, tz)
    return instant


def _compute_first_instant_at(day: date, hour: int, tz: tzinfo | None) -> float:
    return first_instant(datetime.combine(day, time(hour)), tz)


def first_instant(wall: datetime, tz: tzinfo | None) -> float:
    """Return the first instant whose local wall time is the naive ``wall``: its first occurrence when the clock goes
    back over it, the end of the gap (the transition instant) when the clock skips it."""
    # fold=0 and fold=1 pick the offset before and after a transition (PEP 495); naive means local time.
    instants = sorted({wall.replace(tzinfo=tz, fold=fold).timestamp() for fold in (0, 1)})
    existing = [instant for instant in instants if _wall(instant, tz) == wall]
    if existing:
        return existing[0]  # the first occurrence when the clock goes back
    # In a gap: one reading lies before the transition, the other after it. The transition instant is the first
    # whose wall time is not before ``wall``; transitions fall on whole seconds.
    low, high = math.floor(instants[0]), math.ceil(instants[-1])
    if _wall(low, tz) >= wall:
        return float(low)
    while high - low > 1:
        middle = (low + high) // 2
        if _wall(middle, tz) >= wall:
            high = middle
        else:
            low = middle
    return float(high)
