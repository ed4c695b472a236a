"""What a ``hermesd --cluster`` replica tells about the store and the whole cluster: ``/health``, ``/health/cluster``
and ``/metrics`` with PostgreSQL down answer within a second or two and say so, instead of waiting 30 s for the
pool and failing with its exception.

:class:`StoreCheck` asks whether PostgreSQL takes a write, never waiting more than ``timeout_s`` and at most once
per ``keep_s``; :class:`CheckedReaders` refuses a read at once while the check says the store is away.
:class:`ClusterWatch` keeps the cluster's status (:func:`~hermes_actors.cluster.status.cluster_status`) for
``keep_s`` and turns it into :class:`~hermes_actors.health.ClusterView` and Prometheus series.
:class:`ClusterCollector` exports them (the shard hosts serve no HTTP of their own; their numbers come with their
heartbeats). Every replica exports the same cluster series: scrape one, or aggregate them with ``max by``.

* ``hermes_store_up``: 1 while PostgreSQL takes writes, 0 while it does not (the other store series are left out)
* ``hermes_cluster_trouble``, ``hermes_cluster_messages_stuck``, ``hermes_cluster_shards{state}`` (held, unheld)
* per host: ``hermes_cluster_host_up``, ``_heartbeat_age_seconds``, ``_uptime_seconds``, ``_incarnations``,
  ``_shards``, ``_handed_over`` and the counters ``hermes_cluster_host_turns_total{host,outcome}``
  (``stale`` and ``unsaved`` among the outcomes), ``_fence_refusals_total``, ``_shards_taken_total``,
  ``_shards_lost_total``, ``_unknown_commits_total``, ``_store_errors_total``
* ``hermes_cluster_replica_heartbeat_age_seconds{replica}``, ``hermes_cluster_role_held{role,holder}``,
  ``hermes_cluster_role_term_left_seconds{role}``
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import msgspec
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hermes_actors.cluster.settings import ClusterHealth
from hermes_actors.cluster.status import ClusterStatus, cluster_status
from hermes_actors.errors import HermesError, StoreError
from hermes_actors.health import ClusterView
from hermes_actors.store import StoreInterface
from hermes_actors.store.pg.store import PostgresStore
from hermes_actors.store.readers import ReaderPool

__all__ = ["CheckedReaders", "ClusterCollector", "ClusterWatch", "StoreCheck"]

_log = logging.getLogger(__name__)


class StoreCheck:
    """Whether PostgreSQL takes a write now (:meth:`problem`), asked at most once per ``keep_s`` and answered
    within ``timeout_s`` (a connection's wait, then each statement's run)."""

    def __init__(
        self,
        store: PostgresStore,
        *,
        timeout_s: float = 1.0,
        keep_s: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._timeout = timeout_s
        self._keep = keep_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._verdict: tuple[float, str | None] = (float("-inf"), None)

    def problem(self) -> str | None:
        """Why the store cannot be written now, or ``None`` when it can."""
        with self._lock:  # one check at a time: a burst of probes waits for one answer
            checked_at, reason = self._verdict
            if self._monotonic() - checked_at < self._keep:
                return reason
            try:
                self._store.check_writable(timeout_s=self._timeout)
                reason = None
            except HermesError as exc:
                reason = str(exc)
            self._verdict = (self._monotonic(), reason)
            return reason


class CheckedReaders(ReaderPool):
    """The store as a reader, refused at once (a :class:`StoreError` naming why) while ``check`` says it is away."""

    def __init__(self, store: PostgresStore, check: StoreCheck) -> None:
        self._pg = store
        self._check = check

    @contextmanager
    def reader(self, timeout: float | None = 30.0) -> Iterator[StoreInterface]:
        problem = self._check.problem()
        if problem is not None:
            raise StoreError(f"not read: {problem}")
        yield self._pg

    def close(self) -> None:
        """Nothing to close: the replica closes the store."""


class ClusterWatch:
    """The cluster's status as this replica last read it (at most every ``keep_s``), judged by ``health``."""

    def __init__(
        self,
        store: PostgresStore,
        check: StoreCheck,
        *,
        health: ClusterHealth | None = None,
        hosts: Sequence[str] = (),
        keep_s: float = 2.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._check = check
        self.health = health or ClusterHealth()
        self._hosts = tuple(hosts)
        self._keep = keep_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._read: tuple[float, ClusterStatus | None, str | None] = (float("-inf"), None, None)

    def status(self) -> tuple[ClusterStatus | None, str | None]:
        """The cluster's status, or ``None`` and why it could not be read."""
        with self._lock:
            read_at, status, problem = self._read
            if self._monotonic() - read_at < self._keep:
                return status, problem
            problem = self._check.problem()
            status = None
            if problem is None:
                try:
                    status = cluster_status(self._store, health=self.health, expected_hosts=self._hosts)
                except HermesError as exc:
                    problem = str(exc)
            self._read = (self._monotonic(), status, problem)
            return status, problem

    def view(self) -> ClusterView:
        """What ``/health/cluster`` answers."""
        status, problem = self.status()
        if status is None:
            return ClusterView(trouble=[f"the cluster's store cannot be read: {problem}"], status=msgspec.Raw(b"null"))
        return ClusterView(trouble=status.trouble, status=msgspec.Raw(msgspec.json.encode(status)))


class ClusterCollector(Collector):
    """``/metrics``: the store's reachability and the cluster's series (see the module docstring)."""

    def __init__(self, check: StoreCheck, watch: ClusterWatch) -> None:
        self._check = check
        self._watch = watch

    def collect(self) -> Iterator[Metric]:
        problem = self._check.problem()
        yield GaugeMetricFamily(
            "hermes_store_up", "1 while PostgreSQL takes writes, 0 while it does not.", 0 if problem else 1
        )
        if problem is not None:
            return
        status, _ = self._watch.status()
        if status is not None:
            yield from _cluster_series(status, self._watch.health)


def _gauge(name: str, doc: str, labels: Sequence[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=list(labels))


def _cluster_series(status: ClusterStatus, health: ClusterHealth) -> Iterator[Metric]:
    yield GaugeMetricFamily("hermes_cluster_trouble", "Troubles found by cluster.health.", len(status.trouble))
    yield GaugeMetricFamily(
        "hermes_cluster_messages_stuck", "Messages pending over cluster.health.stuck_after_s.", status.stuck_count
    )
    shards = _gauge("hermes_cluster_shards", "Shards by state: held by a host, or not.", ["state"])
    shards.add_metric(["held"], status.shards - len(status.unheld))
    shards.add_metric(["unheld"], len(status.unheld))
    yield shards
    gauges = {
        "up": _gauge("hermes_cluster_host_up", "1 while the host beats within host_silent_after_s.", ["host"]),
        "age": _gauge("hermes_cluster_host_heartbeat_age_seconds", "Since the host's last heartbeat.", ["host"]),
        "uptime": _gauge("hermes_cluster_host_uptime_seconds", "Since its incarnation started.", ["host"]),
        "incarnations": _gauge("hermes_cluster_host_incarnations", "Processes the name has run as.", ["host"]),
        "shards": _gauge("hermes_cluster_host_shards", "Shards the host holds.", ["host"]),
        "handed": _gauge("hermes_cluster_host_handed_over", "Rows handed to sessions, still pending.", ["host"]),
    }
    counters = {
        "refusals": CounterMetricFamily("hermes_cluster_host_fence_refusals", "Commits refused.", labels=["host"]),
        "taken": CounterMetricFamily("hermes_cluster_host_shards_taken", "Shard terms taken.", labels=["host"]),
        "lost": CounterMetricFamily("hermes_cluster_host_shards_lost", "Shard terms lost.", labels=["host"]),
        "unknown": CounterMetricFamily(
            "hermes_cluster_host_unknown_commits", "Commits cut off, then resolved.", labels=["host"]
        ),
        "errors": CounterMetricFamily(
            "hermes_cluster_host_store_errors", "Failed store calls of the host's loops.", labels=["host"]
        ),
    }
    turns = CounterMetricFamily("hermes_cluster_host_turns", "Turns by outcome, per host.", labels=["host", "outcome"])
    for host in status.hosts:
        seen = host.seen_s_ago
        gauges["up"].add_metric([host.name], 1 if seen is not None and seen < health.host_silent_after_s else 0)
        gauges["shards"].add_metric([host.name], host.shards)
        if seen is None:
            continue
        gauges["age"].add_metric([host.name], seen)
        gauges["uptime"].add_metric([host.name], host.up_s or 0.0)
        gauges["incarnations"].add_metric([host.name], host.incarnations)
        stats = host.stats
        if stats is None:
            continue
        gauges["handed"].add_metric([host.name], stats.handed_over)
        counters["refusals"].add_metric([host.name], stats.fence_refusals)
        counters["taken"].add_metric([host.name], stats.shards_taken)
        counters["lost"].add_metric([host.name], stats.shards_lost)
        counters["unknown"].add_metric([host.name], stats.unknown_commits)
        counters["errors"].add_metric([host.name], stats.store_errors)
        for outcome, count in sorted(stats.turns.items()):
            turns.add_metric([host.name, outcome], count)
    yield from gauges.values()
    yield from counters.values()
    yield turns
    replicas = _gauge("hermes_cluster_replica_heartbeat_age_seconds", "Since the replica's last beat.", ["replica"])
    for replica in status.replicas:
        replicas.add_metric([replica.name], replica.seen_s_ago)
    yield replicas
    held = _gauge("hermes_cluster_role_held", "1 for the replica holding the role.", ["role", "holder"])
    left = _gauge("hermes_cluster_role_term_left_seconds", "The role's term left (negative: free).", ["role"])
    for role in status.roles:
        holding = role.holder is not None and role.remaining_s > 0
        held.add_metric([role.role, (role.holder or "") if holding else ""], 1 if holding else 0)
        left.add_metric([role.role], role.remaining_s if role.remaining_s != float("-inf") else -1e9)
    yield held
    yield left
