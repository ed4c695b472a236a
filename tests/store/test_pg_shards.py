"""Shards and their leases in PostgreSQL (hermes_actors.store.pg.shards, shard_queue), on the throw-away cluster."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from hermes_actors.errors import LeaseLostError, ShardLostError
from hermes_actors.ids import SessionKind, is_session_id
from hermes_actors.store import InboxState
from hermes_actors.store.pg import PostgresStore
from hermes_actors.store.pg.shard_queue import InboxListener, Notices
from hermes_actors.store.pg.shards import ShardFence, home_shards, new_session_id_in, shard_of
from hermes_actors.store.sql import tracing

TTL = 10.0


class Skew:
    """Seconds added to the database clock: a store whose skew is ahead sees every term as that much older."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self) -> float:
        return self.seconds


@pytest.fixture
def skew() -> Skew:
    return Skew()


@pytest.fixture
def shard_store(postgres_dsn: str, skew: Skew) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, lease_skew=skew, migrate_schema=False) as store:
        store.shards.ensure(8)
        yield store


def test_a_session_s_shard_is_the_first_8_bytes_of_its_sha256_modulo_the_shard_count() -> None:
    # sha256(b"20250101_000000_abcdef")[:8] as a big-endian integer, worked out once and pinned: a change of the
    # function would move every session of a running cluster to another shard.
    assert shard_of("20250101_000000_abcdef", 256) == shard_of("20250101_000000_abcdef", 256)
    assert shard_of("a", 2**64) == 0xCA978112CA1BBDCA
    assert shard_of("a", 256) == 0xCA
    assert {shard_of(f"s{i}", 4) for i in range(100)} == {0, 1, 2, 3}


def test_a_new_session_id_drawn_for_a_shard_lands_in_it_and_keeps_the_id_s_shape() -> None:
    drawn = [new_session_id_in(shard, 256) for shard in range(256)]
    assert [shard_of(session_id, 256) for session_id in drawn] == list(range(256))
    assert all(is_session_id(session_id) and len(session_id.rsplit("_", 1)[1]) == 8 for session_id in drawn)
    assert len(set(drawn)) == 256
    terminal = new_session_id_in(5, 16, SessionKind.CLI)
    assert is_session_id(terminal)
    assert len(terminal.rsplit("_", 1)[1]) == 6
    assert shard_of(terminal, 16) == 5


def test_home_shards_split_every_shard_once_and_a_removed_host_moves_only_its_own() -> None:
    hosts = ["h0", "h1", "h2"]
    homes = {h: home_shards(h, hosts, 256) for h in hosts}
    assert sorted(s for shards in homes.values() for s in shards) == list(range(256))
    assert all(40 < len(shards) < 130 for shards in homes.values())
    after = {h: home_shards(h, ["h0", "h1"], 256) for h in ("h0", "h1")}
    assert after["h0"] >= homes["h0"]
    assert after["h1"] >= homes["h1"]


def test_free_shards_are_taken_at_epoch_1_and_a_held_shard_is_not_taken(shard_store: PostgresStore) -> None:
    assert shard_store.shards.acquire("a", [0, 1], TTL) == {0: 1, 1: 1}
    assert shard_store.shards.acquire("b", [1, 2], TTL) == {2: 1}
    assert shard_store.shards.expired() == [3, 4, 5, 6, 7]
    by_shard = {lease.shard: lease for lease in shard_store.shards.leases()}
    assert by_shard[1].holder == "a"
    assert 0 < by_shard[1].remaining_s <= TTL
    assert by_shard[5].holder is None


def test_an_expired_shard_is_stolen_under_a_new_epoch_and_the_old_holder_cannot_renew_it(
    shard_store: PostgresStore, skew: Skew
) -> None:
    shard_store.shards.acquire("a", [0, 1], TTL)
    assert shard_store.shards.renew("a", {0: 1, 1: 1}, TTL) == {0: 1, 1: 1}
    skew.seconds = TTL + 1  # both terms have run out by the database clock
    assert shard_store.shards.renew("a", {0: 1, 1: 1}, TTL) == {}  # an expired term is taken again, not renewed
    assert shard_store.shards.acquire("b", [0], TTL) == {0: 2}
    assert shard_store.shards.acquire("a", [1], TTL) == {1: 2}
    assert shard_store.shards.renew("a", {0: 1, 1: 2}, TTL) == {1: 2}
    with pytest.raises(ShardLostError, match="no longer holds shard 0 at epoch 1"):
        shard_store.shards.check(0, "a", 1)
    shard_store.shards.check(0, "b", 2)


