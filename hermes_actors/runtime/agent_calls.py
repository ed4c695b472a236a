"""A session's agent calls: in the agent pool with the turn's timeout and cancel token, or inline.

Either way an agent that fails gives an :class:`~hermes_actors.runtime.protocol.AgentFailure` (its kind, and what
the user is told instead of a reply), never an exception, and each call is counted in the runtime's metrics. A pool
call runs in a copy of the session thread's context, so the agent's log lines carry the session's fields too.

The one exception is shutdown: a pool that refuses the call or cancels it
(:meth:`~hermes_actors.runtime.agent_pool.AgentPool.shutdown`) raises :class:`~hermes_actors.errors.ShutdownError`,
so the turn commits nothing and runs again at the next start (a ``/stop`` instead stores the turn as stopped). Such a
call is not counted: it says nothing of the agent.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

from hermes_actors.agents.base import AgentError, AgentReply
from hermes_actors.errors import ShutdownError
from hermes_actors.runtime.protocol import AgentFailure, FailureKind
from hermes_actors.runtime.services import CancelToken, SessionServices

__all__ = ["AgentCalls"]

_log = logging.getLogger(__name__)
T = TypeVar("T")


class AgentCalls:
    """Runs one session's agent calls (on the session's thread)."""

    __slots__ = ("_metrics", "_pool", "_timeout", "session_id")

    def __init__(self, services: SessionServices, session_id: str) -> None:
        self.session_id = session_id
        self._pool = services.agent_pool
        self._timeout = services.config.agent_timeout_s
        self._metrics = services.metrics

    def in_pool(
        self, call: Callable[[], T], token: CancelToken, timeout: float | None = None
    ) -> T | AgentFailure | None:
        """Run ``call`` in the agent pool; return its result, how it failed, or ``None`` if cancelled. Raise
        :class:`ShutdownError` if the pool shut down before the call finished."""
        started = time.perf_counter()
        # A turn stopped before its call began (a /stop, a newer message) makes no call at all.
        result = None if token.cancelled else self._in_pool(call, token, self._timeout if timeout is None else timeout)
        outcome = "cancelled" if result is None else result.kind.value if isinstance(result, AgentFailure) else "ok"
        self._metrics.agent_called(outcome, time.perf_counter() - started, result)
        return result

    def _in_pool(self, call: Callable[[], T], token: CancelToken, timeout: float) -> T | AgentFailure | None:
        # The deadline is taken before the call can start: an agent that reads its own deadline in the call (the
        # OpenAI agent) then has one no earlier than this, so its own timeout can only end past this deadline.
        deadline = time.monotonic() + timeout
        try:
            future: Future[T] = self._pool.submit(contextvars.copy_context().run, call)
        except RuntimeError as exc:  # the only reason an executor refuses a call: it has shut down
            raise ShutdownError("the runtime is stopping: the turn runs again at the next start") from exc
        token.wait_for(future, max(0.0, deadline - time.monotonic()))
        if token.cancelled:
            return None
        if future.cancelled():  # only the pool's shutdown cancels a call before this method does
            raise ShutdownError("the runtime stopped during the agent call: the turn runs again at the next start")
        # An agent held to the same deadline (the OpenAI agent's request timeout) may fail with its own timeout
        # just as the wait ends: past the deadline, an agent's error is the turn's timeout, told one way.
        late_error = time.monotonic() >= deadline and future.done() and isinstance(future.exception(), AgentError)
        if not future.done() or late_error:
            future.cancel()
            _log.warning("session %s: the agent did not answer within %.0f s", self.session_id, timeout)
            return AgentFailure(
                kind=FailureKind.TIMEOUT,
                text=f"Sorry, the agent did not answer within {timeout:.0f} s. Your message is saved; try again.",
                error=f"no answer within {timeout:.0f} s",
            )
        try:
            return future.result()
        except AgentError as exc:
            _log.warning("session %s: agent failed: %s", self.session_id, exc)
            return AgentFailure(
                kind=FailureKind.ERROR,
                text=f"Sorry, the agent failed: {exc}. Your message is saved; try again.",
                error=str(exc),
            )
        except Exception as exc:
            _log.exception("session %s: agent raised", self.session_id)
            return AgentFailure(
                kind=FailureKind.CRASH,
                text=f"Sorry, the agent failed unexpectedly ({type(exc).__name__}). Your message is saved; try again.",
                error=f"{type(exc).__name__}: {exc}",
            )

    def inline(self, call: Callable[[], AgentReply]) -> AgentReply | AgentFailure:
        """Run ``call`` (an agent that never blocks) on this thread; return its reply or how it failed."""
        started = time.perf_counter()
        try:
            reply = call()
        except Exception as exc:
            _log.exception("session %s: agent raised", self.session_id)
            failure = AgentFailure(
                kind=FailureKind.ERROR,
                text=f"Sorry, the agent failed: {exc}. Your message is saved; try again.",
                error=str(exc) or type(exc).__name__,
            )
            self._metrics.agent_called(FailureKind.ERROR.value, time.perf_counter() - started, failure)
            return failure
        self._metrics.agent_called("ok", time.perf_counter() - started, reply)
        return reply
