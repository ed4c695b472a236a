"""Contract tests of the tables around the transcript, written against the store interface only."""

from __future__ import annotations

import pytest

from hermes_actors.errors import LeaseLostError
from hermes_actors.store import InboxState, StoreInterface
from hermes_actors.testing import FakeClock


def _accept(store: StoreInterface, message_id: str, *, platform: str = "telegram") -> int | None:
    return store.inbox.add(
        platform=platform, account_id="", platform_message_id=message_id, routing_key="k", payload=b"p"
    )


def test_an_inbox_row_is_pending_until_completed_and_a_redelivery_is_refused(store: StoreInterface) -> None:
    first = _accept(store, "m1")
    assert first is not None
    assert _accept(store, "m1") is None
    row = store.inbox.get(first)
    assert row is not None
    assert row.state is InboxState.PENDING
    assert store.inbox.depth() == 1
    assert store.inbox.complete(first, session_id=None, state=InboxState.REJECTED)
    assert not store.inbox.complete(first, session_id=None)  # completed once only
    done = store.inbox.get(first)
    assert done is not None
    assert done.state == "rejected"  # a StrEnum: the stored text is unchanged
    assert store.inbox.pending() == []
    assert store.inbox.pending_among([first]) == set()


def test_an_inbox_row_is_found_by_its_platform_message(store: StoreInterface) -> None:
    accepted = _accept(store, "m1")
    found = store.inbox.find("telegram", "", "m1")
    assert found is not None
    assert found == store.inbox.get(accepted or 0)
    assert store.inbox.find("telegram", "", "m2") is None
    assert store.inbox.find("telegram", "other", "m1") is None


def test_inbox_payloads_since_keep_to_one_platform(store: StoreInterface, clock: FakeClock) -> None:
    _accept(store, "old")
    clock.advance(10)
    _accept(store, "new")
    _accept(store, "other", platform="signal")
    assert store.inbox.payloads_since("telegram", clock() - 1) == [b"p"]


def test_outbox_rows_are_unsent_until_sent_or_abandoned(store: StoreInterface) -> None:
    ids = [
        store.outbox.add(session_id=None, platform="telegram", account_id="", chat_id="c", thread_id=None, payload=b"x")
        for _ in range(3)
    ]
    assert store.outbox.backlog() == 3
    assert store.outbox.begin_attempt(ids[0]) == 1
    store.outbox.mark_sent(ids[0], "p1")
    store.outbox.abandon(ids[1], "handoff failed")
    assert [row.id for row in store.outbox.unsent()] == [ids[2]]
    assert store.outbox.unsent("signal") == []


def test_an_outbox_row_committed_with_its_attempt_counted_ahead_can_have_that_count_taken_back(
    store: StoreInterface,
) -> None:
    def add(attempts: int) -> int:
        return store.outbox.add(
            session_id=None,
            platform="telegram",
            account_id="",
            chat_id="c",
            thread_id=None,
            payload=b"x",
            attempts=attempts,
        )

    ahead, plain, sent = add(1), add(0), add(1)
    store.outbox.mark_sent(sent, "p1")
    assert [(row.id, row.attempts) for row in store.outbox.unsent()] == [(ahead, 1), (plain, 0)]
    store.outbox.uncount_attempts([ahead, plain, sent])  # a row never counted, or sent, keeps its count
    assert [(row.id, row.attempts) for row in store.outbox.unsent()] == [(ahead, 0), (plain, 0)]
    assert store.outbox.begin_attempt(ahead) == 1


def test_a_lease_fences_a_turn_after_another_owner_took_it(store: StoreInterface, clock: FakeClock) -> None:
    store.create_session("telegram", session_id="s1")
    epoch = store.leases.grant("s1", "a", 10)
    assert isinstance(epoch, int)
    assert store.leases.grant("s1", "b", 10) == "a"
    assert store.leases.owners() == ["a"]
    clock.advance(11)
    assert isinstance(store.leases.grant("s1", "b", 10), int)
    with pytest.raises(LeaseLostError):
        store.leases.fence("s1", "a", epoch, 10)
    assert store.leases.holder("s1") == "b"
    assert store.leases.release_all("b") == 1
    assert store.leases.owners() == []


