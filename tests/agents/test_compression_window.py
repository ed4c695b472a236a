"""Compression against a scripted OpenAI-compatible model: the summary's budget, a child prompt smaller than the
parent's last, the refusal of a history too short to gain, and no turn sent over the context window."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from hermes_actors.agents.history import SUMMARY_CUT, fit_summary, summary_budget
from hermes_actors.agents.openai_chat import OpenAIAgent
from hermes_actors.agents.tools import freeze_tools, session_search_tool
from hermes_actors.config import RuntimeConfig
from hermes_actors.errors import ConfigError
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.store import Store
from hermes_actors.testing import FakePlatform, open_fake_gateway
from tests.agents.chat_server import ChatServer, completion, open_chat_server

KEY = "agent:main:fake:dm:chat-1"
# The tool list is part of every prompt (frozen with the session, as JSON): the window holds it and 1,024 tokens
# (four characters each) of messages.


def _never_read() -> AbstractContextManager[Store]:
    raise AssertionError("the tool list is only measured here, never run")


TOOLS_CHARS = len(freeze_tools([session_search_tool(_never_read, "")]))
WINDOW = 1024 + TOOLS_CHARS // 4
SUMMARY_PREFIX = "Summarise the conversation above"


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with open_chat_server() as chat:
        yield chat


class Setup:
    def __init__(self, server: ChatServer, db_path: Path) -> None:
        self.server = server
        self.db_path = db_path

    def open(self, **runtime: Any) -> Any:
        agent = OpenAIAgent(base_url=self.server.base_url, model="test-model", api_key="test", max_retries=0)
        options: dict[str, Any] = {
            "context_window": WINDOW,
            "compress_at_ratio": 1.0,  # only the window itself makes a turn compress
            "protected_recent_messages": 2,
            "auto_titles": False,
            "agent_timeout_s": 10,
        } | runtime
        return open_fake_gateway(self.db_path, agent=agent, **options)


@pytest.fixture
def setup(server: ChatServer, tmp_path: Path) -> Setup:
    return Setup(server, tmp_path / "state.db")


def chars(body: Any) -> int:
    """The characters of a request's messages and tool list: what the runtime's estimate counts (four a token)."""
    tools = TOOLS_CHARS if body.get("tools") else 0
    return tools + sum(len(m["content"]) for m in body["messages"] if isinstance(m.get("content"), str))


def is_summary_request(body: Any) -> bool:
    return str(body["messages"][-1]["content"]).startswith(SUMMARY_PREFIX)


def turn(fake: FakePlatform, text: str) -> str:
    fake.push(text)
    return fake.pop(timeout=10).text


def text(n: int, word: str) -> str:
    return (f"{word} " * n)[:n]


@pytest.mark.slow
def test_a_turn_that_would_exceed_the_window_compresses_first_also_right_after_a_compression(setup: Setup) -> None:
    server = setup.server
    server.script(
        completion(text(700, "one")),
        completion(text(700, "two")),
        completion("We planned the release in three steps."),  # the summary
        completion(text(700, "three")),
        completion("The release plan, step three done."),  # the second summary
        completion("four"),
    )
    with setup.open() as (gateway, fake):
        turn(fake, text(700, "first"))
        turn(fake, text(700, "second"))
        parent = gateway.session_for(KEY)
        # History 2,800 characters (700 tokens, under the window); with this message 4,400 (1,100 tokens): over it.
        assert turn(fake, text(1600, "third")) == text(700, "three")
        assert gateway.wait_idle()
        child = gateway.session_for(KEY)
        bodies = server.completion_bodies
        assert [is_summary_request(b) for b in bodies] == [False, False, True, False]
        assert bodies[2]["max_tokens"] == WINDOW // 10  # the summary's default budget
        assert chars(bodies[3]) // 4 <= WINDOW
        assert child != parent
        # The child now holds 3,937 characters; 400 more would go over the window although it has only just
        # been compressed: it compresses again first.
        assert turn(fake, text(400, "fourth")) == "four"
        assert gateway.wait_idle()
        bodies = server.completion_bodies
        assert [is_summary_request(b) for b in bodies[4:]] == [True, False]
        assert chars(bodies[5]) // 4 <= WINDOW
        assert gateway.session_for(KEY) not in (parent, child)
        with gateway.read() as store:
            assert parent is not None
            assert child is not None
            assert store.get_session(parent).end_reason == "compression"
            assert store.get_session(child).end_reason == "compression"


def test_compress_makes_the_childs_first_prompt_smaller_than_the_parents_last(setup: Setup) -> None:
    server = setup.server
    server.script(
        *(completion(text(600, f"reply{i}")) for i in range(3)),
        completion("Three rounds about the schema migration; next: the indexes."),
        completion("ok"),
    )
    with setup.open() as (gateway, fake):
        for i in range(3):
            turn(fake, text(600, f"ask{i}"))
        parent = gateway.session_for(KEY)
        assert turn(fake, "/compress") == f"Compressed 6 messages; the conversation continues as {parent_tip(gateway)}."
        assert turn(fake, "next") == "ok"
        bodies = server.completion_bodies
        parent_last, child_first = bodies[2], bodies[4]
        assert is_summary_request(bodies[3])
        assert chars(child_first) < chars(parent_last)
        assert gateway.session_for(KEY) != parent


def parent_tip(gateway: Gateway) -> str:
    tip = gateway.session_for(KEY)
    assert tip is not None
    return tip


def test_compress_refuses_a_history_too_short_to_gain_without_asking_the_model(setup: Setup) -> None:
    server = setup.server
    server.script(completion("hello"), completion("fine"))
    with setup.open() as (gateway, fake):
        turn(fake, "hi")
        turn(fake, "how are you")
        session = gateway.session_for(KEY)
        reply = turn(fake, "/compress")
        assert reply.startswith("Not compressed: this conversation is too short to gain from it.")
        assert reply.endswith("Nothing changed.")
        assert len(server.completion_bodies) == 2  # no summary was asked for
        assert gateway.wait_idle()
        assert gateway.session_for(KEY) == session
        with gateway.read() as store:
            assert session is not None
            assert store.get_session(session).is_live


def test_compress_refuses_when_the_summary_would_make_the_prompt_bigger(setup: Setup) -> None:
    server = setup.server
    server.script(*(completion(text(200, f"r{i}")) for i in range(3)), completion(text(2000, "verbose")))
    with setup.open(summary_max_tokens=1000) as (gateway, fake):
        for i in range(3):
            turn(fake, text(200, f"q{i}"))
        session = gateway.session_for(KEY)
        reply = turn(fake, "/compress")
        assert reply.startswith("Not compressed: this conversation is too short to gain from it. Its prompt is")
        assert is_summary_request(server.completion_bodies[-1])
        assert gateway.wait_idle()
        assert gateway.session_for(KEY) == session
        with gateway.read() as store:
            assert session is not None
            assert store.get_session(session).is_live
            assert len(store.load_transcript(session)) == 6


def test_the_summary_is_kept_within_its_token_budget(setup: Setup) -> None:
    server = setup.server
    server.script(*(completion(text(600, f"r{i}")) for i in range(3)), completion(text(1000, "long-winded")))
    with setup.open(summary_max_tokens=50) as (gateway, fake):
        for i in range(3):
            turn(fake, text(600, f"q{i}"))
        assert turn(fake, "/compress").startswith("Compressed 6 messages;")
        assert server.completion_bodies[-1]["max_tokens"] == 50
        assert gateway.wait_idle()
        child = parent_tip(gateway)
        with gateway.read() as store:
            summary = store.load_transcript(child)[0].content or ""
        body = summary.split("\n", 1)[1]
        assert len(body) <= 50 * 4
        assert body.endswith("…[summary cut to its budget]")


def test_a_message_too_long_for_the_window_is_answered_and_never_sent(setup: Setup) -> None:
    server = setup.server
    with setup.open() as (gateway, fake):
        reply = turn(fake, text(5000, "paste"))
        said = re.match(r"Not sent: with this message the prompt would be about ([\d,]+) tokens, more than", reply)
        assert said is not None, reply
        assert abs(int(said[1].replace(",", "")) - (5000 + TOOLS_CHARS) // 4) <= 2  # the message and the tool list
        assert f"the model's context window of {WINDOW:,}" in reply
        assert server.completion_bodies == []
        assert gateway.wait_idle()
        with gateway.read() as store:
            session = gateway.session_for(KEY)
            assert session is None or store.find_session(session) is None  # nothing was stored


def test_summary_budgets_and_cuts() -> None:
    assert summary_budget(0, 128_000) == 12_800
    assert summary_budget(0, 100) == 16
    assert summary_budget(300, 128_000) == 300
    assert fit_summary("short", 10) == "short"
    cut = fit_summary("word " * 100, 20)
    assert len(cut) <= 80
    assert cut.endswith(SUMMARY_CUT)
    assert not cut.startswith(" ")


def test_summary_max_tokens_must_not_be_negative() -> None:
    with pytest.raises(ConfigError, match=r"runtime\.summary_max_tokens"):
        RuntimeConfig(summary_max_tokens=-1)
