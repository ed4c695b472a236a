"""Replicas whose configs differ (issue 37, item 3): a webhook reply of a route this replica does not know waits for
a replica that knows it, never marked sent unsent; replicas say at start what differs, and the status names it."""

from __future__ import annotations

import base64
import logging
from pathlib import Path

import pytest

from hermes_actors.cluster.replica.entry_points import ClusterReplica
from hermes_actors.cluster.replica.fingerprint import cluster_config, differences
from hermes_actors.cluster.replica.inbox import ClusterInbox
from hermes_actors.cluster.replica.ingress import ClusterIngress
from hermes_actors.cluster.settings import ClusterSettings
from hermes_actors.cluster.status import cluster_status
from hermes_actors.media import MediaStore
from hermes_actors.messages import OutboundMessage, encode
from hermes_actors.store.pg import PostgresStore
from hermes_actors.testing import poll_until
from platforms.webhook import WebhookAdapter, WebhookConfig, WebhookRoute
from tests.platforms.test_webhook import SECRET, Receiver

pytestmark = pytest.mark.slow  # a callback receiver and a dispatcher for a few seconds


def _reply(pg: PostgresStore, route: str, text: str) -> int:
    message = OutboundMessage(platform="webhook", account_id=route, session_id="s", chat_id="c1", text=text)
    with pg.transaction():
        return pg.outbox.add(
            session_id=None, platform="webhook", account_id=route, chat_id="c1", thread_id=None, payload=encode(message)
        )


def _sent(pg: PostgresStore, outbox_id: int) -> tuple[object, int]:
    """(sent_at, attempts) of an outbox row."""
    rows = pg.database.execute("SELECT sent_at, attempts FROM outbox WHERE id = %s", (outbox_id,))
    return rows[0][0], int(rows[0][1])


def test_a_reply_of_a_route_this_replica_does_not_know_waits_unsent(
    postgres_dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    receiver = Receiver()
    receiver.host.start()
    sections = {
        "webhook": WebhookConfig(port=0, routes={"known": WebhookRoute(secret=SECRET, callback_url=receiver.url)})
    }
    wider = {
        "webhook": WebhookConfig(
            port=0,
            routes={
                "known": WebhookRoute(secret=SECRET, callback_url=receiver.url),
                "elsewhere": WebhookRoute(secret=SECRET, callback_url=receiver.url),
            },
        )
    }
    settings = ClusterSettings(postgres_dsn=postgres_dsn)
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as pg:
        other = cluster_config(settings, wider)
        pg.replicas.beat("replica-b", fingerprint=other[1], settings=other[0])  # a live replica on the wider config
        inbox = ClusterInbox(ClusterIngress(pg, shards=4), MediaStore(tmp_path))
        replica = ClusterReplica(
            pg,
            inbox,
            sections,
            build=lambda name, config: WebhookAdapter(config),  # type: ignore[arg-type]
            name="replica-a",
            shared_config=cluster_config(settings, sections),
        )
        known = _reply(pg, "known", "to a route known here")
        unknown = _reply(pg, "elsewhere", "to a route only replica-b knows")
        with caplog.at_level(logging.WARNING, logger="hermes_actors.cluster.replica.entry_points"):
            replica.start()
        try:
            assert receiver.take().json()["text"] == "to a route known here"
            poll_until(lambda: _sent(pg, known)[0] is not None, what="the known route's reply marked sent")
            replica.dispatcher.dispatch_once()
            assert _sent(pg, unknown) == (None, 0)  # never claimed: not marked sent unsent
            warned = [r.getMessage() for r in caplog.records if "runs another config" in r.getMessage()]
            assert len(warned) == 1
            assert "they differ in platforms.webhook.routes.elsewhere" in warned[0]
            status = cluster_status(pg)
            assert any(line.startswith("replicas run on different configs (") for line in status.trouble)
        finally:
            replica.stop()
            inbox.close()
            receiver.release.set()
            receiver.host.stop()


def test_the_shared_config_masks_secrets_and_still_tells_two_secrets_apart() -> None:
    settings = ClusterSettings(postgres_dsn="postgresql:///hermes")
    first, second = "whsec_" + base64.b64encode(b"1" * 24).decode(), "whsec_" + base64.b64encode(b"2" * 24).decode()
    one = cluster_config(settings, {"webhook": WebhookConfig(routes={"r": WebhookRoute(secret=first)})})
    two = cluster_config(settings, {"webhook": WebhookConfig(routes={"r": WebhookRoute(secret=second)})})
    assert first not in one[0]
    assert "whsec" not in one[0]
    assert one[1] != two[1]
    assert differences(one[0], two[0]) == ["platforms.webhook.routes.r.secret"]
