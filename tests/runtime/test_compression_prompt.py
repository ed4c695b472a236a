"""Compression decisions count the prompt a turn actually sends: the frozen prefix (system message with the
memories, tool list), the history and the new message (SPEC section 5), against a scripted OpenAI-compatible
model whose requests are counted and measured."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from hermes_actors.agents.openai_chat import OpenAIAgent
from hermes_actors.agents.tools import freeze_tools, session_search_tool
from hermes_actors.store import Store
from hermes_actors.testing import FakePlatform, open_fake_gateway
from tests.agents.chat_server import ChatServer, completion, open_chat_server
from tests.runtime.test_prefix import remember

KEY = "agent:main:fake:dm:chat-1"
SUMMARY_PREFIX = "Summarise the conversation above"


def _never_read() -> AbstractContextManager[Store]:
    raise AssertionError("the tool list is only measured here, never run")


TOOLS_CHARS = len(freeze_tools([session_search_tool(_never_read, "")]))


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with open_chat_server() as chat:
        yield chat


def chars(body: Any) -> int:
    """What the runtime's estimate counts of a request: its messages' text and its tool list."""
    tools = TOOLS_CHARS if body.get("tools") else 0
    return tools + sum(len(m["content"]) for m in body["messages"] if isinstance(m.get("content"), str))


def is_summary_request(body: Any) -> bool:
    return str(body["messages"][-1]["content"]).startswith(SUMMARY_PREFIX)


def turn(fake: FakePlatform, text: str) -> str:
    fake.push(text)
    return fake.pop(timeout=10).text


def text(n: int, word: str) -> str:
    return (f"{word} " * n)[:n]


def gateway(server: ChatServer, db_path: Path, *, prompt: str | None = None, **runtime: Any) -> Any:
    agent = OpenAIAgent(
        base_url=server.base_url, model="test-model", api_key="test", max_retries=0, system_prompt=prompt
    )
    options: dict[str, Any] = {"protected_recent_messages": 2, "auto_titles": False, "agent_timeout_s": 10}
    return open_fake_gateway(db_path, agent=agent, **(options | runtime))


def test_compress_refuses_when_the_childs_new_prefix_would_make_the_prompt_bigger(
    server: ChatServer, db_path: Path
) -> None:
    server.script(*(completion(text(500, f"reply{i}")) for i in range(3)), completion("still here"))
    with gateway(server, db_path, context_window=100_000) as (gw, fake):
        for i in range(3):
            turn(fake, text(500, f"ask{i}"))
        assert gw.wait_idle()
        session = gw.session_for(KEY)
        assert session is not None
        # Memories saved meanwhile (another session's reset) go into the system message a child would freeze:
        # 4,000 characters more than this session's, where a summary saves at most the 2,000 of four messages.
        remember(db_path, session, "notes " * 667)
        reply = turn(fake, "/compress")
        assert reply.startswith("Not compressed: a new session would not make the prompt smaller."), reply
        assert reply.endswith("Nothing changed.")
        assert turn(fake, "and now?") == "still here"
        bodies = server.completion_bodies
        assert not any(is_summary_request(b) for b in bodies)  # refused before asking the model
        assert len(bodies) == 4
        assert bodies[3]["messages"][0] == bodies[0]["messages"][0]  # the same session, its prefix unchanged
        assert gw.wait_idle()
        assert gw.session_for(KEY) == session
        with gw.read() as store:
            assert store.get_session(session).is_live


def test_hygiene_counts_the_system_prompt_and_compresses_before_a_turn_past_the_threshold(
    server: ChatServer, db_path: Path
) -> None:
    window = 2048
    server.script(
        completion(text(100, "one")),
        completion(text(100, "two")),
        completion("Two rounds about the release."),  # the summary
        completion("three"),
    )
    with gateway(server, db_path, prompt=text(4800, "rule"), context_window=window) as (gw, fake):
        turn(fake, text(100, "first"))
        turn(fake, text(100, "second"))
        parent = gw.session_for(KEY)
        # History 400 characters (100 tokens, far under 0.85 of the window); with the 4,800-character system
        # prompt, the tool list and this message the prompt is about 0.88 of it.
        assert turn(fake, text(100, "third")) == "three"
        bodies = server.completion_bodies
        assert [is_summary_request(b) for b in bodies] == [False, False, True, False]
        assert str(bodies[3]["messages"][1]["content"]).startswith("[Summary of the conversation so far]")
        assert chars(bodies[3]) < chars(bodies[1]) + 100  # the child's turn: summary, 2 recent, the message
        assert gw.wait_idle()
        child = gw.session_for(KEY)
        assert child not in (None, parent)
        with gw.read() as store:
            assert parent is not None
            assert store.get_session(parent).end_reason == "compression"