def test_a_released_shard_is_free_at_once_and_only_its_holder_releases_it(shard_store: PostgresStore) -> None:
    shard_store.shards.acquire("a", [0, 1], TTL)
    assert shard_store.shards.release("b", {0: 1}) == 0
    assert shard_store.shards.release("a", {0: 1}) == 1
    assert shard_store.shards.acquire("b", [0, 1], TTL) == {0: 2}


def test_a_stale_holder_s_turn_commit_is_refused_and_rolled_back(shard_store: PostgresStore, skew: Skew) -> None:
    session = shard_store.create_session("telegram", session_id="s-1")
    shard = shard_of(session.id, 8)
    inbox_id = shard_store.inbox.add(
        platform="telegram", account_id="", platform_message_id="m1", routing_key="k", payload=b"{}"
    )
    assert inbox_id is not None
    fence = ShardFence("a", 8)
    fence.grant(shard_store.shards.acquire("a", [shard], TTL), TTL, asked_at=float("inf"))  # no local deadline
    shard_store.fence_shards(fence)
    skew.seconds = TTL + 1
    assert shard_store.shards.acquire("b", [shard], TTL) == {shard: 2}

    def turn() -> None:
        with shard_store.transaction():
            shard_store.append_messages(session.id, [])
            shard_store.inbox.complete(inbox_id, session_id=session.id)

    with pytest.raises(ShardLostError):
        turn()
    with pytest.raises(ShardLostError):
        shard_store.leases.grant(session.id, "a", TTL)
    with pytest.raises(ShardLostError):  # outside a transaction too: the completion is not left committed
        shard_store.inbox.complete(inbox_id, session_id=session.id)
    assert shard_store.inbox.pending_among([inbox_id]) == {inbox_id}
    shard_store.fence_shards(None)


def test_the_holder_s_commit_goes_through_and_the_test_switch_lets_a_stale_one_through(
    shard_store: PostgresStore, skew: Skew
) -> None:
    session = shard_store.create_session("telegram", session_id="s-2")
    shard = shard_of(session.id, 8)
    first, second = (
        shard_store.inbox.add(platform="t", account_id="", platform_message_id=m, routing_key="k", payload=b"")
        for m in ("m1", "m2")
    )
    assert first is not None
    assert second is not None
    fence = ShardFence("a", 8)
    fence.grant(shard_store.shards.acquire("a", [shard], TTL), TTL, asked_at=float("inf"))
    shard_store.fence_shards(fence)
    assert shard_store.leases.grant(session.id, "a", TTL) == 1
    with shard_store.transaction():
        assert shard_store.inbox.complete(first, session_id=session.id)
    skew.seconds = TTL + 1
    shard_store.shards.acquire("b", [shard], TTL)
    fence.enabled = False  # the fault test's switch: nothing is checked
    with shard_store.transaction():
        assert shard_store.inbox.complete(second, session_id=session.id)
    shard_store.fence_shards(None)


def test_a_host_fences_itself_once_its_local_deadline_passes_without_asking_the_database() -> None:
    now = [100.0]
    fence = ShardFence("a", 8, monotonic=lambda: now[0])
    fence.grant({3: 7}, TTL, asked_at=95.0)
    assert fence.held() == {3: 7}
    now[0] = 105.0
    assert fence.held() == {}

    class Unreachable:
        def check(self, shard: int, holder: str, epoch: int) -> None:
            raise AssertionError("the database is not asked after the local deadline")

    session = next(f"s{i}" for i in range(100) if shard_of(f"s{i}", 8) == 3)
    with pytest.raises(ShardLostError, match="its term ran out locally"):
        fence.check(Unreachable(), session)  # type: ignore[arg-type]


def test_a_takeover_waits_for_a_turn_that_holds_the_shard_row(shard_store: PostgresStore, postgres_dsn: str) -> None:
    shard_store.shards.acquire("a", [0], 0.5)
    late = Skew()
    late.seconds = 5.0
    checked = threading.Event()
    commit = threading.Event()

    def turn() -> None:
        with shard_store.transaction():
            shard_store.shards.check(0, "a", 1)
            checked.set()
            commit.wait(10)

    with PostgresStore.open(postgres_dsn, lease_skew=late, migrate_schema=False) as other, ThreadPoolExecutor(2) as run:
        holding = run.submit(turn)
        assert checked.wait(10)
        taking = run.submit(other.shards.acquire, "b", [0], TTL)
        with pytest.raises(TimeoutError):
            taking.result(timeout=0.3)  # blocked on the turn's lock of the row (FOR KEY SHARE)
        commit.set()
        holding.result(timeout=10)
        assert taking.result(timeout=10) == {0: 2}


