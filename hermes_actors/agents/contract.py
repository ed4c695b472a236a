"""What the runtime expects of an agent, as checks a test can run on one (:mod:`hermes_actors.testing` exports them).

:func:`check_agent` runs every check; each ``check_*`` runs one rule and raises :class:`AssertionError` saying what
the agent did and what the runtime needs instead. The rules:

- the agent has the :class:`~hermes_actors.agents.base.Agent` methods, and its capability attributes their types;
- a turn returns an :class:`~hermes_actors.agents.turn.AgentReply` the store takes (assistant and tool messages,
  each tool result after the call that asked for it, the last message the assistant's) or raises
  :class:`~hermes_actors.agents.turn.AgentError`: never another exception, whatever the input (empty, long,
  control characters, attachments, a failing tool);
- with ``TurnInput.events`` given, the reply's text is streamed through ``events.text`` (what was streamed is the
  start of the reply's text), each tool call reported ``running`` then ``completed`` and stored as a tool message,
  nothing reported after the call returned, and ``started``/``stopped`` left to the runtime;
- every call returns (or raises ``AgentError``) within its ``timeout_s``, and an inline agent at once;
- a summary is text, within ``max_tokens`` for a :class:`~hermes_actors.agents.base.BudgetedSummaryAgent`;
  memories are :class:`~hermes_actors.agents.turn.Memory` records; the optional capabilities answer as declared;
- turns of several sessions may run at once, from several threads.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from hermes_actors.agents.base import (
    Agent,
    background_end_hook,
    background_probe,
    cleanup_calls,
    runs_inline,
    summary_call,
    title_call,
)
from hermes_actors.agents.contract_inputs import (
    EventRecorder,
    contract_history,
    contract_tools,
    contract_turns,
    turn_of,
)
from hermes_actors.agents.factory import AGENT_METHODS
from hermes_actors.agents.history import CHARS_PER_TOKEN
from hermes_actors.agents.turn import AgentError, AgentReply, Memory
from hermes_actors.store.records import Role

__all__ = [
    "AgentContract",
    "check_agent",
    "check_capabilities",
    "check_concurrent_turns",
    "check_memories",
    "check_methods",
    "check_reply",
    "check_streaming",
    "check_summary",
    "check_timeouts",
    "check_turns",
]

T = TypeVar("T")

INLINE_LIMIT_S = 0.5
"""How long an agent that ``runs_inline`` may take for a call: it runs on its session's thread, without a timeout."""


def check_agent(
    agent: Agent,
    *,
    timeout_s: float = 10.0,
    slow_text: str | None = None,
    streams: bool = True,
    summary_tokens: int = 64,
    grace_s: float = 1.0,
) -> None:
    """Check ``agent`` against every rule of this module; raise :class:`AssertionError` naming the first it breaks.

    ``timeout_s`` bounds each call; ``slow_text`` is a user text that makes the agent work longer than
    ``timeout_s`` (for a model agent: a prompt to an endpoint that stalls), to check it gives up in time;
    ``streams=False`` accepts an agent that sends its text in one piece; ``summary_tokens`` is the summary budget.
    A call may overrun its ``timeout_s`` by ``grace_s``.
    """
    check_methods(agent)
    check_turns(agent, timeout_s=timeout_s, grace_s=grace_s)
    check_streaming(agent, timeout_s=timeout_s, streams=streams)
    check_timeouts(agent, slow_text=slow_text, timeout_s=timeout_s, grace_s=grace_s)
    check_summary(agent, max_tokens=summary_tokens, timeout_s=timeout_s, grace_s=grace_s)
    check_memories(agent, timeout_s=timeout_s, grace_s=grace_s)
    check_capabilities(agent, timeout_s=timeout_s, grace_s=grace_s)
    check_concurrent_turns(agent, timeout_s=timeout_s)


def check_methods(agent: object) -> None:
    """The :class:`~hermes_actors.agents.base.Agent` methods are there, and each capability attribute the agent
    has is of its type (``runs_inline`` a bool, ``model`` a name, ``context_window`` 1024 tokens or more,
    ``system_prompt`` text or ``None``)."""
    name = type(agent).__name__
    missing = [method for method in AGENT_METHODS if not callable(getattr(agent, method, None))]
    assert not missing, f"{name} lacks {', '.join(missing)}: every agent has run_turn, summarize and save_memories"
    kinds: dict[str, tuple[Callable[[object], bool], str]] = {
        "runs_inline": (lambda v: isinstance(v, bool), "a bool"),
        "model": (lambda v: isinstance(v, str) and bool(v), "a model name (non-empty str)"),
        "context_window": (lambda v: isinstance(v, int) and v >= 1024, "an int of at least 1024 tokens"),
        "system_prompt": (lambda v: v is None or isinstance(v, str), "a str or None"),
    }
    for attribute, (fits, expected) in kinds.items():
        if hasattr(agent, attribute):
            value = getattr(agent, attribute)
            assert fits(value), f"{name}.{attribute} is {value!r}; the runtime reads it as {expected}"


