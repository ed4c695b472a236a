"""One request's turn, as the API's handlers see it: submitted durably, watched live, and ended with its outcome.

:class:`TurnCall` registers a watcher for the message's turn (the model's text deltas and tool calls, see
:class:`~hermes_actors.agents.turn.TurnEvents`) and a waiter for its reply before it submits the message, then hands
the handler what happens as :class:`TextDelta`, :class:`ToolEvent` and, last, :class:`Finished` (the reply, or the
agent's failure, or a notice that the message could not be saved, or that the turn was stopped by ``/stop`` or
``/new`` from another request, told as soon as the stopped turn is stored). Between events the handler gets control
back every ``tick_s`` (for keep-alives and to look whether its client is still there). Chat completions, Responses and
runs are built on it, so they stream, fail and drain alike.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

import msgspec

from hermes_actors.messages import ApprovalRequest, InboundMessage, OutboundError, OutboundMessage, TokenUsage
from hermes_actors.waiters import ReplyWaiters

if TYPE_CHECKING:
    from hermes_actors.ports import ApiInbox

__all__ = ["STOPPED", "Finished", "Idle", "TextDelta", "ToolEvent", "TurnCall", "TurnEvent", "finished_from"]

STOPPED = "turn_stopped"
"""The ``failure_code`` of a turn stopped before it answered (``/stop``, ``/new``, a reset of its session)."""


class TextDelta(msgspec.Struct, frozen=True):
    text: str


class ToolEvent(msgspec.Struct, frozen=True):
    name: str
    call_id: str
    status: str  # running | completed
    detail: str = ""  # the call's arguments (running), the tool's result (completed)


class Idle(msgspec.Struct, frozen=True):
    """Nothing happened for a tick."""


class Finished(msgspec.Struct, frozen=True, kw_only=True):
    """The turn's outcome: ``reply`` is the agent's text (``None`` when it gave none: ``failure`` says why)."""

    session_id: str | None
    reply: str | None
    failure: str | None = None
    failure_code: str | None = None  # agent_incomplete, storage_unavailable, turn_stopped, session_busy
    usage: TokenUsage | None = None
    streamed: str = ""  # the text the watcher saw before the end (a failed turn's partial answer)
    tool_calls: str | None = None  # the calls of the client's tools the reply ends with (JSON, OpenAI's shape)
    approval: ApprovalRequest | None = None  # the turn paused on calls waiting for a person's approval
    retry_after_s: int | None = None  # a message refused as busy: when it may be sent again

    @property
    def completed(self) -> bool:
        return self.reply is not None

    @property
    def stopped(self) -> bool:
        """Whether the turn was stopped before it answered (no reply will come)."""
        return self.failure_code == STOPPED


TurnEvent = TextDelta | ToolEvent | Idle | Finished


class _Watcher:
    """Carries a turn's events from the agent's thread onto the request's loop."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        queue: asyncio.Queue[TurnEvent | _Reply | _Stopped],
        on_started: Callable[[], None] | None,
    ) -> None:
        self._loop = loop
        self._queue = queue
        self._on_started = on_started
        self.session_id: str | None = None  # the session the turn runs in, once it has begun

    def _put(self, event: TurnEvent) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is listening any more
            self._loop.call_soon_threadsafe(self._queue.put_nowait, event)

    def started(self, session_id: str) -> None:
        self.session_id = session_id  # read on the loop after the first event, which comes after this
        if self._on_started is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._on_started)

    def stopped(self) -> None:
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._queue.put_nowait, _Stopped())

    def text(self, delta: str) -> None:
        self._put(TextDelta(delta))

    def tool(self, name: str, call_id: str, status: str, detail: str = "") -> None:
        self._put(ToolEvent(name, call_id, status, detail))


