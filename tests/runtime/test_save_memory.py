"""The save-memory turn before ``/new`` and ``/reset`` (``runtime.save_memory_on``), as timer resets run it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import pytest

from hermes_actors.agents.base import AgentError, EchoAgent, Memory
from hermes_actors.config import RuntimeConfig
from hermes_actors.errors import ConfigError
from hermes_actors.store import MessageRecord
from tests.runtime.conftest import MakeGateway
from tests.runtime.test_lifecycle import RecordingAgent

KEY = "agent:main:fake:dm:chat-1"


@pytest.mark.parametrize("command", ["/new", "/reset"])
def test_new_and_reset_save_memories_before_the_session_ends(make_gateway: MakeGateway, command: str) -> None:
    agent = RecordingAgent()
    gateway, fake = make_gateway(agent=agent)
    fake.push("remember that I like green tea")
    fake.pop()
    assert gateway.wait_idle()
    old = gateway.session_for(KEY)
    fake.push(command)
    assert fake.pop().text == "Started a new session."
    fake.push("hello again")
    assert fake.pop().text == "echo: hello again"
    assert gateway.wait_idle()
    assert "I like green tea" in (agent.prompts_seen[-1] or "")  # frozen into the new session's system message
    with gateway.read() as store:
        assert old is not None
        assert store.get_session(old).end_reason in ("new_session", "session_reset")
        assert store.memories.for_user("fake:user-1") == ["I like green tea"]


def test_save_memory_on_leaves_out_the_triggers_it_does_not_name(make_gateway: MakeGateway) -> None:
    agent = RecordingAgent()
    gateway, fake = make_gateway(agent=agent, save_memory_on=("idle", "daily", "reset"))
    fake.push("remember that I like green tea")
    fake.pop()
    fake.push("/new")
    assert fake.pop().text == "Started a new session."
    fake.push("hello again")
    fake.pop()
    fake.push("/reset")
    assert fake.pop().text == "Started a new session."
    assert gateway.wait_idle()
    assert "green tea" not in (agent.prompts_seen[-1] or "")  # /new saved nothing
    with gateway.read() as store:
        assert store.memories.for_user("fake:user-1") == []


class BrokenMemoryAgent(EchoAgent):
    runs_inline = False

    def save_memories(self, history: Sequence[MessageRecord], *, timeout_s: float) -> list[Memory]:
        raise AgentError("the memory model is down")


def test_a_failed_memory_turn_is_logged_and_does_not_block_the_reset(
    make_gateway: MakeGateway, caplog: pytest.LogCaptureFixture
) -> None:
    gateway, fake = make_gateway(agent=BrokenMemoryAgent())
    fake.push("remember that I like green tea")
    fake.pop()
    assert gateway.wait_idle()
    old = gateway.session_for(KEY)
    with caplog.at_level(logging.WARNING):
        fake.push("/reset")
        assert fake.pop().text == "Started a new session."
        assert gateway.wait_idle()
    assert "save-memory turn failed" in caplog.text
    with gateway.read() as store:
        assert old is not None
        assert store.get_session(old).end_reason == "session_reset"


class StuckMemoryAgent(EchoAgent):
    runs_inline = False

    def __init__(self) -> None:
        self.release = threading.Event()

    def save_memories(self, history: Sequence[MessageRecord], *, timeout_s: float) -> list[Memory]:
        self.release.wait(10)
        return [Memory(content="too late")]


def test_a_memory_turn_that_hangs_delays_the_reply_only_up_to_the_agent_timeout(make_gateway: MakeGateway) -> None:
    agent = StuckMemoryAgent()
    try:
        gateway, fake = make_gateway(agent=agent, agent_timeout_s=0.05)
        fake.push("hi")
        fake.pop()
        fake.push("/new")
        assert fake.pop(timeout=5).text == "Started a new session."
        assert gateway.wait_idle()
        with gateway.read() as store:
            assert store.memories.for_user("fake:user-1") == []
    finally:
        agent.release.set()


def test_save_memory_on_names_unknown_triggers() -> None:
    with pytest.raises(ConfigError, match=r"runtime.save_memory_on: unknown trigger 'weekly'"):
        RuntimeConfig(save_memory_on=("idle", "weekly"))
    assert RuntimeConfig().save_memory_on == ("idle", "daily", "new", "reset")
    assert not RuntimeConfig(save_memory_on=()).saves_memories_on("idle")
