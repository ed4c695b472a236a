"""When a scheduled job is due: its :class:`Schedule` (a time, an interval, or a cron expression in a zone), read
from what people type, and the ``jobs:`` section of ``config.yaml`` (:class:`JobsConfig`).

Pure: no I/O and no clock reads (``now`` is an argument). Times are unix seconds; a zone of ``None`` is the
system's local time, as for the daily reset.

A cron expression names wall-clock times of its zone, and each is the first instant showing it
(:func:`~hermes_actors.lifecycle.policy.first_instant`, the daily reset's rule): on the day the clock skips it (spring
forward), the job runs once, at the end of the gap; on the day it shows twice (fall back), once, at its first
occurrence. Cron expressions are parsed and stepped by ``croniter`` (a dependency) on naive wall times, so its
own zone handling never comes into it.
"""

from __future__ import annotations

import enum
import itertools
import math
import re
from datetime import datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Annotated

import msgspec
from msgspec import Meta

from hermes_actors.constraints import PositiveSeconds, Rule, check_section
from hermes_actors.job_port import JobError
from hermes_actors.lifecycle.policy import first_instant

if TYPE_CHECKING:
    from croniter import croniter

__all__ = [
    "JobsConfig",
    "MissedRun",
    "Schedule",
    "ScheduleKind",
    "parse_duration",
    "parse_time",
    "schedule_of",
    "zone_named",
]

_MACROS = frozenset({"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"})
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$")
_CRON_STEPS = 1000  # wall times looked at for one due time (a skipped or repeated hour costs a few)


class ScheduleKind(enum.StrEnum):
    """How a job's times are given (the stored ``jobs.schedule``)."""

    AT = "at"  # once, at a time
    EVERY = "every"  # at an interval from its first time
    CRON = "cron"  # the times of a cron expression in a zone


class MissedRun(enum.StrEnum):
    """What a due time missed while nothing ran (a stopped daemon, a host failover) does (``jobs.missed``)."""

    RUN = "run"  # runs once, late (several missed times still run once)
    SKIP = "skip"  # is skipped; the job waits for its next time


def zone_named(name: str | None, default: tzinfo | None) -> tzinfo | None:
    """The zone ``name`` (an IANA name such as ``Europe/Berlin``), or ``default`` for ``None``."""
    if name is None:
        return default
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise JobError(f"tz: unknown time zone {name!r}; use an IANA name such as Europe/Berlin or UTC") from None


def parse_duration(text: str, field: str = "every") -> float:
    """Seconds from ``3s``, ``10m``, ``1h30m``, ``2d`` or ``1w`` (units s, m, h, d, w; a bare number is seconds)."""
    stripped = text.strip().lower()
    try:
        seconds = float(stripped)
    except ValueError:
        parts = _DURATION.findall(stripped)
        if not parts or _DURATION.sub("", stripped).strip():
            raise JobError(
                f"{field}: {text!r} is not a duration; write a number and a unit (s, m, h, d, w), such as 30s, 10m "
                "or 1h30m"
            ) from None
        seconds = sum(float(amount) * _UNITS[unit] for amount, unit in parts)
    if not math.isfinite(seconds) or seconds <= 0:
        raise JobError(f"{field}: {text!r} must be a positive duration, such as 30s or 10m")
    return seconds


def parse_time(text: str, zone: tzinfo | None, now: float) -> float:
    """The instant of ``text``: an ISO 8601 time (``2026-12-01T09:00``, with ``Z`` or an offset, or in ``zone``) or
    ``HH:MM[:SS]``, the next such local time in ``zone`` (today when it is still ahead, else tomorrow)."""
    stripped = text.strip()
    clock = _CLOCK.match(stripped)
    if clock is not None:
        hour, minute, second = int(clock[1]), int(clock[2]), int(clock[3] or 0)
        if hour > 23 or minute > 59 or second > 59:
            raise JobError(f"at: {text!r} is not a time of day; use HH:MM, such as 09:30")
        today = datetime.fromtimestamp(now, zone).replace(tzinfo=None)
        wall = today.replace(hour=hour, minute=minute, second=second, microsecond=0)
        instant = first_instant(wall, zone)
        return instant if instant > now else first_instant(wall + timedelta(days=1), zone)
    try:
        parsed = datetime.fromisoformat(stripped.replace("Z", "+00:00"))
    except ValueError:
        raise JobError(
            f"at: {text!r} is not a time; use ISO 8601 such as 2026-12-01T09:00 (in --tz, or with an offset) or "
            "HH:MM for the next such time"
        ) from None
    if parsed.tzinfo is not None:
        return parsed.timestamp()
    return first_instant(parsed, zone)


def _croniter() -> type[croniter]:
    try:
        from croniter import croniter
    except ImportError:
        raise JobError(
            "cron: cron schedules need croniter, a dependency of hermes-actors: reinstall it (pip install .)"
        ) from None
    return croniter


def _check_cron(expression: str) -> str:
    text = " ".join(expression.split())
    macro = text.lower() in _MACROS
    if not macro and len(text.split(" ")) != 5:
        raise JobError(
            f"cron: {expression!r} must have five fields (minute hour day-of-month month day-of-week), such as "
            "'30 2 * * *', or be one of " + ", ".join(sorted(_MACROS))
        )
    if not _croniter().is_valid(text):
        raise JobError(f"cron: {expression!r} is not a valid cron expression; such as '30 2 * * *' or '*/15 * * * *'")
    return text.lower() if macro else text


