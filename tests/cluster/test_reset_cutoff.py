"""reset_cutoff: the latest last activity from which some policy of a configuration resets a session now."""

from __future__ import annotations

from datetime import UTC, datetime

from hermes_actors.cluster.host.timers import reset_cutoff
from hermes_actors.lifecycle.policy import (
    PlatformResetOverride,
    ResetConfig,
    ResetMode,
    ResetOverride,
    reset_due,
)

NOW = datetime(2026, 3, 10, 15, 30, tzinfo=UTC).timestamp()


def test_no_policy_that_resets_means_no_cutoff() -> None:
    assert reset_cutoff(ResetConfig(), NOW, UTC) is None


def test_idle_is_the_shortest_idle_time_of_any_override() -> None:
    config = ResetConfig(
        mode=ResetMode.IDLE,
        idle_minutes=600,
        platforms={"telegram": PlatformResetOverride(chat_types={"group": ResetOverride(idle_minutes=30)})},
    )
    assert reset_cutoff(config, NOW, UTC) == NOW - 30 * 60


def test_daily_is_the_last_boundary_at_or_before_now() -> None:
    config = ResetConfig(mode=ResetMode.DAILY, at_hour=4)
    assert reset_cutoff(config, NOW, UTC) == datetime(2026, 3, 10, 4, tzinfo=UTC).timestamp()
    early = datetime(2026, 3, 10, 3, 59, tzinfo=UTC).timestamp()
    assert reset_cutoff(config, early, UTC) == datetime(2026, 3, 9, 4, tzinfo=UTC).timestamp()


def test_a_session_active_after_the_cutoff_is_never_due_and_one_just_before_may_be() -> None:
    config = ResetConfig(
        mode=ResetMode.NONE,
        chat_types={"group": ResetOverride(mode=ResetMode.BOTH, idle_minutes=120, at_hour=9)},
        platforms={"slack": PlatformResetOverride(mode=ResetMode.IDLE, idle_minutes=45)},
    )
    cutoff = reset_cutoff(config, NOW, UTC)
    assert cutoff is not None
    platforms, chat_types = ["slack", "telegram"], ["group", "dm", None]
    policies = [config.policy_for(p, c) for p in platforms for c in chat_types]
    for offset in range(1, 48 * 60, 7):
        last_active = cutoff + offset * 60
        assert all(reset_due(NOW, last_active, policy, UTC) is None for policy in policies)
    assert any(reset_due(NOW, cutoff - 1, policy, UTC) is not None for policy in policies)
