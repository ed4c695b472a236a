"""Several agents behind one gateway: bindings choose a new session's agent, the session records it and keeps it
(across restarts, compression and ``/resume``), a message may ask for an agent by name, and the choice is made once
per activation, not per turn."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import msgspec
import pytest

from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.turn import AgentMessage, AgentReply, TurnInput
from hermes_actors.config import RuntimeConfig
from hermes_actors.errors import ConfigError
from hermes_actors.routing import SessionSource, build_session_key
from hermes_actors.runtime.agent_roster import DEFAULT_AGENT, AgentBinding, AgentRoster, NamedAgent
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.records import NewSession
from hermes_actors.store import Role, SessionRecord
from hermes_actors.testing import FakePlatform


class Voice(EchoAgent):
    """An echo agent that answers with the system message its session froze, so a reply shows whose it is."""

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        text = f"{turn.system_prompt}: {turn.user_text}"
        return AgentReply(messages=(AgentMessage(role=Role.ASSISTANT, content=text),), text=text)


def roster(bindings: Sequence[AgentBinding] = ()) -> AgentRoster:
    return AgentRoster(
        [
            NamedAgent(name=DEFAULT_AGENT, agent=Voice(system_prompt="plain")),
            NamedAgent(name="support", agent=Voice(system_prompt="support desk")),
            NamedAgent(name="sales", agent=Voice(system_prompt="sales team")),
        ],
        bindings,
    )


def source(**fields: str) -> SessionSource:
    values = {"platform": "webhook", "account_id": "billing", "chat_type": "dm", "chat_id": "c1", **fields}
    return SessionSource(**values)


# -- the rule ---------------------------------------------------------------------------------------------------


def test_the_most_specific_binding_wins_and_among_equals_the_first_listed() -> None:
    agents = roster(
        [
            AgentBinding(agent="sales"),  # the catch-all
            AgentBinding(agent="support", platform="webhook"),
            AgentBinding(agent="sales", platform="webhook", account="billing"),
            AgentBinding(agent="support", chat_type="group"),
            AgentBinding(agent="sales", chat_type="group"),  # equal to the one before: the first listed wins
            AgentBinding(agent=DEFAULT_AGENT, platform="webhook", chat_id="vip"),
        ]
    )
    assert agents.bound(source(platform="telegram", account_id="")).name == "sales"
    assert agents.bound(source(account_id="other")).name == "support"
    assert agents.bound(source()).name == "sales"
    assert agents.bound(source(chat_type="group")).name == "support"
    assert agents.bound(source(chat_type="group", chat_id="vip")).name == DEFAULT_AGENT
    assert agents.bound(source(platform="slack", chat_id="vip")).name == "sales"  # the chat id is webhook's


def test_without_a_matching_binding_the_default_agent_answers() -> None:
    agents = roster([AgentBinding(agent="support", platform="slack")])
    assert agents.bound(source()).name == DEFAULT_AGENT
    assert agents.names == (DEFAULT_AGENT, "support", "sales")


def test_a_requested_agent_wins_over_the_bindings_and_an_unknown_name_is_ignored() -> None:
    agents = roster([AgentBinding(agent="support")])
    assert agents.for_new(source(), "sales").name == "sales"
    assert agents.for_new(source(), "gpt-4o").name == "support"
    assert agents.for_new(source(), None).name == "support"


def test_a_stored_session_keeps_its_agent_and_one_from_before_has_the_default(caplog: pytest.LogCaptureFixture) -> None:
    agents = roster([AgentBinding(agent="support")])
    record = SessionRecord(id="s1", source="webhook", started_at=0.0, last_active_at=0.0, agent="sales")
    assert agents.for_record(record).name == "sales"
    older = SessionRecord(id="s0", source="webhook", started_at=0.0, last_active_at=0.0)
    assert agents.for_record(older).name == DEFAULT_AGENT  # what answered it before there were names
    gone = SessionRecord(id="s2", source="webhook", started_at=0.0, last_active_at=0.0, agent="retired")
    with caplog.at_level(logging.WARNING):
        assert agents.for_record(gone).name == DEFAULT_AGENT
    assert "its agent 'retired' is no longer configured" in caplog.text
    assert "add agents.retired back" in caplog.text


def test_a_binding_naming_an_unknown_agent_is_refused_naming_its_key_and_the_agents() -> None:
    with pytest.raises(ConfigError) as error:
        roster([AgentBinding(agent="support"), AgentBinding(agent="suport", platform="webhook")])
    assert error.value.path == "bindings[1].agent"
    assert "names 'suport', which is not an agent; use one of: default, support, sales" in str(error.value)


def test_a_roster_without_the_default_agent_or_with_a_name_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match="no agent is named 'default'"):
        AgentRoster([NamedAgent(name="support", agent=EchoAgent())])
    with pytest.raises(ConfigError, match="two agents are named 'default'"):
        AgentRoster([NamedAgent(name=DEFAULT_AGENT, agent=EchoAgent())] * 2)


# -- through a gateway --------------------------------------------------------------------------------------------


class CountingRoster(AgentRoster):
    """Counts how often a session's agent is chosen."""

    __slots__ = ("choices",)

    def __init__(self, agents: Sequence[NamedAgent], bindings: Sequence[AgentBinding] = ()) -> None:
        super().__init__(agents, bindings)
        self.choices = 0

    def for_new(self, source: SessionSource, requested: str | None = None) -> NamedAgent:
        self.choices += 1
        return super().for_new(source, requested)

    def for_record(self, record: SessionRecord) -> NamedAgent:
        self.choices += 1
        return super().for_record(record)


