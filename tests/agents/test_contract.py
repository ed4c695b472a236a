"""The agent contract kit (hermes_actors.testing): the built-in agents keep it, and each way of breaking it fails
with an AssertionError that says what the agent did and what the runtime needs."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from hermes_actors.agents import AgentError, AgentMessage, AgentReply, Memory, MessageRecord, Role, TurnInput
from hermes_actors.agents.contract import (
    check_capabilities,
    check_concurrent_turns,
    check_memories,
    check_methods,
    check_streaming,
    check_summary,
    check_timeouts,
    check_turns,
)
from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.openai_chat import OpenAIAgent
from hermes_actors.testing import AgentContract, EventRecorder, check_agent
from tests.agents.chat_server import ChatServer, Scripted, completion, open_chat_server, tool_call


class Answering:
    """A well-behaved agent that answers in one assistant message, streamed word by word; subclasses break it."""

    runs_inline = False

    def answer(self, turn: TurnInput) -> str:
        return f"You said {len(turn.user_text)} characters."

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        text = self.answer(turn)
        if turn.events is not None:
            for word in text.split(" "):
                turn.events.text(word + " ")
        text = text + " " if turn.events is not None else text
        return AgentReply(messages=(AgentMessage(role=Role.ASSISTANT, content=text),), text=text)

    def summarize(self, history: Sequence[MessageRecord], *, timeout_s: float) -> str:
        return "A short summary."

    def save_memories(self, history: Sequence[MessageRecord], *, timeout_s: float) -> list[Memory]:
        return [Memory(content="lives in Porto")]


def test_the_echo_agent_keeps_the_contract() -> None:
    check_agent(EchoAgent(system_prompt="Be brief."))


def test_a_well_behaved_plugin_keeps_the_contract() -> None:
    check_agent(Answering())


class TestTheEchoAgentThroughTheMixin(AgentContract):
    def make_agent(self) -> EchoAgent:
        return EchoAgent()


def _model(body: Any) -> Scripted:
    """A model that calls contract_lookup once when offered it, then answers in three streamed pieces; a prompt
    with SLOW in it stalls."""
    messages = body["messages"]
    if "SLOW" in json.dumps(messages):
        return Scripted(body=completion("late").body, delay_s=5.0)
    offered = [tool["function"]["name"] for tool in body.get("tools") or []]
    if "contract_lookup" in offered and messages[-1]["role"] == "user":
        return completion(None, tool_calls=[tool_call("c1", "contract_lookup", {"query": "x"})])
    return Scripted(body=completion("The answer is 42.").body, pieces=("The ", "answer ", "is 42."))


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    with open_chat_server() as server:
        server.respond_with(_model)
        yield server


@pytest.mark.slow
def test_the_openai_agent_keeps_the_contract_and_gives_up_on_a_stalled_endpoint_in_time(chat: ChatServer) -> None:
    agent = OpenAIAgent(base_url=chat.base_url, model="test-model", max_retries=0)
    try:
        check_agent(agent, timeout_s=1.0, slow_text="SLOW please", grace_s=1.0)
    finally:
        agent.close()
    assert any(body.get("tools") for body in chat.completion_bodies)  # the tool turns reached the model


def _fails(check: Any, agent: object, *words: str, **options: Any) -> str:
    with pytest.raises(AssertionError) as failed:
        check(agent, **options)
    message = str(failed.value)
    for word in words:
        assert word in message, message
    return message


def test_an_agent_without_the_agent_methods_is_told_which_it_lacks() -> None:
    class Half:
        def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
            raise AgentError("half an agent")

    _fails(check_methods, Half(), "Half lacks summarize, save_memories")


def test_a_capability_attribute_of_the_wrong_type_is_named() -> None:
    class Windowed(Answering):
        context_window = "128k"

    _fails(check_methods, Windowed(), "Windowed.context_window is '128k'", "an int of at least 1024 tokens")


def test_an_exception_other_than_agent_error_names_the_input_that_raised_it() -> None:
    class Fragile(Answering):
        def answer(self, turn: TurnInput) -> str:
            return f"First word: {turn.user_text.split()[0]}"

    message = _fails(check_turns, Fragile(), "run_turn (empty text) raised IndexError", "expects AgentError")
    assert "raise AgentError(...) from the cause" in message


def test_agent_error_is_accepted_except_for_the_plain_turn() -> None:
    class Picky(Answering):
        def answer(self, turn: TurnInput) -> str:
            if len(turn.user_text) > 100 or not turn.user_text:
                raise AgentError("too long or empty")
            return "ok"

    check_turns(Picky())

    class Refusing(Answering):
        def answer(self, turn: TurnInput) -> str:
            raise AgentError("no model")

    _fails(check_turns, Refusing(), "run_turn (plain) raised AgentError: no model", "must answer a plain turn")


@pytest.mark.parametrize(
    ("messages", "text", "words"),
    [
        ((), "hi", ["returned no messages"]),
        ((AgentMessage(role=Role.USER, content="hi"),), "hi", ["has role 'user'", "stores the user's"]),
        (
            (AgentMessage(role=Role.TOOL, content="{}", tool_call_id="c9"), AgentMessage(role=Role.ASSISTANT)),
            "hi",
            ["tool result for call 'c9', which no earlier assistant message asked for"],
        ),
        ((AgentMessage(role=Role.ASSISTANT, tool_calls='{"id": 1}'),), "", ["is not a JSON array of OpenAI"]),
        ((AgentMessage(role=Role.ASSISTANT, content=""),), "", ["AgentReply.text is empty"]),
        (
            (
                AgentMessage(role=Role.ASSISTANT, content="hi"),
                AgentMessage(role=Role.TOOL, content="{}", tool_call_id="c1"),
            ),
            "hi",
            ["tool result for call 'c1'"],
        ),
    ],
)
def test_a_reply_the_store_cannot_take_is_refused(
    messages: tuple[AgentMessage, ...], text: str, words: list[str]
) -> None:
    class Shapeless(Answering):
        def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
            return AgentReply(messages=messages, text=text)

    _fails(check_turns, Shapeless(), "run_turn (plain)", *words)


def test_a_reply_that_ends_with_a_tool_result_is_refused() -> None:
    call = json.dumps([tool_call("c1", "lookup", {})])

    class Unfinished(Answering):
        def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
            messages = (
                AgentMessage(role=Role.ASSISTANT, tool_calls=call),
                AgentMessage(role=Role.TOOL, content="{}", tool_call_id="c1", tool_name="lookup"),
            )
            return AgentReply(messages=messages, text="done")

    _fails(check_turns, Unfinished(), "the last message is a tool message; end with the assistant's")


def test_an_agent_that_never_streams_is_told_how_unless_it_says_it_answers_in_one_piece() -> None:
    class Quiet(Answering):
        def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
            return super().run_turn(TurnInput(session_id="s", history=(), user_text=turn.user_text), timeout_s=1)

    _fails(check_streaming, Quiet(), "nothing was streamed; call turn.events.text(piece)", "streams=False")
    check_streaming(Quiet(), streams=False)


def test_streamed_text_that_is_not_the_start_of_the_reply_is_refused() -> None:
    class Contradicting(Answering):
        def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
            if turn.events is not None:
                turn.events.text("Yes")
            return AgentReply(messages=(AgentMessage(role=Role.ASSISTANT, content="No"),), text="No")

    _fails(check_streaming, Contradicting(), "streamed 'Yes', but the reply's text is 'No'", "must be the start")


def test_tool_progress_must_pair_and_be_stored() -> None:
    class Unstored(Answering):
        def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
            if turn.events is not None:
                turn.events.tool("contract_lookup", "c1", "running", "{}")
                turn.events.tool("contract_lookup", "c1", "completed", "{}")
            return super().run_turn(turn, timeout_s=timeout_s)

    _fails(check_streaming, Unstored(), "tool calls ['c1'] were reported but the reply has no tool message")

    class Unfinished(Answering):
        def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
            if turn.events is not None:
                turn.events.tool("contract_lookup", "c1", "running", "{}")
            return super().run_turn(turn, timeout_s=timeout_s)

    _fails(check_streaming, Unfinished(), "tool calls ['c1'] were reported running and never completed")


def test_an_agent_must_leave_started_and_stopped_to_the_runtime() -> None:
    class Starting(Answering):
        def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
            if turn.events is not None:
                turn.events.started(turn.session_id)
            return super().run_turn(turn, timeout_s=timeout_s)

    _fails(check_streaming, Starting(), "events.started was called by the agent; the runtime reports a turn's start")


def test_a_report_after_the_call_returned_is_a_violation() -> None:
    events = EventRecorder()
    events.text("in time")
    events.close()
    events.text("late")
    reply = AgentReply(messages=(AgentMessage(role=Role.ASSISTANT, content="in time"),), text="in time")
    with pytest.raises(AssertionError, match=r"events\.text was called after run_turn returned"):
        events.check(reply, "run_turn")


class Stalling(Answering):
    """Works 1.5 s on a turn with SLOW in it, whatever its timeout_s."""

    def answer(self, turn: TurnInput) -> str:
        if "SLOW" in turn.user_text:
            threading.Event().wait(1.5)
        return "done"

    def summarize(self, history: Sequence[MessageRecord], *, timeout_s: float) -> str:
        return "A short summary."


@pytest.mark.slow
def test_an_agent_that_overruns_timeout_s_is_caught_by_the_slow_text() -> None:
    _fails(check_timeouts, Stalling(), "run_turn (slow) took", "with timeout_s=0.5; give up within timeout_s",
           slow_text="SLOW", timeout_s=0.5, grace_s=0.5)  # fmt: skip
    check_timeouts(Stalling(), slow_text=None)  # without a slow text there is nothing to overrun


@pytest.mark.slow
def test_an_inline_agent_that_blocks_is_told_to_leave_runs_inline() -> None:
    class Sleepy(Answering):
        runs_inline = True

        def answer(self, turn: TurnInput) -> str:
            time.sleep(0.6)
            return "late"

    _fails(check_turns, Sleepy(), "the agent runs_inline (a promise never to block)", "set runs_inline = False")


def test_a_summary_over_its_budget_is_refused_only_from_an_agent_that_promised_the_budget() -> None:
    class Wordy(Answering):
        def summarize(self, history: Sequence[MessageRecord], *, timeout_s: float) -> str:
            return "word " * 200

    check_summary(Wordy(), max_tokens=16)  # the runtime cuts it

    class Budgeted(Wordy):
        def summarize_within(self, history: Sequence[MessageRecord], *, max_tokens: int, timeout_s: float) -> str:
            return "word " * 200

    _fails(check_summary, Budgeted(), "returned 1000 characters, over the budget of 64", max_tokens=16)

    class Mute(Answering):
        def summarize(self, history: Sequence[MessageRecord], *, timeout_s: float) -> str:
            return " "

    _fails(check_summary, Mute(), "the summary is ' '; return the summary's text")


def test_memories_must_be_memory_records() -> None:
    class Strings(Answering):
        def save_memories(self, history: Sequence[MessageRecord], *, timeout_s: float) -> list[Memory]:
            return ["lives in Porto"]  # type: ignore[list-item]

    _fails(check_memories, Strings(), "save_memories returned 'lives in Porto'; each entry is a Memory")


def test_capabilities_answer_as_their_protocols_say() -> None:
    class Untitled(Answering):
        def title(self, first_user_text: str, first_reply: str, *, timeout_s: float) -> str:
            return ""

        def release_session(self, session_id: str, *, timeout_s: float) -> bool:
            return True

    _fails(check_capabilities, Untitled(), "title returned ''; return a short title, or raise AgentError")

    class Releasing(Answering):
        def release_session(self, session_id: str, *, timeout_s: float) -> bool:
            return True

    _fails(check_capabilities, Releasing(), "release_session returned True; it returns None")


def test_an_agent_unsafe_across_threads_is_caught_by_concurrent_sessions() -> None:
    class Exclusive(Answering):
        """Holds one lock for a turn until every session has tried, then the others fail."""

        def __init__(self) -> None:
            self.lock = threading.Lock()
            self.tried = threading.Semaphore(0)

        def answer(self, turn: TurnInput) -> str:
            if not self.lock.acquire(blocking=False):
                self.tried.release()
                raise RuntimeError("another turn is running")
            try:
                for _ in range(3):
                    self.tried.acquire(timeout=5)
                return "alone"
            finally:
                self.lock.release()

    _fails(check_concurrent_turns, Exclusive(), "raised RuntimeError: another turn is running", "several threads")


def test_the_mixin_fails_the_test_of_the_rule_an_agent_breaks() -> None:
    class Fragile(Answering):
        def answer(self, turn: TurnInput) -> str:
            return turn.user_text[0]

    class TestFragile(AgentContract):
        def make_agent(self) -> Fragile:
            return Fragile()

    suite = TestFragile()
    suite.test_the_agent_has_the_agent_methods()
    suite.test_summaries_keep_to_their_budget()
    with pytest.raises(AssertionError, match=r"run_turn \(empty text\) raised IndexError"):
        suite.test_turns_give_a_reply_or_agent_error()


def test_the_mixin_says_make_agent_is_missing() -> None:
    with pytest.raises(NotImplementedError, match="must define make_agent"):
        AgentContract().test_the_agent_has_the_agent_methods()
