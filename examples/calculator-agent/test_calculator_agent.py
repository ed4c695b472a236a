"""The example agent's tests: the runtime's contract (hermes_actors.testing), and its own behaviour."""

from __future__ import annotations

import json

from calculator_agent import CalculatorAgent, build

from hermes_actors.agents import AgentContext, Role, TurnInput
from hermes_actors.testing import AgentContract, EventRecorder


class TestTheCalculatorKeepsTheAgentContract(AgentContract):
    def make_agent(self) -> CalculatorAgent:
        return build(AgentContext(options={"greeting": "Hi!"}))


def test_arithmetic_is_a_calculate_call_streamed_as_it_runs() -> None:
    events = EventRecorder()
    turn = TurnInput(session_id="s1", history=(), user_text="what is 6 * 7?", events=events)
    reply = build(AgentContext()).run_turn(turn, timeout_s=5)
    assert reply.text == "6 * 7 = 42"
    assert [m.role for m in reply.messages] == [Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    assert json.loads(reply.messages[1].content or "") == {"value": 42.0}
    assert [(name, status) for name, _, status, _ in events.tools] == [
        ("calculate", "running"),
        ("calculate", "completed"),
    ]
    assert events.deltas == ["6 ", "* ", "7 ", "= ", "42"]


def test_other_text_gets_the_configured_greeting_and_the_prompt_is_kept() -> None:
    agent = build(AgentContext(options={"greeting": "Bonjour !"}, system_prompt="Be exact."))
    reply = agent.run_turn(TurnInput(session_id="s1", history=(), user_text="hello"), timeout_s=5)
    assert reply.text.startswith("Bonjour ! ")
    assert agent.system_prompt == "Be exact."


def test_division_by_zero_is_an_error_result_not_an_exception() -> None:
    reply = build(AgentContext()).run_turn(TurnInput(session_id="s1", history=(), user_text="1 / 0"), timeout_s=5)
    assert reply.text.startswith("I cannot: calculate failed (ZeroDivisionError")
