"""The approvals table on both stores: a request is decided once, its results kept, and resumed once."""

from __future__ import annotations

from hermes_actors.routing import SessionSource
from hermes_actors.store import StoreInterface
from hermes_actors.store.approvals import Approvals, ApprovalState
from hermes_actors.testing import FakeClock

SOURCE = SessionSource(platform="telegram", chat_id="42", chat_type="dm", user_id="7", account_id="main")
CALLS = '[{"id": "call_1", "type": "function", "function": {"name": "files__delete", "arguments": "{}"}}]'


def _approvals(store: StoreInterface) -> Approvals:
    return store.approvals


def _session(store: StoreInterface) -> str:
    return store.create_session(SOURCE, routing_key="agent:main:telegram:dm:42").id


def test_a_request_is_stored_pending_with_its_chat_and_calls(store: StoreInterface, clock: FakeClock) -> None:
    session_id = _session(store)
    approvals = _approvals(store)
    approval_id = approvals.add(session_id, message_id="m1", source=SOURCE, calls=CALLS, expires_at=clock() + 60)
    row = approvals.get(approval_id)
    assert row is not None
    assert (row.session_id, row.message_id, row.source, row.calls) == (session_id, "m1", SOURCE, CALLS)
    assert row.state is ApprovalState.PENDING
    assert row.is_open
    assert row.expires_at == clock() + 60
    assert approvals.open_in(session_id) == row
    assert approvals.pending() == [row]
    assert approvals.of_message("m1") == [row]
    assert approvals.get(approval_id + 1000) is None


def test_a_request_is_decided_once_and_resumed_once(store: StoreInterface, clock: FakeClock) -> None:
    session_id = _session(store)
    approvals = _approvals(store)
    approval_id = approvals.add(session_id, message_id="m1", source=SOURCE, calls=CALLS, expires_at=clock() + 60)
    clock.advance(5)
    assert approvals.decide(approval_id, approved=True, by="telegram:7", reason="ok")
    assert not approvals.decide(approval_id, approved=False, by="timeout")  # the first answer stands
    approvals.record_results(approval_id, '{"call_1": "deleted"}')
    row = approvals.get(approval_id)
    assert row is not None
    assert (row.state, row.decided_by, row.reason, row.decided_at) == (
        ApprovalState.APPROVED,
        "telegram:7",
        "ok",
        clock(),
    )
    assert row.results == '{"call_1": "deleted"}'
    assert approvals.pending() == []
    assert approvals.open_in(session_id) == row  # decided, but its turn has not continued yet
    assert approvals.resume(approval_id)
    assert not approvals.resume(approval_id)
    assert approvals.open_in(session_id) is None


def test_requests_go_with_their_session(store: StoreInterface, clock: FakeClock) -> None:
    session_id = _session(store)
    approvals = _approvals(store)
    approval_id = approvals.add(session_id, message_id="m1", source=SOURCE, calls=CALLS, expires_at=clock() + 60)
    store.delete_session(session_id)
    assert approvals.get(approval_id) is None


def test_overdue_requests_are_the_pending_ones_past_their_deadline_whose_timer_is_set(
    store: StoreInterface, clock: FakeClock
) -> None:
    session_id = _session(store)
    approvals = _approvals(store)
    ids = [
        approvals.add(session_id, message_id=f"m{n}", source=SOURCE, calls=CALLS, expires_at=clock() + 60)
        for n in range(4)
    ]
    for approval_id in ids:
        store.timers.set(f"approval:{approval_id}", clock() + 60)
    assert approvals.overdue(clock(), timer_prefix="approval:") == []  # not yet
    clock.advance(60)
    assert approvals.decide(ids[1], approved=True, by="telegram:7")  # answered in time
    assert store.timers.cancel(f"approval:{ids[2]}")  # its denial was queued
    overdue = approvals.overdue(clock(), timer_prefix="approval:")
    assert [row.id for row in overdue] == [ids[0], ids[3]]
    assert [row.id for row in approvals.overdue(clock(), timer_prefix="approval:", limit=1)] == [ids[0]]
    assert approvals.overdue(clock(), timer_prefix="other:") == []
