"""An example hermes-actors plug-in agent: it streams its answers and has a tool, ``calculate``.

Run it under hermesd with ``agent.factory: calculator_agent:build`` (this directory on PYTHONPATH) or, once this
directory is installed (``pip install ./examples/calculator-agent``), with ``agent.factory: calculator``.
``agent.options.greeting`` is how it starts an answer that needs no arithmetic. A real agent would ask a model
which tool to call; this one calls ``calculate`` for any message that holds arithmetic.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from collections.abc import Callable, Sequence

from hermes_actors.agents import AgentContext, AgentMessage, AgentReply, Memory, MessageRecord, Role, Tool, TurnInput

_EXPRESSION = re.compile(r"[\d.]+(?:\s*[-+*/]\s*[\d.]+)+")
_OPERATORS: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def _evaluate(node: ast.expr) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    raise ValueError("only numbers and + - * / are allowed")


def calculate(arguments: dict[str, object]) -> str:
    """The tool's handler: the value of ``arguments["expression"]``, as JSON."""
    value = _evaluate(ast.parse(str(arguments["expression"]), mode="eval").body)
    return json.dumps({"value": round(value, 10)})


CALCULATE = Tool(
    name="calculate",
    description="Evaluate arithmetic with + - * / on numbers.",
    parameters={"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    handler=calculate,
)


class CalculatorAgent:
    """Answers arithmetic with its ``calculate`` tool, and anything else with its greeting; never blocks."""

    runs_inline = True  # no I/O: sessions call it on their own thread
    model = "calculator"

    def __init__(self, *, greeting: str, system_prompt: str | None) -> None:
        self.greeting = greeting
        self.system_prompt = system_prompt  # sessions freeze it into their system message

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        messages: list[AgentMessage] = []
        found = _EXPRESSION.search(turn.user_text)
        if found is None:
            text = f"{self.greeting} Ask me to calculate something, such as 6 * 7."
        else:
            call_id, arguments = f"calc_{len(turn.history)}", json.dumps({"expression": found.group()})
            call = {"id": call_id, "type": "function", "function": {"name": "calculate", "arguments": arguments}}
            messages.append(AgentMessage(role=Role.ASSISTANT, tool_calls=json.dumps([call])))
            if turn.events is not None:
                turn.events.tool("calculate", call_id, "running", arguments)
            result = CALCULATE.run(json.loads(arguments))  # never raises: a failure comes back as {"error": ...}
            if turn.events is not None:
                turn.events.tool("calculate", call_id, "completed", result)
            messages.append(AgentMessage(role=Role.TOOL, content=result, tool_name="calculate", tool_call_id=call_id))
            answer = json.loads(result)
            text = f"{found.group()} = {answer['value']:g}" if "value" in answer else f"I cannot: {answer['error']}"
        for word in re.findall(r"\S+\s*", text):  # a model's tokens would arrive like this
            if turn.events is not None:
                turn.events.text(word)
        messages.append(AgentMessage(role=Role.ASSISTANT, content=text))
        return AgentReply(messages=tuple(messages), text=text)

    def summarize(self, history: Sequence[MessageRecord], *, timeout_s: float) -> str:
        asked = [m.content for m in history if m.role == Role.USER and m.content]
        return "The user asked: " + " | ".join(asked[-5:])

    def save_memories(self, history: Sequence[MessageRecord], *, timeout_s: float) -> list[Memory]:
        return []


def build(context: AgentContext) -> CalculatorAgent:
    """The factory ``agent.factory`` names: ``options.greeting`` (default "Hello!") and the configured prompt."""
    return CalculatorAgent(greeting=str(context.options.get("greeting", "Hello!")), system_prompt=context.system_prompt)