def test_the_holder_renews_and_releases_without_waiting_for_its_turns_and_a_commit_across_shards_cannot_deadlock(
    shard_store: PostgresStore, postgres_dsn: str
) -> None:
    """A group commit checks the shards of its turns one after another while the keeper renews them all in one
    statement. Were the renewal to wait for the turns' locks, it would hold shard 0's row while waiting for shard 1's,
    and the commit, holding 1's and asking for 0's, would deadlock with it (PostgreSQL aborts one after a second)."""
    shard_store.shards.acquire("a", [0, 1], TTL)
    first, second = threading.Event(), threading.Event()
    go_on = threading.Event()
    commit = threading.Event()

    def group_commit() -> None:
        with shard_store.transaction():
            shard_store.shards.check(1, "a", 1)
            first.set()
            go_on.wait(10)
            shard_store.shards.check(0, "a", 1)
            second.set()
            commit.wait(10)

    late = Skew()
    late.seconds = TTL + 5.0
    with PostgresStore.open(postgres_dsn, lease_skew=late, migrate_schema=False) as other, ThreadPoolExecutor(3) as run:
        holding = run.submit(group_commit)
        assert first.wait(10)
        renewed = run.submit(shard_store.shards.renew, "a", {0: 1, 1: 1}, TTL)
        assert renewed.result(timeout=2) == {0: 1, 1: 1}  # at once: it waits for no turn
        go_on.set()  # the commit asks for shard 0's row, which the renewal has long let go of
        assert second.wait(2)
        assert shard_store.shards.release("a", {0: 1}) == 1  # a release does not wait for the turns either
        taking = run.submit(other.shards.acquire, "b", [0, 1], TTL)  # b sees both terms as expired
        with pytest.raises(TimeoutError):
            taking.result(timeout=0.3)  # but a takeover does: the turns in flight commit first
        commit.set()
        holding.result(timeout=10)
        assert taking.result(timeout=10) == {0: 2, 1: 2}


def _failing_write(store: PostgresStore) -> None:
    """A write of a group commit that checks shard 0 in its savepoint and then fails."""
    with store.transaction():
        store.shards.check(0, "a", 1)
        raise RuntimeError("a write of the batch failed")


def test_a_transaction_checks_a_shard_in_the_database_once_until_a_savepoint_rolls_back(
    shard_store: PostgresStore, skew: Skew
) -> None:
    shard_store.shards.acquire("a", [0], TTL)
    asked: list[str] = []
    execute = shard_store.database.execute

    def counting(sql: str, params: object = None, *, keyed: bool = False) -> list[tuple[object, ...]]:
        if "FROM shard_leases" in sql:
            asked.append(sql)
        return execute(sql, params, keyed=keyed)  # type: ignore[arg-type]

    shard_store.database.execute = counting  # type: ignore[method-assign]
    with shard_store.transaction():
        shard_store.shards.check(0, "a", 1)
        shard_store.shards.check(0, "a", 1)  # the row is held until the transaction ends: not asked again
        assert len(asked) == 1
        with pytest.raises(RuntimeError):
            _failing_write(shard_store)  # its savepoint rolls back: the lock may be gone with it
        skew.seconds = TTL + 1.0  # the term has run out meanwhile: the database must be asked again
        with pytest.raises(ShardLostError):
            shard_store.shards.check(0, "a", 1)
    assert len(asked) == 2
    with shard_store.transaction():  # a new transaction asks again
        skew.seconds = 0.0
        shard_store.shards.check(0, "a", 1)
    assert len(asked) == 3


