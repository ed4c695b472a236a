"""The webhook adapter in cluster mode: verified, committed to the PostgreSQL inbox of its session's shard,
answered 202; the turn runs in the shard host; a dispatcher claims the reply and posts it to the callback."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_actors.cluster.host.runtime import HostRuntime
from hermes_actors.cluster.host.settings import HostSettings
from hermes_actors.cluster.replica.dispatch import OutboxDispatcher
from hermes_actors.cluster.replica.inbox import ClusterInbox
from hermes_actors.cluster.replica.ingress import ClusterIngress
from hermes_actors.media import MediaStore
from hermes_actors.store.pg import PostgresStore
from hermes_actors.testing import poll_until
from platforms.webhook import WebhookAdapter, WebhookConfig, WebhookRoute
from tests.platforms.test_webhook import CALLBACK_SECRET, SECRET, Receiver, post, signature, signature_is_valid

pytestmark = pytest.mark.slow  # a shard host, an HTTP server and a callback receiver for a few seconds

SHARDS = 8


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    receiver.host.start()
    yield receiver
    receiver.release.set()
    receiver.host.stop()


def _post(adapter: WebhookAdapter, payload: dict[str, str], webhook_id: str) -> tuple[int, dict[str, object]]:
    body = json.dumps(payload).encode()
    stamp = str(int(time.time()))
    headers = {
        "content-type": "application/json",
        "webhook-id": webhook_id,
        "webhook-timestamp": stamp,
        "webhook-signature": signature(SECRET, webhook_id, stamp, body),
    }
    return post(f"{adapter.url}/webhooks/default", body, headers)


def test_a_webhook_runs_in_the_shard_host_and_its_reply_reaches_the_callback_once(
    postgres_dsn: str, receiver: Receiver, tmp_path: Path
) -> None:
    host = HostRuntime(HostSettings(name="h0", postgres_dsn=postgres_dsn, hosts=("h0",), shards=SHARDS))
    host.start()
    route = WebhookRoute(secret=SECRET, callback_url=receiver.url, callback_secret=CALLBACK_SECRET)
    adapter = WebhookAdapter(WebhookConfig(port=0, routes={"default": route}))
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as pg:
        inbox = ClusterInbox(ClusterIngress(pg, shards=SHARDS, poke=lambda shard: host.poke()), MediaStore(tmp_path))
        dispatcher = OutboxDispatcher(pg, {s.platform: s for s in adapter.senders()}, name="d0")
        adapter.start(inbox)
        dispatcher.start(interval_s=0.05)
        try:
            webhook_id = f"msg_{uuid.uuid4().hex}"
            answers = [_post(adapter, {"text": "hello", "chat_id": "c1"}, webhook_id) for _ in range(2)]
            assert [status for status, _ in answers] == [202, 202]
            assert [answer["duplicate"] for _, answer in answers] == [False, True]
            callback = receiver.take()
            assert signature_is_valid(CALLBACK_SECRET, callback.headers, callback.body)
            assert callback.json()["text"] == "echo: hello"
            assert callback.json()["in_reply_to"] == webhook_id
            poll_until(lambda: pg.outbox.backlog() == 0, what="the reply marked sent")
            assert pg.database.value("SELECT count(*) FROM outbox") == 1
            assert inbox.poll_cursor("webhook") is None  # a push adapter keeps none
        finally:
            adapter.stop()
            dispatcher.stop()
            inbox.close()
            host.stop()
