"""The runtime's metrics read for a person: histogram quantiles and the vitals of a fresh registry."""

from __future__ import annotations

import math

import pytest

from hermes_actors.runtime.metrics import Metrics, latency_of
from hermes_actors.testing import GatedAgent
from tests.runtime.conftest import MakeGateway


def _histogram(buckets: dict[str, float], total: float) -> dict[str, list[tuple[dict[str, str], float]]]:
    count = buckets["+Inf"]
    return {
        "h_bucket": [({"le": bound}, value) for bound, value in buckets.items()],
        "h_count": [({}, count)],
        "h_sum": [({}, total)],
    }


def test_quantiles_are_linear_within_the_bucket_they_fall_in() -> None:
    latency = latency_of(_histogram({"0.1": 50, "0.5": 90, "1.0": 100, "+Inf": 100}, total=20.0), "h")
    assert latency is not None
    assert latency.count == 100
    assert latency.mean_s == pytest.approx(0.2)
    assert latency.p50_s == pytest.approx(0.1)  # the 50th of 100 is the last of the first bucket
    assert latency.p95_s == pytest.approx(0.75)  # halfway through (0.5, 1.0]


def test_a_quantile_past_the_highest_bound_is_that_bound() -> None:
    latency = latency_of(_histogram({"1.0": 10, "+Inf": 100}, total=500.0), "h")
    assert latency is not None
    assert latency.p95_s == 1.0


def test_no_observation_gives_no_latency() -> None:
    assert latency_of(_histogram({"1.0": 0, "+Inf": 0}, total=0.0), "h") is None


def test_a_metrics_object_without_a_runtime_reads_as_zeros() -> None:
    metrics = Metrics()
    metrics.turn_finished("fake", "ok", 0.02)
    metrics.turn_finished("fake", "failed", 0.04)
    vitals = metrics.vitals()
    assert vitals.turns == {"ok": 1, "failed": 1}
    assert vitals.turn_latency is not None
    assert vitals.turn_latency.count == 2
    assert math.isclose(vitals.turn_latency.mean_s, 0.03)
    assert (vitals.inbox_pending, vitals.inbox_oldest_age_s, vitals.outbox_pending) == (0, None, {})
    assert (vitals.tokens_in, vitals.tokens_out, vitals.commits) == (0, 0, 0)
    assert b"hermes_turns_total" in metrics.exposition().body


def test_the_vitals_count_the_inbox_per_platform_while_a_turn_is_held(make_gateway: MakeGateway) -> None:
    agent = GatedAgent()
    gateway, fake = make_gateway(agent=agent)
    try:
        fake.push("held")
        assert agent.started.wait(5)
        vitals = gateway.vitals()
        assert vitals.inbox_by_platform == {"fake": 1}  # its turn has not committed: the message still waits
        assert vitals.inbox_oldest_by_platform_s["fake"] >= 0
    finally:
        agent.release.set()
    assert gateway.wait_idle()
    assert gateway.vitals().inbox_by_platform.get("fake", 0) == 0
