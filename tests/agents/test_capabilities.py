from __future__ import annotations

from collections.abc import Sequence

import openai

from hermes_actors.agents.base import (
    BackgroundInterruptingAgent,
    BackgroundReportingAgent,
    InlineAgent,
    SessionReleasingAgent,
    TitlingAgent,
    background_probe,
    cleanup_calls,
    context_window_of,
    runs_inline,
    title_call,
)
from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.openai_chat import OpenAIAgent
from hermes_actors.agents.turn import AgentReply, Memory, TurnInput
from hermes_actors.store import MessageRecord


class PlainAgent:
    """An agent with the three calls every agent has and no capability."""

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        return AgentReply(messages=(), text="")

    def summarize(self, history: Sequence[MessageRecord], *, timeout_s: float) -> str:
        return ""

    def save_memories(self, history: Sequence[MessageRecord], *, timeout_s: float) -> list[Memory]:
        return []


class ToolingAgent(PlainAgent):
    """Every optional capability, the way a sandboxing agent would have them."""

    runs_inline = False
    context_window = 32_768

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, float]] = []

    def release_session(self, session_id: str, *, timeout_s: float) -> None:
        self.calls.append(("release_session", session_id, timeout_s))

    def interrupt_background(self, session_id: str, *, timeout_s: float) -> None:
        self.calls.append(("interrupt_background", session_id, timeout_s))

    def background_started_at(self, session_id: str) -> float | None:
        return 12.5 if session_id == "busy" else None


class ReleasingOnly(PlainAgent):
    def release_session(self, session_id: str, *, timeout_s: float) -> None:
        pass


def test_the_echo_agent_runs_inline_and_titles_sessions() -> None:
    echo = EchoAgent()
    assert isinstance(echo, InlineAgent)
    assert runs_inline(echo)
    assert isinstance(echo, TitlingAgent)
    call = title_call(echo)
    assert call is not None
    assert call("hello there my friend", "echo", timeout_s=1) == "Hello there my friend"
    assert cleanup_calls(echo) == ()
    assert background_probe(echo) is None
    assert context_window_of(echo, 16_000) == 16_000


def test_an_agent_without_capabilities_gets_the_defaults() -> None:
    plain = PlainAgent()
    for capability in (
        InlineAgent,
        TitlingAgent,
        SessionReleasingAgent,
        BackgroundInterruptingAgent,
        BackgroundReportingAgent,
    ):
        assert not isinstance(plain, capability)
    assert not runs_inline(plain)
    assert title_call(plain) is None
    assert cleanup_calls(plain) == ()
    assert background_probe(plain) is None
    assert context_window_of(plain, 8_192) == 8_192


def test_a_false_runs_inline_sends_the_agent_to_the_pool() -> None:
    agent = ToolingAgent()
    assert isinstance(agent, InlineAgent)
    assert not runs_inline(agent)


def test_a_subclass_that_blocks_can_turn_inline_off_per_instance() -> None:
    echo = EchoAgent()
    echo.runs_inline = False  # the class says True; this instance runs in the pool
    assert not runs_inline(echo)
    assert runs_inline(EchoAgent())


def test_the_reset_cleanups_come_in_order_and_only_when_present() -> None:
    agent = ToolingAgent()
    calls = cleanup_calls(agent)
    assert [name for name, _ in calls] == ["release_session", "interrupt_background"]
    for _, call in calls:
        call("s1", timeout_s=2.0)
    assert agent.calls == [("release_session", "s1", 2.0), ("interrupt_background", "s1", 2.0)]
    assert [name for name, _ in cleanup_calls(ReleasingOnly())] == ["release_session"]


def test_background_and_context_window_are_read_from_the_agent() -> None:
    agent = ToolingAgent()
    probe = background_probe(agent)
    assert probe is not None
    assert probe("busy") == 12.5
    assert probe("idle") is None
    assert context_window_of(agent, 8_192) == 32_768


def test_the_openai_agent_titles_but_runs_in_the_pool() -> None:
    with openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="k", max_retries=0) as client:
        agent = OpenAIAgent(base_url="http://127.0.0.1:9/v1", model="m", client=client)
        assert title_call(agent) is not None
        assert not runs_inline(agent)
        assert cleanup_calls(agent) == ()
