"""The :class:`Agent` protocol a session's turn calls, and the optional capabilities an agent may have.

An :class:`Agent` is called from a session's turn, never concurrently for one session. Every agent runs turns,
summaries and memory extraction; anything more is a capability of its own, stated by a protocol below and asked
for with ``isinstance`` (they are ``runtime_checkable``) or with the helper next to it:

- :class:`InlineAgent` (``runs_inline``, see :func:`runs_inline`): the agent never blocks, so sessions call it on
  their own thread instead of the agent pool.
- :class:`TitlingAgent` (``title``, see :func:`title_call`): a short title for a session after its first exchange.
- :class:`SessionReleasingAgent` and :class:`BackgroundInterruptingAgent` (see :func:`cleanup_calls`): what a reset
  calls to free a session's resources and stop its background tasks.
- :class:`BackgroundReportingAgent` (see :func:`background_probe`): since when a session's background process
  runs, which holds its reset back; :class:`BackgroundEndReportingAgent` (see :func:`background_end_hook`) also
  says when such a process ends, so a reset it held off runs then.
- :class:`ContextWindowAgent` (see :func:`context_window_of`): the model's context window in tokens.
- :class:`BudgetedSummaryAgent` (see :func:`summary_call`): a summary kept within a token budget.
- :class:`ModelNamingAgent` (see :func:`model_of`): the model's name, recorded on each session it starts.
- :class:`PromptedAgent` (see :func:`system_prompt_of`): the configured system prompt (``agent.system_prompt``),
  frozen into each session's system message when it starts.
- :class:`ProbingAgent` (see :func:`probe_call`): a cheap check that the agent's model answers (no model call),
  which health checks run now and then to report the agent ``degraded`` before a turn finds out.
- :class:`SteerableAgent` (see :func:`takes_steering`): messages sent while a turn runs (busy policy ``steer``)
  go into that turn at its next model call (:attr:`TurnInput.steering`) instead of waiting for the next turn.

The built-in :class:`~hermes_actors.agents.echo.EchoAgent` is the embedded default;
``hermes_actors.agents.openai_chat`` talks to any OpenAI-compatible endpoint. The data of a turn lives in
:mod:`hermes_actors.agents.turn`; its names and the echo agent's are importable from here too.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Protocol, cast, runtime_checkable

from hermes_actors.agents.echo import ECHO_TITLE_WORDS, EchoAgent, echo_title
from hermes_actors.agents.turn import AgentError, AgentMessage, AgentReply, Memory, TurnInput
from hermes_actors.store.records import MessageRecord

__all__ = [
    "ECHO_TITLE_WORDS",
    "Agent",
    "AgentError",
    "AgentMessage",
    "AgentReply",
    "BackgroundEndReportingAgent",
    "BackgroundInterruptingAgent",
    "BackgroundReportingAgent",
    "BudgetedSummaryAgent",
    "CleanupCall",
    "ContextWindowAgent",
    "EchoAgent",
    "InlineAgent",
    "Memory",
    "ModelNamingAgent",
    "ProbingAgent",
    "PromptedAgent",
    "SessionReleasingAgent",
    "SteerableAgent",
    "TitleCall",
    "TitlingAgent",
    "TurnInput",
    "background_end_hook",
    "background_probe",
    "cleanup_calls",
    "context_window_of",
    "echo_title",
    "model_of",
    "probe_call",
    "runs_inline",
    "summary_call",
    "system_prompt_of",
    "takes_steering",
    "title_call",
]


class Agent(Protocol):
    """Runs turns, compression summaries and memory extraction for every session of a gateway.

    What the runtime expects (:func:`hermes_actors.testing.check_agent` checks it): the agent is safe to call from
    several sessions' threads at once (one session's calls never overlap); each call returns within its
    ``timeout_s`` or raises :class:`AgentError`, and any other exception is a bug (logged with its traceback, the
    turn fails the same way). An agent that never blocks says so with ``runs_inline`` (:class:`InlineAgent`).
    """

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        """Answer ``turn.user_text`` after ``turn.history`` under ``turn.system_prompt``, calling ``turn.tools`` as
        needed; report the text as it is produced and each tool call through ``turn.events`` when it is not
        ``None``; return the messages to store and the text to send, or raise :class:`AgentError`."""
        ...

    def summarize(self, history: Sequence[MessageRecord], *, timeout_s: float) -> str:
        """Return a summary of ``history`` that a continuation session can start from."""
        ...

    def save_memories(self, history: Sequence[MessageRecord], *, timeout_s: float) -> list[Memory]:
        """Return what is worth remembering about the user from ``history`` (may be empty)."""
        ...


@runtime_checkable
class InlineAgent(Protocol):
    """An agent that says whether it blocks: ``runs_inline = True`` promises never to, so sessions call it on their
    own thread (no timeout, no pool slot). An agent without the attribute runs in the agent pool."""

    runs_inline: bool


@runtime_checkable
class TitlingAgent(Protocol):
    """An agent that titles sessions, asked in the background (:mod:`hermes_actors.lifecycle.auto_titles`)."""

    def title(self, first_user_text: str, first_reply: str, *, timeout_s: float) -> str:
        """A short descriptive title (3-7 words) for a session after its first exchange; raise
        :class:`AgentError` when there is none."""
        ...


@runtime_checkable
class SessionReleasingAgent(Protocol):
    """An agent holding resources per session that a reset must free, within ``timeout_s``."""

    def release_session(self, session_id: str, *, timeout_s: float) -> None:
        """Close the sandboxes, browsers and subprocesses of ``session_id``."""
        ...


@runtime_checkable
class BackgroundInterruptingAgent(Protocol):
    """An agent running background tasks for a session that a reset must stop, within ``timeout_s``."""

    def interrupt_background(self, session_id: str, *, timeout_s: float) -> None:
        """Stop the in-flight background tasks of ``session_id``."""
        ...


@runtime_checkable
class BackgroundReportingAgent(Protocol):
    """An agent that tells when a session's background process started: a scheduled reset waits for it (up to
    ``bg_process_max_age_hours``)."""

    def background_started_at(self, session_id: str) -> float | None:
        """The epoch time the background process of ``session_id`` started, ``None`` when it has none."""
        ...


@runtime_checkable
class BackgroundEndReportingAgent(Protocol):
    """An agent that reports when a session's background process ends: the runtime registers a callback once, and
    the agent calls it with the session id (from any thread) when that session's process has ended."""

    def on_background_ended(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(session_id)`` whenever a background process of ``session_id`` ends."""
        ...


@runtime_checkable
class ContextWindowAgent(Protocol):
    """An agent that knows its model's context window; compression uses it instead of the configured one."""

    context_window: int


@runtime_checkable
class BudgetedSummaryAgent(Protocol):
    """An agent that keeps a compression summary within a token budget (the runtime cuts any summary over it)."""

    def summarize_within(self, history: Sequence[MessageRecord], *, max_tokens: int, timeout_s: float) -> str:
        """Like :meth:`Agent.summarize`, in at most ``max_tokens`` tokens."""
        ...


@runtime_checkable
class ModelNamingAgent(Protocol):
    """An agent that names its model (``agent.model``; the echo agent says ``echo``)."""

    model: str


@runtime_checkable
class PromptedAgent(Protocol):
    """An agent with a configured system prompt (``agent.system_prompt`` or ``agent.system_prompt_file``)."""

    system_prompt: str | None


@runtime_checkable
class ProbingAgent(Protocol):
    """An agent that can check, cheaply, that its model answers (an endpoint's model list, not a completion)."""

    def probe(self, *, timeout_s: float) -> None:
        """Return when the model's endpoint answers within ``timeout_s``; raise :class:`AgentError` saying what
        failed (refused, timed out, refused the key) otherwise."""
        ...


@runtime_checkable
class SteerableAgent(Protocol):
    """An agent that takes messages sent while its turn runs (``takes_steering = True``).

    Before each model call of a turn whose :attr:`TurnInput.steering` is not ``None`` it calls
    ``turn.steering.take()``, sends each text as a user message after what the model has been sent so far, and puts
    each into its reply's ``messages`` at that place as ``AgentMessage(role=Role.USER, content=text)``: the runtime
    stores them there and completes their messages with the turn. What a turn never took, or a turn that fails,
    leaves for the next turn. An agent without the attribute gets no ``steering``; such messages wait for the next
    turn, collected into one."""

    takes_steering: bool


class TitleCall(Protocol):
    """The bound ``title`` of a :class:`TitlingAgent`."""

    def __call__(self, first_user_text: str, first_reply: str, *, timeout_s: float) -> str: ...


class CleanupCall(Protocol):
    """A bound ``release_session`` or ``interrupt_background``."""

    def __call__(self, session_id: str, *, timeout_s: float) -> None: ...


_DECLARED: set[tuple[type, type]] = set()
"""(class, capability) pairs known to hold: the class itself declares the capability's member."""

_SEEN: weakref.WeakKeyDictionary[object, dict[type, bool]] = weakref.WeakKeyDictionary()
"""Each agent's answers, positive or negative: an agent's capabilities do not change while it lives."""


def _capable(agent: object, capability: type, member: str) -> bool:
    """``isinstance(agent, capability)`` for a one-member capability, remembered for a class that declares
    ``member`` itself (every instance of it then has it) and for the agent itself. A protocol check walks the
    protocol's members on every call, tens of microseconds, and sessions ask several times a turn."""
    kind = type(agent)
    if (kind, capability) in _DECLARED:
        return True
    try:
        known = _SEEN.setdefault(agent, {})
    except TypeError:  # not weakly referable or not hashable: asked every time
        known = {}
    found = known.get(capability)
    if found is None:
        found = known[capability] = isinstance(agent, capability)
        if found and hasattr(kind, member):
            _DECLARED.add((kind, capability))
    return found


def runs_inline(agent: object) -> bool:
    """Whether ``agent`` promises never to block (:class:`InlineAgent` with ``runs_inline`` true)."""
    return _capable(agent, InlineAgent, "runs_inline") and bool(cast(InlineAgent, agent).runs_inline)


def title_call(agent: object) -> TitleCall | None:
    """The agent's ``title`` when it is a :class:`TitlingAgent`, else ``None``."""
    return cast(TitlingAgent, agent).title if _capable(agent, TitlingAgent, "title") else None


def cleanup_calls(agent: object) -> tuple[tuple[str, CleanupCall], ...]:
    """What a reset calls on ``agent``, in order, by name: ``release_session`` then ``interrupt_background``,
    each only if the agent has it."""
    calls: list[tuple[str, CleanupCall]] = []
    if _capable(agent, SessionReleasingAgent, "release_session"):
        calls.append(("release_session", cast(SessionReleasingAgent, agent).release_session))
    if _capable(agent, BackgroundInterruptingAgent, "interrupt_background"):
        calls.append(("interrupt_background", cast(BackgroundInterruptingAgent, agent).interrupt_background))
    return tuple(calls)


def background_probe(agent: object) -> Callable[[str], float | None] | None:
    """The agent's ``background_started_at`` when it is a :class:`BackgroundReportingAgent`, else ``None``."""
    if _capable(agent, BackgroundReportingAgent, "background_started_at"):
        return cast(BackgroundReportingAgent, agent).background_started_at
    return None


def background_end_hook(agent: object) -> Callable[[Callable[[str], None]], None] | None:
    """The agent's ``on_background_ended`` when it is a :class:`BackgroundEndReportingAgent`, else ``None``."""
    if _capable(agent, BackgroundEndReportingAgent, "on_background_ended"):
        return cast(BackgroundEndReportingAgent, agent).on_background_ended
    return None


def summary_call(agent: Agent, max_tokens: int) -> Callable[[Sequence[MessageRecord], float], str]:
    """``summary(history, timeout_s)``: the agent's ``summarize_within`` with ``max_tokens`` when it is a
    :class:`BudgetedSummaryAgent`, else its ``summarize``."""
    if _capable(agent, BudgetedSummaryAgent, "summarize_within"):
        within = cast(BudgetedSummaryAgent, agent).summarize_within
        return lambda history, timeout_s: within(history, max_tokens=max_tokens, timeout_s=timeout_s)
    return lambda history, timeout_s: agent.summarize(history, timeout_s=timeout_s)


def context_window_of(agent: object, default: int) -> int:
    """The agent's context window in tokens when it is a :class:`ContextWindowAgent`, else ``default``."""
    if _capable(agent, ContextWindowAgent, "context_window"):
        return int(cast(ContextWindowAgent, agent).context_window)
    return default


def model_of(agent: object) -> str | None:
    """The agent's model name when it is a :class:`ModelNamingAgent`, else ``None``."""
    if _capable(agent, ModelNamingAgent, "model"):
        return str(cast(ModelNamingAgent, agent).model)
    return None


def system_prompt_of(agent: object) -> str | None:
    """The agent's configured system prompt when it is a :class:`PromptedAgent` and has one, else ``None``."""
    if _capable(agent, PromptedAgent, "system_prompt"):
        return cast(PromptedAgent, agent).system_prompt or None
    return None


def takes_steering(agent: object) -> bool:
    """Whether ``agent`` takes messages into a running turn (:class:`SteerableAgent` with ``takes_steering`` true)."""
    return _capable(agent, SteerableAgent, "takes_steering") and bool(cast(SteerableAgent, agent).takes_steering)


def probe_call(agent: object) -> Callable[[float], None] | None:
    """``probe(timeout_s)``: the agent's ``probe`` when it is a :class:`ProbingAgent`, else ``None``."""
    if _capable(agent, ProbingAgent, "probe"):
        probe = cast(ProbingAgent, agent).probe
        return lambda timeout_s: probe(timeout_s=timeout_s)
    return None