class Schedule(msgspec.Struct, frozen=True, kw_only=True):
    """A job's times: its ``kind`` and ``spec`` as stored (unix seconds, seconds, or a cron expression) and, for a
    cron expression, its zone's name (``None``: the gateway's)."""

    kind: ScheduleKind
    spec: str
    tz: str | None = None

    def first_due(self, now: float, zone: tzinfo | None) -> float:
        """The first due time of a job created (or resumed) at ``now``; a past ``at`` stays as it is (late)."""
        match self.kind:
            case ScheduleKind.AT:
                return float(self.spec)
            case ScheduleKind.EVERY:
                return now + float(self.spec)
            case ScheduleKind.CRON:
                return self._cron_after(now, zone)

    def following(self, due_at: float, now: float, zone: tzinfo | None) -> float | None:
        """The due time after ``due_at`` once that one has been dealt with at ``now``: the first one after both
        (the times missed in between collapse into the run at ``due_at``); ``None`` for a one-shot job."""
        match self.kind:
            case ScheduleKind.AT:
                return None
            case ScheduleKind.EVERY:
                every = float(self.spec)
                steps = max(1, math.floor((now - due_at) / every) + 1)
                return due_at + steps * every
            case ScheduleKind.CRON:
                return self._cron_after(max(due_at, now), zone)

    def interval_s(self, now: float, zone: tzinfo | None) -> float | None:
        """The shortest gap between the next few due times (``None`` for a one-shot job)."""
        if self.kind is ScheduleKind.AT:
            return None
        if self.kind is ScheduleKind.EVERY:
            return float(self.spec)
        times = [self._cron_after(now, zone)]
        for _ in range(4):
            times.append(self._cron_after(times[-1], zone))
        return min(b - a for a, b in itertools.pairwise(times))

    def describe(self) -> str:
        """The schedule in words: ``once at 2026-12-01T09:00:00+00:00``, ``every 10m``, ``cron '30 2 * * *'
        (Europe/Berlin)``."""
        match self.kind:
            case ScheduleKind.AT:
                stamp = datetime.fromtimestamp(float(self.spec)).astimezone()
                return f"once at {stamp.isoformat(timespec='seconds')}"
            case ScheduleKind.EVERY:
                return f"every {_duration_text(float(self.spec))}"
            case ScheduleKind.CRON:
                return f"cron '{self.spec}' ({self.tz or 'local time'})"

    def _cron_after(self, after: float, zone: tzinfo | None) -> float:
        """The first due time of the cron expression strictly after ``after`` (see the module docstring)."""
        wall = datetime.fromtimestamp(after, zone).replace(tzinfo=None, microsecond=0)
        times = _croniter()(self.spec, wall)
        for _ in range(_CRON_STEPS):
            instant = first_instant(times.get_next(datetime), zone)
            if instant > after:
                return instant
        raise JobError(f"cron: '{self.spec}' found no time after {wall.isoformat()}")


def _duration_text(seconds: float) -> str:
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def schedule_of(
    *,
    in_: str | None = None,
    at: str | None = None,
    every: str | None = None,
    cron: str | None = None,
    tz: str | None,
    default_zone: tzinfo | None,
    now: float,
) -> Schedule:
    """The schedule of exactly one of ``in_``, ``at``, ``every`` and ``cron`` (see
    :class:`~hermes_actors.job_port.JobSpec`); :class:`JobError` names what is wrong."""
    given = [name for name, value in (("in", in_), ("at", at), ("every", every), ("cron", cron)) if value is not None]
    if len(given) != 1:
        raise JobError(
            "schedule: give exactly one of in (a delay such as 10m), at (a time), every (an interval) or cron "
            f"(an expression with tz); got {', '.join(given) or 'none'}"
        )
    zone = zone_named(tz, default_zone)
    if in_ is not None:
        return Schedule(kind=ScheduleKind.AT, spec=repr(now + parse_duration(in_, "in")))
    if at is not None:
        return Schedule(kind=ScheduleKind.AT, spec=repr(parse_time(at, zone, now)))
    if every is not None:
        if tz is not None:
            raise JobError("tz: an interval (every) runs the same in every zone; give tz with cron or at only")
        return Schedule(kind=ScheduleKind.EVERY, spec=repr(parse_duration(every)))
    assert cron is not None
    return Schedule(kind=ScheduleKind.CRON, spec=_check_cron(cron), tz=tz)


_AtLeastOne = Annotated[int, Rule(Meta(ge=1), "must be at least 1")]


class JobsConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``jobs:`` section: scheduled turns.

    ``agent_tool`` offers every session that starts the ``schedule`` tool, which lets the agent add, list and cancel
    jobs of the asking principal in its chat (at most ``agent_tool_max_jobs`` active or paused ones each, none more
    often than every ``agent_tool_min_interval_s``). ``missed_after_s``: a run that starts later than this after its
    due time (the daemon was stopped, a cluster host failed over) counts as missed, and runs once late or is skipped
    as the job says.
    """

    agent_tool: bool = False
    agent_tool_max_jobs: _AtLeastOne = 20
    agent_tool_min_interval_s: PositiveSeconds = 60.0
    missed_after_s: PositiveSeconds = 120.0

    def __post_init__(self) -> None:
        check_section(self, "jobs")
