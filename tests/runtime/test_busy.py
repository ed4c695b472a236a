"""Busy policies in one process: each policy when the running turn times out and when ``/stop`` stops it, a steered
message joining the running turn, an interrupted turn's partial answer, and the ``busy:`` settings.

The agent is the built-in OpenAI agent against the tests' scripted endpoint (:class:`GatedModel`), whose calls are
held until let through and counted: each test checks that no message was lost (every inbox row answered, every
text in the transcript), how many model calls were made, and the replies in order.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.openai_chat import OpenAIAgent
from hermes_actors.agents.turn import AgentMessage, AgentReply, TurnInput
from hermes_actors.config import BusyConfig, InterruptedOutput
from hermes_actors.daemon.config_file import decode_settings
from hermes_actors.errors import ConfigError
from hermes_actors.messages import BusyPolicy, OutboundError, OutboundMessage
from hermes_actors.runtime.busy import busy_text
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.interruption import PARTIAL_MARK
from hermes_actors.store import Role
from hermes_actors.testing import FakePlatform, open_fake_gateway
from tests.agents.chat_server import ChatServer, open_chat_server
from tests.runtime.busy_model import GatedModel, answer_of

TIMEOUT_S = 1.0  # the agent's timeout in the timeout cases
STOPPED = "Stopped."


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with open_chat_server() as opened:
        yield opened


def _agent(server: ChatServer) -> OpenAIAgent:
    return OpenAIAgent(base_url=server.base_url, model="test-model", api_key="unused", max_retries=0, timeout_s=30)


def _texts(sent: list[OutboundMessage]) -> list[str]:
    return [m.text for m in sent]


def _replies(fake: FakePlatform, gateway: Gateway, count: int) -> list[OutboundMessage]:
    replies = [fake.pop(timeout=15) for _ in range(count)]
    assert gateway.wait_idle(15)
    with pytest.raises(TimeoutError):
        fake.pop(timeout=0.3)  # nothing more comes
    return replies


def _nothing_lost(gateway: Gateway, texts: list[str]) -> list[str]:
    """Every inbox row answered, each text a user message of the transcript once; return the transcript's roles."""
    with gateway.read() as store:
        assert store.inbox.pending() == []
        (session,) = store.list_sessions()
        transcript = store.load_transcript(session.id)
    users = [m.content for m in transcript if m.role == Role.USER]
    assert users == texts
    return [m.role for m in transcript]


def _start(
    db_path: Path, server: ChatServer, model: GatedModel, policy: BusyPolicy, **runtime: Any
) -> tuple[Gateway, FakePlatform, Any]:
    opened = open_fake_gateway(
        db_path, agent=_agent(server), busy=BusyConfig(mode=policy), auto_titles=False, **runtime
    )
    gateway, fake = opened.__enter__()
    return gateway, fake, opened


def _three_messages(gateway: Gateway, fake: FakePlatform, model: GatedModel, tag: str, policy: BusyPolicy) -> None:
    """``tag-1`` runs (its model call held); ``tag-2`` and ``tag-3`` arrive during it. An interrupting message
    waits until the turn it started has its model call, so the next one interrupts that turn."""
    fake.push(f"{tag}-1")
    model.wait_calls(tag, 1)
    fake.push(f"{tag}-2")
    if policy is BusyPolicy.INTERRUPT:
        model.wait_calls(tag, 2)
    fake.push(f"{tag}-3")
    if policy is BusyPolicy.INTERRUPT:
        model.wait_calls(tag, 3)
    gateway.statistics()  # an ask: the supervisor has handled both messages


BUSY = busy_text(5)
TIMED_OUT = f"Sorry, the agent did not answer within {TIMEOUT_S:.0f} s. Your message is saved; try again."

# policy -> (replies in order, model calls) after /stop stopped the running turn
AFTER_STOP = {
    BusyPolicy.QUEUE: ([answer_of("queue-1", "queue-2"), answer_of("queue-3"), STOPPED], 3),
    BusyPolicy.COLLECT: ([answer_of("collect-1", "collect-2", "collect-3"), STOPPED], 2),
    BusyPolicy.INTERRUPT: ([STOPPED], 3),  # each message interrupted the last turn; /stop stops the third
    BusyPolicy.REJECT: ([BUSY, BUSY, STOPPED], 1),
    BusyPolicy.STEER: ([answer_of("steer-1", "steer-2", "steer-3"), STOPPED], 2),  # never taken: collected
}