def test_a_turn_s_fence_checks_its_shard_inside_its_lease_renewal_and_names_the_term_lost(
    shard_store: PostgresStore, skew: Skew
) -> None:
    session = shard_store.create_session("telegram", session_id="s-guarded")
    shard = shard_of(session.id, 8)
    inbox_id = shard_store.inbox.add(
        platform="telegram", account_id="", platform_message_id="m-guarded", routing_key="k", payload=b"{}"
    )
    assert inbox_id is not None
    fence = ShardFence("a", 8)
    fence.grant(shard_store.shards.acquire("a", [shard], TTL), TTL, asked_at=float("inf"))
    shard_store.fence_shards(fence)
    asked: list[str] = []
    execute = shard_store.database.execute

    def recording(sql: str, params: object = None, *, keyed: bool = False) -> list[tuple[object, ...]]:
        if "shard_leases" in sql:
            asked.append(sql)
        return execute(sql, params, keyed=keyed)  # type: ignore[arg-type]

    try:
        epoch = shard_store.leases.grant(session.id, "owner", TTL)
        assert isinstance(epoch, int)
        shard_store.database.execute = recording  # type: ignore[method-assign]
        with shard_store.transaction():
            shard_store.leases.fence(session.id, "owner", epoch, TTL)
            assert shard_store.inbox.complete(inbox_id, session_id=session.id)  # the shard's row is held: not asked
        assert len(asked) == 1
        assert "UPDATE leases" in asked[0]  # one statement: the renewal carries the shard's check
        with pytest.raises(LeaseLostError), shard_store.transaction():
            shard_store.leases.fence(session.id, "owner", epoch + 1, TTL)
        skew.seconds = TTL + 1
        assert shard_store.shards.acquire("b", [shard], TTL) == {shard: 2}
        refusals = fence.refusals
        with pytest.raises(ShardLostError), shard_store.transaction():
            shard_store.leases.fence(session.id, "owner", epoch, TTL)  # both terms have run out: the shard's told
        assert fence.refusals == refusals + 1
    finally:
        shard_store.database.execute = execute  # type: ignore[method-assign]
        shard_store.fence_shards(None)


def _guarded(shard_store: PostgresStore, session_id: str, *messages: str) -> tuple[ShardFence, int, list[int]]:
    """Hold ``session_id``'s shard as host "a" (no local deadline), its lease as "owner", and add ``messages``."""
    fence = ShardFence("a", 8)
    fence.grant(shard_store.shards.acquire("a", [shard_of(session_id, 8)], TTL), TTL, asked_at=float("inf"))
    shard_store.fence_shards(fence)
    epoch = shard_store.leases.grant(session_id, "owner", TTL)
    assert isinstance(epoch, int)
    added = [
        shard_store.inbox.add(platform="t", account_id="", platform_message_id=m, routing_key="k", payload=b"")
        for m in messages
    ]
    return fence, epoch, [i for i in added if i is not None]


def test_a_turn_s_rows_are_completed_in_its_fence_s_own_statement(shard_store: PostgresStore) -> None:
    session = shard_store.create_session("telegram", session_id="s-fenced")
    _, epoch, (first, second, answered) = _guarded(shard_store, session.id, "m1", "m2", "m3")
    shard_store.inbox.complete(answered, session_id=session.id)  # another turn's already
    completion = shard_store.inbox.completion([first, second, answered], session_id=session.id)
    try:
        with tracing(shard_store.sql) as trace, shard_store.transaction():
            shard_store.leases.fence(session.id, "owner", epoch, TTL, then=[completion])
        sent = [sql for sql, _ in trace.statements if sql not in ("BEGIN", "SAVEPOINT")]
        (statement,) = sent  # one statement: the shard's check, the lease's renewal and the rows' completion
        assert "UPDATE leases" in statement
        assert "UPDATE inbox" in statement
        assert completion.done == {first, second}
        assert shard_store.inbox.pending_among([first, second, answered]) == set()
        rows = shard_store.database.execute("SELECT session_id FROM inbox WHERE id = ANY(%s)", ([first, second],))
        assert rows == [(session.id,), (session.id,)]
    finally:
        shard_store.fence_shards(None)


def test_a_fence_whose_lease_or_shard_was_lost_completes_nothing(shard_store: PostgresStore, skew: Skew) -> None:
    session = shard_store.create_session("telegram", session_id="s-lost")
    _, epoch, (row,) = _guarded(shard_store, session.id, "m1")
    try:
        completion = shard_store.inbox.completion([row], session_id=session.id)
        with pytest.raises(LeaseLostError), shard_store.transaction():
            shard_store.leases.fence(session.id, "owner", epoch + 1, TTL, then=[completion])
        assert completion.done == set()
        skew.seconds = TTL + 1
        assert shard_store.shards.acquire("b", [shard_of(session.id, 8)], TTL) == {shard_of(session.id, 8): 2}
        with pytest.raises(ShardLostError), shard_store.transaction():
            shard_store.leases.fence(session.id, "owner", epoch, TTL, then=[completion])
        assert completion.done == set()
        assert shard_store.inbox.pending_among([row]) == {row}
    finally:
        shard_store.fence_shards(None)


