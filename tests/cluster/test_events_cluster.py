"""Event webhooks in cluster mode (in this process, no Ray): shard hosts emit events in their fenced commits, and
the replicas' outbox dispatchers, competing for ``send:events``, deliver each once by its id."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest

from hermes_actors.cluster.host.runtime import HostRuntime
from hermes_actors.cluster.host.settings import HostSettings
from hermes_actors.cluster.replica.dispatch import OutboxDispatcher
from hermes_actors.cluster.replica.ingress import ClusterIngress
from hermes_actors.config import EVENTS_PLATFORM, EventKind, EventsConfig, EventWebhook
from hermes_actors.store.deliveries import DeliveryState
from hermes_actors.store.pg import PostgresStore
from hermes_actors.testing import FakePlatform, poll_until
from platforms.support.event_webhooks import EventSender
from tests.events.receiver import open_receiver

SHARDS = 8
SECRET = "whsec_" + base64.b64encode(b"cluster-events-secret-24-by").decode()

pytestmark = pytest.mark.slow  # runs hosts for a few seconds


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as store:
        yield store


def _sent(pg: PostgresStore, count: int) -> bool:
    rows = pg.deliveries.of_platform(EVENTS_PLATFORM, limit=1000)
    return len(rows) == count and all(row.state is DeliveryState.SENT for row in rows)


def test_events_committed_by_two_hosts_are_delivered_once_each_by_competing_dispatchers(
    postgres_dsn: str, pg: PostgresStore
) -> None:
    hosts = ("h0", "h1")
    with open_receiver(SECRET, ["500"]) as receiver:
        events = EventsConfig(
            webhooks={"ops": EventWebhook(url=receiver.url, secret=SECRET, events=(EventKind.TURN_COMPLETED,))}
        )
        runtimes = [
            HostRuntime(
                HostSettings(
                    name=name,
                    postgres_dsn=postgres_dsn,
                    hosts=hosts,
                    shards=SHARDS,
                    lease_ttl_s=3.0,
                    grace_s=0.5,
                    events=events,
                )
            )
            for name in hosts
        ]
        dispatchers = [
            OutboxDispatcher(pg, {}, name=f"replica-{n}", role_ttl_s=3.0, retry_base_s=0.2) for n in range(2)
        ]
        for dispatcher in dispatchers:
            sender = EventSender(events, queued_at=pg.deliveries.queued_at, environ={})
            dispatcher.offer(sender.platform, sender)
        try:
            for runtime in runtimes:
                runtime.start()
            for dispatcher in dispatchers:
                dispatcher.start(0.05)
            poll_until(lambda: all(r.fence.held() for r in runtimes), what="both hosts holding shards")
            platform = FakePlatform("fake")
            ingress = ClusterIngress(pg, shards=SHARDS)
            for chat in range(6):
                assert ingress.accept(platform.message(f"hello {chat}", chat_id=f"chat-{chat}", user_id=f"u{chat}"))
            receiver.wait_accepted(6)
            poll_until(lambda: _sent(pg, 6), timeout=30, what="six deliveries sent")
        finally:
            for dispatcher in dispatchers:
                dispatcher.stop()
            for runtime in runtimes:
                runtime.stop()
    assert sorted(receiver.accepted.values()) == [1] * 6  # each event once, by its id
    replies = sorted(body["data"]["reply"] for body in receiver.of_type("turn.completed"))
    assert replies == [f"echo: hello {chat}" for chat in range(6)]
    assert sum(1 for attempt in receiver.attempts if attempt.answer == "500") == 1
    assert all(r.status().turns > 0 for r in runtimes)  # both hosts committed turns and their events