def test_a_fence_completes_the_turn_s_rows_after_its_check_and_none_when_it_fails(
    store: StoreInterface, clock: FakeClock
) -> None:
    store.create_session("telegram", session_id="s1")
    epoch = store.leases.grant("s1", "a", 10)
    assert isinstance(epoch, int)
    first, second = (
        store.inbox.add(platform="t", account_id="", platform_message_id=m, routing_key="k", payload=b"")
        for m in ("m1", "m2")
    )
    assert first is not None
    assert second is not None
    store.inbox.complete(second, session_id="s1")  # answered by another turn already
    completion = store.inbox.completion([first, second], session_id="s1")
    with store.transaction():
        store.leases.fence("s1", "a", epoch, 10, then=[completion])
    assert completion.done == {first}
    assert store.inbox.pending_among([first, second]) == set()
    third = store.inbox.add(platform="t", account_id="", platform_message_id="m3", routing_key="k", payload=b"")
    assert third is not None
    lost = store.inbox.completion([third], session_id="s1")
    with pytest.raises(LeaseLostError), store.transaction():
        store.leases.fence("s1", "a", epoch + 1, 10, then=[lost])
    assert lost.done == set()
    assert store.inbox.pending_among([third]) == {third}


def test_a_new_session_s_lease_is_taken_at_once_and_a_held_one_still_found(
    store: StoreInterface, clock: FakeClock
) -> None:
    store.create_session("telegram", session_id="s1")
    epoch = store.leases.grant("s1", "a", 10, new=True)
    assert isinstance(epoch, int)
    store.leases.fence("s1", "a", epoch, 10)
    assert store.leases.grant("s1", "b", 10, new=True) == "a"  # held: found, not taken
    assert store.leases.grant("s1", "a", 10, new=True) == epoch  # its own: renewed under the same epoch
    clock.advance(11)
    taken = store.leases.grant("s1", "b", 10, new=True)
    assert isinstance(taken, int)
    assert taken > epoch
    with pytest.raises(LeaseLostError):
        store.leases.fence("s1", "a", epoch, 10)


def test_timers_and_cursors_are_replaced_by_name(store: StoreInterface) -> None:
    store.timers.set("idle", 5.0)
    store.timers.apply({"idle": (7.0, b"x"), "daily": (6.0, None)})
    assert [(t.name, t.due_at) for t in store.timers.all()] == [("daily", 6.0), ("idle", 7.0)]
    assert store.timers.cancel("daily")
    store.kv.set_cursor("telegram", "41")
    store.kv.set_cursor("telegram", "42")
    store.kv.set_meta("k", "v")
    assert (store.kv.get_cursor("telegram"), store.kv.get_meta("k")) == ("42", "v")


def test_queue_summaries_count_what_waits_and_date_the_oldest(store: StoreInterface, clock: FakeClock) -> None:
    assert store.inbox.summary().count == 0
    assert store.inbox.summary().oldest_at is None
    assert store.outbox.summary_by_platform() == {}
    first_at = clock()
    first = _accept(store, "m1")
    clock.advance(5)
    _accept(store, "m2")
    assert (store.inbox.summary().count, store.inbox.summary().oldest_at) == (2, first_at)
    assert first is not None
    clock.advance(1)
    _accept(store, "s1", platform="signal")
    assert {p: (s.count, s.oldest_at) for p, s in store.inbox.summary_by_platform().items()} == {
        "telegram": (2, first_at),
        "signal": (1, first_at + 6),
    }
    store.inbox.complete(first, session_id=None)
    assert (store.inbox.summary().count, store.inbox.summary().oldest_at) == (2, first_at + 5)
    assert store.inbox.summary_by_platform()["telegram"].count == 1

    def reply(platform: str) -> int:
        return store.outbox.add(
            session_id=None, platform=platform, account_id="", chat_id="c", thread_id=None, payload=b"r"
        )

    queued_at = clock()
    sent, kept = reply("telegram"), reply("telegram")
    clock.advance(3)
    given_up = reply("signal")
    reply("signal")
    store.outbox.mark_sent(sent, None)
    store.outbox.abandon(given_up, "refused")
    summary = store.outbox.summary_by_platform()
    assert {platform: (s.count, s.oldest_at) for platform, s in summary.items()} == {
        "telegram": (1, queued_at),
        "signal": (1, queued_at + 3),
    }
    assert kept > sent
