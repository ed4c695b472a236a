"""Fenced turn commits: a process whose lease was taken over while it was paused or slow never commits a turn
computed from the history it had; the message is run again under a fresh lease (or refused while busy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_actors.config import RuntimeConfig
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.protocol import Delivery, RunTurn
from hermes_actors.runtime.records import looked_up_again
from hermes_actors.runtime.services import CancelToken
from hermes_actors.store import Store
from hermes_actors.testing import FakeClock, FakePlatform
from tests.runtime.test_leases import AskedAgent

KEY = "agent:main:fake:dm:chat-1"


@pytest.mark.slow
def test_a_turn_whose_lease_was_taken_over_mid_turn_is_rolled_back(db_path: Path) -> None:
    clock = FakeClock()
    config = RuntimeConfig(lease_ttl_s=30, lease_wait_s=0.2)
    slow_agent = AskedAgent()
    first_fake, second_fake = FakePlatform(), FakePlatform()
    first = Gateway(db_path, config=config, agent=slow_agent, senders=[first_fake], clock=clock, tick_interval_s=3600)
    second: Gateway | None = None
    try:
        first_fake.attach(first)
        slow_agent.release.set()
        first_fake.push("one")
        assert first_fake.pop().text == "echo: one"
        assert first.wait_idle()
        session_id = first.session_for(KEY)
        assert session_id is not None
        slow_agent.release.clear()
        slow_agent.started.clear()
        first_fake.push("two, computed from a history that will be stale")
        assert slow_agent.started.wait(10)
        clock.advance(31)  # the first process is paused past its lease
        second = Gateway(db_path, config=config, senders=[second_fake], clock=clock, tick_interval_s=3600)
        second_fake.attach(second)
        second_fake.push("three", chat_id="chat-2", message_id="second-1")  # ids of its own: m1 is the first's
        second.rebind("agent:main:fake:dm:chat-2", session_id)
        # The first message to chat-2 opened its own session; the next one reaches the shared one.
        second_fake.pop()
        second_fake.push("four", chat_id="chat-2", message_id="second-2")
        assert second_fake.pop().text == "echo: four"
        slow_agent.release.set()  # the paused process wakes up and tries to commit "two"
        refused = first_fake.pop()
        assert refused.text.startswith("This conversation is busy in process")
        assert first.wait_idle()
        with first.read() as store:
            users = [m.content for m in store.load_transcript(session_id) if m.role == "user"]
        assert users == ["one", "four"]
        # "two" was computed once, under the lease it lost; it waited for the lease again and was refused, not rerun.
        assert slow_agent.asked.count("two, computed from a history that will be stale") == 1
    finally:
        slow_agent.release.set()
        if second is not None:
            second.stop(timeout=10)
        first.stop(timeout=10)


def test_a_replayed_message_already_answered_elsewhere_is_not_run_again(db_path: Path) -> None:
    from hermes_actors.runtime.protocol import Delivery
    from hermes_actors.store import Store

    fake = FakePlatform()
    gateway = Gateway(db_path, config=RuntimeConfig(), senders=[fake])
    try:
        fake.attach(gateway)
        fake.push("hello")
        assert fake.pop().text == "echo: hello"
        assert gateway.wait_idle()
        with Store.open(db_path) as store:
            row = store.inbox.get(1)  # the answered row of "hello"
        from hermes_actors.messages import decode_inbound
        from hermes_actors.runtime.protocol import Deliver

        # What a second process's stale replay would hand the supervisor: the same, already answered, row.
        assert row is not None
        delivery = Delivery(inbox_id=row.id, message=decode_inbound(row.payload), replayed=True)
        gateway._supervisor.tell(Deliver(routing_key=KEY, delivery=delivery))
        assert gateway.wait_idle()
        session_id = gateway.session_for(KEY)
        assert session_id is not None
        with gateway.read() as store:
            users = [m.content for m in store.load_transcript(session_id) if m.role == "user"]
        assert users == ["hello"]
    finally:
        gateway.stop(timeout=10)


def test_a_fresh_delivery_batched_with_replayed_ones_is_kept(db_path: Path) -> None:
    # A chat's replayed messages and a fresh one accepted meanwhile can share a turn; only the replayed rows are
    # looked up, so the fresh one (never looked up) must not be taken for answered and dropped.
    from hermes_actors.messages import encode
    from hermes_actors.runtime.protocol import Delivery
    from hermes_actors.runtime.records import still_pending
    from hermes_actors.store import Store
    from hermes_actors.store.readers import ReaderPool

    fake = FakePlatform()
    messages = [fake.message(text, message_id=f"m{n}") for n, text in enumerate(["answered", "replayed", "fresh"])]
    with Store.open(db_path) as store:
        ids = []
        for message in messages:
            inbox_id = store.inbox.add(
                platform=message.source.platform,
                account_id="",
                platform_message_id=message.message_id,
                routing_key=KEY,
                payload=encode(message),
            )
            assert inbox_id is not None
            ids.append(inbox_id)
        assert store.inbox.complete(ids[0], session_id=None)
    deliveries = [
        Delivery(inbox_id=ids[0], message=messages[0], replayed=True),
        Delivery(inbox_id=ids[1], message=messages[1], replayed=True),
        Delivery(inbox_id=ids[2], message=messages[2]),
    ]
    readers = ReaderPool(db_path, size=1)
    try:
        assert still_pending(readers, deliveries) == deliveries[1:]
    finally:
        readers.close()


def test_a_lease_taken_before_it_expired_still_fails_the_commit_of_a_session_that_checked_it_before(
    db_path: Path,
) -> None:
    """A session's later turns answer the lease check from the database version (no statement) until another
    process commits; a holder taken for dead by another process (no expiry to wait for) is still refused."""
    clock = FakeClock()
    config = RuntimeConfig(lease_ttl_s=30, lease_wait_s=0.2)
    agent = AskedAgent()
    agent.release.set()
    fake = FakePlatform()
    gateway = Gateway(db_path, config=config, agent=agent, senders=[fake], clock=clock, tick_interval_s=3600)
    try:
        fake.attach(gateway)
        for text in ("one", "two"):  # the first creates the session, the second checks the lease in the table
            fake.push(text)
            assert fake.pop().text == f"echo: {text}"
        session_id = gateway.session_for(KEY)
        assert session_id is not None
        with gateway.read() as store:
            ends = store.sql.value("SELECT expires_at FROM leases WHERE session_id = ?", (session_id,))
        clock.advance(1)
        fake.push("three")
        assert fake.pop().text == "echo: three"
        with gateway.read() as store:  # checked without a statement: not extended by the turn
            assert store.sql.value("SELECT expires_at FROM leases WHERE session_id = ?", (session_id,)) == ends
        with Store.open(db_path, clock=clock) as other, other.transaction():  # another process takes it, unexpired
            assert other.leases.release(session_id, gateway.lease_owner)
            assert isinstance(other.leases.grant(session_id, "elsewhere:1:other", 30), int)
        fake.push("four")
        assert fake.pop().text.startswith("This conversation is busy in process")
        assert gateway.wait_idle()
        with gateway.read() as store:
            users = [m.content for m in store.load_transcript(session_id) if m.role == "user"]
        assert users == ["one", "two", "three"]
        assert agent.asked.count("four") == 1
    finally:
        agent.release.set()
        gateway.stop(timeout=10)


def test_a_turn_run_again_after_a_refused_commit_looks_each_of_its_messages_up_first() -> None:
    # A fresh delivery skips the look-up before its agent runs; once its commit was refused (a lease lost, a store
    # error), another process may have answered it meanwhile, so the turn that runs it again looks it up.
    message = FakePlatform().message("hi")
    turn = RunTurn(
        deliveries=(Delivery(inbox_id=3, message=message), Delivery(inbox_id=4, message=message, replayed=True)),
        token=CancelToken(),
        also_answers=("m0",),
    )
    again = looked_up_again(turn)
    assert [(d.inbox_id, d.replayed) for d in again.deliveries] == [(3, True), (4, True)]
    assert (again.token, again.also_answers) == (turn.token, turn.also_answers)
