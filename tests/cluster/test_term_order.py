"""A session's order across a host's lapsed and retaken shard term (what the fault test showed under load: a message
queued under a lapsed term committed ahead of the earlier one whose turn the lapse refused)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from hermes_actors.agents.base import EchoAgent
from hermes_actors.agents.turn import AgentReply, TurnInput
from hermes_actors.cluster.host.runtime import HostRuntime
from hermes_actors.cluster.host.settings import HostSettings
from hermes_actors.cluster.replica.ingress import ClusterIngress
from hermes_actors.routing import build_session_key
from hermes_actors.store.pg import PostgresStore
from hermes_actors.store.pg.shards import shard_of
from hermes_actors.testing import FakePlatform, poll_until

pytestmark = pytest.mark.slow  # a host for a few seconds

SHARDS = 4


class GatePerText(EchoAgent):
    """An echo agent whose turn for each text waits for that text's gate; ``started`` says which turns began."""

    runs_inline = False

    def __init__(self) -> None:
        super().__init__()
        self.gates = {text: threading.Event() for text in ("one", "two")}
        self.started = {text: threading.Event() for text in ("one", "two")}

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        text = turn.user_text
        if text in self.gates:
            self.started[text].set()
            self.gates[text].wait(20)
        return super().run_turn(turn, timeout_s=timeout_s)


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as store:
        yield store


def test_a_message_queued_under_a_lapsed_term_does_not_overtake_the_refused_one(
    postgres_dsn: str, pg: PostgresStore
) -> None:
    agent = GatePerText()
    settings = HostSettings(
        name="h0", postgres_dsn=postgres_dsn, hosts=("h0",), shards=SHARDS, lease_ttl_s=1.5, grace_s=0.1
    )
    host = HostRuntime(settings, agent=agent)
    try:
        host.start()
        poll_until(lambda: len(host.fence.held()) == SHARDS, what="the host holding every shard")
        platform = FakePlatform("fake")
        ingress = ClusterIngress(pg, shards=SHARDS, poke=lambda shard: host.poke())
        first = platform.message("one", chat_id="c", user_id="u")
        shard = shard_of(build_session_key(first.source), SHARDS)
        ingress.accept(first)
        assert agent.started["one"].wait(10)
        ingress.accept(platform.message("two", chat_id="c", user_id="u"))  # queued behind "one"
        epoch = host.fence.held()[shard]
        host.keeper.stall_renewals = True
        poll_until(lambda: shard not in host.fence.held(), what="the term lapsing by the host's own deadline")
        agent.gates["one"].set()  # its commit is refused: the host no longer holds the shard
        # Handed over under the lapsed term, "two" must not run before "one" runs again (before the fix it started
        # here, waited at its gate until the host had retaken the shard, and committed first).
        agent.started["two"].wait(2)
        host.keeper.stall_renewals = False
        poll_until(lambda: host.fence.held().get(shard, epoch) > epoch, what="the host retaking the shard")
        agent.gates["two"].set()

        def answered() -> bool:
            return int(pg.database.value("SELECT count(*) FROM inbox WHERE state = 'pending'")) == 0

        poll_until(answered, timeout=20, what="both messages answered")
        committed = pg.database.execute(
            "SELECT m.content FROM messages m WHERE m.role = 'user' ORDER BY m.id",
        )
        assert [str(text) for (text,) in committed] == ["one", "two"]
    finally:
        for gate in agent.gates.values():
            gate.set()
        host.stop()
