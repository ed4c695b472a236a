"""A run's event buffer and outcomes (:mod:`platforms.api_server.run`), without a server."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from hermes_actors.messages import InboundMessage
from hermes_actors.ports import StoredAnswer
from hermes_actors.routing import SessionSource
from platforms.api_server import run as run_module
from platforms.api_server.run import Run, RunStatus

SOURCE = SessionSource(platform="api_server", chat_id="c", user_id="c")


def _names(events: list[bytes]) -> list[str]:
    return [event.split(b"\n", 1)[0].decode().removeprefix("event: ") for event in events]


def test_a_late_subscriber_gets_the_newest_buffered_events_and_always_the_end() -> None:
    async def scenario() -> list[bytes]:
        run = Run("run_x", scope=None, prompt="p", call=None)
        for index in range(run_module.BUFFERED_EVENTS + 5):
            run.publish("message.delta", {"delta": str(index)})
        run.end(RunStatus.COMPLETED, output="done")
        return [event async for event in run.follow(0.01) if event is not None]

    events = asyncio.run(scenario())
    assert len(events) == run_module.BUFFERED_EVENTS + 1
    assert b'"delta":"5"' in events[0]  # the five oldest fell out
    assert _names(events)[-1] == "run.completed"


def test_a_subscriber_gets_events_published_while_it_waits() -> None:
    async def scenario() -> list[bytes]:
        run = Run("run_x", scope=None, prompt="p", call=None)
        run.publish("message.delta", {"delta": "a"})

        async def later() -> None:
            await asyncio.sleep(0.02)
            run.publish("message.delta", {"delta": "b"})
            run.end(RunStatus.CANCELLED)

        task = asyncio.create_task(later())
        events = [event async for event in run.follow(0.01) if event is not None]
        await task
        return events

    events = asyncio.run(scenario())
    assert _names(events) == ["message.delta", "message.delta", "run.cancelled"]


def test_a_run_ends_once() -> None:
    async def scenario() -> Run:
        run = Run("run_x", scope=None, prompt="p", call=None)
        run.end(RunStatus.CANCELLED)
        run.end(RunStatus.COMPLETED, output="late")
        return run

    run = asyncio.run(scenario())
    assert run.view().status is RunStatus.CANCELLED
    assert run.view().output is None


def _stored(state: str, reply: str | None) -> StoredAnswer:
    message = InboundMessage(source=SOURCE, text="hi", message_id="run_x")
    return StoredAnswer(message=message, state=state, session_id="s1", reply=reply)


def test_a_stored_answer_becomes_the_runs_outcome() -> None:
    async def outcome(state: str, reply: str | None, *, watched: bool) -> Any:
        run = Run("run_x", scope=None, prompt="hi", call=None)
        run.end_stored(_stored(state, reply), watched=watched)
        return msgspec.to_builtins(run.view())

    completed = asyncio.run(outcome("done", "echo: hi", watched=False))
    assert (completed["status"], completed["output"], completed["session_id"]) == ("completed", "echo: hi", "s1")
    assert completed["usage"]["total_tokens"] > 0
    assert asyncio.run(outcome("done", None, watched=True))["status"] == "cancelled"
    unseen = asyncio.run(outcome("done", None, watched=False))
    assert (unseen["status"], unseen["error"]["code"]) == ("failed", "no_answer")
    assert "session s1" in unseen["error"]["message"]
    rejected = asyncio.run(outcome("rejected", None, watched=True))
    assert (rejected["status"], rejected["error"]["code"]) == ("failed", "rejected")
