from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest

from hermes_actors.routing import SessionSource, build_session_key
from hermes_actors.runtime.gateway import AcceptResult, Gateway
from hermes_actors.store.writer import WriterClosedError
from tests.runtime.conftest import MakeGateway, assert_turns_are_contiguous


@pytest.mark.slow
def test_a_thousand_sessions_of_twenty_turns_from_four_producers_stay_complete_and_ordered(
    make_gateway: MakeGateway,
) -> None:
    gateway, fake = make_gateway(max_live_actors=5000)
    sessions, turns, producers = 1000, 20, 4
    errors: list[BaseException] = []

    def produce(worker: int) -> None:
        try:
            for turn in range(turns):
                for chat in range(worker, sessions, producers):
                    fake.push(f"c{chat} t{turn}", chat_id=f"chat-{chat}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(w,)) for w in range(producers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors
    assert gateway.wait_idle(120)
    assert_every_chat_has_all_its_turns_in_order(gateway, sessions, turns)


def assert_every_chat_has_all_its_turns_in_order(gateway: Gateway, sessions: int, turns: int) -> None:
    """Chats ``chat-0`` .. were sent ``c<chat> t<turn>`` for every turn: check each transcript and the queues."""
    with gateway.read() as store:
        assert store.stats().sessions == sessions
        for chat in range(sessions):
            session_id = store.get_route(f"agent:main:fake:dm:chat-{chat}")
            assert session_id is not None
            users = assert_turns_are_contiguous(store.load_transcript(session_id))
            assert users == [f"c{chat} t{turn}" for turn in range(turns)]
        assert store.inbox.pending() == []
        assert store.outbox.unsent() == []


@pytest.mark.slow
def test_one_session_behind_two_routing_keys_never_interleaves_turns(make_gateway: MakeGateway) -> None:
    gateway, fake = make_gateway(pending_soft_limit=1000, pending_hard_limit=1000)
    fake.push("start", chat_id="telegram-chat")
    fake.pop()
    assert gateway.wait_idle()
    first_key = build_session_key(SessionSource(platform="fake", chat_id="telegram-chat"))
    second_key = build_session_key(SessionSource(platform="fake", chat_id="terminal"))
    session_id = gateway.session_for(first_key)
    assert session_id is not None
    gateway.rebind(second_key, session_id)  # what /resume does
    assert gateway.session_for(second_key) == session_id

    def produce(chat_id: str) -> None:
        for i in range(100):
            fake.push(f"{chat_id} {i}", chat_id=chat_id)

    threads = [threading.Thread(target=produce, args=(c,)) for c in ("telegram-chat", "terminal")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert gateway.wait_idle(60)
    with gateway.read() as store:
        assert store.stats().sessions == 1
        users = assert_turns_are_contiguous(store.load_transcript(session_id))
        assert len(users) == 201
        for chat_id in ("telegram-chat", "terminal"):
            mine = [u for u in users if u.startswith(chat_id + " ")]
            assert mine == [f"{chat_id} {i}" for i in range(100)]
        assert sorted(store.routes_to(session_id)) == sorted([first_key, second_key])


def test_messages_submitted_without_waiting_keep_their_order_and_each_turn_runs_once(
    make_gateway: MakeGateway,
) -> None:
    # Pipelined producers: 200 messages each to 20 chats, up to 64 commits awaited at once, as an HTTP server does.
    gateway, fake = make_gateway(pending_soft_limit=10**6, pending_hard_limit=10**6)
    sessions, turns, producers = 20, 10, 2
    results: list[list[AcceptResult]] = [[] for _ in range(producers)]

    def produce(worker: int) -> None:
        in_flight: list[Future[AcceptResult]] = []
        for turn in range(turns):
            for chat in range(worker, sessions, producers):
                message = fake.message(f"c{chat} t{turn}", chat_id=f"chat-{chat}", message_id=f"m{chat}.{turn}")
                in_flight.append(gateway.submit(message))
                if len(in_flight) >= 64:
                    results[worker].extend(f.result(30) for f in in_flight)
                    in_flight.clear()
        results[worker].extend(f.result(30) for f in in_flight)

    threads = [threading.Thread(target=produce, args=(w,)) for w in range(producers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    accepted = [r for worker in results for r in worker]
    assert len(accepted) == sessions * turns
    assert not any(r.duplicate for r in accepted)
    assert len({r.inbox_id for r in accepted}) == sessions * turns
    # A redelivery submitted the same way is recognised and queues no second turn.
    again = gateway.submit(fake.message("c0 t0", chat_id="chat-0", message_id="m0.0")).result(30)
    assert again.duplicate
    assert again.inbox_id is None
    assert gateway.wait_idle(60)
    assert_every_chat_has_all_its_turns_in_order(gateway, sessions, turns)
    assert len(fake.sent) == sessions * turns


def test_a_submitted_batch_resolves_once_committed_and_a_stopped_gateway_refuses_at_once(
    make_gateway: MakeGateway,
) -> None:
    gateway, fake = make_gateway()
    batch = [fake.message(f"hello {i}", chat_id=f"chat-{i}", message_id=f"b{i}") for i in range(3)]
    results = gateway.submit_many(batch).result(30)
    assert [r.duplicate for r in results] == [False, False, False]
    with gateway.read() as store:  # resolved means committed: a reader already sees every row
        rows = [store.inbox.get(r.inbox_id) for r in results if r.inbox_id is not None]
        assert sorted(row.platform_message_id for row in rows if row is not None) == ["b0", "b1", "b2"]
    gateway.stop()
    with pytest.raises(WriterClosedError, match="no more writes"):
        gateway.submit(fake.message("too late", chat_id="chat-9", message_id="late"))