@contextmanager
def gateway(path: Path, agents: AgentRoster) -> Iterator[tuple[Gateway, FakePlatform]]:
    fake = FakePlatform("webhook", account_id="billing")
    running = Gateway(path, agents=agents, senders=[fake], config=RuntimeConfig(protected_recent_messages=2))
    fake.attach(running)
    try:
        yield running, fake
    finally:
        running.stop(timeout=10)


_ids = itertools.count(1)


def ask(fake: FakePlatform, text: str, chat_id: str) -> str:
    fake.push(text, chat_id=chat_id, message_id=f"msg-{next(_ids)}")  # unique across restarts
    return fake.pop().text


def session_of(running: Gateway, fake: FakePlatform, chat_id: str) -> str | None:
    return running.session_for(build_session_key(fake.message("", chat_id=chat_id).source, running.config.key_policy))


def stored(running: Gateway, session_id: str) -> SessionRecord:
    with running.read() as store:
        return store.get_session(session_id)


def test_bound_chats_are_answered_by_their_agents_and_keep_them_when_the_bindings_change(db_path: Path) -> None:
    first = [AgentBinding(agent="support", chat_id="c1"), AgentBinding(agent="sales", chat_id="c2")]
    with gateway(db_path, roster(first)) as (running, fake):
        assert ask(fake, "hi", "c1") == "support desk: hi"
        assert ask(fake, "hi", "c2") == "sales team: hi"
        assert ask(fake, "hi", "c3") == "plain: hi"
        one = session_of(running, fake, "c1")
        assert one is not None
        record = stored(running, one)
        assert (record.agent, record.system_prompt, record.model) == ("support", "support desk", "echo")
    swapped = [AgentBinding(agent="sales", chat_id="c1"), AgentBinding(agent="support", chat_id="c2")]
    with gateway(db_path, roster(swapped)) as (running, fake):  # a restart with the bindings changed
        assert ask(fake, "again", "c1") == "support desk: again"  # the session keeps its agent
        assert ask(fake, "again", "c2") == "sales team: again"
        assert ask(fake, "/new", "c1").startswith("Started a new session.")
        assert ask(fake, "fresh", "c1") == "sales team: fresh"  # a new session: the new binding reaches it
        assert ask(fake, f"/resume {one}", "c1").startswith("Resumed ")
        assert ask(fake, "back", "c1") == "support desk: back"  # /resume brings its agent back with it


def test_a_compression_child_keeps_its_parents_agent_after_the_bindings_changed(db_path: Path) -> None:
    with gateway(db_path, roster([AgentBinding(agent="support")])) as (running, fake):
        for word in ("one", "two", "three"):
            ask(fake, f"{word} " * 500, "c1")  # long enough for a summary to gain
    with gateway(db_path, roster([AgentBinding(agent="sales")])) as (running, fake):
        assert "Compressed" in ask(fake, "/compress", "c1")
        assert ask(fake, "after", "c1") == "support desk: after"
        child = session_of(running, fake, "c1")
        assert child is not None
        record = stored(running, child)
        assert record.parent_session_id is not None
        assert (record.agent, record.system_prompt) == ("support", "support desk")


def test_a_message_naming_an_agent_starts_its_session_with_that_agent_and_an_existing_session_keeps_its_own(
    db_path: Path,
) -> None:
    with gateway(db_path, roster([AgentBinding(agent="support")])) as (running, fake):
        running.accept(msgspec.structs.replace(fake.message("hello", chat_id="api-1"), agent="sales"))
        assert fake.pop().text == "sales team: hello"
        running.accept(msgspec.structs.replace(fake.message("and you?", chat_id="api-1"), agent=DEFAULT_AGENT))
        assert fake.pop().text == "sales team: and you?"
        session_id = session_of(running, fake, "api-1")
        assert session_id is not None
        assert stored(running, session_id).agent == "sales"
        assert ask(fake, "bound", "api-2") == "support desk: bound"  # no name asked for: the bindings choose


def test_a_new_session_remembers_the_agent_its_first_message_asked_for() -> None:
    message = FakePlatform("api_server").message("hi")
    assert NewSession.of("key", message).agent is None
    assert NewSession.of("key", msgspec.structs.replace(message, agent="sales")).agent == "sales"


def test_the_agent_is_chosen_once_per_activation_not_per_turn(db_path: Path) -> None:
    agents = CountingRoster(roster().agents, [AgentBinding(agent="support")])
    with gateway(db_path, agents) as (_, fake):
        for text in ("one", "two", "three", "four"):
            assert ask(fake, text, "c1") == f"support desk: {text}"
        assert agents.choices == 1
