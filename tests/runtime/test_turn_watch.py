"""A watched turn's stop: the moment its token is cancelled nothing the agent reports reaches its watchers any more,
and they hear ``stopped`` once the runtime says the stopped turn is stored; a cancel after the turn settled (its
result is kept) changes nothing. A watched turn whose agent fails sends what the agent had streamed with its reply.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from hermes_actors.agents.base import EchoAgent
from hermes_actors.agents.turn import AgentError, AgentReply, TurnInput
from hermes_actors.messages import OutboundError
from hermes_actors.runtime.services import CancelToken
from hermes_actors.runtime.turn_watch import TurnWatch
from hermes_actors.testing import open_fake_gateway
from hermes_actors.turn_events import ToolStatus


class Recorder:
    """A watcher that keeps what it is told."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def started(self, session_id: str) -> None:
        self.seen.append(f"started {session_id}")

    def stopped(self) -> None:
        self.seen.append("stopped")

    def text(self, delta: str) -> None:
        self.seen.append(f"text {delta}")

    def tool(self, name: str, call_id: str, status: ToolStatus, detail: str = "") -> None:
        self.seen.append(f"tool {name} {status}")


def test_a_cancel_cuts_the_agent_off_from_the_watchers_and_the_stored_stop_is_told_once() -> None:
    watch, watcher, token = TurnWatch(), Recorder(), CancelToken()
    watch.watch("m1", watcher)
    events = watch.begin(["m1"], "s1", token)
    assert events is not None
    events.text("before")
    token.cancel()
    token.cancel()
    events.text("after")
    events.tool("search", "c1", "running")
    assert token.settle() is True
    assert watcher.seen == ["started s1", "text before"]
    watch.stopped(["m1"])  # the stopped turn's commit is durable
    assert watcher.seen == ["started s1", "text before", "stopped"]


def test_a_turn_cancelled_before_it_began_reports_nothing_of_its_agent() -> None:
    watch, watcher, token = TurnWatch(), Recorder(), CancelToken()
    watch.watch("m1", watcher)
    token.cancel()  # /stop came between the dispatch and the agent's call
    events = watch.begin(["m1"], "s1", token)
    assert events is not None
    events.text("never seen")
    assert watcher.seen == ["started s1"]


def test_a_cancel_after_the_turn_settled_leaves_it_and_its_watchers_alone() -> None:
    watch, watcher, token = TurnWatch(), Recorder(), CancelToken()
    watch.watch("m1", watcher)
    events = watch.begin(["m1"], "s1", token)
    assert events is not None
    assert token.settle() is False  # the agent's call is over: its reply is the turn's
    token.cancel()  # a /stop that came too late
    events.text("the rest of the answer")
    assert token.cancelled is False
    assert watcher.seen == ["started s1", "text the rest of the answer"]


def test_every_watcher_of_a_merged_turn_hears_the_stop() -> None:
    watch, first, second, token = TurnWatch(), Recorder(), Recorder(), CancelToken()
    watch.watch("m1", first)
    watch.watch("m2", second)
    events = watch.begin(["m1", "m2"], "s1", token)
    assert events is not None
    token.cancel()
    events.text("dropped")
    watch.stopped(["m1", "m2"])
    assert first.seen == second.seen == ["started s1", "stopped"]


def test_a_watcher_that_fails_on_the_stop_does_not_fail_the_turn() -> None:
    class Broken(Recorder):
        def stopped(self) -> None:
            raise RuntimeError("a watcher's bug")

    watch = TurnWatch()
    watch.watch("m1", Broken())
    watch.stopped(["m1"])  # the session's thread, after its commit: must not raise
    watch.stopped(["nobody watches this"])


class HalfWayAgent(EchoAgent):
    """Streams the start of an answer when watched, then fails as a model whose stream broke off; records whether
    it was given events to stream to."""

    runs_inline = True

    def __init__(self) -> None:
        super().__init__()
        self.watched: list[bool] = []

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        self.watched.append(turn.events is not None)
        if turn.events is not None:
            turn.events.text("half ")
            turn.events.text("way")
        raise AgentError("the stream broke off")


def test_a_failed_agents_reply_carries_what_it_streamed_to_a_watcher_and_an_unwatched_turn_streams_nothing(
    tmp_path: Path,
) -> None:
    agent = HalfWayAgent()
    with open_fake_gateway(tmp_path / "state.db", agent=agent) as (gateway, fake):
        watcher = Recorder()
        gateway.watch.watch("watched", watcher)
        fake.push("go", message_id="watched")
        failed = fake.pop()
        assert failed.error is OutboundError.AGENT_FAILED
        assert failed.partial == "half way"  # a request that read only the outcome can answer with it
        assert watcher.seen[1:] == ["text half ", "text way"]
        fake.push("again", message_id="unwatched")
        unseen = fake.pop()
        assert unseen.error is OutboundError.AGENT_FAILED
        assert unseen.partial is msgspec.UNSET
    assert agent.watched == [True, False]  # nobody watched the second turn: its agent was given nothing to stream to
