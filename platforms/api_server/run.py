"""One run of ``/v1/runs`` as this process knows it: its status, its outcome, and the events its subscribers read.

A run's events are kept in a bounded buffer (the newest :data:`BUFFERED_EVENTS`), its terminal event apart from
it, so a subscriber that comes late reads what is still buffered, then the live events, and always the end.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import msgspec

from hermes_actors.messages import ApprovalRequest, OutboundMessage, TokenUsage
from hermes_actors.ports import StoredAnswer
from hermes_actors.routing import SessionSource
from platforms.api_server.turn_call import Finished
from platforms.api_server.wire import Usage, usage_of

if TYPE_CHECKING:
    from platforms.api_server.turn_call import TurnCall

__all__ = ["BUFFERED_EVENTS", "Run", "RunError", "RunStatus", "RunView"]

BUFFERED_EVENTS = 2048  # per run: a subscriber that comes later than this many events misses the oldest


class RunStatus(enum.StrEnum):
    """Where a run stands: ``queued`` while its turn waits in its session's queue, ``running`` once it has begun
    (or has streamed something, for a run read back pending from the store), ``stopping`` from a stop until the
    turn has ended, ``requires_approval`` while its turn waits for a decision on tool calls (``POST
    /v1/runs/{id}/approval`` continues it)."""

    QUEUED = "queued"
    RUNNING = "running"
    STOPPING = "stopping"
    REQUIRES_APPROVAL = "requires_approval"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


class RunError(msgspec.Struct, frozen=True, kw_only=True):
    """Why a run failed: ``code`` is ``agent_incomplete`` (the agent gave no answer), ``storage_unavailable``,
    ``rejected`` (its session was too busy) or ``no_answer`` (read back from the store: it ended without one)."""

    message: str
    code: str | None


class RunView(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The body of ``GET /v1/runs/{id}`` (and of ``POST``'s 202 and a stop's answer)."""

    run_id: str
    status: RunStatus
    session_id: str | None
    output: str | None = None
    usage: Usage | None = None
    error: RunError | None = None
    approval: ApprovalRequest | None = None  # what it waits for, while it requires approval


