"""The runtime's Prometheus series: counters and histograms the turn path feeds, on a registry of one runtime's own.

:func:`~hermes_actors.runtime.assembly.assemble` builds one :class:`Metrics` per runtime (tests run many gateways
in one process, so never the process-wide default registry) and hands it to the parts that count: the session
actor (turns), the agent calls (latency, tokens), the outbox actors (retries, give-ups), the edge (duplicates), the
session controls (resets) and the store writer (commits, through its observer). What needs the store or the
supervisor (queue depths and ages, live actors, activations, passivations) is read when scraped, by
:class:`~hermes_actors.runtime.scrape.RuntimeCollector`, so the turn path pays no extra read. Feeding a series costs
a lock and a dictionary lookup, about 2 µs.

Series (``_total`` is added to counters by the client):

* ``hermes_turns_total{platform,outcome}``: finished turns; outcome is ``ok``, ``failed`` (the agent gave no answer,
  or the turn was refused), ``cancelled`` (``/stop``), ``unsaved`` (the store refused the commit; it runs again),
  ``lease_lost`` (another process took the session; it runs again), ``stale`` (another turn answered it),
  ``abandoned`` (the process stopped during its agent call; it runs again at the next start) or ``error`` (a bug;
  its messages are dead-lettered: ``hermesctl messages dead-letters``)
* ``hermes_turn_duration_seconds{platform}``: a turn from its start in the session actor to its commit
* ``hermes_agent_call_duration_seconds{outcome}``: one agent call; ``ok``, ``timeout``, ``error``, ``crash``,
  ``cancelled``
* ``hermes_model_tokens_total{direction}``: the model's token counts, ``input`` and ``output``
* ``hermes_deliveries_retried_total{platform}``, ``hermes_deliveries_given_up_total{platform}``
* ``hermes_inbox_duplicates_total{platform}``: redeliveries the inbox recognised and refused
* ``hermes_messages_total{outcome}``: accepted messages by how they ended: ``answered``, ``refused`` (with a reply
  saying why: busy, the session ended, the agent gave no answer), ``stopped`` (``/stop``) or ``dead_lettered``
  (recorded as a dead letter: ``hermesctl messages dead-letters``)
* ``hermes_resets_total{reason}``: sessions ended by a reset, ``/new``, an operator (the end reason)
* ``hermes_store_commit_duration_seconds``, ``hermes_store_commit_batch_size``: the writer's committed transactions
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.registry import Collector

from hermes_actors.agents.base import AgentReply
from hermes_actors.ports import Exposition, Latency, Vitals

__all__ = ["MESSAGE_OUTCOMES", "Metrics", "latency_of"]

MESSAGE_OUTCOMES = ("answered", "refused", "stopped", "dead_lettered")
"""How an accepted message can end (``hermes_messages_total{outcome}``)."""

_LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
)
_COMMIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class Metrics:
    """One runtime's series and the registry that exposes them (see the module docstring)."""

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=False)
        self.turns = Counter("hermes_turns", "Finished turns.", ["platform", "outcome"], registry=registry)
        self.turn_seconds = Histogram(
            "hermes_turn_duration_seconds",
            "A turn, from its start in the session actor to its commit.",
            ["platform"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.agent_seconds = Histogram(
            "hermes_agent_call_duration_seconds",
            "One call of the agent.",
            ["outcome"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.tokens = Counter("hermes_model_tokens", "Model tokens, by direction.", ["direction"], registry=registry)
        self.retried = Counter(
            "hermes_deliveries_retried",
            "Reply sends that failed and wait for a retry.",
            ["platform"],
            registry=registry,
        )
        self.given_up = Counter(
            "hermes_deliveries_given_up", "Replies given up (a permanent failure).", ["platform"], registry=registry
        )
        self.duplicates = Counter(
            "hermes_inbox_duplicates",
            "Redelivered messages the inbox recognised and refused.",
            ["platform"],
            registry=registry,
        )
        self.resets = Counter("hermes_resets", "Sessions ended, by reason.", ["reason"], registry=registry)
        self.messages = Counter(
            "hermes_messages", "Accepted messages, by how they ended.", ["outcome"], registry=registry
        )
        self._outcomes = {outcome: self.messages.labels(outcome) for outcome in MESSAGE_OUTCOMES}  # 0 from the start
        self.commit_seconds = Histogram(
            "hermes_store_commit_duration_seconds",
            "One transaction of the store writer.",
            buckets=_COMMIT_BUCKETS,
            registry=registry,
        )
        self.commit_batch = Histogram(
            "hermes_store_commit_batch_size",
            "Writes in one transaction of the store writer.",
            buckets=_BATCH_BUCKETS,
            registry=registry,
        )
        self._input = self.tokens.labels("input")
        self._output = self.tokens.labels("output")
        # The labelled children of the turn path, kept: labels() takes a lock and builds a key on every call.
        self._turn_series: dict[tuple[str, str], tuple[Counter, Histogram]] = {}
        self._agent_series: dict[str, Histogram] = {}
        # Hears each agent call's outcome and result (the gateway's agent health); set once, before turns run.
        self.on_agent_call: Callable[[str, object], None] | None = None

    def register(self, collector: Collector) -> None:
        """Add series read at scrape time."""
        self.registry.register(collector)

    # -- the parts that count ----------------------------------------------------------------------------------

    def turn_finished(self, platform: str, outcome: str, seconds: float) -> None:
        """Count a turn and its duration."""
        series = self._turn_series.get((platform, outcome))
        if series is None:  # two threads may both get here: labels() hands both the same children
            series = self._turn_series[(platform, outcome)] = (
                self.turns.labels(platform, outcome),
                self.turn_seconds.labels(platform),
            )
        series[0].inc()
        series[1].observe(seconds)

    def messages_ended(self, outcome: str, count: int = 1) -> None:
        """Count ``count`` messages that ended with ``outcome`` (one of :data:`MESSAGE_OUTCOMES`)."""
        if count > 0:
            self._outcomes[outcome].inc(count)

    def agent_called(self, outcome: str, seconds: float, result: object = None) -> None:
        """Count an agent call's duration, and the tokens of its reply."""
        histogram = self._agent_series.get(outcome)
        if histogram is None:
            histogram = self._agent_series[outcome] = self.agent_seconds.labels(outcome)
        histogram.observe(seconds)
        if self.on_agent_call is not None:
            self.on_agent_call(outcome, result)
        if isinstance(result, AgentReply):
            if result.input_tokens:
                self._input.inc(result.input_tokens)
            if result.output_tokens:
                self._output.inc(result.output_tokens)

    def committed(self, writes: int, seconds: float, *, committed: bool) -> None:
        """The store writer's :class:`~hermes_actors.store.writer.CommitObserver`: committed transactions only (a
        refused one is in the log, and in the turns it failed)."""
        if committed:
            self.commit_seconds.observe(seconds)
            self.commit_batch.observe(writes)

    # -- reading -------------------------------------------------------------------------------------------------

    def exposition(self) -> Exposition:
        """Every series in Prometheus's text format."""
        return Exposition(content_type=CONTENT_TYPE_LATEST, body=generate_latest(self.registry))

    def vitals(self) -> Vitals:
        """The same numbers for a person (``hermesctl status``, ``/health/detailed``)."""
        samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in self.registry.collect():
            for sample in family.samples:
                samples.setdefault(sample.name, []).append((sample.labels, sample.value))

        def total(name: str) -> int:
            return int(sum(value for _, value in samples.get(name, ())))

        def by(name: str, label: str) -> dict[str, int]:
            counts: dict[str, int] = {}
            for labels, value in samples.get(name, ()):
                counts[labels[label]] = counts.get(labels[label], 0) + int(value)
            return counts

        def gauge(name: str, label: str) -> dict[str, float]:
            return {labels[label]: value for labels, value in samples.get(name, ())}

        oldest = samples.get("hermes_inbox_oldest_age_seconds", [])
        tokens = by("hermes_model_tokens_total", "direction")
        outbox_ages = gauge("hermes_outbox_oldest_age_seconds", "platform")
        inbox_ages = gauge("hermes_inbox_platform_oldest_age_seconds", "platform")
        return Vitals(
            turns=by("hermes_turns_total", "outcome"),
            turn_latency=latency_of(samples, "hermes_turn_duration_seconds"),
            agent_latency=latency_of(samples, "hermes_agent_call_duration_seconds"),
            tokens_in=tokens.get("input", 0),
            tokens_out=tokens.get("output", 0),
            inbox_pending=total("hermes_inbox_pending"),
            inbox_oldest_age_s=oldest[0][1] if oldest and not math.isnan(oldest[0][1]) else None,
            outbox_pending=by("hermes_outbox_pending", "platform"),
            outbox_oldest_age_s={k: v for k, v in outbox_ages.items() if not math.isnan(v)},
            deliveries_retried=total("hermes_deliveries_retried_total"),
            deliveries_given_up=total("hermes_deliveries_given_up_total"),
            live_actors=total("hermes_live_actors"),
            activations=total("hermes_activations_total"),
            passivations=by("hermes_passivations_total", "reason"),
            duplicates=total("hermes_inbox_duplicates_total"),
            resets=by("hermes_resets_total", "reason"),
            commits=total("hermes_store_commit_duration_seconds_count"),
            commit_latency=latency_of(samples, "hermes_store_commit_duration_seconds"),
            inbox_by_platform=by("hermes_inbox_platform_pending", "platform"),
            inbox_oldest_by_platform_s={k: v for k, v in inbox_ages.items() if not math.isnan(v)},
            messages=by("hermes_messages_total", "outcome"),
            dead_letters=by("hermes_dead_letters", "kind"),
        )


def latency_of(samples: Mapping[str, Iterable[tuple[Mapping[str, str], float]]], name: str) -> Latency | None:
    """Summarise the histogram ``name`` over all its label values; ``None`` before its first observation."""
    count = sum(value for _, value in samples.get(f"{name}_count", ()))
    if not count:
        return None
    total = sum(value for _, value in samples.get(f"{name}_sum", ()))
    buckets: dict[float, float] = {}
    for labels, value in samples.get(f"{name}_bucket", ()):
        bound = float(labels["le"])
        buckets[bound] = buckets.get(bound, 0.0) + value
    cumulative = sorted(buckets.items())
    return Latency(
        count=int(count),
        mean_s=total / count,
        p50_s=_quantile(0.5, cumulative, count),
        p95_s=_quantile(0.95, cumulative, count),
    )


def _quantile(q: float, cumulative: list[tuple[float, float]], count: float) -> float:
    """The ``q`` quantile of a histogram's cumulative buckets, linear within the bucket it falls in; a quantile in
    the ``+Inf`` bucket is the highest finite bound (nothing better is known)."""
    rank = q * count
    lower_bound, lower_count = 0.0, 0.0
    for bound, seen in cumulative:
        if seen >= rank:
            if math.isinf(bound):
                return lower_bound
            share = (rank - lower_count) / (seen - lower_count) if seen > lower_count else 1.0
            return lower_bound + (bound - lower_bound) * share
        lower_bound, lower_count = bound, seen
    return lower_bound
