"""The built-in echo agent: deterministic, never blocks, and the embedded default.

It answers ``echo: <text>`` and acts out the message shapes a real agent produces (tool calls and their results,
a real ``session_search``), so the runtime can be exercised end to end without a model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from hermes_actors.agents.tools import SESSION_SEARCH, error_json, find_tool
from hermes_actors.agents.turn import AgentMessage, AgentReply, Memory, TurnEvents, TurnInput
from hermes_actors.store.records import MessageRecord, Role
from hermes_actors.titles import MAX_TITLE_LENGTH

__all__ = ["ECHO_TITLE_WORDS", "EchoAgent", "echo_title"]

_TOOL_REQUEST = re.compile(r"^/?tool\s+(?P<name>[\w.-]+)\s*(?P<args>.*)$", re.DOTALL)
_SEARCH_REQUEST = re.compile(r"^search:\s*(?P<query>.*)$", re.DOTALL)
_REMEMBER = re.compile(r"\bremember\s+(?:that\s+)?(?P<fact>.+)", re.IGNORECASE)
_TITLE_TRIM = " .,;:!?…'\"`()[]{}<>*_~-—。，；：！？「」"
ECHO_TITLE_WORDS = 7


def _estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _report(events: TurnEvents, messages: Sequence[AgentMessage]) -> None:
    """Tell a watcher what the turn did: each tool call as it would have run, then the reply word by word."""
    arguments = {
        call["id"]: call["function"]["arguments"] for m in messages for call in json.loads(m.tool_calls or "[]")
    }
    for message in messages:
        if message.role == Role.TOOL:
            call_id = message.tool_call_id or ""
            events.tool(message.tool_name or "?", call_id, "running", arguments.get(call_id, ""))
            events.tool(message.tool_name or "?", call_id, "completed", message.content or "")
    for word in re.findall(r"\S+\s*|\s+", messages[-1].content or ""):
        events.text(word)


def _tool_turn(turn: TurnInput, name: str, args: str) -> tuple[AgentMessage, ...]:
    """Act out a call of tool ``name``: the call, a made-up result and a final answer."""
    call_id = f"call_{len(turn.history)}"
    call = [{"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]
    result = f"{name} ran with {args!r}"
    return (
        AgentMessage(role=Role.ASSISTANT, content=None, tool_calls=json.dumps(call)),
        AgentMessage(role=Role.TOOL, content=result, tool_name=name, tool_call_id=call_id),
        AgentMessage(role=Role.ASSISTANT, content=f"echo: {name} said {result!r}"),
    )


def _client_turn(turn: TurnInput, name: str, args: str) -> tuple[AgentMessage, ...]:
    """Call the client's tool ``name``: the turn ends with the call, for the client to run."""
    call = [{"id": f"call_{len(turn.history)}", "type": "function", "function": {"name": name, "arguments": args}}]
    return (AgentMessage(role=Role.ASSISTANT, content=None, tool_calls=json.dumps(call)),)


def _results_text(turn: TurnInput) -> str:
    """The answer to a client's tool results: each call's tool name and what it returned."""
    names = {call["id"]: call["function"]["name"] for m in turn.history for call in json.loads(m.tool_calls or "[]")}
    said = "; ".join(f"{names.get(r.call_id, r.call_id)} returned {r.output!r}" for r in turn.tool_results)
    return f"echo: {said}"


def _asking_turn(turn: TurnInput, name: str, args: str) -> tuple[AgentMessage, ...]:
    """Call ``name``, which needs approval: the turn pauses on the call until a person decides."""
    call = [{"id": f"call_{len(turn.history)}", "type": "function", "function": {"name": name, "arguments": args}}]
    return (AgentMessage(role=Role.ASSISTANT, content=None, tool_calls=json.dumps(call)),)


def _decided_turn(turn: TurnInput) -> tuple[AgentMessage, ...]:
    """Continue from the decisions on the calls the last turn paused on: a call the runtime ran answers with its
    result; one of the echo agent's own is acted out when approved, and answered with the denial when not."""
    produced: list[AgentMessage] = []
    said = [_results_text(turn).removeprefix("echo: ")] if turn.tool_results else []
    for decision in turn.approvals.decisions:
        if decision.answered:
            continue
        name, call_id = decision.tool_name, decision.call_id
        if decision.approved:
            result = f"{name} ran"
            said.append(f"{name} ran")
        else:
            result = error_json(f"{name} was denied: {decision.reason or 'no reason given'}")
            said.append(f"{name} was denied ({decision.reason or 'no reason given'})")
        produced.append(AgentMessage(role=Role.TOOL, content=result, tool_name=name, tool_call_id=call_id))
    produced.append(AgentMessage(role=Role.ASSISTANT, content="echo: " + "; ".join(said)))
    return tuple(produced)


def _search_turn(turn: TurnInput, query: str) -> tuple[AgentMessage, ...]:
    """Call the turn's session_search tool with ``query``: the call, its result and a summary of the hits."""
    arguments = {"query": query}
    call_id = f"call_{len(turn.history)}"
    call = [
        {"id": call_id, "type": "function", "function": {"name": SESSION_SEARCH, "arguments": json.dumps(arguments)}}
    ]
    tool = find_tool(turn.tools, SESSION_SEARCH)
    result = tool.run(arguments) if tool is not None else error_json(f"this turn offers no {SESSION_SEARCH} tool")
    return (
        AgentMessage(role=Role.ASSISTANT, content=None, tool_calls=json.dumps(call)),
        AgentMessage(role=Role.TOOL, content=result, tool_name=SESSION_SEARCH, tool_call_id=call_id),
        AgentMessage(role=Role.ASSISTANT, content="echo: " + _summarise_search(result)),
    )