# policy -> (replies in order, model calls) after the running turn timed out
AFTER_TIMEOUT = {
    BusyPolicy.QUEUE: ([TIMED_OUT, answer_of("queue-1", "queue-2"), answer_of("queue-3")], 3),
    BusyPolicy.COLLECT: ([TIMED_OUT, answer_of("collect-1", "collect-2", "collect-3")], 2),
    BusyPolicy.INTERRUPT: ([TIMED_OUT], 3),  # the third turn, answering all three, timed out
    BusyPolicy.REJECT: ([BUSY, BUSY, TIMED_OUT], 1),
    BusyPolicy.STEER: ([TIMED_OUT, answer_of("steer-1", "steer-2", "steer-3")], 2),
}


@pytest.mark.parametrize("policy", list(BusyPolicy), ids=[p.value for p in BusyPolicy])
def test_after_a_stop_every_message_has_its_answer_in_the_policys_order(
    db_path: Path, server: ChatServer, policy: BusyPolicy
) -> None:
    model, tag = GatedModel(server), policy.value
    gateway, fake, opened = _start(db_path, server, model, policy)
    try:
        _three_messages(gateway, fake, model, tag, policy)
        fake.push("/stop")
        gateway.statistics()
        model.open()
        expected, calls = AFTER_STOP[policy]
        replies = _replies(fake, gateway, len(expected))
        assert _texts(replies) == expected
        assert model.calls[tag] == calls
        kept = [f"{tag}-1"] if policy is BusyPolicy.REJECT else [f"{tag}-{n}" for n in (1, 2, 3)]
        _nothing_lost(gateway, kept)
        if policy is BusyPolicy.REJECT:
            assert [r.error for r in replies[:2]] == [OutboundError.SESSION_BUSY] * 2
            assert [r.retry_after_s for r in replies[:2]] == [5, 5]
    finally:
        opened.__exit__(None, None, None)


@pytest.mark.parametrize("policy", list(BusyPolicy), ids=[p.value for p in BusyPolicy])
def test_after_a_turn_timed_out_every_message_has_its_answer_in_the_policys_order(
    db_path: Path, server: ChatServer, policy: BusyPolicy
) -> None:
    model, tag = GatedModel(server), policy.value
    gateway, fake, opened = _start(db_path, server, model, policy, agent_timeout_s=TIMEOUT_S)
    try:
        _three_messages(gateway, fake, model, tag, policy)
        expected, calls = AFTER_TIMEOUT[policy]
        first = expected.index(TIMED_OUT)
        replies = [fake.pop(timeout=15) for _ in range(first + 1)]  # up to the timeout's notice
        model.open()  # the turns after it are answered
        replies += _replies(fake, gateway, len(expected) - first - 1)
        assert _texts(replies) == expected
        assert model.calls[tag] == calls
        kept = [f"{tag}-1"] if policy is BusyPolicy.REJECT else [f"{tag}-{n}" for n in (1, 2, 3)]
        _nothing_lost(gateway, kept)
        if policy is BusyPolicy.INTERRUPT:  # the notice answers the interrupted messages too
            assert replies[0].answers == ("m1", "m2", "m3")
    finally:
        opened.__exit__(None, None, None)


def test_a_steered_message_joins_the_running_turn_at_its_next_model_call(db_path: Path, server: ChatServer) -> None:
    model = GatedModel(server, tool_first=frozenset({"steer"}))
    gateway, fake, opened = _start(db_path, server, model, BusyPolicy.STEER)
    try:
        fake.push("steer-1")
        model.wait_calls("steer", 1)  # the first call will ask for a tool
        fake.push("steer-2")
        fake.push("steer-3")
        gateway.statistics()
        model.open()
        (reply,) = _replies(fake, gateway, 1)
        assert reply.text == answer_of("steer-1", "steer-2", "steer-3")
        assert reply.answers == ("m1", "m2", "m3")
        assert model.calls["steer"] == 2  # the tool call, then the answer that saw the steered messages
        roles = _nothing_lost(gateway, ["steer-1", "steer-2", "steer-3"])
        assert roles == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.USER, Role.USER, Role.ASSISTANT]
    finally:
        opened.__exit__(None, None, None)


def test_an_agent_that_takes_no_steering_gets_the_messages_collected_as_its_next_turn(db_path: Path) -> None:
    agent = _Streaming()
    with open_fake_gateway(db_path, agent=agent, busy=BusyConfig(mode=BusyPolicy.STEER), auto_titles=False) as (
        gateway,
        fake,
    ):
        fake.push("a")
        assert agent.started.wait(10)
        fake.push("b")
        fake.push("c")
        gateway.statistics()
        agent.release.set()
        assert _texts(_replies(fake, gateway, 2)) == ["echo: a", "echo: b\nc"]


