"""What a session records when it starts, and the prompt it keeps: the system message (configured prompt and the
memories of its start) and the tool list are frozen with the session and sent as the same bytes on every call,
across passivation and restarts; token counts come from the model's ``usage``, estimates are marked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_actors.agents.base import AgentReply, EchoAgent, TurnInput
from hermes_actors.agents.openai_chat import OpenAIAgent
from hermes_actors.cli.session_text import load_details, summary_lines
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.prefix import user_key
from hermes_actors.runtime.records import source_of
from hermes_actors.store import NewMessage, Role, Store
from hermes_actors.testing import FakeClock
from tests.agents.chat_server import ChatServer, completion, open_chat_server
from tests.runtime.conftest import MakeGateway

PROMPT = "You are terse."


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with open_chat_server() as running:
        yield running


@pytest.fixture
def agent(server: ChatServer) -> Iterator[OpenAIAgent]:
    with OpenAIAgent(
        base_url=server.base_url, model="test-model", api_key="sk-test", max_retries=0, system_prompt=PROMPT
    ) as running:
        yield running


def remember(db_path: Path, session_id: str, fact: str) -> None:
    """Save a memory about the user of ``session_id`` from another connection (as another session's reset does)."""
    with Store.open(db_path) as store:
        key = user_key(source_of(store.get_session(session_id)))
        assert key is not None
        store.memories.add(key, [fact], source_session_id=None)


def prefix_of(body: Any) -> tuple[str, str]:
    """The system message and the tool list a request sent, as the exact text they were."""
    first = body["messages"][0]
    assert first["role"] == "system"
    return first["content"], json.dumps(body["tools"])


def only_session(db_path: Path) -> str:
    with Store.open(db_path) as store:
        (session,) = store.list_sessions()
        return session.id


@pytest.mark.slow
def test_the_system_message_and_tools_stay_the_same_bytes_across_passivation_and_restart(
    make_gateway: MakeGateway, db_path: Path, server: ChatServer, agent: OpenAIAgent
) -> None:
    clock = FakeClock()
    options: dict[str, Any] = {"agent": agent, "passivate_after_s": 60, "clock": clock, "auto_titles": False}
    gateway, fake = make_gateway(**options)
    server.script(
        completion("one back"),
        completion("two back"),
        completion("three back"),
        completion("[]"),  # /new runs the save-memory turn first (runtime.save_memory_on): nothing new to keep
        completion("new back"),
    )
    fake.push("one")
    assert fake.pop().text == "one back"
    assert gateway.wait_idle()
    session_id = only_session(db_path)
    remember(db_path, session_id, "likes tea")  # mid-session: for the user's next session, not this one
    clock.advance(61)
    gateway.tick()
    assert gateway.wait_idle()
    assert gateway.statistics().live_actors == 0  # passivated: the next turn builds the session again
    fake.push("two")
    assert fake.pop().text == "two back"
    assert gateway.wait_idle()
    gateway.stop(timeout=10)
    restarted, fake = make_gateway(**options)  # a restart: a fresh gateway on the same database file
    fake.push("three", message_id="after-restart-3")  # a new fake platform counts its ids from m1 again
    assert fake.pop().text == "three back"
    bodies = server.completion_bodies
    assert len(bodies) == 3
    first = prefix_of(bodies[0])
    assert first[0] == PROMPT  # no memories yet when the session started
    assert "session_search" in first[1]
    assert [prefix_of(body) for body in bodies[1:]] == [first, first]
    with restarted.read() as store:
        record = store.get_session(session_id)
        assert (record.model, record.system_prompt) == ("test-model", PROMPT)
        assert json.loads(record.tools or "") == bodies[0]["tools"]
    fake.push("/new", message_id="after-restart-4")
    fake.pop()
    fake.push("again", message_id="after-restart-5")
    assert fake.pop().text == "new back"
    assert prefix_of(server.completion_bodies[-1])[0] == f"{PROMPT}\n\nKnown about the user:\n- likes tea"


def test_a_session_records_the_echo_agents_name_and_marks_its_estimated_tokens(
    make_gateway: MakeGateway, db_path: Path
) -> None:
    gateway, fake = make_gateway()
    fake.push("hello")
    fake.pop()
    assert gateway.wait_idle()
    with gateway.read() as store:
        record = store.get_session(only_session(db_path))
        assert record.model == "echo"
        assert record.tokens_estimated == 1  # the echo agent counts four characters a token
        assert record.input_tokens > 0
        assert [m.token_count for m in store.load_transcript(record.id)] == [None, None]
        tokens = [line for line in summary_lines(load_details(store, record), now=0) if line.startswith("Tokens:")]
        assert tokens == [f"Tokens:   {record.input_tokens} in, {record.output_tokens} out (estimated)"]


def test_token_counts_come_from_usage_and_a_turn_without_usage_marks_the_session_estimated(
    make_gateway: MakeGateway, db_path: Path, server: ChatServer, agent: OpenAIAgent
) -> None:
    gateway, fake = make_gateway(agent=agent, auto_titles=False)
    server.script(completion("counted", prompt_tokens=21, completion_tokens=4))
    fake.push("hi")
    fake.pop()
    assert gateway.wait_idle()
    session_id = only_session(db_path)
    with gateway.read() as store:
        record = store.get_session(session_id)
        assert (record.input_tokens, record.output_tokens, record.tokens_estimated) == (21, 4, 0)
        assert "Tokens:   21 in, 4 out" in summary_lines(load_details(store, record), now=0)
        # The assistant message: its completion tokens. The user message has no count of its own in usage.
        assert [(m.role, m.token_count) for m in store.load_transcript(session_id)] == [
            ("user", None),
            ("assistant", 4),
        ]
    server.script(completion("guessed " * 10, prompt_tokens=None, completion_tokens=None))
    fake.push("and now?")
    fake.pop()
    assert gateway.wait_idle()
    with gateway.read() as store:
        record = store.get_session(session_id)
        assert record.tokens_estimated == 1
        assert record.input_tokens > 21
        assert record.output_tokens > 4
        assert store.load_transcript(session_id)[-1].token_count is None


class PromptAgent(EchoAgent):
    """Echoes, and records the system message of every turn."""

    def __init__(self) -> None:
        super().__init__(system_prompt=PROMPT)
        self.prompts: list[str | None] = []

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        self.prompts.append(turn.system_prompt)
        return super().run_turn(turn, timeout_s=timeout_s)


FAKE_USER = SessionSource(platform="fake", chat_type="dm", chat_id="chat-1", user_id="user-1")
KEY = "agent:main:fake:dm:chat-1"


def test_a_session_from_before_the_frozen_prefix_is_frozen_by_its_next_turn(
    make_gateway: MakeGateway, db_path: Path
) -> None:
    with Store.open(db_path) as store:  # a session as schema version 5 left it: no tool list, no system message
        old = store.create_session(FAKE_USER, routing_key=KEY)
        store.set_route(KEY, old.id)
        store.append_messages(old.id, [NewMessage(role=Role.USER, content="before")])
    remember(db_path, old.id, "likes tea")
    clock = FakeClock()
    agent = PromptAgent()
    gateway, fake = make_gateway(agent=agent, passivate_after_s=60, clock=clock)
    fake.push("first turn since the upgrade")
    fake.pop()
    assert gateway.wait_idle()
    frozen = f"{PROMPT}\n\nKnown about the user:\n- likes tea"
    with gateway.read() as store:
        record = store.get_session(old.id)
        assert record.system_prompt == frozen
        assert record.tools is not None
        assert "session_search" in record.tools
    remember(db_path, old.id, "lives in Oslo")
    clock.advance(61)
    gateway.tick()
    assert gateway.wait_idle()
    fake.push("after passivation")
    fake.pop()
    assert agent.prompts == [frozen, frozen]


def test_a_compression_child_freezes_its_own_prefix_with_the_memories_of_its_start(
    make_gateway: MakeGateway, db_path: Path
) -> None:
    agent = PromptAgent()
    gateway, fake = make_gateway(agent=agent, protected_recent_messages=2)
    padding = " and check every table of it twice" * 4  # a history /compress gains on (it refuses a short one)
    for text in ("one", "two"):
        fake.push(text + padding)
        fake.pop()
    assert gateway.wait_idle()
    parent = gateway.session_for(KEY)
    assert parent is not None
    remember(db_path, parent, "likes tea")
    fake.push("three" + padding)
    fake.pop()
    fake.push("/compress")
    assert fake.pop().text.startswith("Compressed 6 messages")
    fake.push("in the child")
    fake.pop()
    assert gateway.wait_idle()
    child = gateway.session_for(KEY)
    assert child is not None
    assert child != parent
    with_tea = f"{PROMPT}\n\nKnown about the user:\n- likes tea"
    assert agent.prompts == [PROMPT, PROMPT, PROMPT, with_tea]
    with gateway.read() as store:
        assert store.get_session(parent).system_prompt == PROMPT
        assert store.get_session(child).system_prompt == with_tea
        assert store.get_session(child).model == "echo"
