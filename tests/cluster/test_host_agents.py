"""Shard hosts run the named agents and their bindings too (no Ray: the host runtime in this process)."""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import pytest

from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.turn import AgentMessage, AgentReply, TurnInput
from hermes_actors.cluster.host.runtime import HostRuntime
from hermes_actors.cluster.host.settings import HostSettings
from hermes_actors.cluster.replica.ingress import ClusterIngress
from hermes_actors.daemon.agent_bindings import host_roster_factory
from hermes_actors.daemon.agent_settings import AgentSettings
from hermes_actors.runtime.agent_roster import DEFAULT_AGENT, AgentBinding, AgentRoster, NamedAgent
from hermes_actors.store import Role
from hermes_actors.store.pg import PostgresStore
from hermes_actors.testing import FakePlatform, poll_until

SHARDS = 4

pytestmark = pytest.mark.slow  # a host runs for a few seconds


class Voice(EchoAgent):
    """An echo agent that answers with its session's frozen system message, so a reply shows whose it is."""

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        text = f"{turn.system_prompt}: {turn.user_text}"
        return AgentReply(messages=(AgentMessage(role=Role.ASSISTANT, content=text),), text=text)


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as store:
        yield store


def test_a_host_with_a_roster_answers_each_chat_with_its_bound_agent_and_records_it(
    postgres_dsn: str, pg: PostgresStore
) -> None:
    roster = AgentRoster(
        [
            NamedAgent(name=DEFAULT_AGENT, agent=Voice(system_prompt="front desk")),
            NamedAgent(name="support", agent=Voice(system_prompt="support desk")),
        ],
        (AgentBinding(agent="support", platform="fake", chat_type="group"),),
    )
    settings = HostSettings(name="h0", postgres_dsn=postgres_dsn, hosts=("h0",), shards=SHARDS, grace_s=0.5)
    runtime = HostRuntime(settings, agents=roster)
    try:
        runtime.start()
        platform = FakePlatform("fake")
        ingress = ClusterIngress(pg, shards=SHARDS)
        assert ingress.accept(platform.message("hi", chat_id="dm-1", user_id="u1"))
        assert ingress.accept(platform.message("help", chat_id="g-1", user_id="u1", chat_type="group"))
        rows = poll_until(
            lambda: (
                found
                if len(
                    found := pg.database.execute(
                        "SELECT m.content, s.agent FROM messages m JOIN sessions s ON s.ref = m.session_ref "
                        "WHERE m.role = 'assistant' ORDER BY m.content"
                    )
                )
                == 2
                else None
            ),
            timeout=30,
            what="both chats answered",
        )
    finally:
        runtime.stop()
    answers = {str(content): agent for content, agent in rows}
    assert set(answers) == {"front desk: hi", "support desk: help"}
    assert answers["support desk: help"] == "support"
    assert answers["front desk: hi"] in (None, DEFAULT_AGENT)


def test_the_roster_factory_shard_hosts_get_pickles_and_builds_every_named_agent() -> None:
    default = AgentSettings(system_prompt="front desk")
    support = AgentSettings(system_prompt="support desk")
    bindings = (AgentBinding(agent="support", platform="webhook"),)
    factory = pickle.loads(pickle.dumps(host_roster_factory(default, {"support": support}, bindings, {})))
    roster = factory()
    assert isinstance(roster, AgentRoster)
    assert [named.name for named in roster.agents] == [DEFAULT_AGENT, "support"]