def check_turns(agent: Agent, *, timeout_s: float = 10.0, grace_s: float = 1.0) -> None:
    """A plain turn is answered; every contract input gets a reply the store takes or an :class:`AgentError`."""
    first = True
    for label, turn in contract_turns():
        run = functools.partial(agent.run_turn, turn, timeout_s=timeout_s)
        reply = _timed(agent, f"run_turn ({label})", run, timeout_s, grace_s)
        if first:
            assert isinstance(reply, AgentReply), (
                f"run_turn ({label}) raised AgentError: {reply}; the agent must answer a plain turn"
            )
            first = False
        if isinstance(reply, AgentReply):
            check_reply(reply, f"run_turn ({label})")


def check_reply(reply: object, label: str = "run_turn") -> None:
    """``reply`` is an :class:`AgentReply` the runtime can store and send."""
    assert isinstance(reply, AgentReply), f"{label} returned a {type(reply).__name__}; return an AgentReply"
    assert isinstance(reply.messages, tuple), f"{label}: AgentReply.messages is not a tuple of AgentMessage"
    assert reply.messages, (
        f"{label} returned no messages; store at least the assistant's answer (AgentMessage(role=Role.ASSISTANT, ...))"
    )
    assert isinstance(reply.text, str), f"{label}: AgentReply.text is a {type(reply.text).__name__}, not a str"
    for field in ("input_tokens", "output_tokens"):
        count = getattr(reply, field)
        assert _is_count(count), f"{label}: AgentReply.{field} is {count!r}, not a count"
    asked: set[str] = set()
    for index, message in enumerate(reply.messages):
        where = f"{label}: message {index}"
        assert message.role in (Role.ASSISTANT, Role.TOOL), (
            f"{where} has role {str(message.role)!r}; an agent stores assistant and tool messages (the runtime stores "
            "the user's)"
        )
        if message.tool_calls is not None:
            asked |= _call_ids(message.tool_calls, where)
        if message.role == Role.TOOL:
            assert message.tool_call_id in asked, (
                f"{where} is a tool result for call {message.tool_call_id!r}, which no earlier assistant message "
                "asked for; put the assistant message with its tool_calls first"
            )
    last = reply.messages[-1]
    assert last.role == Role.ASSISTANT, f"{label}: the last message is a {last.role} message; end with the assistant's"
    assert reply.text or last.tool_calls, f"{label}: AgentReply.text is empty; it is what the user is sent"


def _call_ids(tool_calls: str, where: str) -> set[str]:
    try:
        calls = json.loads(tool_calls)
        ids = {str(call["id"]) for call in calls if call["type"] == "function" and call["function"]["name"]}
    except (ValueError, TypeError, KeyError) as exc:
        raise AssertionError(
            f"{where}: tool_calls is not a JSON array of OpenAI tool calls "
            '([{"id": ..., "type": "function", "function": {"name": ..., "arguments": ...}}]): '
            f"{type(exc).__name__}: {exc}"
        ) from None
    assert len(ids) == len(calls), f"{where}: tool_calls has calls without a function or with the same id"
    return ids


def check_streaming(agent: Agent, *, timeout_s: float = 10.0, streams: bool = True) -> None:
    """With ``TurnInput.events`` given, the reply streams through it (see the module's rules); ``streams=False``
    accepts a reply sent in one piece."""
    for label, text in (("plain", "Stream a short answer, please."), ("tool", "Use your tools, then answer.")):
        events = EventRecorder()
        turn = turn_of(text, tools=contract_tools(), events=events)
        try:
            reply = agent.run_turn(turn, timeout_s=timeout_s)
        except AgentError:
            continue
        finally:
            events.close()
        check_reply(reply, f"run_turn ({label}, streamed)")
        events.check(reply, f"run_turn ({label}, streamed)", streams=streams)


