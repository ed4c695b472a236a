from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from hermes_actors.errors import ConfigError
from hermes_actors.lifecycle import policy as policy_module
from hermes_actors.lifecycle.policy import (
    PlatformResetOverride,
    ResetConfig,
    ResetMode,
    ResetOverride,
    ResetPolicy,
    bg_process_blocks_reset,
    daily_deadline,
    decode_reset_config,
    idle_deadline,
    is_idle_expired,
    next_reset,
    reset_due,
    should_notify,
)
from hermes_actors.store import EndReason

HOUR = 3600.0
DAY = 24 * HOUR


def zone(name: str) -> ZoneInfo:
    """Return the zone, or skip the test on a machine without time zone data (``pip install tzdata``)."""
    try:
        return ZoneInfo(name)
    except ZoneInfoNotFoundError:
        pytest.skip(f"no time zone data for {name} (install tzdata)")


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp()


def local(name: str, year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> float:
    """Return the instant of a local wall time (its first occurrence when the clock goes back)."""
    return datetime(year, month, day, hour, minute, second, tzinfo=zone(name)).timestamp()


def daily(at_hour: int) -> ResetPolicy:
    return ResetPolicy(mode=ResetMode.DAILY, at_hour=at_hour)


def test_the_public_names_are_pinned() -> None:
    assert policy_module.__all__ == [
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


def test_the_defaults_are_hermes_defaults() -> None:
    assert ResetPolicy() == ResetPolicy(
        mode=ResetMode.NONE,
        idle_minutes=1440,
        at_hour=4,
        notify=True,
        notify_exclude_platforms=("api_server", "webhook"),
        bg_process_max_age_hours=24,
    )
    assert decode_reset_config({}).base == ResetPolicy()
    assert decode_reset_config(None) == ResetConfig()


# Idle


def test_a_session_is_idle_expired_strictly_after_its_deadline() -> None:
    policy = ResetPolicy(mode=ResetMode.IDLE, idle_minutes=60)
    last_active = 1_764_460_800.0
    deadline = idle_deadline(last_active, policy)
    assert deadline == last_active + HOUR
    assert not is_idle_expired(deadline - 1e-6, last_active, policy)
    assert not is_idle_expired(deadline, last_active, policy)
    assert is_idle_expired(deadline + 1e-6, last_active, policy)


# Daily


def test_activity_before_at_hour_resets_at_today_s_at_hour() -> None:
    assert daily_deadline(local("Asia/Tokyo", 2026, 6, 10, 3, 59, 59), daily(4), zone("Asia/Tokyo")) == utc(
        2026, 6, 9, 19
    )


def test_activity_at_or_after_at_hour_resets_tomorrow() -> None:
    tokyo = zone("Asia/Tokyo")
    tomorrow = utc(2026, 6, 10, 19)  # 04:00 JST on June 11
    assert daily_deadline(local("Asia/Tokyo", 2026, 6, 10, 4), daily(4), tokyo) == tomorrow
    assert daily_deadline(local("Asia/Tokyo", 2026, 6, 10, 4) + 1e-6, daily(4), tokyo) == tomorrow
    assert daily_deadline(local("Asia/Tokyo", 2026, 6, 10, 18, 30), daily(4), tokyo) == tomorrow


def test_activity_late_in_the_evening_resets_the_next_morning() -> None:
    deadline = daily_deadline(local("Europe/Berlin", 2026, 6, 10, 23, 30), daily(4), zone("Europe/Berlin"))
    assert deadline == utc(2026, 6, 11, 2)  # 04:00 CEST


def test_at_hour_zero_is_midnight() -> None:
    deadline = daily_deadline(local("Europe/Berlin", 2026, 1, 10, 23, 59), daily(0), zone("Europe/Berlin"))
    assert deadline == utc(2026, 1, 10, 23)  # 00:00 CET on January 11


@pytest.mark.parametrize(
    ("name", "last_active", "at_hour", "expected"),
    [
        # New York springs forward on 2026-03-08: 02:00 EST becomes 03:00 EDT at 07:00 UTC.
        pytest.param("America/New_York", (2026, 3, 7, 12, 0), 2, utc(2026, 3, 8, 7), id="ny-spring-in-the-gap"),
        pytest.param("America/New_York", (2026, 3, 8, 1, 59), 2, utc(2026, 3, 8, 7), id="ny-spring-just-before"),
        pytest.param("America/New_York", (2026, 3, 8, 3, 30), 2, utc(2026, 3, 9, 6), id="ny-spring-after-the-gap"),
        pytest.param("America/New_York", (2026, 3, 7, 12, 0), 4, utc(2026, 3, 8, 8), id="ny-spring-after-it"),
        pytest.param("America/New_York", (2026, 3, 7, 12, 0), 1, utc(2026, 3, 8, 6), id="ny-spring-before-it"),
        # New York falls back on 2026-11-01: 02:00 EDT becomes 01:00 EST at 06:00 UTC.
        pytest.param("America/New_York", (2026, 10, 31, 12, 0), 1, utc(2026, 11, 1, 5), id="ny-fall-first-one-am"),
        pytest.param("America/New_York", (2026, 10, 31, 12, 0), 4, utc(2026, 11, 1, 9), id="ny-fall-25-hour-day"),
        # Berlin springs forward on 2026-03-29: 02:00 CET becomes 03:00 CEST at 01:00 UTC.
        pytest.param("Europe/Berlin", (2026, 3, 28, 12, 0), 2, utc(2026, 3, 29, 1), id="berlin-spring-in-the-gap"),
        pytest.param("Europe/Berlin", (2026, 3, 28, 12, 0), 4, utc(2026, 3, 29, 2), id="berlin-spring-after-it"),
        pytest.param("Europe/Berlin", (2026, 3, 29, 3, 0), 2, utc(2026, 3, 30, 0), id="berlin-spring-at-gap-end"),
        # Berlin falls back on 2026-10-25: 03:00 CEST becomes 02:00 CET at 01:00 UTC.
        pytest.param("Europe/Berlin", (2026, 10, 24, 12, 0), 2, utc(2026, 10, 25, 0), id="berlin-fall-first-two-am"),
        pytest.param("Europe/Berlin", (2026, 10, 24, 12, 0), 4, utc(2026, 10, 25, 3), id="berlin-fall-after-it"),
    ],
)
def test_daily_deadlines_on_daylight_saving_days(
    name: str, last_active: tuple[int, int, int, int, int], at_hour: int, expected: float
) -> None:
    assert daily_deadline(local(name, *last_active), daily(at_hour), zone(name)) == expected


def test_activity_between_the_two_occurrences_of_at_hour_resets_the_next_day() -> None:
    new_york = zone("America/New_York")
    # 01:30 EDT, after the first 01:00 and before the second (01:00 EST at 06:00 UTC), which does not count.
    assert daily_deadline(utc(2026, 11, 1, 5, 30), daily(1), new_york) == utc(2026, 11, 2, 6)
    assert daily_deadline(utc(2026, 11, 1, 6, 30), daily(1), new_york) == utc(2026, 11, 2, 6)


def test_a_gap_that_does_not_start_on_the_hour_resets_at_its_end() -> None:
    # Lord Howe Island moves from +10:30 to +11 at 02:00 on 2026-10-04: 02:00-02:30 does not exist.
    deadline = daily_deadline(local("Australia/Lord_Howe", 2026, 10, 3, 12), daily(2), zone("Australia/Lord_Howe"))
    assert deadline == utc(2026, 10, 3, 15, 30)
    assert datetime.fromtimestamp(deadline, zone("Australia/Lord_Howe")).strftime("%H:%M %z") == "02:30 +1100"


@pytest.fixture
def new_york_local_time() -> Iterator[None]:
    """Make the process's local zone America/New_York for one test."""
    if not hasattr(time, "tzset"):
        pytest.skip("time.tzset is not available on this platform")
    zone("America/New_York")
    saved = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    try:
        yield
    finally:
        if saved is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = saved
        time.tzset()


@pytest.mark.usefixtures("new_york_local_time")
def test_without_a_zone_the_local_zone_is_used() -> None:
    assert daily_deadline(utc(2026, 3, 7, 17), daily(2)) == utc(2026, 3, 8, 7)
    assert daily_deadline(utc(2026, 10, 31, 16), daily(1)) == utc(2026, 11, 1, 5)
    assert daily_deadline(utc(2026, 6, 10, 3, 30), daily(0)) == utc(2026, 6, 10, 4)


def test_remembered_deadlines_follow_a_change_of_the_local_zone(new_york_local_time: None) -> None:
    # Deadlines are remembered per day and zone; for local time the zone is whatever TZ says right now.
    last_active = utc(2026, 3, 7, 17)
    assert daily_deadline(last_active, daily(2)) == utc(2026, 3, 8, 7)  # New York, remembered
    os.environ["TZ"] = "UTC"
    time.tzset()
    assert daily_deadline(last_active, daily(2)) == utc(2026, 3, 8, 2)
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    assert daily_deadline(last_active, daily(2)) == utc(2026, 3, 8, 7)


@given(
    name=st.sampled_from(["UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Asia/Kolkata"]),
    last_active=st.floats(min_value=utc(2020, 1, 1), max_value=utc(2032, 1, 1)),
    at_hour=st.integers(min_value=0, max_value=23),
)
# A fraction of a microsecond before 11:00 local: datetime.fromtimestamp rounds it up to 11:00 itself.
@example(name="Australia/Lord_Howe", last_active=1956527999.9999998, at_hour=11)
def test_the_daily_deadline_is_the_next_at_hour_in_local_time(name: str, last_active: float, at_hour: int) -> None:
    tz = zone(name)
    deadline = daily_deadline(last_active, daily(at_hour), tz)
    assert last_active < deadline <= last_active + DAY + HOUR
    # Whole seconds, rounded down: hours begin on a whole second, and rounding to the microsecond could cross one.
    before, after = (datetime.fromtimestamp(math.floor(instant), tz) for instant in (last_active, deadline))
    assert after.date() == before.date() + timedelta(days=0 if before.hour < at_hour else 1)
    if (after.hour, after.minute, after.second) != (at_hour, 0, 0):  # at_hour:00 fell in a gap: its end
        just_before = datetime.fromtimestamp(deadline - 1, tz)
        assert just_before.utcoffset() != after.utcoffset()
        assert just_before.replace(tzinfo=None) < after.replace(hour=at_hour, minute=0, tzinfo=None)


# Modes


def test_next_reset_follows_the_mode() -> None:
    tz = zone("Europe/Berlin")
    last_active = local("Europe/Berlin", 2026, 6, 10, 22)  # six hours before 04:00
    four_am = utc(2026, 6, 11, 2)

    def policy(mode: ResetMode, idle_minutes: int) -> ResetPolicy:
        return ResetPolicy(mode=mode, idle_minutes=idle_minutes, at_hour=4)

    assert next_reset(policy(ResetMode.NONE, 60), last_active, tz) is None
    assert next_reset(policy(ResetMode.IDLE, 600), last_active, tz) == (last_active + 600 * 60, EndReason.IDLE)
    assert next_reset(policy(ResetMode.DAILY, 60), last_active, tz) == (four_am, EndReason.DAILY)
    assert next_reset(policy(ResetMode.BOTH, 60), last_active, tz) == (last_active + HOUR, EndReason.IDLE)
    assert next_reset(policy(ResetMode.BOTH, 600), last_active, tz) == (four_am, EndReason.DAILY)
    assert next_reset(policy(ResetMode.BOTH, 360), last_active, tz) == (four_am, EndReason.IDLE)  # a tie


def test_reset_due_honours_each_boundary_and_the_mode() -> None:
    tz = zone("Europe/Berlin")
    last_active = local("Europe/Berlin", 2026, 6, 10, 22)
    four_am = utc(2026, 6, 11, 2)
    both = ResetPolicy(mode=ResetMode.BOTH, idle_minutes=360)  # idle deadline = 04:00 as well
    assert reset_due(four_am - 1e-6, last_active, both, tz) is None
    assert reset_due(four_am, last_active, both, tz) is EndReason.DAILY
    assert reset_due(four_am + 1e-6, last_active, both, tz) is EndReason.IDLE
    assert reset_due(four_am, last_active, msgspec.structs.replace(both, mode=ResetMode.IDLE), tz) is None
    assert reset_due(four_am + DAY, last_active, msgspec.structs.replace(both, mode=ResetMode.NONE), tz) is None
    assert reset_due(four_am, last_active, msgspec.structs.replace(both, mode=ResetMode.DAILY), tz) is EndReason.DAILY


# Background processes and notifications


def test_a_background_process_blocks_a_reset_only_while_younger_than_the_cap() -> None:
    policy = ResetPolicy(mode=ResetMode.IDLE, bg_process_max_age_hours=24)
    now = 1_764_460_800.0
    assert not bg_process_blocks_reset(None, now, policy)
    assert bg_process_blocks_reset(now, now, policy)
    assert bg_process_blocks_reset(now + 60, now, policy)  # started "later" (clock skew): young
    assert bg_process_blocks_reset(now - DAY + 1e-6, now, policy)
    assert not bg_process_blocks_reset(now - DAY, now, policy)
    assert not bg_process_blocks_reset(now - DAY - 1, now, policy)
    assert not bg_process_blocks_reset(now, now, ResetPolicy(bg_process_max_age_hours=0))
    assert bg_process_blocks_reset(now - 5400, now, ResetPolicy(bg_process_max_age_hours=1.5 + 1e-9))


def test_notifications_skip_api_server_and_webhook_by_default() -> None:
    policy = ResetPolicy()
    assert should_notify(policy, "telegram")
    assert should_notify(policy, "cli")
    assert not should_notify(policy, "api_server")
    assert not should_notify(policy, "webhook")
    assert not should_notify(ResetPolicy(notify=False), "telegram")
    custom = ResetPolicy(notify_exclude_platforms=("slack",))
    assert should_notify(custom, "webhook")
    assert not should_notify(custom, "slack")


# Overrides

_LAYERED: dict[str, Any] = {
    "mode": "idle",
    "idle_minutes": 60,
    "chat_types": {"group": {"mode": "daily", "at_hour": 5}, "dm": {"at_hour": 6}},
    "platforms": {
        "telegram": {"idle_minutes": 30, "at_hour": 7, "chat_types": {"group": {"mode": "none"}}},
        "api_server": {"notify": False},
    },
}


def test_overrides_change_only_the_fields_they_set() -> None:
    config = decode_reset_config(_LAYERED)
    assert config.policy_for("slack", None) == ResetPolicy(mode=ResetMode.IDLE, idle_minutes=60)
    assert config.policy_for("slack", "channel") == ResetPolicy(mode=ResetMode.IDLE, idle_minutes=60)
    assert config.policy_for("slack", "group") == ResetPolicy(mode=ResetMode.DAILY, idle_minutes=60, at_hour=5)
    assert config.policy_for("api_server", "dm") == ResetPolicy(
        mode=ResetMode.IDLE, idle_minutes=60, at_hour=6, notify=False
    )


def test_the_most_specific_override_wins() -> None:
    config = decode_reset_config(_LAYERED)
    # base < chat_types.dm < platforms.telegram
    assert config.policy_for("telegram", "dm") == ResetPolicy(mode=ResetMode.IDLE, idle_minutes=30, at_hour=7)
    # base < chat_types.group < platforms.telegram < platforms.telegram.chat_types.group
    assert config.policy_for("telegram", "group") == ResetPolicy(mode=ResetMode.NONE, idle_minutes=30, at_hour=7)
    assert config.policy_for("telegram", None) == ResetPolicy(mode=ResetMode.IDLE, idle_minutes=30, at_hour=7)


def test_a_config_built_in_python_equals_the_decoded_one_and_round_trips() -> None:
    built = ResetConfig(
        mode=ResetMode.IDLE,
        idle_minutes=60,
        chat_types={"group": ResetOverride(mode=ResetMode.DAILY, at_hour=5), "dm": ResetOverride(at_hour=6)},
        platforms={
            "telegram": PlatformResetOverride(
                idle_minutes=30, at_hour=7, chat_types={"group": ResetOverride(mode=ResetMode.NONE)}
            ),
            "api_server": PlatformResetOverride(notify=False),
        },
    )
    assert decode_reset_config(_LAYERED) == built
    assert decode_reset_config(msgspec.to_builtins(built)) == built
    assert decode_reset_config(msgspec.json.decode(msgspec.json.encode(built))) == built


def test_yaml_friendly_values_are_accepted() -> None:
    config = decode_reset_config({"bg_process_max_age_hours": 2, "notify_exclude_platforms": ["webhook"]})
    assert config.base.bg_process_max_age_hours == 2.0
    assert config.base.notify_exclude_platforms == ("webhook",)


# Bad configuration


@pytest.mark.parametrize(
    ("section", "error"),
    [
        (
            {"platforms": {"telegram": {"mode": "sometimes"}}},
            "session_reset.platforms.telegram.mode: Invalid enum value 'sometimes' "
            "(expected one of: none, idle, daily, both)",
        ),
        (
            {"mode": "always"},
            "session_reset.mode: Invalid enum value 'always' (expected one of: none, idle, daily, both)",
        ),
        ({"at_hour": 24}, "session_reset.at_hour: must be 0..23 (an hour of the local day)"),
        ({"at_hour": -1}, "session_reset.at_hour: must be 0..23 (an hour of the local day)"),
        ({"idle_minutes": 0}, "session_reset.idle_minutes: must be at least 1 (minutes of inactivity)"),
        (
            {"bg_process_max_age_hours": -1},
            "session_reset.bg_process_max_age_hours: must be a non-negative number of hours",
        ),
        (
            {"idel_minutes": 60},
            "session_reset.idel_minutes: unknown field (expected one of: mode, idle_minutes, at_hour, notify, "
            "notify_exclude_platforms, bg_process_max_age_hours, chat_types, platforms)",
        ),
        ({"idle_minutes": "60"}, "session_reset.idle_minutes: Expected `int`, got `str`"),
        ({"idle_minutes": 1.5}, "session_reset.idle_minutes: Expected `int`, got `float`"),
        ({"notify": "yes"}, "session_reset.notify: Expected `bool`, got `str`"),
        ({"mode": None}, "session_reset.mode: Expected `str`, got `null`"),
        (
            {"notify_exclude_platforms": ["webhook", 7]},
            "session_reset.notify_exclude_platforms[1]: Expected `str`, got `int`",
        ),
        (
            {"chat_types": {"dm": {"idle_minutes": 0}}},
            "session_reset.chat_types.dm.idle_minutes: must be at least 1 (minutes of inactivity)",
        ),
        ({"chat_types": {"dm": {"notify": 1}}}, "session_reset.chat_types.dm.notify: Expected `bool`, got `int`"),
        (
            {"platforms": {"slack": {}, "telegram": {"chat_types": {"dm": {}, "group": {"modes": "none"}}}}},
            "session_reset.platforms.telegram.chat_types.group.modes: unknown field (expected one of: mode, "
            "idle_minutes, at_hour, notify, notify_exclude_platforms, bg_process_max_age_hours)",
        ),
        (
            {"platforms": {"telegram": {"chat_types": {"group": {"at_hour": 25}}}}},
            "session_reset.platforms.telegram.chat_types.group.at_hour: must be 0..23 (an hour of the local day)",
        ),
        (
            {"platforms": {"telegram": {"chat_types": {"group": {"chat_types": {}}}}}},
            "session_reset.platforms.telegram.chat_types.group.chat_types: unknown field (expected one of: mode, "
            "idle_minutes, at_hour, notify, notify_exclude_platforms, bg_process_max_age_hours)",
        ),
        ({"platforms": {"telegram": "daily"}}, "session_reset.platforms.telegram: Expected `object`, got `str`"),
        ({"platforms": {7: {}}}, "session_reset.platforms: Expected `str`, got `int` (for a key)"),
        (["idle"], "session_reset: Expected `object`, got `array`"),
    ],
)
def test_a_bad_section_is_a_config_error_naming_the_field(section: object, error: str) -> None:
    with pytest.raises(ConfigError) as caught:
        decode_reset_config(section)
    assert str(caught.value) == error
    assert caught.value.path == error.split(": ", 1)[0]


def test_errors_name_the_section_where_it_lives() -> None:
    with pytest.raises(ConfigError, match=r"^gateway\.session_reset\.platforms\.telegram\.mode: Invalid enum"):
        decode_reset_config({"platforms": {"telegram": {"mode": "x"}}}, path="gateway.session_reset")
    with pytest.raises(ConfigError) as caught:
        decode_reset_config({"platforms": {"telegram": {"at_hour": 99}}}, path="gateway.session_reset")
    assert caught.value.path == "gateway.session_reset.platforms.telegram.at_hour"
    assert str(caught.value).endswith(": must be 0..23 (an hour of the local day)")


def test_values_out_of_range_are_refused_when_built_in_python_too() -> None:
    with pytest.raises(ConfigError, match=r"^session_reset\.at_hour: must be 0\.\.23"):
        ResetPolicy(at_hour=24)
    with pytest.raises(ConfigError, match=r"^session_reset\.idle_minutes: must be at least 1"):
        ResetPolicy(idle_minutes=0)
    with pytest.raises(ConfigError, match=r"^session_reset\.bg_process_max_age_hours: "):
        ResetPolicy(bg_process_max_age_hours=float("nan"))
    with pytest.raises(ConfigError, match=r"^session_reset\.platforms\.tg\.chat_types\.dm\.idle_minutes: "):
        ResetConfig(platforms={"tg": PlatformResetOverride(chat_types={"dm": ResetOverride(idle_minutes=-5)})})
