from __future__ import annotations

from pathlib import Path

import pytest

import hermes_actors.runtime.assembly as assembly_module
from hermes_actors.config import RuntimeConfig
from hermes_actors.errors import ConfigError
from hermes_actors.messages import OutboundMessage, encode
from hermes_actors.routing import SessionSource
from hermes_actors.store import NewMessage, Role, Store
from hermes_actors.testing import FakeClock, FakePlatform
from tests.runtime.conftest import MakeGateway


def test_a_failed_send_is_retried_with_backoff_and_marked_sent(make_gateway: MakeGateway) -> None:
    clock = FakeClock()
    gateway, fake = make_gateway(clock=clock, outbox_retry_base_s=10)
    fake.fail_next(2)
    fake.push("hello")
    assert gateway.wait_idle()  # the reply waits in the outbox actor until its retry is due
    assert fake.sent == []
    with gateway.read() as store:
        (row,) = store.outbox.unsent()
        assert row.attempts == 1
        assert row.next_attempt_at == clock.now + 10
    clock.advance(10)
    gateway.tick()
    assert gateway.wait_idle()
    assert fake.sent == []  # the second attempt failed too: backoff doubles
    clock.advance(20)
    gateway.tick()
    reply = fake.pop()
    assert reply.text == "echo: hello"
    assert not reply.possible_duplicate  # the platform refused outright: no copy can exist
    assert gateway.wait_idle()
    with gateway.read() as store:
        assert store.outbox.unsent() == []


def test_a_retry_after_an_unknown_outcome_is_flagged_as_a_possible_duplicate(make_gateway: MakeGateway) -> None:
    clock = FakeClock()
    gateway, fake = make_gateway(clock=clock)
    fake.fail_next(1, outcome_unknown=True)
    fake.push("hello")
    assert gateway.wait_idle()
    clock.advance(1)
    gateway.tick()
    assert fake.pop().possible_duplicate


def test_replies_to_one_chat_keep_their_order_behind_a_failure(make_gateway: MakeGateway) -> None:
    clock = FakeClock()
    gateway, fake = make_gateway(clock=clock)
    fake.fail_next(1)
    fake.push("first")
    assert gateway.wait_idle()
    fake.push("second")
    fake.push("other chat", chat_id="chat-2")
    assert fake.pop().text == "echo: other chat"  # a different chat is not held up
    assert gateway.wait_idle()
    clock.advance(1)
    gateway.tick()
    assert [fake.pop().text, fake.pop().text] == ["echo: first", "echo: second"]


def test_a_permanent_failure_gives_the_reply_up_and_the_chat_goes_on(make_gateway: MakeGateway) -> None:
    gateway, fake = make_gateway(clock=FakeClock())
    fake.fail_next(1, permanent=True)
    fake.push("to a blocked bot")
    assert gateway.wait_idle()
    fake.push("after")
    assert fake.pop().text == "echo: after"  # not held behind the refused reply, no retry needed
    assert gateway.wait_idle()
    with gateway.read() as store:
        assert store.outbox.unsent() == []
        reasons = store.sql.execute("SELECT last_error FROM outbox WHERE abandoned_at IS NOT NULL")
    assert reasons == [("fake platform refused the send",)]
    assert [m.text for m in fake.sent] == ["echo: after"]


