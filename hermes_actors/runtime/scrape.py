"""The series read when ``/metrics`` is scraped: the store's queues and the supervisor's actors.

Nothing on the turn path keeps these up to date: a scrape reads the inbox and outbox through a borrowed reader (the
store's typed interface) and asks the supervisor for its snapshot. A part that cannot answer (the store closed, the
supervisor stopped or too busy) leaves its series out of that scrape and logs why, so the rest is still served.

* ``hermes_inbox_pending``, ``hermes_inbox_oldest_age_seconds``: inbound messages without a finished turn, and how
  long the oldest has waited (NaN when none waits)
* ``hermes_outbox_pending{platform}``, ``hermes_outbox_oldest_age_seconds{platform}``: replies neither sent nor
  given up, per platform (every platform with a sender, 0 when nothing waits)
* ``hermes_dead_letters{kind}``: dead letters not replayed: a ``message``'s, an event ``delivery``'s
* ``hermes_live_actors``, ``hermes_activations_total``, ``hermes_passivations_total{reason}`` (``idle``,
  ``evicted``, ``ended``)
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hermes_actors.runtime.protocol import SupervisorStatistics
from hermes_actors.store.readers import ReaderPool
from hermes_actors.store.records import QueueSummary

__all__ = ["RuntimeCollector"]

_log = logging.getLogger(__name__)

READ_TIMEOUT_S = 5.0  # how long a scrape waits for a reader when all are lent


class RuntimeCollector(Collector):
    """Reads the queues from ``readers`` and the actors from ``statistics`` at each scrape; ``platforms`` names
    the platforms with a sender and ``clock`` is the runtime's (the queues' timestamps are of it)."""

    def __init__(
        self,
        readers: ReaderPool,
        statistics: Callable[[], SupervisorStatistics],
        platforms: Callable[[], list[str]],
        clock: Callable[[], float],
    ) -> None:
        self._readers = readers
        self._statistics = statistics
        self._platforms = platforms
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        try:
            yield from self._queues()
        except Exception as exc:
            _log.warning("metrics: the store's queues could not be read for this scrape: %s", exc)
        try:
            stats = self._statistics()
        except Exception as exc:
            _log.warning("metrics: the supervisor did not answer this scrape: %s", exc)
        else:
            yield from _actors(stats)

    def _queues(self) -> Iterator[Metric]:
        with self._readers.reader(timeout=READ_TIMEOUT_S) as store:  # counts and one row each: cheap at any size
            inbox = store.inbox.summary()
            inbox_platforms = store.inbox.summary_by_platform()
            outbox = store.outbox.summary_by_platform()
            messages, deliveries = store.dead_letters.open_counts()
        now = self._clock()
        yield GaugeMetricFamily("hermes_inbox_pending", "Inbound messages without a finished turn.", inbox.count)
        yield GaugeMetricFamily(
            "hermes_inbox_oldest_age_seconds",
            "How long the oldest inbound message without a finished turn has waited (NaN: none waits).",
            max(now - inbox.oldest_at, 0.0) if inbox.oldest_at is not None else math.nan,
        )
        platforms = list(self._platforms())
        inbound = "Inbound messages without a finished turn"
        yield from _by_platform("hermes_inbox_platform", inbound, platforms, inbox_platforms, now)
        yield from _by_platform("hermes_outbox", "Replies neither sent nor given up", platforms, outbox, now)
        letters = GaugeMetricFamily(
            "hermes_dead_letters", "Dead letters waiting for a replay, by kind.", labels=["kind"]
        )
        letters.add_metric(["message"], messages)
        letters.add_metric(["delivery"], deliveries)
        yield letters


def _by_platform(
    name: str, what: str, platforms: Iterable[str], waiting: Mapping[str, QueueSummary], now: float
) -> Iterator[Metric]:
    """``<name>_pending`` and ``<name>_oldest_age_seconds`` labelled by platform: every configured platform, 0 and
    NaN where nothing waits."""
    counts = dict.fromkeys(platforms, 0) | {platform: queue.count for platform, queue in waiting.items()}
    oldest = {platform: queue.oldest_at for platform, queue in waiting.items() if queue.oldest_at is not None}
    pending = GaugeMetricFamily(f"{name}_pending", f"{what}, by platform.", labels=["platform"])
    ages = GaugeMetricFamily(
        f"{name}_oldest_age_seconds",
        f"How long the oldest of the {what.lower()} has waited (NaN: none waits), by platform.",
        labels=["platform"],
    )
    for platform in sorted(counts):
        pending.add_metric([platform], counts[platform])
        ages.add_metric([platform], max(now - oldest[platform], 0.0) if platform in oldest else math.nan)
    yield pending
    yield ages


def _actors(stats: SupervisorStatistics) -> Iterator[Metric]:
    yield GaugeMetricFamily("hermes_live_actors", "Session actors running now.", stats.live_actors)
    yield CounterMetricFamily("hermes_activations", "Session actors started.", stats.activations)
    passivations = CounterMetricFamily(
        "hermes_passivations",
        "Session actors stopped: idle (passivated), evicted (over runtime.max_live_actors), ended (the session ended).",
        labels=["reason"],
    )
    passivations.add_metric(["idle"], stats.passivations)
    passivations.add_metric(["evicted"], stats.evictions)
    passivations.add_metric(["ended"], stats.ended)
    yield passivations
