"""A young background process holds a session's reset off in cluster mode too, whichever host holds its shard."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from hermes_actors.agents.base import EchoAgent
from hermes_actors.cluster.host.runtime import HostRuntime
from hermes_actors.cluster.host.settings import HostSettings
from hermes_actors.cluster.replica.ingress import ClusterIngress
from hermes_actors.lifecycle.policy import ResetConfig, ResetMode
from hermes_actors.store import EndReason
from hermes_actors.store.pg import PostgresStore
from hermes_actors.testing import FakePlatform, poll_until
from tests.runtime.test_resets import ReportingBackgroundAgent as BackgroundAgent

SHARDS = 8
RESET = ResetConfig(mode=ResetMode.IDLE, idle_minutes=1, bg_process_max_age_hours=1)

pytestmark = pytest.mark.slow  # each runs a host for a few seconds


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as store:
        yield store


def _host(dsn: str, name: str, agent: EchoAgent | None = None, hosts: tuple[str, ...] = ("h0",)) -> HostRuntime:
    settings = HostSettings(
        name=name, postgres_dsn=dsn, hosts=hosts, shards=SHARDS, reset=RESET, timer_scan_s=3600, grace_s=0.2
    )
    return HostRuntime(settings, agent=agent)


def _one_turn(pg: PostgresStore) -> str:
    ClusterIngress(pg, shards=SHARDS).accept(FakePlatform("fake").message("hello", chat_id="c", user_id="u"))
    poll_until(
        lambda: pg.database.value("SELECT count(*) FROM inbox WHERE state = 'pending'") == 0, what="the first turn"
    )
    return str(pg.database.value("SELECT id FROM sessions"))


def _reset_rows(pg: PostgresStore) -> int:
    return int(pg.database.value("SELECT count(*) FROM inbox WHERE kind = 'timer'"))


def _idle_past_reset(pg: PostgresStore, session_id: str) -> None:
    pg.database.execute("UPDATE sessions SET last_active_at = last_active_at - 120 WHERE id = %s", (session_id,))


def test_a_young_background_process_holds_the_reset_off_until_the_agent_reports_it_ended(
    postgres_dsn: str, pg: PostgresStore
) -> None:
    agent = BackgroundAgent(started_at=time.time())
    host = _host(postgres_dsn, "h0", agent)
    host.start()
    try:
        session_id = _one_turn(pg)
        _idle_past_reset(pg, session_id)
        host.timers.scan()  # due, but its process is a moment old: no reset row
        assert _reset_rows(pg) == 0
        assert pg.get_session(session_id).is_live
        agent.end_process(session_id)  # the host scans again at once
        poll_until(lambda: not pg.get_session(session_id).is_live, what="the reset after the process ended")
        assert pg.get_session(session_id).end_reason == EndReason.IDLE
    finally:
        host.stop()


def test_a_background_process_older_than_the_limit_does_not_hold_the_reset_off(
    postgres_dsn: str, pg: PostgresStore
) -> None:
    host = _host(postgres_dsn, "h0", BackgroundAgent(started_at=time.time() - 3601))
    host.start()
    try:
        session_id = _one_turn(pg)
        _idle_past_reset(pg, session_id)
        host.timers.scan()  # (the host's own first scan may have found it already)
        assert _reset_rows(pg) == 1
        host.poke()
        poll_until(lambda: not pg.get_session(session_id).is_live, what="the reset")
    finally:
        host.stop()


def test_the_next_holder_of_the_shard_knows_of_the_process_the_previous_holder_s_agent_runs(
    postgres_dsn: str, pg: PostgresStore
) -> None:
    """h0's agent runs the session's process; h0 gives its shards up (alive: its process goes on) and h1, whose own
    agent knows nothing of it, holds them now: h1's scan finds the reset due and must still wait for the process."""
    first = _host(postgres_dsn, "h0", BackgroundAgent(started_at=time.time()))
    first.start()
    try:
        session_id = _one_turn(pg)
        # h0 records the process its agent reports once the turn is over (after its commit).
        poll_until(lambda: pg.reset_scan.holds([session_id]), what="h0 recording the process")
    finally:
        first.stop()  # releases its shards
    second = _host(postgres_dsn, "h1", EchoAgent(), hosts=("h1",))
    second.start()
    try:
        poll_until(lambda: len(second.fence.held()) == SHARDS, what="h1 holding every shard")
        _idle_past_reset(pg, session_id)
        second.timers.scan()
        assert _reset_rows(pg) == 0
        assert pg.get_session(session_id).is_live
        # Once the process recorded is older than the limit, the reset goes ahead.
        pg.database.execute("UPDATE background_processes SET started_at = started_at - 3601")
        second.timers.scan()
        assert _reset_rows(pg) == 1
        second.poke()
        poll_until(lambda: not pg.get_session(session_id).is_live, what="the reset")
    finally:
        second.stop()