def test_recovery_replays_unanswered_messages_and_delivers_unsent_replies(db_path: Path) -> None:
    platform = FakePlatform("fake")
    source = SessionSource(platform="fake", chat_id="chat-1", user_id="user-1")
    with Store.open(db_path) as store:
        # What a crashed gateway left: a committed turn whose reply was being sent, and a message with no turn.
        session = store.create_session(source, routing_key="agent:main:fake:dm:chat-1")
        store.set_route("agent:main:fake:dm:chat-1", session.id)
        store.append_messages(
            session.id,
            [NewMessage(role=Role.USER, content="before"), NewMessage(role=Role.ASSISTANT, content="echo: before")],
        )
        reply = OutboundMessage(platform="fake", chat_id="chat-1", text="echo: before", session_id=session.id)
        row = store.outbox.add(
            session_id=session.id,
            platform="fake",
            account_id="",
            chat_id="chat-1",
            thread_id=None,
            payload=encode(reply),
        )
        store.outbox.begin_attempt(row)  # the crash hit between the attempt and its confirmation
        store.inbox.add(
            platform="fake",
            account_id="",
            platform_message_id="m-after",
            routing_key="agent:main:fake:dm:chat-1",
            payload=encode(platform.message("after", message_id="m-after")),
        )
    from hermes_actors.runtime.gateway import Gateway

    gateway = Gateway(db_path, senders=[platform])
    try:
        first = platform.pop()
        assert (first.text, first.possible_duplicate) == ("echo: before", True)
        second = platform.pop()
        assert (second.text, second.possible_duplicate) == ("echo: after", False)
        assert gateway.wait_idle()
        with gateway.read() as store:
            contents = [m.content for m in store.load_transcript(session.id)]
            assert contents == ["before", "echo: before", "after", "echo: after"]
            assert store.inbox.pending() == []
            assert store.outbox.unsent() == []
    finally:
        gateway.stop()


def test_a_polled_batch_commits_with_its_cursor_and_dedupes_a_replayed_poll(make_gateway: MakeGateway) -> None:
    from hermes_actors.runtime.gateway import PollCursor

    gateway, fake = make_gateway()
    batch = [fake.message(f"update {i}", message_id=f"u{i}", chat_id=f"chat-{i}") for i in range(5)]
    results = gateway.accept_many(batch, cursor=PollCursor(platform="fake", cursor="1005"))
    assert [r.duplicate for r in results] == [False] * 5
    replay = gateway.accept_many([*batch[3:], fake.message("update 5", message_id="u5")])
    assert [r.duplicate for r in replay] == [True, True, False]
    assert gateway.wait_idle()
    assert sorted(m.text for m in fake.sent) == sorted(f"echo: update {i}" for i in range(6))
    with gateway.read() as store:
        assert store.kv.get_cursor("fake") == "1005"


def test_old_answered_inbox_rows_and_sent_replies_are_pruned_in_chunks(
    make_gateway: MakeGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(assembly_module, "QUEUE_PRUNE_CHUNK", 2)  # several chunks, each its own commit
    clock = FakeClock()
    gateway, fake = make_gateway(clock=clock, queue_retention_days=2)
    for n in range(5):
        fake.push(f"old {n}", message_id=f"old-{n}")
        fake.pop()
    assert gateway.wait_idle()
    clock.advance(3 * 86400)
    fake.push("recent", message_id="recent")
    fake.pop()
    assert gateway.wait_idle()
    gateway.prune_queues()
    assert gateway.wait_idle()
    with gateway.read() as store:
        inbox = [str(m) for (m,) in store.sql.execute("SELECT platform_message_id FROM inbox")]
        outbox = store.sql.value("SELECT count(*) FROM outbox")
    assert inbox == ["recent"]
    assert outbox == 1
    # The transcript is untouched: only the queues are trimmed.
    session = gateway.session_for("agent:main:fake:dm:chat-1")
    assert session is not None
    with gateway.read() as store:
        assert len(store.load_transcript(session)) == 12


def test_a_retention_under_a_day_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^runtime\.queue_retention_days: must be at least 1 day"):
        RuntimeConfig(queue_retention_days=0.5)


def test_a_reply_refused_with_retry_after_is_sent_again_when_that_time_comes_not_at_the_next_tick(
    make_gateway: MakeGateway,
) -> None:
    # The gateway's periodic tick is an hour away: only the retry's own timer can send the reply again.
    gateway, fake = make_gateway(tick_interval_s=3600.0)
    fake.fail_next(1, retry_after_s=0.2)
    fake.push("hello")
    reply = fake.pop(timeout=10)
    assert reply.text == "echo: hello"
    assert gateway.wait_idle()
    with gateway.read() as store:
        assert store.outbox.unsent() == []
        assert store.timers.all() == []  # the retry's wake-up is not a durable deadline
