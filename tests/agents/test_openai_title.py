from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_actors.agents.base import AgentError
from hermes_actors.agents.openai_chat import TITLE_EXCERPT_CHARS, OpenAIAgent
from hermes_actors.testing import open_fake_gateway
from hermes_actors.titles import MAX_TITLE_LENGTH
from tests.agents.chat_server import ChatServer, completion, failure, open_chat_server


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with open_chat_server() as running:
        yield running


@pytest.fixture
def agent(server: ChatServer) -> Iterator[OpenAIAgent]:
    with OpenAIAgent(base_url=server.base_url, model="test-model", api_key="sk-test", max_retries=0) as made:
        yield made


def test_the_title_prompt_sends_the_first_exchange_and_asks_for_a_short_title(
    server: ChatServer, agent: OpenAIAgent
) -> None:
    server.script(completion("Payments Refactor Plan"))
    title = agent.title("help me plan the payments refactor", "Sure: first the ledger...", timeout_s=5)
    assert title == "Payments Refactor Plan"
    (body,) = server.completion_bodies
    assert body["model"] == "test-model"
    assert "tools" not in body
    messages = body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[0]["content"] == "help me plan the payments refactor"
    assert messages[1]["content"] == "Sure: first the ledger..."
    assert "3 to 7 words" in messages[2]["content"]
    assert "no quotes" in messages[2]["content"]


def test_a_long_first_exchange_is_sent_as_excerpts(server: ChatServer, agent: OpenAIAgent) -> None:
    server.script(completion("Log triage"))
    agent.title("l" * 50_000, "r" * 50_000, timeout_s=5)
    (body,) = server.completion_bodies
    assert [len(m["content"]) for m in body["messages"][:2]] == [TITLE_EXCERPT_CHARS, TITLE_EXCERPT_CHARS]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("answer", "title"),
    [
        ('"Payments Refactor Plan."', "Payments Refactor Plan"),
        ("Title: Debugging the auth flow", "Debugging the auth flow"),
        ("**Title:** Rust borrow checker questions\n\nI chose this because...", "Rust borrow checker questions"),
        ("\n\n  'Quarterly report outline'  \n", "Quarterly report outline"),
        ("「数据库迁移计划」。", "数据库迁移计划"),
        ("## Kubernetes ingress debugging", "Kubernetes ingress debugging"),
        ("#2 priority bug triage", "#2 priority bug triage"),
        ("'Why the cache misses.'", "Why the cache misses"),
    ],
)
def test_the_answer_is_cleaned_of_labels_quotes_and_final_punctuation(
    server: ChatServer, agent: OpenAIAgent, answer: str, title: str
) -> None:
    server.script(completion(answer))
    assert agent.title("q", "a", timeout_s=5) == title


def test_an_over_long_answer_is_cut_at_a_word(server: ChatServer, agent: OpenAIAgent) -> None:
    server.script(completion(" ".join(["wordy"] * 40)))
    title = agent.title("q", "a", timeout_s=5)
    assert len(title) <= MAX_TITLE_LENGTH
    assert title == " ".join(["wordy"] * 16)


@pytest.mark.parametrize("answer", ["", "   ", '""', "\n\n"])
def test_an_empty_title_is_an_agent_error(server: ChatServer, agent: OpenAIAgent, answer: str) -> None:
    server.script(completion(answer))
    with pytest.raises(AgentError, match="answered an empty title; the session stays untitled"):
        agent.title("q", "a", timeout_s=5)


def test_an_endpoint_failure_is_an_agent_error_naming_the_endpoint(server: ChatServer, agent: OpenAIAgent) -> None:
    server.script(failure(500, "model not loaded"))
    with pytest.raises(AgentError, match=r"agent endpoint .* answered HTTP 500: model not loaded"):
        agent.title("q", "a", timeout_s=5)


def test_a_gateway_titles_a_session_from_the_model_after_the_first_reply(
    server: ChatServer, agent: OpenAIAgent, tmp_path: Path
) -> None:
    server.script(completion("Sure, let us start with the ledger."), completion("Payments Refactor Plan"))
    with open_fake_gateway(tmp_path / "state.db", agent=agent) as (gateway, fake):
        fake.push("help me plan the payments refactor")
        assert fake.pop().text == "Sure, let us start with the ledger."
        session_id = gateway.session_for("agent:main:fake:dm:chat-1")
        assert session_id is not None
        assert gateway.wait_idle()  # it also waits for the title job in the agent pool
        with gateway.read() as store:
            assert store.get_session(session_id).title == "Payments Refactor Plan"
    turn, titling = server.completion_bodies
    assert "tools" in turn
    assert [m["content"] for m in titling["messages"][:2]] == [
        "help me plan the payments refactor",
        "Sure, let us start with the ledger.",
    ]