class _Streaming(EchoAgent):
    """An echo agent that streams ``Once upon`` to its turn's events, then waits for ``release``."""

    runs_inline = False

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        if turn.events is not None:
            turn.events.text("Once upon")
        self.started.set()
        self.release.wait(10)
        text = f"echo: {turn.user_text}"
        return AgentReply(messages=(AgentMessage(role=Role.ASSISTANT, content=text),), text=text)


@pytest.mark.parametrize("kept", [InterruptedOutput.PARTIAL, InterruptedOutput.DISCARD])
def test_an_interrupted_turn_keeps_its_streamed_text_marked_partial_or_nothing(
    db_path: Path, kept: InterruptedOutput
) -> None:
    agent = _Streaming()
    busy = BusyConfig(mode=BusyPolicy.INTERRUPT, interrupted_output=kept)
    with open_fake_gateway(db_path, agent=agent, busy=busy, auto_titles=False) as (gateway, fake):
        fake.push("tell me a story")
        assert agent.started.wait(10)
        agent.started.clear()
        fake.push("a short one")
        assert agent.started.wait(10)  # the new turn runs
        agent.release.set()
        (reply,) = _replies(fake, gateway, 1)
        assert reply.text == "echo: a short one"
        assert reply.answers == ("m1", "m2")  # it answers the interrupted message too
        with gateway.read() as store:
            (session,) = store.list_sessions()
            transcript = [(m.role, m.content) for m in store.load_transcript(session.id)]
    partial = [(Role.ASSISTANT, f"Once upon\n\n{PARTIAL_MARK}")] if kept is InterruptedOutput.PARTIAL else []
    assert transcript == [
        (Role.USER, "tell me a story"),
        *partial,
        (Role.USER, "a short one"),
        (Role.ASSISTANT, "echo: a short one"),
    ]


def test_a_message_that_reaches_an_idle_session_runs_whatever_its_policy(db_path: Path) -> None:
    with open_fake_gateway(db_path, busy=BusyConfig(mode=BusyPolicy.REJECT)) as (_, fake):
        for text in ("one", "two"):
            fake.push(text)
            assert fake.pop().text == f"echo: {text}"


def test_a_messages_own_policy_comes_before_the_configured_one(db_path: Path) -> None:
    agent = _Streaming()
    with open_fake_gateway(db_path, agent=agent, busy=BusyConfig(mode=BusyPolicy.QUEUE), auto_titles=False) as (
        gateway,
        fake,
    ):
        fake.push("first")
        assert agent.started.wait(10)
        gateway.accept(msgspec.structs.replace(fake.message("second"), busy=BusyPolicy.REJECT))
        gateway.accept(fake.message("third"))  # the configured queue
        gateway.statistics()
        agent.release.set()
        assert _texts(_replies(fake, gateway, 3)) == [BUSY, "echo: first", "echo: third"]


# -- the busy: section ----------------------------------------------------------------------------------------------


def test_the_busy_section_sets_a_policy_per_platform_and_chat_type_most_specific_last() -> None:
    settings = decode_settings(
        {
            "busy": {
                "mode": "collect",
                "interrupted_output": "partial",
                "retry_after_s": 7,
                "chat_types": {"group": {"mode": "reject"}},
                "platforms": {"telegram": {"mode": "steer", "chat_types": {"group": {"mode": "interrupt"}}}},
            }
        }
    )
    busy = settings.busy
    assert (busy.interrupted_output, busy.retry_after_s) == (InterruptedOutput.PARTIAL, 7)
    assert busy.policy_for("slack", "dm") is BusyPolicy.COLLECT
    assert busy.policy_for("slack", "group") is BusyPolicy.REJECT
    assert busy.policy_for("telegram", "dm") is BusyPolicy.STEER
    assert busy.policy_for("telegram", "group") is BusyPolicy.INTERRUPT
    assert BusyConfig().policy_for("telegram", "group") is BusyPolicy.QUEUE  # today's default


@pytest.mark.parametrize(
    ("section", "path", "problem"),
    [
        ({"mode": "wait"}, "busy.mode", "'wait' (expected one of: queue, collect, interrupt, reject, steer)"),
        ({"platforms": {"telegram": {"mode": "later"}}}, "busy.platforms.telegram.mode", "Invalid enum value"),
        ({"retry_after_s": 0}, "busy.retry_after_s", "must be 1..3600 seconds"),
        ({"collect": True}, "busy.collect", "unknown field (expected one of: mode, interrupted_output,"),
    ],
)
def test_a_bad_busy_setting_is_refused_naming_its_field(section: dict[str, Any], path: str, problem: str) -> None:
    with pytest.raises(ConfigError) as refused:
        decode_settings({"busy": section})
    assert refused.value.path == path
    assert problem in str(refused.value)