def check_timeouts(agent: Agent, *, slow_text: str | None = None, timeout_s: float = 1.0, grace_s: float = 1.0) -> None:
    """With ``slow_text`` (a text that keeps the agent busier than ``timeout_s``), each of the agent's calls given
    it returns or raises :class:`AgentError` within ``timeout_s`` and ``grace_s``. The other checks time every
    call too; this one makes the agent run out of time."""
    if slow_text is None:
        return
    history = contract_history(slow_text)
    turn = turn_of(slow_text, history=history[:-1])
    reply = _timed(agent, "run_turn (slow)", lambda: agent.run_turn(turn, timeout_s=timeout_s), timeout_s, grace_s)
    if isinstance(reply, AgentReply):
        check_reply(reply, "run_turn (slow)")
    _timed(agent, "summarize (slow)", lambda: agent.summarize(history, timeout_s=timeout_s), timeout_s, grace_s)
    _timed(agent, "save_memories (slow)", lambda: agent.save_memories(history, timeout_s=timeout_s), timeout_s, grace_s)


def check_summary(agent: Agent, *, max_tokens: int = 64, timeout_s: float = 10.0, grace_s: float = 1.0) -> None:
    """A summary of a long conversation is text the runtime can start a session from; a
    :class:`~hermes_actors.agents.base.BudgetedSummaryAgent` keeps it within ``max_tokens`` (four characters a
    token, as the runtime counts); another agent's summary is cut to the budget by the runtime."""
    history = contract_history("Let us plan the trip to Lisbon in May.", turns=30)
    summarize = summary_call(agent, max_tokens)
    summary = _timed(agent, "summarize", lambda: summarize(history, timeout_s), timeout_s, grace_s)
    if isinstance(summary, AgentError):
        return
    assert _is_text(summary), f"the summary is {summary!r}; return the summary's text"
    if hasattr(agent, "summarize_within"):
        limit = max_tokens * CHARS_PER_TOKEN
        assert len(summary) <= limit, (
            f"summarize_within(max_tokens={max_tokens}) returned {len(summary)} characters, over the budget of "
            f"{limit} ({CHARS_PER_TOKEN} characters a token); shorten it, or let the runtime cut it by not "
            "defining summarize_within"
        )


def check_memories(agent: Agent, *, timeout_s: float = 10.0, grace_s: float = 1.0) -> None:
    """``save_memories`` returns a list of :class:`Memory` (maybe empty) or raises :class:`AgentError`."""
    history = contract_history("Remember that I am vegetarian and live in Porto.")
    found = _timed(
        agent, "save_memories", lambda: agent.save_memories(history, timeout_s=timeout_s), timeout_s, grace_s
    )
    if isinstance(found, AgentError):
        return
    assert isinstance(found, list), f"save_memories returned a {type(found).__name__}; return a list of Memory"
    for memory in found:
        assert isinstance(memory, Memory), f"save_memories returned {memory!r}; each entry is a Memory(content=...)"
        assert _is_text(memory.content), f"save_memories returned {memory!r}; a memory has text"


def check_capabilities(agent: Agent, *, timeout_s: float = 10.0, grace_s: float = 1.0) -> None:
    """Each optional capability the agent has answers as its protocol says (title, cleanup, background)."""
    title = title_call(agent)
    if title is not None:
        got = _timed(
            agent,
            "title",
            lambda: title("Plan a trip to Lisbon", "Gladly: when?", timeout_s=timeout_s),
            timeout_s,
            grace_s,
        )
        assert isinstance(got, AgentError) or _is_text(got), (
            f"title returned {got!r}; return a short title, or raise AgentError when there is none"
        )
    for name, call in cleanup_calls(agent):
        cleanup = functools.partial(call, "contract-session", timeout_s=timeout_s)
        done = _timed(agent, name, cleanup, timeout_s, grace_s)
        assert done is None or isinstance(done, AgentError), f"{name} returned {done!r}; it returns None"
    probe = background_probe(agent)
    if probe is not None:
        since = _timed(agent, "background_started_at", lambda: probe("contract-session"), timeout_s, grace_s)
        assert since is None or isinstance(since, int | float), (
            f"background_started_at returned {since!r}; return the start's epoch seconds or None"
        )
    hook = background_end_hook(agent)
    if hook is not None:
        hook(lambda session_id: None)


