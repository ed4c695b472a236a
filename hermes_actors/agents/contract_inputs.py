"""The inputs the agent contract (:mod:`hermes_actors.agents.contract`) gives an agent, and the
:class:`EventRecorder` that watches what it streams."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence

from hermes_actors.agents.tools import Tool
from hermes_actors.agents.turn import AgentReply, TurnEvents, TurnInput
from hermes_actors.messages import Attachment, AttachmentKind
from hermes_actors.store.records import MessageRecord, Role

__all__ = ["EventRecorder", "contract_history", "contract_tools", "contract_turns", "turn_of"]

SYSTEM_PROMPT = "You are being checked against the hermes-actors agent contract. Answer briefly."


def _lookup(arguments: dict[str, object]) -> str:
    return json.dumps({"query": arguments.get("query"), "answer": 42})


def _broken(arguments: dict[str, object]) -> str:
    raise RuntimeError("this tool always fails (an input of the agent contract)")


def contract_tools() -> tuple[Tool, ...]:
    """Two tools: ``contract_lookup`` answers, ``contract_broken`` fails (its ``run`` gives an error result)."""
    parameters = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    return (
        Tool(name="contract_lookup", description="Look a fact up.", parameters=parameters, handler=_lookup),
        Tool(name="contract_broken", description="A tool that always fails.", parameters=parameters, handler=_broken),
    )


def contract_history(text: str, *, turns: int = 2, session_id: str = "contract-1") -> list[MessageRecord]:
    """A transcript as a summary sees it: a compression summary, then ``turns`` exchanges (each with a tool call and
    its result), then the user's ``text`` (a turn's history is the transcript before its text: drop that one)."""
    rows: list[tuple[str, str | None, str | None, str | None]] = [
        (Role.SYSTEM, "Summary of the conversation so far: the user asked about travel.", None, None)
    ]
    for n in range(turns):
        call = [{"id": f"call_{n}", "type": "function", "function": {"name": "contract_lookup", "arguments": "{}"}}]
        rows += [
            (Role.USER, f"Question {n}: what about day {n + 1}?", None, None),
            (Role.ASSISTANT, None, json.dumps(call), None),
            (Role.TOOL, '{"answer": 42}', None, f"call_{n}"),
            (Role.ASSISTANT, f"Day {n + 1} is free.", None, None),
        ]
    rows.append((Role.USER, text, None, None))
    return [
        MessageRecord(
            id=index + 1,
            session_id=session_id,
            role=role,
            content=content,
            created_at=1_764_460_800.0 + index,
            tool_calls=calls,
            tool_name="contract_lookup" if call_id else None,
            tool_call_id=call_id,
        )
        for index, (role, content, calls, call_id) in enumerate(rows)
    ]


def turn_of(
    text: str,
    *,
    history: Sequence[MessageRecord] = (),
    tools: Sequence[Tool] = (),
    events: TurnEvents | None = None,
    attachments: Sequence[Attachment] = (),
    session_id: str = "contract-1",
) -> TurnInput:
    """A turn of ``session_id`` answering ``text`` after ``history`` (the transcript before ``text``)."""
    chars = sum(len(m.content or "") + len(m.tool_calls or "") for m in history)
    return TurnInput(
        session_id=session_id,
        history=history,
        user_text=text,
        system_prompt=SYSTEM_PROMPT,
        history_tokens=chars // 4,
        tools=tools,
        attachments=attachments,
        events=events,
    )


def contract_turns() -> list[tuple[str, TurnInput]]:
    """The turns every agent must take without raising anything but ``AgentError``, by label; the first is the plain
    turn every agent must answer."""
    attachments = (
        Attachment(kind=AttachmentKind.IMAGE, mime_type="image/png", source_url="https://example.invalid/cat.png"),
        Attachment(kind=AttachmentKind.DOCUMENT, name="big.pdf", error="over the size limit", description=None),
    )
    odd = "你好 — ¿qué tal? 🌍 \x00\x1b[31mred\x1b[0m \u202eevil\u202c \t\r\n end"
    return [
        ("plain", turn_of("Hello! What can you do?")),
        ("with history", turn_of("And day three?", history=contract_history("")[:-1], tools=contract_tools())),
        ("empty text", turn_of("")),
        ("long text", turn_of("word " * 5000)),
        ("control and non-Latin characters", turn_of(odd)),
        ("attachments", turn_of("[image: cat.png] [document: big.pdf]", attachments=attachments)),
        ("a failing tool", turn_of("Call contract_broken, then answer.", tools=contract_tools())),
        ("a slash command", turn_of("/unknown-command with arguments")),
    ]


class EventRecorder(TurnEvents):
    """A :class:`TurnEvents` that records what an agent reports, and what it must not: ``started``/``stopped``
    (the runtime's) and anything after :meth:`close`. Thread-safe; every call returns at once."""

    def __init__(self) -> None:
        self.deltas: list[str] = []
        self.tools: list[tuple[str, str, str, str]] = []  # (name, call_id, status, detail)
        self.violations: list[str] = []
        self._closed = False
        self._lock = threading.Lock()

    def _record(self, what: str) -> bool:
        with self._lock:
            if self._closed:
                self.violations.append(f"events.{what} was called after run_turn returned")
                return False
            return True

    def started(self, session_id: str) -> None:
        with self._lock:
            self.violations.append("events.started was called by the agent; the runtime reports a turn's start")

    def stopped(self) -> None:
        with self._lock:
            self.violations.append("events.stopped was called by the agent; the runtime reports a turn's stop")

    def text(self, delta: str) -> None:
        if self._record("text"):
            self.deltas.append(delta)

    def tool(self, name: str, call_id: str, status: str, detail: str = "") -> None:
        if self._record("tool"):
            self.tools.append((name, call_id, status, detail))

    def close(self) -> None:
        """The agent's call returned: from now on a report is a violation."""
        with self._lock:
            self._closed = True

    def check(self, reply: AgentReply, label: str, *, streams: bool = True) -> None:
        """Raise :class:`AssertionError` unless what was reported agrees with ``reply`` (see the contract)."""
        assert not self.violations, f"{label}: " + "; ".join(self.violations)
        bad = [delta for delta in self.deltas if not isinstance(delta, str)]
        assert not bad, f"{label}: events.text got {bad[0]!r}; pass each piece of text as a str"
        streamed = "".join(self.deltas)
        if streams and reply.text:
            assert self.deltas, (
                f"{label}: nothing was streamed; call turn.events.text(piece) as the reply's text is produced (when "
                "turn.events is not None), or check with streams=False for an agent that answers in one piece"
            )
        assert reply.text.startswith(streamed), (
            f"{label}: streamed {streamed[:200]!r}, but the reply's text is {reply.text[:200]!r}; what is streamed "
            "must be the start of AgentReply.text (the runtime sends the rest when the turn ends)"
        )
        self._check_tools(reply, label)

    def _check_tools(self, reply: AgentReply, label: str) -> None:
        running: dict[str, str] = {}
        completed: set[str] = set()
        for name, call_id, status, detail in self.tools:
            assert isinstance(detail, str), f"{label}: events.tool detail {detail!r} of {name} is not a str"
            if status == "running":
                assert call_id not in running, f"{label}: tool call {call_id!r} was reported running twice"
                running[call_id] = name
            elif status == "completed":
                assert running.get(call_id) == name, (
                    f"{label}: tool call {call_id!r} ({name}) was reported completed before it was reported running"
                )
                completed.add(call_id)
            else:
                raise AssertionError(f"{label}: tool status {status!r}; report 'running', then 'completed'")
        unfinished = sorted(set(running) - completed)
        assert not unfinished, f"{label}: tool calls {unfinished} were reported running and never completed"
        stored = {m.tool_call_id for m in reply.messages if m.role == Role.TOOL}
        unstored = sorted(set(running) - stored)
        assert not unstored, (
            f"{label}: tool calls {unstored} were reported but the reply has no tool message for them; store each "
            "call and its result (the stored turn is what a client reads back)"
        )