def finished_from(message: OutboundMessage, streamed: str) -> Finished:
    """The outcome an outbound reply stands for."""
    usage = message.usage if isinstance(message.usage, TokenUsage) else None
    if message.error == OutboundError.AGENT_FAILED:
        # What the agent had written comes with the reply when this request did not watch it being written (a
        # chat completion without ``stream`` in a cluster: its shard host relays nothing of the turn as it runs).
        written = message.partial if isinstance(message.partial, str) else ""
        return Finished(
            session_id=message.session_id,
            reply=None,
            failure=message.text,
            failure_code="agent_incomplete",
            streamed=streamed or written,
        )
    if message.error is not None:
        return Finished(
            session_id=message.session_id,
            reply=None,
            failure=message.text,
            failure_code=str(message.error),
            streamed=streamed,
            retry_after_s=message.retry_after_s if isinstance(message.retry_after_s, int) else None,
        )
    calls = message.tool_calls if isinstance(message.tool_calls, str) else None
    approval = message.approval if isinstance(message.approval, ApprovalRequest) else None
    return Finished(
        session_id=message.session_id,
        reply=message.text,
        usage=usage,
        streamed=streamed,
        tool_calls=calls,
        approval=approval,
    )


class TurnCall:
    """The turn of one inbound message, watched from the request's event loop. Use :meth:`open` before
    submitting the message and :meth:`close` when the request is done (in a ``finally``)."""

    def __init__(self, watch: ApiInbox, waiters: ReplyWaiters, inbound: InboundMessage) -> None:
        self.inbound = inbound
        self._watch_port = watch
        self._waiters = waiters
        self._queue: asyncio.Queue[TurnEvent | _Reply | _Stopped] = asyncio.Queue()
        self._streamed: list[str] = []
        self._reply: concurrent.futures.Future[OutboundMessage] | None = None
        self._watcher: _Watcher | None = None
        self.finished: Finished | None = None
        self.stopped = False  # a /stop was sent for it (its client left): one is enough

    @property
    def message_id(self) -> str:
        return self.inbound.message_id

    @property
    def session_id(self) -> str | None:
        """The session the turn runs in, once it has begun (``None`` before, or when another watcher took over)."""
        return self._watcher.session_id if self._watcher is not None else None

    @property
    def streamed(self) -> str:
        """The text seen so far."""
        return "".join(self._streamed)

    def open(self, on_started: Callable[[], None] | None = None) -> None:
        """Watch the turn and expect its reply (before the message is submitted, so nothing is missed);
        ``on_started`` is called on this loop when the turn begins (its agent is called)."""
        loop = asyncio.get_running_loop()
        self._watcher = _Watcher(loop, self._queue, on_started)
        self._watch_port.watch_turn(self.message_id, self._watcher)
        reply = self._reply = self._waiters.expect(self.message_id)

        def done(future: concurrent.futures.Future[OutboundMessage]) -> None:
            if not future.cancelled():
                message = future.result()
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._queue.put_nowait, _Reply(message))

        reply.add_done_callback(done)

    def close(self) -> None:
        """Stop watching and waiting; a reply that comes later only goes to the transcript."""
        self._watch_port.unwatch_turn(self.message_id)
        self._waiters.forget(self.message_id, self._reply)
        if self._reply is not None:
            self._reply.cancel()

    def finish_with(self, finished: Finished) -> None:
        """End the call with an outcome known without a turn (an idempotent retry answered from the store)."""
        self._queue.put_nowait(_Reply(None, finished))

    async def events(self, tick_s: float) -> AsyncIterator[TurnEvent]:
        """The turn's events in order, :class:`Idle` after ``tick_s`` without one, ending with :class:`Finished`."""
        while self.finished is None:
            try:
                item = await asyncio.wait_for(self._queue.get(), tick_s)
            except TimeoutError:
                yield Idle()
                continue
            if isinstance(item, _Stopped):
                self.finished = self._stopped()
                yield self.finished
                return
            if isinstance(item, _Reply):
                if item.finished is not None:
                    self.finished = item.finished
                else:
                    assert item.message is not None
                    self.finished = finished_from(item.message, self.streamed)
                yield self.finished
                return
            if isinstance(item, TextDelta):
                self._streamed.append(item.text)
            yield item

    def _stopped(self) -> Finished:
        session_id = self.session_id
        where = f"session {session_id}" if session_id else "its session"
        return Finished(
            session_id=session_id,
            reply=None,
            failure=(
                "the turn was stopped before it answered (/stop, /new or a reset of its session, sent by another "
                f"request or chat); no reply will come. The message is kept in {where} without an answer; send it "
                "again to have it answered"
            ),
            failure_code=STOPPED,
            streamed=self.streamed,
        )


class _Stopped(msgspec.Struct, frozen=True):
    """The runtime said the turn was stopped."""


class _Reply(msgspec.Struct, frozen=True):
    message: OutboundMessage | None
    finished: Finished | None = None