def _gathered(listener: InboxListener, expected: set[int], timeout_s: float = 5.0) -> set[int]:
    """The shards ``listener`` is notified of (with a row or without) until ``expected`` have all come or
    ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    seen: set[int] = set()
    while not expected <= seen and (left := deadline - time.monotonic()) > 0:
        notices = listener.wait(left)
        seen |= notices.shards | {shard for shard, _, _ in notices.rows}
    return seen


def _rows_notified(listener: InboxListener, count: int, timeout_s: float = 5.0) -> Notices:
    """What ``listener`` is notified of until ``count`` notifications came or ``timeout_s`` has passed."""
    return _notified_until(listener, lambda got: len(got.rows) + len(got.shards) >= count, timeout_s)


def _notified_until(
    listener: InboxListener,
    done: Callable[[Notices], bool],
    timeout_s: float = 5.0,
    wanted: Callable[[int], bool] | None = None,
) -> Notices:
    """What ``listener`` is notified of (rows of the shards ``wanted``) until ``done`` says so or ``timeout_s``
    has passed."""
    deadline = time.monotonic() + timeout_s
    gathered = Notices()
    while not done(gathered) and (left := deadline - time.monotonic()) > 0:
        notices = listener.wait(left, wanted=wanted)
        gathered.rows.extend(notices.rows)
        gathered.shards.update(notices.shards)
    return gathered


def test_the_shard_queue_notifies_the_listener_and_pulls_pending_rows_by_shard(
    shard_store: PostgresStore, postgres_dsn: str
) -> None:
    listener = InboxListener(postgres_dsn)
    try:
        queue = shard_store.shard_queue
        first = queue.add(3, platform="t", account_id="", platform_message_id="m1", routing_key="k", payload=b"x")
        assert (
            queue.add(3, platform="t", account_id="", platform_message_id="m1", routing_key="k", payload=b"x") is None
        )
        second = queue.add(5, platform="t", account_id="", platform_message_id="m2", routing_key="j", payload=b"y")
        # Each add commits its own NOTIFY: the second may reach the listener after a wait already returned the first.
        assert _gathered(listener, {3, 5}) == {3, 5}
        assert listener.wait(0.05) == Notices()
        assert [(s, row.id) for s, row in queue.pending([3])] == [(3, first)]
        assert [row.id for _, row in queue.pending([3, 5, 7])] == [first, second]
        assert [(lag.shard, lag.pending) for lag in queue.lag()] == [(3, 1), (5, 1)]
        assert second is not None
        assert queue.reshard(second, 3)
        assert listener.wait(5.0) == Notices(shards={3})
        assert shard_store.inbox.complete(second, session_id=None, state=InboxState.DONE)
        assert not queue.reshard(second, 4)
        assert [(lag.shard, lag.pending) for lag in queue.lag()] == [(3, 1)]
    finally:
        listener.close()


def test_a_message_added_by_its_key_goes_to_the_shard_of_the_key_s_route_else_of_the_key_in_one_statement(
    shard_store: PostgresStore, postgres_dsn: str
) -> None:
    shard_store.create_session("t", session_id="s-routed-1")
    shard_store.set_route("routed-key", "s-routed-1")
    listener = InboxListener(postgres_dsn)
    try:
        queue = shard_store.shard_queue
        keys = ["routed-key", *(f"key-{n}" for n in range(40))]
        added = {
            key: queue.add_routed(
                64, platform="t", account_id="", platform_message_id=f"m-{key}", routing_key=key, payload=b"x"
            )
            for key in keys
        }
        assert added["routed-key"] is not None
        assert added["routed-key"][1] == shard_of("s-routed-1", 64)
        for key in keys[1:]:
            found = added[key]
            assert found is not None
            assert found[1] == shard_of(key, 64)
        redelivered = queue.add_routed(
            64, platform="t", account_id="", platform_message_id="m-key-0", routing_key="key-0", payload=b"x"
        )
        assert redelivered is None
        shards = {found[1] for found in added.values() if found is not None}
        assert _gathered(listener, shards) == shards
        assert [row.id for _, row in queue.pending(sorted(shards), limit=100)] == sorted(
            found[0] for found in added.values() if found is not None
        )
    finally:
        listener.close()


def test_a_message_s_notification_carries_its_row_as_a_pull_reads_it_unless_the_row_is_too_large(
    shard_store: PostgresStore, postgres_dsn: str
) -> None:
    shard_store.create_session("t", session_id="s-told-1")
    shard_store.set_route("told-key", "s-told-1")
    listener = InboxListener(postgres_dsn)
    try:
        queue = shard_store.shard_queue
        payloads = {"told-key": bytes(range(256)) * 3, "new-key": b"\x00\n'\"[", "big-key": b"z" * 6000}
        added = {
            key: queue.add_routed(
                64, platform="t", account_id="acc", platform_message_id=f"m-{key}", routing_key=key, payload=payload
            )
            for key, payload in payloads.items()
        }
        notices = _rows_notified(listener, 3)
        whole = {row.routing_key: (shard, row, route) for shard, row, route in notices.rows}
        assert set(whole) == {"told-key", "new-key"}
        big = added["big-key"]
        assert big is not None
        assert notices.shards == {big[1]}  # too large to ride along: the holder pulls it
        _, read = queue.pull(sorted({found[1] for found in added.values() if found is not None}))
        pulled = {row.routing_key: (shard, row, route) for shard, row, route in read}
        for key in ("told-key", "new-key"):
            assert whole[key] == pulled[key]
            assert whole[key][1].payload == payloads[key]
        assert whole["told-key"][2] == "s-told-1"
        assert whole["new-key"][2] is None
    finally:
        listener.close()


def test_a_listener_leaves_out_the_rows_of_shards_it_does_not_want_and_still_hears_of_bare_shards(
    shard_store: PostgresStore, postgres_dsn: str
) -> None:
    """A host decodes only the rows of the shards it holds (``wanted``); a bare shard notice is always passed on."""
    listener = InboxListener(postgres_dsn)
    try:
        queue = shard_store.shard_queue
        shards = {
            key: found[1]
            for key in ("w-1", "w-2", "w-3", "w-4")
            if (
                found := queue.add_routed(
                    64, platform="t", account_id="", platform_message_id=f"m-{key}", routing_key=key, payload=b"p"
                )
            )
            is not None
        }
        kept = shards["w-1"]
        big = queue.add_routed(
            64, platform="t", account_id="", platform_message_id="m-big", routing_key="w-big", payload=b"z" * 6000
        )
        assert big is not None
        asked: list[int] = []

        def wanted(shard: int) -> bool:
            asked.append(shard)
            return shard == kept

        gathered = _notified_until(listener, lambda got: big[1] in got.shards, wanted=wanted)
        assert sorted(asked) == sorted(shards.values())  # asked once per row notice, never of the bare one
        assert {row.routing_key for _, row, _ in gathered.rows} == {k for k, s in shards.items() if s == kept}
        assert gathered.shards == {big[1]}
    finally:
        listener.close()


def test_a_pull_learns_the_pending_ids_then_reads_the_new_rows_with_their_key_s_route(
    shard_store: PostgresStore,
) -> None:
    queue = shard_store.shard_queue
    shard_store.create_session("fake", session_id="s1")
    shard_store.set_route("k1", "s1")
    added = [
        queue.add(shard, platform="fake", account_id="", platform_message_id=f"m{n}", routing_key=key, payload=b"{}")
        for n, (shard, key) in enumerate([(1, "k1"), (2, "k2"), (1, "k1"), (3, "k3")])
    ]
    ids = [i for i in added if i is not None]
    assert queue.pending_ids([1, 2]) == [ids[0], ids[1], ids[2]]
    assert queue.pending_ids([]) == []
    shard_store.inbox.complete(ids[2], session_id="s1")
    # One statement: every pending id, only the rows not known yet whole, each with its key's route.
    pending, whole = queue.pull([1, 2, 3], known=[ids[0]])
    assert pending == [ids[0], ids[1], ids[3]]
    assert [(shard, row.id, route) for shard, row, route in whole] == [(2, ids[1], None), (3, ids[3], None)]
    pending, whole = queue.pull([1], known=[])
    assert (pending, [(shard, row.id, route) for shard, row, route in whole]) == ([ids[0]], [(1, ids[0], "s1")])
    assert whole[0][1].routing_key == "k1"
    assert queue.pull([], known=[]) == ([], [])
