"""The supervisor's message outcomes: it answers while the writer is held, and every message has an outcome in every
state (an ask's error goes back to the caller, a stopped actor's asks raise ``ActorDeadError``)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import cast

import pykka
import pytest

from hermes_actors.messages import InboundMessage, encode
from hermes_actors.routing import build_session_key
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.protocol import Deliver, Delivery, RunTurn, SupervisorTell
from hermes_actors.runtime.services import CancelToken
from hermes_actors.runtime.session import SessionActor
from hermes_actors.runtime.turns import SessionTurns
from hermes_actors.store import StoreInterface
from hermes_actors.testing import FakePlatform
from tests.runtime.conftest import HeldWriter, MakeGateway


def _commit_without_dispatch(gateway: Gateway, inbound: InboundMessage) -> Deliver:
    """Store ``inbound`` in the inbox as ``accept`` does, but hand back its ``Deliver`` instead of sending it."""
    key = build_session_key(inbound.source, gateway.config.key_policy)

    def add(store: StoreInterface) -> int | None:
        return store.inbox.add(
            platform=inbound.source.platform,
            account_id="",
            platform_message_id=inbound.message_id,
            routing_key=key,
            payload=encode(inbound),
            owner=gateway.lease_owner,
        )

    inbox_id = gateway._writer.call(add)
    assert inbox_id is not None
    return Deliver(routing_key=key, delivery=Delivery(inbox_id=inbox_id, message=inbound))


def test_the_supervisor_answers_asks_while_the_writer_is_held_and_its_replies_follow_the_commit(
    make_gateway: MakeGateway,
) -> None:
    gateway, fake = make_gateway(ask_timeout_s=3.0)
    title = _commit_without_dispatch(gateway, fake.message("/title", message_id="m-title"))
    plain = _commit_without_dispatch(gateway, fake.message("/sethome", message_id="m-home"))
    held = HeldWriter(gateway)
    try:
        gateway._supervisor.tell(title)  # answered by the supervisor itself: a reply of its own
        gateway._supervisor.tell(plain)  # writes the home channel and replies
        stats = gateway.statistics()  # before: the supervisor sat in writer.call, so this ask timed out
        assert stats.rejected == 0
        assert gateway.session_for(title.routing_key) is None
        with pytest.raises(TimeoutError):
            fake.pop(timeout=0.2)  # a reply leaves only once its row has committed
    finally:
        held.release()
    assert fake.pop().text == "No conversation yet; /title <text> names the next one."
    assert fake.pop().text == "This chat is now the home channel for fake."
    assert gateway.wait_idle()
    with gateway.read() as store:
        assert store.homes.get("fake") is not None
        assert store.inbox.pending() == []


def test_a_refusal_over_the_hard_limit_is_answered_while_the_writer_is_held(make_gateway: MakeGateway) -> None:
    gateway, fake = make_gateway(ask_timeout_s=3.0, pending_soft_limit=1, pending_hard_limit=1)
    first, second, third = (
        _commit_without_dispatch(gateway, fake.message(text, message_id=f"m-{text}")) for text in ("a", "b", "c")
    )
    held = HeldWriter(gateway)
    try:
        for deliver in (first, second, third):  # "a" runs (its commit waits), "b" queues, "c" is one too many
            gateway._supervisor.tell(deliver)
        assert gateway.statistics().rejected == 1
    finally:
        held.release()
    replies = {reply.reply_to: reply.text for reply in (fake.pop() for _ in range(3))}
    assert replies["m-a"] == "echo: a"
    assert replies["m-b"] == "echo: b"
    assert replies["m-c"].startswith("Too many messages are waiting in this conversation (1)")
    assert gateway.wait_idle()
    with gateway.read() as store:
        assert store.inbox.get(third.delivery.inbox_id).state == "rejected"  # type: ignore[union-attr]


def test_an_unknown_message_asked_of_the_supervisor_comes_back_to_the_caller_and_it_goes_on(
    make_gateway: MakeGateway,
) -> None:
    gateway, fake = make_gateway()
    ref = gateway._supervisor._ref
    with pytest.raises(TypeError, match="unknown message"):
        ref.ask("not a message", timeout=5)
    fake.push("still here")
    assert fake.pop().text == "echo: still here"


def test_a_stopped_supervisor_refuses_asks_and_tells_with_actor_dead(db_path: Path) -> None:
    fake = FakePlatform()
    gateway = Gateway(db_path, senders=[fake])
    gateway.stop(timeout=10)
    key = build_session_key(fake.message("x").source, gateway.config.key_policy)
    with pytest.raises(pykka.ActorDeadError):
        gateway._supervisor.session_for(key)
    with pytest.raises(pykka.ActorDeadError):
        gateway._supervisor.tell(cast(SupervisorTell, None))


class _NoTurns:
    """Enough of :class:`SessionTurns` for an actor that is never given a turn."""

    session_id = "s-unused"
    platform = "fake"

    def release_lease(self) -> None:
        pass


class _Recorder(pykka.ThreadingActor):
    """Stands in for the supervisor: keeps what it is told and sets ``told`` at each message."""

    def __init__(self, told: threading.Event) -> None:
        super().__init__()
        self.seen: list[str] = []
        self._told = told

    def on_receive(self, message: object) -> object:
        if message == "seen":
            return list(self.seen)
        self.seen.append(type(message).__name__)
        self._told.set()
        return None


def test_a_session_actor_returns_an_unknown_ask_to_its_caller_and_queued_asks_get_actor_dead_at_stop() -> None:
    told = threading.Event()
    supervisor = _Recorder.start(told)
    try:
        session = SessionActor.start(lambda: cast(SessionTurns, _NoTurns()), supervisor)
        with pytest.raises(TypeError, match="unknown message"):
            session.ask("not a turn", timeout=5)
        assert session.is_alive()
        session.stop()
        with pytest.raises(pykka.ActorDeadError):
            session.ask(RunTurn(deliveries=(), token=CancelToken()), timeout=5)
        assert told.wait(5)
        assert supervisor.ask("seen", timeout=5) == ["SessionStopped"]
    finally:
        supervisor.stop()


def test_a_session_actor_told_an_unknown_message_reports_itself_stopped() -> None:
    told = threading.Event()
    supervisor = _Recorder.start(told)
    try:
        session = SessionActor.start(lambda: cast(SessionTurns, _NoTurns()), supervisor)
        session.tell("not a turn")  # a bug: on_failure logs it and tells the supervisor the actor is gone
        assert told.wait(5)
        assert supervisor.ask("seen", timeout=5) == ["SessionStopped"]
        assert session.actor_stopped.wait(5)
    finally:
        supervisor.stop()
