"""The agent's health as health checks report it: a probe at most once per interval, a turn's failure and success,
and readiness that fails on a degraded agent only when asked to."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from hermes_actors.agents.base import AgentError, AgentReply, EchoAgent, TurnInput
from hermes_actors.errors import ConfigError
from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.agent_health import AgentHealth, AgentProbeConfig, AgentState
from hermes_actors.runtime.gateway import Gateway


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _Probe:
    def __init__(self) -> None:
        self.calls = 0
        self.error: str | None = "connection refused"

    def __call__(self, timeout_s: float) -> None:
        self.calls += 1
        if self.error is not None:
            raise AgentError(self.error)


def test_a_probe_runs_at_most_once_per_interval_however_often_health_is_asked() -> None:
    clock, probe = _Clock(), _Probe()
    health = AgentHealth(probe, AgentProbeConfig(interval_s=30, timeout_s=5), clock=clock, wall=clock)
    first = health.check()
    assert (first.state, first.last_error, first.probed_at) == (AgentState.DEGRADED, "connection refused", 100.0)
    for _ in range(50):
        health.check()
    assert probe.calls == 1
    probe.error = None
    clock.now += 30
    recovered = health.check()
    assert (recovered.state, recovered.last_error, recovered.since, probe.calls) == (AgentState.OK, None, 130.0, 2)


def test_a_failed_call_degrades_an_agent_without_a_probe_and_an_answer_recovers_it() -> None:
    health = AgentHealth(None)
    assert health.check().state is AgentState.UNKNOWN
    health.called("agent endpoint timed out")
    assert (health.check().state, health.check().last_error) == (AgentState.DEGRADED, "agent endpoint timed out")
    assert not health.fails_readiness  # informs only by default
    health.called(None)
    assert health.check().state is AgentState.OK


def test_fail_readiness_counts_a_degraded_agent_against_readiness() -> None:
    health = AgentHealth(None, AgentProbeConfig(fail_readiness=True))
    health.called("refused")
    assert health.fails_readiness
    health.called(None)
    assert not health.fails_readiness


def test_a_probe_slower_than_its_timeout_does_not_hold_the_health_check() -> None:
    release = threading.Event()

    def slow(timeout_s: float) -> None:
        release.wait(10)

    health = AgentHealth(slow, AgentProbeConfig(interval_s=5, timeout_s=0.05))
    try:
        assert health.check().state is AgentState.UNKNOWN  # returned after 0.05 s; the probe goes on
    finally:
        release.set()


@pytest.mark.parametrize(
    ("fields", "key"),
    [({"interval_s": 0.1}, "agent.probe.interval_s"), ({"interval_s": 5, "timeout_s": 10}, "agent.probe.timeout_s")],
)
def test_probe_settings_that_would_probe_too_often_are_refused_naming_the_key(
    fields: dict[str, float], key: str
) -> None:
    with pytest.raises(ConfigError, match=key):
        AgentProbeConfig(interval_s=fields["interval_s"], timeout_s=fields.get("timeout_s", 1.0))


class _FlakyAgent(EchoAgent):
    """Fails turns while ``failing`` is set."""

    failing = True

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        if self.failing:
            raise AgentError("cannot connect to agent endpoint http://127.0.0.1:9/v1: Connection refused")
        return super().run_turn(turn, timeout_s=timeout_s)


def test_a_turn_that_fails_marks_the_gateways_agent_degraded_and_one_that_answers_recovers_it(tmp_path: Path) -> None:
    agent = _FlakyAgent()
    source = SessionSource(platform="cli", chat_type="dm", chat_id="c", user_id="u")
    with Gateway(tmp_path / "state.db", agent=agent) as gateway:
        assert gateway.readiness().agent is not None
        gateway.accept(InboundMessage(source=source, text="one", message_id="m1"))
        assert gateway.wait_idle()
        info = gateway.readiness().agent
        assert info is not None
        assert info.state == "degraded"
        assert "Connection refused" in (info.last_error or "")
        assert gateway.readiness().ready  # informs only: agent.probe.fail_readiness is off
        agent.failing = False
        gateway.accept(InboundMessage(source=source, text="two", message_id="m2"))
        assert gateway.wait_idle()
        info = gateway.readiness().agent
        assert info is not None
        assert (info.state, info.last_error) == ("ok", None)


def test_with_fail_readiness_a_failed_turn_fails_the_gateways_readiness(tmp_path: Path) -> None:
    source = SessionSource(platform="cli", chat_type="dm", chat_id="c", user_id="u")
    probe = AgentProbeConfig(fail_readiness=True)
    with Gateway(tmp_path / "state.db", agent=_FlakyAgent(), agent_probe=probe) as gateway:
        gateway.accept(InboundMessage(source=source, text="one", message_id="m1"))
        assert gateway.wait_idle()
        readiness = gateway.readiness()
        assert not readiness.ready
        assert readiness.reasons() == [
            "agent: degraded (cannot connect to agent endpoint http://127.0.0.1:9/v1: Connection refused)"
        ]