def _summarise_search(result: str) -> str:
    answer = json.loads(result)
    if answer.get("error"):
        suggestion = f" (try: {answer['suggestion']})" if answer.get("suggestion") else ""
        return f"search failed: {answer['error']}{suggestion}"
    hits = answer.get("hits") or []
    if answer.get("shape") == "browse":
        recent = [session["session_id"] for session in answer.get("sessions") or []]
        return f"recent sessions: {', '.join(recent)}" if recent else "there are no other sessions"
    if not hits:
        return "search found nothing"
    found = "; ".join(f"{hit['session_id']}: {hit['snippet']}" for hit in hits)
    return f"search found {len(hits)}: {found}"


def _arguments(args: str) -> dict[str, object]:
    """``args`` as a call's arguments: a JSON object as it is, any other text as ``{"input": text}``."""
    try:
        value = json.loads(args) if args else {}
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"input": args}


class EchoAgent:
    """A deterministic agent: replies ``echo: <text>``.

    ``tool <name> <args>`` makes it emit an assistant tool call, the tool's result and a final answer, so the
    whole message shape is exercised; when ``name`` is one of the client's tools the turn ends with the call
    (``args`` are its arguments, as given) and the client's results are answered ``echo: <name> returned
    '<output>'``. A tool that needs approval (``turn.approvals``) pauses the turn on the call; the decision is
    answered with the result the runtime got (a tool of the turn's) or acted out (approved) or refused (denied).
    ``search: <query>`` does the same with a real call of the turn's
    ``session_search`` tool and answers with the session ids and snippets it found. ``remember <fact>`` in a
    session makes its save-memory turn keep the fact. It never blocks (a search is a few indexed reads), so
    sessions call it on their own thread (``runs_inline``) instead of the agent pool; a subclass that blocks
    must set ``runs_inline = False``. Its token counts are estimates (four characters a token), and say so.
    """

    runs_inline = True
    model = "echo"  # recorded on the sessions it answers (sessions.model)
    system_prompt: str | None = None  # frozen into each session's system message; the echo agent ignores it

    def __init__(self, *, system_prompt: str | None = None) -> None:
        self.system_prompt = system_prompt

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        """Echo the user text, act out a tool call, or search earlier sessions."""
        text = turn.user_text
        search = _SEARCH_REQUEST.match(text.strip())
        match = _TOOL_REQUEST.match(text.strip())
        messages: tuple[AgentMessage, ...]
        clients = {tool.name for tool in turn.client_tools}
        asking = None
        if turn.approvals.decisions and not text:
            messages = _decided_turn(turn)
        elif turn.tool_results and not text:
            messages = (AgentMessage(role=Role.ASSISTANT, content=_results_text(turn)),)
        elif search is not None:
            messages = _search_turn(turn, search["query"].strip())
        elif match is not None and match["name"] in clients:
            messages = _client_turn(turn, match["name"], match["args"].strip() or "{}")
        elif match is not None and turn.approvals.required(match["name"], turn.tools):
            messages = _asking_turn(turn, match["name"], json.dumps(_arguments(match["args"].strip())))
            asking = messages[-1].tool_calls
        elif match is not None:
            messages = _tool_turn(turn, match["name"], match["args"].strip())
        else:
            messages = (AgentMessage(role=Role.ASSISTANT, content=f"echo: {text}"),)
        reply = messages[-1].content or ""
        if turn.events is not None:
            _report(turn.events, messages)
        prompt = turn.history_tokens + _estimate_tokens(text)
        return AgentReply(
            messages=messages,
            text=reply,
            input_tokens=prompt,
            output_tokens=sum(_estimate_tokens(m.content or m.tool_calls or "") for m in messages),
            tokens_estimated=True,
            client_calls=None if asking else messages[-1].tool_calls,  # a client's call ends a turn without words
            approval_calls=asking,
        )

    def summarize(self, history: Sequence[MessageRecord], *, timeout_s: float) -> str:
        """List the user's messages, newest last."""
        asked = [m.content for m in history if m.role == Role.USER and m.content]
        return "Summary of the conversation so far: " + " | ".join(asked[-20:])

    def save_memories(self, history: Sequence[MessageRecord], *, timeout_s: float) -> list[Memory]:
        """Keep every ``remember ...`` the user said."""
        facts = [_REMEMBER.search(m.content) for m in history if m.role == Role.USER and m.content]
        return [Memory(content=f["fact"].strip()) for f in facts if f is not None]

    def title(self, first_user_text: str, first_reply: str, *, timeout_s: float) -> str:
        """Title a session by the first words of its first user message (see :func:`echo_title`)."""
        return echo_title(first_user_text)


def echo_title(text: str) -> str:
    """The echo agent's title for a session whose first message is ``text``: its first seven words at most,
    capitalised, without punctuation at either end; fewer than three words are prefixed with "Conversation
    about" and an empty text gives "Conversation without words"."""
    words = " ".join(text.split()[:ECHO_TITLE_WORDS]).strip(_TITLE_TRIM).split()
    if not words:
        return "Conversation without words"
    if len(words) < 3:
        words = ["Conversation", "about", *words]
    title = " ".join(words)[:MAX_TITLE_LENGTH].rstrip()
    return title[:1].upper() + title[1:]
