"""``/v1/conversations`` in cluster mode: a conversation made through one replica is read, continued by a response
and deleted through another, its turn running in the shard host, all through a real PostgreSQL."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.cluster import test_api_cluster
from tests.cluster.test_api_cluster import Cluster

pytestmark = pytest.mark.slow  # a shard host, PostgreSQL listeners and HTTP servers for a few seconds

cluster = test_api_cluster.cluster  # a shard host in this process holding every shard


def _texts(items: list[Any]) -> list[tuple[str, str]]:
    return [(item.role, item.content[0].text) for item in items if item.type == "message"]


def test_a_conversation_is_shared_by_every_replica_and_its_turn_runs_in_the_host(cluster: Cluster) -> None:
    first, second = cluster.replica(), cluster.replica()
    try:
        conversation = first.client().conversations.create(
            items=[{"type": "message", "role": "user", "content": "the boat is blue"}], metadata={"k": "v"}
        )
        assert second.client().conversations.retrieve(conversation.id).metadata == {"k": "v"}
        answer = second.client().responses.create(
            model="hermes-agent", input="which colour?", conversation=conversation.id
        )
        assert answer.output_text == "echo: which colour?"
        items = list(first.client().conversations.items.list(conversation.id, order="asc"))
        assert _texts(items) == [
            ("user", "the boat is blue"),
            ("user", "which colour?"),
            ("assistant", "echo: which colour?"),
        ]
        assert second.client().conversations.delete(conversation.id).deleted
        with pytest.raises(openai.NotFoundError):
            first.client().conversations.retrieve(conversation.id)
        assert cluster.pg.database.execute("SELECT count(*) FROM sessions") == [(0,)]
    finally:
        first.stop()
        second.stop()