class Run:
    """A run watched by this process (``call`` is ``None`` for one read back finished from the store)."""

    def __init__(
        self,
        run_id: str,
        *,
        scope: str | None,
        prompt: str,
        call: TurnCall | None,
        routing_key: str | None = None,
        session_id: str | None = None,
        source: SessionSource | None = None,
    ) -> None:
        self.run_id = run_id
        self.source = source or (call.inbound.source if call is not None else None)  # the run's conversation
        self.scope = scope
        self.prompt = prompt
        self.call = call
        self.routing_key = routing_key
        self.session_id = session_id
        self.status = RunStatus.QUEUED
        self.output: str | None = None
        self.usage: TokenUsage | None = None
        self.error: RunError | None = None
        self.approval: ApprovalRequest | None = None  # the request its turn paused on, until it continues
        self.ended_at: float | None = None  # time.monotonic() of the end
        self.admitted = False  # holds a place under max_concurrent_runs until it ends
        self.began = False  # its turn has begun (the runtime said so)
        self.adopted = False  # read back pending from the store: whether its turn has begun is not known
        self.stop_id = ""
        self.stop_reply: concurrent.futures.Future[OutboundMessage] | None = None  # the /stop's "Stopped."
        self.task: asyncio.Task[None] | None = None
        self._log: deque[bytes] = deque(maxlen=BUFFERED_EVENTS)
        self._count = 0  # events published so far (the buffer holds the newest of them)
        self._terminal: bytes | None = None
        self._wake = asyncio.Event()

    # -- what happens ---------------------------------------------------------------------------------------------

    def begin(self) -> None:
        """The run's turn has begun (it waited in its session's queue until now)."""
        self.began = True
        if self.status is RunStatus.QUEUED:
            self.status = RunStatus.RUNNING

    def publish(self, name: str, payload: object) -> None:
        """Buffer an event and wake the subscribers; a text or tool event means the turn has begun."""
        if self.status is RunStatus.QUEUED:
            self.status = RunStatus.RUNNING
        self._log.append(_event(name, payload))
        self._count += 1
        self._notify()

    def end(self, status: RunStatus, *, output: str | None = None, error: RunError | None = None) -> None:
        """Finish the run (once: later calls are ignored) and send its terminal event."""
        if self.status.finished:
            return
        self.status, self.output, self.error = status, output, error
        self.ended_at = time.monotonic()
        if status is RunStatus.COMPLETED:
            self._terminal = _event("run.completed", {"output": output or "", "usage": self._usage()})
        elif status is RunStatus.FAILED:
            self._terminal = _event("run.failed", {"error": error})
        else:
            self._terminal = _event("run.cancelled", {})
        self._notify()

    def pause(self, approval: ApprovalRequest, question: str) -> None:
        """The run's turn paused on calls waiting for approval: its status says so until a decision continues it
        (:meth:`resume`); subscribers get ``run.requires_approval``."""
        self.status, self.approval = RunStatus.REQUIRES_APPROVAL, approval
        self.publish("run.requires_approval", {"approval": approval, "text": question})

    def resume(self, call: TurnCall) -> None:
        """A decision continues the run: its turn is ``call``'s from now on."""
        self.call, self.approval, self.began = call, None, False
        self.status = RunStatus.QUEUED

    def end_with(self, finished: Finished) -> None:
        """Finish the run with its turn's outcome (``cancelled`` for a turn stopped before it answered); a turn that
        paused on calls waiting for approval pauses it instead."""
        if finished.session_id:
            self.session_id = finished.session_id
        if finished.approval is not None and finished.reply is not None:
            self.usage = finished.usage
            self.pause(finished.approval, finished.reply)
            return
        if finished.stopped:
            self.end(RunStatus.CANCELLED)
            return
        if finished.reply is not None:
            self.usage = finished.usage
            self.end(RunStatus.COMPLETED, output=finished.reply)
            return
        reason = finished.failure or "the turn ended without a reply"
        if finished.failure_code == "agent_incomplete":
            reason = f"the agent did not answer: {reason}"
        self.end(RunStatus.FAILED, error=RunError(message=reason, code=finished.failure_code))

    def end_stored(self, stored: StoredAnswer, *, watched: bool) -> None:
        """Finish the run as the store has it (``stored.state`` is not ``pending``). A turn that stored no reply
        was stopped when this process ``watched`` it (a failure's reply would have reached it); read back later,
        the store cannot tell a stop from a failure."""
        self.session_id = stored.session_id or self.session_id
        where = f" (its input is stored in session {stored.session_id})" if stored.session_id else ""
        if stored.approval is not None:
            self.pause(stored.approval, stored.reply or "")
        elif stored.state == "done" and stored.reply is not None:
            self.usage = stored.usage
            self.end(RunStatus.COMPLETED, output=stored.reply)
        elif stored.state == "done" and watched:
            self.end(RunStatus.CANCELLED)
        elif stored.state == "done":
            message = f"the run ended without an answer: the agent failed or the run was stopped{where}"
            self.end(RunStatus.FAILED, error=RunError(message=message, code="no_answer"))
        else:
            message = f"the run was not run: its session had too many messages waiting; submit it again{where}"
            self.end(RunStatus.FAILED, error=RunError(message=message, code="rejected"))

    def _notify(self) -> None:
        self._wake.set()
        self._wake = asyncio.Event()

    # -- what is seen ---------------------------------------------------------------------------------------------

    def view(self) -> RunView:
        return RunView(
            run_id=self.run_id,
            status=self.status,
            session_id=self.session_id,
            output=self.output,
            usage=self._usage() if self.status is RunStatus.COMPLETED else None,
            error=self.error,
            approval=self.approval,
        )

    def _usage(self) -> Usage:
        return usage_of(self.prompt, self.output or "", self.usage)

    async def follow(self, tick_s: float) -> AsyncIterator[bytes | None]:
        """The run's events as SSE bytes: those still buffered, then each as it comes, ending with the terminal
        event; ``None`` after ``tick_s`` without one (for keep-alives and to look whether the client is there)."""
        sent = 0
        while True:
            wake = self._wake
            oldest = self._count - len(self._log)
            pending = list(self._log)[max(sent - oldest, 0) :]
            sent = self._count
            for event in pending:
                yield event
            if self._terminal is not None and sent == self._count:
                yield self._terminal
                return
            if sent != self._count:
                continue  # more came while those were written
            try:
                await asyncio.wait_for(wake.wait(), tick_s)
            except TimeoutError:
                yield None


def _event(name: str, payload: object) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + msgspec.json.encode(payload) + b"\n\n"
