"""Busy policies in cluster mode: a shard host (in this process, on PostgreSQL) takes messages from the cluster's
inbox and treats those that reach a busy session by ``busy:`` as one machine does."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.turn import AgentReply, TurnInput
from hermes_actors.cluster.host.runtime import HostRuntime
from hermes_actors.cluster.host.settings import HostSettings
from hermes_actors.cluster.replica.ingress import ClusterIngress
from hermes_actors.config import BusyConfig, BusyOverride
from hermes_actors.messages import BusyPolicy, OutboundError, decode_outbound
from hermes_actors.runtime.busy import busy_text
from hermes_actors.store.pg import PostgresStore
from hermes_actors.testing import FakePlatform, poll_until

SHARDS = 8

pytestmark = pytest.mark.slow


class _HeldAgent(EchoAgent):
    """An echo agent whose turns wait for ``release``; ``started`` counts the turns that began."""

    runs_inline = False

    def __init__(self) -> None:
        self.release = threading.Event()
        self._lock = threading.Condition()
        self.started = 0

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        with self._lock:
            self.started += 1
            self._lock.notify_all()
        self.release.wait(20)
        return super().run_turn(turn, timeout_s=timeout_s)

    def wait_started(self, count: int) -> None:
        with self._lock:
            assert self._lock.wait_for(lambda: self.started >= count, 20), f"{self.started} turns began"


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as store:
        yield store


def _replies(pg: PostgresStore, chat_id: str) -> list[tuple[str, OutboundError | None]]:
    rows = pg.database.execute("SELECT payload FROM outbox ORDER BY id")
    messages = [decode_outbound(bytes(payload)) for (payload,) in rows]
    return [(m.text, m.error) for m in messages if m.chat_id == chat_id]


def test_a_shard_host_collects_or_rejects_what_reaches_a_busy_session_by_its_chat_type(
    postgres_dsn: str, pg: PostgresStore
) -> None:
    busy = BusyConfig(
        chat_types={"dm": BusyOverride(mode=BusyPolicy.COLLECT), "group": BusyOverride(mode=BusyPolicy.REJECT)}
    )
    agent = _HeldAgent()
    host = HostRuntime(
        HostSettings(name="h0", postgres_dsn=postgres_dsn, hosts=("h0",), shards=SHARDS, busy=busy), agent=agent
    )
    host.start()
    try:
        platform, ingress = FakePlatform("fake"), ClusterIngress(pg, shards=SHARDS)
        chats = {"dm": "collecting", "group": "rejecting"}
        for chat_type, chat in chats.items():
            assert ingress.accept(platform.message(f"{chat}-1", chat_id=chat, user_id="u", chat_type=chat_type))
        agent.wait_started(2)
        for n in (2, 3):
            for chat_type, chat in chats.items():
                assert ingress.accept(platform.message(f"{chat}-{n}", chat_id=chat, user_id="u", chat_type=chat_type))
        supervisor = host.runtime.supervisor
        poll_until(
            lambda: (supervisor.statistics().queued_messages, supervisor.statistics().rejected) == (2, 2),
            timeout=20,
            what="two messages collected and two rejected",
        )
        agent.release.set()
        pending = "SELECT count(*) FROM inbox WHERE state = 'pending'"
        poll_until(lambda: pg.database.value(pending) == 0, timeout=20, what="every message answered")
        assert _replies(pg, "collecting") == [("echo: collecting-1", None), ("echo: collecting-2\ncollecting-3", None)]
        busy_notice = (busy_text(5), OutboundError.SESSION_BUSY)
        assert _replies(pg, "rejecting") == [busy_notice, busy_notice, ("echo: rejecting-1", None)]
        assert agent.started == 3  # the two first turns, and one for both collected messages
    finally:
        agent.release.set()
        host.stop()
