"""A pool call's timeout: an agent held to the turn's own deadline (the OpenAI agent's request timeout) that fails
at that deadline is told as the turn's timeout, however late the session thread reads the clock after submitting."""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

from hermes_actors.agents.base import AgentError
from hermes_actors.runtime.agent_calls import AgentCalls
from hermes_actors.runtime.protocol import AgentFailure, FailureKind
from hermes_actors.runtime.services import CancelToken

TIMEOUT_S = 0.3


class _LateSubmitter(ThreadPoolExecutor):
    """A pool whose ``submit`` returns only after the call has started and run a while: the session thread
    descheduled right after handing the call over, as on a loaded machine."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        future = super().submit(fn, *args, **kwargs)
        time.sleep(0.1)
        return future


def _calls(pool: ThreadPoolExecutor, timeout_s: float, recorded: list[tuple[str, object]]) -> AgentCalls:
    """A session's agent calls on ``pool`` with the turn timeout ``timeout_s``, each call's outcome and result
    appended to ``recorded`` (the metrics' view)."""
    services = SimpleNamespace(
        agent_pool=pool,
        config=SimpleNamespace(agent_timeout_s=timeout_s),
        metrics=SimpleNamespace(agent_called=lambda outcome, _s, result=None: recorded.append((outcome, result))),
    )
    return AgentCalls(services, "s1")  # type: ignore[arg-type]


def _held_to_its_own_deadline() -> str:
    deadline = time.monotonic() + TIMEOUT_S  # read when the call starts, as the OpenAI agent does
    time.sleep(max(0.0, deadline - time.monotonic()))
    raise AgentError(f"agent endpoint timed out: no answer within {TIMEOUT_S:g} s")


def test_an_agent_failing_at_the_turns_deadline_is_the_turns_timeout_though_the_submitter_ran_late() -> None:
    recorded: list[tuple[str, object]] = []
    with _LateSubmitter(max_workers=1) as pool:
        result = _calls(pool, TIMEOUT_S, recorded).in_pool(_held_to_its_own_deadline, CancelToken())
    assert isinstance(result, AgentFailure)
    assert result.kind is FailureKind.TIMEOUT
    assert result.text.startswith("Sorry, the agent did not answer within")
    assert recorded == [("timeout", result)]


def test_an_agent_error_before_the_deadline_is_told_as_the_agents_error() -> None:
    def refuses() -> str:
        raise AgentError("agent endpoint refused the key")

    with ThreadPoolExecutor(max_workers=1) as pool:
        result = _calls(pool, 5.0, []).in_pool(refuses, CancelToken())
    assert isinstance(result, AgentFailure)
    assert result.kind is FailureKind.ERROR
    assert "refused the key" in result.text