def check_concurrent_turns(agent: Agent, *, sessions: int = 4, timeout_s: float = 10.0) -> None:
    """Turns of ``sessions`` sessions, run at once from as many threads, each get a reply or an
    :class:`AgentError`: the runtime calls one agent from every session's thread."""
    outcomes: list[object] = [None] * sessions
    barrier = threading.Barrier(sessions)

    def run(index: int) -> None:
        turn = turn_of(f"Hello from session {index}.", session_id=f"contract-{index}")
        barrier.wait(timeout_s)
        try:
            outcomes[index] = agent.run_turn(turn, timeout_s=timeout_s)
        except Exception as exc:  # judged below, on the test's thread
            outcomes[index] = exc

    threads = [threading.Thread(target=run, args=(n,), name=f"contract-{n}") for n in range(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s * 2)
    assert not any(thread.is_alive() for thread in threads), f"{sessions} concurrent turns did not all return"
    for index, outcome in enumerate(outcomes):
        if isinstance(outcome, Exception) and not isinstance(outcome, AgentError):
            raise AssertionError(
                f"run_turn of session contract-{index}, run beside {sessions - 1} others, raised "
                f"{type(outcome).__name__}: {outcome}; the agent must be safe to call from several threads at once"
            ) from outcome
        if not isinstance(outcome, AgentError):
            check_reply(outcome, f"run_turn (session contract-{index}, concurrent)")


def _is_count(value: object) -> bool:
    return isinstance(value, int) and value >= 0


def _is_text(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _timed(agent: object, label: str, call: Callable[[], T], timeout_s: float, grace_s: float) -> T | AgentError:
    """``call()``'s result or its :class:`AgentError`; any other exception, or an overrun, fails the check."""
    started = time.monotonic()
    try:
        result: T | AgentError = call()
    except AgentError as exc:
        result = exc
    except Exception as exc:
        raise AssertionError(
            f"{label} raised {type(exc).__name__}: {exc}; the runtime expects AgentError for a call that fails "
            "(raise AgentError(...) from the cause)"
        ) from exc
    elapsed = time.monotonic() - started
    if runs_inline(agent):
        assert elapsed <= INLINE_LIMIT_S, (
            f"{label} took {elapsed:.2f} s, but the agent runs_inline (a promise never to block) and so runs on its "
            f"session's thread without a timeout; set runs_inline = False, or answer within {INLINE_LIMIT_S} s"
        )
    assert elapsed <= timeout_s + grace_s, (
        f"{label} took {elapsed:.2f} s with timeout_s={timeout_s}; give up within timeout_s (raise AgentError)"
    )
    return result


class AgentContract:
    """The contract as pytest tests, one per rule: mix it into a test class and say how to build the agent.

    ::

        class TestMyAgent(AgentContract):
            slow_text = None  # or a text that keeps the agent busier than contract_timeout_s

            def make_agent(self) -> Agent:
                return build(AgentContext(options={"greeting": "Hi"}))

    Each test builds a fresh agent and closes it afterwards (its ``close()``, when it has one). The class
    attributes are :func:`check_agent`'s arguments.
    """

    contract_timeout_s: float = 10.0
    slow_text: str | None = None
    streams: bool = True
    summary_tokens: int = 64
    grace_s: float = 1.0

    def make_agent(self) -> Agent:
        """The agent under test (a new one for each test)."""
        raise NotImplementedError(f"{type(self).__name__} must define make_agent() to return the agent under test")

    def _check(self, check: Callable[[Agent], None]) -> None:
        agent = self.make_agent()
        try:
            check(agent)
        finally:
            close = getattr(agent, "close", None)
            if callable(close):
                close()

    def test_the_agent_has_the_agent_methods(self) -> None:
        self._check(check_methods)

    def test_turns_give_a_reply_or_agent_error(self) -> None:
        self._check(lambda a: check_turns(a, timeout_s=self.contract_timeout_s, grace_s=self.grace_s))

    def test_turns_stream_through_turn_events(self) -> None:
        self._check(lambda a: check_streaming(a, timeout_s=self.contract_timeout_s, streams=self.streams))

    def test_calls_end_within_timeout_s(self) -> None:
        timeout, grace = self.contract_timeout_s, self.grace_s
        self._check(lambda a: check_timeouts(a, slow_text=self.slow_text, timeout_s=timeout, grace_s=grace))

    def test_summaries_keep_to_their_budget(self) -> None:
        timeout, grace = self.contract_timeout_s, self.grace_s
        self._check(lambda a: check_summary(a, max_tokens=self.summary_tokens, timeout_s=timeout, grace_s=grace))

    def test_memories_are_memory_records(self) -> None:
        self._check(lambda a: check_memories(a, timeout_s=self.contract_timeout_s, grace_s=self.grace_s))

    def test_capabilities_answer_as_declared(self) -> None:
        self._check(lambda a: check_capabilities(a, timeout_s=self.contract_timeout_s, grace_s=self.grace_s))

    def test_sessions_run_turns_at_once(self) -> None:
        self._check(lambda a: check_concurrent_turns(a, timeout_s=self.contract_timeout_s))
