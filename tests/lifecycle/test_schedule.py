"""Job schedules: each kind's due times, a cron expression in Europe/Berlin across both daylight-saving changes,
missed times collapsing into one, and the errors people read."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_actors.job_port import JobError
from hermes_actors.lifecycle.schedule import (
    JobsConfig,
    Schedule,
    ScheduleKind,
    parse_duration,
    parse_time,
    schedule_of,
)

BERLIN = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC).timestamp()


def _utc(year: int, month: int, day: int, hour: int, minute: int) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp()


def _berlin_walls(instants: list[float]) -> list[str]:
    return [datetime.fromtimestamp(t, BERLIN).strftime("%m-%d %H:%M %Z") for t in instants]


def _cron_times(schedule: Schedule, start: float, count: int) -> list[float]:
    times = [schedule.first_due(start, None)]
    while len(times) < count:
        following = schedule.following(times[-1], times[-1], None)
        assert following is not None
        times.append(following)
    return times


def test_in_is_one_run_after_the_delay_and_then_none() -> None:
    schedule = schedule_of(in_="3s", tz=None, default_zone=None, now=NOW)
    assert schedule.kind is ScheduleKind.AT
    assert schedule.first_due(NOW + 100, None) == NOW + 3
    assert schedule.following(NOW + 3, NOW + 3, None) is None


def test_at_reads_iso_times_in_the_zone_given_and_a_clock_time_as_the_next_one() -> None:
    berlin = schedule_of(at="2026-12-01T09:00", tz="Europe/Berlin", default_zone=None, now=NOW)
    assert berlin.first_due(NOW, None) == _utc(2026, 12, 1, 8, 0)
    with_offset = schedule_of(at="2026-12-01T09:00+02:00", tz="Europe/Berlin", default_zone=None, now=NOW)
    assert with_offset.first_due(NOW, None) == _utc(2026, 12, 1, 7, 0)
    assert parse_time("13:30", UTC, NOW) == _utc(2026, 3, 1, 13, 30)  # still ahead today
    assert parse_time("11:30", UTC, NOW) == _utc(2026, 3, 2, 11, 30)  # past today: tomorrow


def test_every_keeps_its_phase_and_collapses_missed_times_into_one() -> None:
    schedule = schedule_of(every="10m", tz=None, default_zone=None, now=NOW)
    first = schedule.first_due(NOW, None)
    assert first == NOW + 600
    assert schedule.following(first, first + 1, None) == first + 600
    # down for 35 minutes after the first due time: one late run, then the next time of the old phase
    assert schedule.following(first, first + 35 * 60, None) == first + 40 * 60


def test_cron_at_0230_in_berlin_runs_once_a_day_across_spring_forward_and_fall_back() -> None:
    schedule = schedule_of(cron="30 2 * * *", tz="Europe/Berlin", default_zone=None, now=NOW)
    zone = BERLIN
    spring = [schedule.first_due(_utc(2026, 3, 27, 12, 0), zone)]
    for _ in range(3):
        following = schedule.following(spring[-1], spring[-1], zone)
        assert following is not None
        spring.append(following)
    # 2026-03-29: 02:00 -> 03:00, so 02:30 does not exist: the run is at the end of the gap, once
    assert _berlin_walls(spring) == ["03-28 02:30 CET", "03-29 03:00 CEST", "03-30 02:30 CEST", "03-31 02:30 CEST"]
    assert spring[1] == _utc(2026, 3, 29, 1, 0)
    autumn = [schedule.first_due(_utc(2026, 10, 23, 12, 0), zone)]
    for _ in range(3):
        following = schedule.following(autumn[-1], autumn[-1], zone)
        assert following is not None
        autumn.append(following)
    # 2026-10-25: 03:00 -> 02:00, so 02:30 shows twice: one run, at the first
    assert _berlin_walls(autumn) == ["10-24 02:30 CEST", "10-25 02:30 CEST", "10-26 02:30 CET", "10-27 02:30 CET"]
    assert autumn[1] == _utc(2026, 10, 25, 0, 30)
    assert [b - a for a, b in itertools.pairwise(autumn)] == [86400, 90000, 86400]


def test_a_cron_time_reached_again_in_the_repeated_hour_does_not_run_twice() -> None:
    schedule = Schedule(kind=ScheduleKind.CRON, spec="30 2 * * *", tz="Europe/Berlin")
    first = _utc(2026, 10, 25, 0, 30)  # 02:30 CEST, the first
    # restarted in the repeated hour, after the second 02:15 (01:15 UTC): the next run is tomorrow's
    assert schedule.following(first, _utc(2026, 10, 25, 1, 15), BERLIN) == _utc(2026, 10, 26, 1, 30)
    assert schedule.first_due(_utc(2026, 10, 25, 1, 15), BERLIN) == _utc(2026, 10, 26, 1, 30)


def test_cron_in_the_gateways_zone_and_its_interval() -> None:
    schedule = schedule_of(cron="*/15 * * * *", tz=None, default_zone=UTC, now=NOW)
    assert schedule.tz is None
    assert _cron_times(schedule, NOW + 1, 3) == [NOW + 900, NOW + 1800, NOW + 2700]
    assert schedule.interval_s(NOW, UTC) == 900
    assert schedule_of(cron="@daily", tz="UTC", default_zone=None, now=NOW).interval_s(NOW, UTC) == 86400


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({}, "schedule: give exactly one of in (a delay such as 10m), at (a time), every (an interval) or cron"),
        ({"in_": "3s", "every": "1m"}, "got in, every"),
        ({"every": "soon"}, "every: 'soon' is not a duration; write a number and a unit (s, m, h, d, w)"),
        ({"in_": "0s"}, "in: '0s' must be a positive duration"),
        ({"cron": "61 * * * *"}, "cron: '61 * * * *' is not a valid cron expression"),
        ({"cron": "* * * * * *"}, "cron: '* * * * * *' must have five fields"),
        ({"cron": "0 9 * * *", "tz": "Mars/Olympus"}, "tz: unknown time zone 'Mars/Olympus'"),
        ({"every": "1h", "tz": "UTC"}, "tz: an interval (every) runs the same in every zone"),
        ({"at": "tomorrowish"}, "at: 'tomorrowish' is not a time; use ISO 8601"),
        ({"at": "25:00"}, "at: '25:00' is not a time of day"),
    ],
)
def test_a_schedule_that_does_not_parse_names_its_field_and_the_fix(fields: dict[str, str], problem: str) -> None:
    arguments: dict[str, str | None] = {"tz": None, **fields}
    with pytest.raises(JobError) as refused:
        schedule_of(**arguments, default_zone=None, now=NOW)
    assert problem in str(refused.value)
    assert str(refused.value).split(":")[0] in {"schedule", "every", "in", "cron", "tz", "at"}


@given(st.integers(min_value=1, max_value=10**6), st.sampled_from("smhdw"))
def test_a_duration_is_its_amount_times_its_unit(amount: int, unit: str) -> None:
    assert parse_duration(f"{amount}{unit}") == amount * {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[unit]


def test_durations_add_up_and_a_bare_number_is_seconds() -> None:
    assert parse_duration("1h30m") == 5400
    assert parse_duration("90") == 90
    assert parse_duration(" 2d 1s ") == 172801


def test_the_jobs_section_refuses_nonsense_by_field() -> None:
    from hermes_actors.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^jobs\.missed_after_s: must be a positive number of seconds"):
        JobsConfig(missed_after_s=0)
    assert not JobsConfig().agent_tool
