"""The lease engine (hermes_actors.store.terms): one release rule for shards and roles, the session leases' declared
difference (an owner renews its own expired lease while no one took it), on both stores, and the local deadlines a
holder keeps."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_actors.errors import LeaseLostError
from hermes_actors.store import Store, StoreInterface
from hermes_actors.store.held_terms import HeldTerms
from hermes_actors.store.pg import PostgresStore
from hermes_actors.testing import FakeClock

TTL = 10.0


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as store:
        yield store


def test_a_released_shard_and_a_released_role_both_end_at_the_database_s_now(pg: PostgresStore) -> None:
    pg.shards.ensure(2)
    assert pg.shards.acquire("a", [0], TTL) == {0: 1}
    assert pg.roles.acquire("send:fake", "a", TTL) == 1
    assert pg.shards.release("a", {0: 1}) == 1
    assert pg.roles.release("send:fake", "a", 1)
    rows = pg.database.execute(
        "SELECT holder, extract(epoch FROM clock_timestamp() - expires_at) FROM shard_leases WHERE shard = 0 "
        "UNION ALL SELECT holder, extract(epoch FROM clock_timestamp() - expires_at) FROM role_leases"
    )
    assert [holder for holder, _ in rows] == [None, None]
    assert all(0 <= float(ago) < 5 for _, ago in rows)  # ended now, not at -infinity
    [shard] = [lease for lease in pg.shards.leases() if lease.shard == 0]
    assert -5 < shard.remaining_s <= 0  # the grace period counts from the release
    assert pg.roles.leases()[0].remaining_s == float("-inf")  # a role no one holds
    assert pg.shards.acquire("b", [0], TTL) == {0: 2}
    assert pg.roles.acquire("send:fake", "b", TTL) == 2


def test_an_owner_renews_its_own_expired_session_lease_while_no_one_took_it(
    store: StoreInterface, clock: FakeClock
) -> None:
    store.create_session("telegram", session_id="s1")
    epoch = store.leases.grant("s1", "a", TTL)
    assert isinstance(epoch, int)
    clock.advance(TTL + 1)
    assert store.leases.holder("s1") is None  # expired: another owner could take it now
    assert store.leases.heartbeat("a", TTL) == 1
    assert store.leases.holder("s1") == "a"
    clock.advance(TTL + 1)
    assert store.leases.grant("s1", "a", TTL) == epoch  # the same tenure
    store.leases.fence("s1", "a", epoch, TTL)
    assert store.leases.release("s1", "a")
    later = store.leases.grant("s1", "a", TTL)
    assert isinstance(later, int)
    assert later > epoch  # a new tenure once released: the epochs come from a counter that only grows


def test_held_terms_end_at_their_local_deadline_and_a_drop_returns_what_was_held() -> None:
    now = [100.0]
    ran_out: list[list[int]] = []
    terms = HeldTerms[int]("a", monotonic=lambda: now[0], on_expired=ran_out.append)
    terms.grant({1: 3, 2: 4}, TTL, asked_at=95.0)
    terms.grant({2: 4}, TTL, asked_at=99.0)  # a renewal sent later moves the deadline
    assert terms.held() == {1: 3, 2: 4}
    now[0] = 106.0
    assert terms.held() == {2: 4}
    assert ran_out == [[1]]
    assert terms.expired == 1
    now[0] = 200.0
    assert terms.drop([2, 7]) == {2: 4}  # even past its deadline, for a release
    assert terms.epoch(2) is None
    stalled = HeldTerms[str]("a", monotonic=lambda: now[0], enabled=False)
    stalled.grant({"r": 1}, TTL, asked_at=0.0)
    assert stalled.epoch("r") == 1  # fencing off (the fault test's switch): no deadline


def test_one_held_term_looked_up_past_its_deadline_is_forgotten_as_held_would() -> None:
    now = [100.0]
    ran_out: list[list[int]] = []
    terms = HeldTerms[int]("a", monotonic=lambda: now[0], on_expired=ran_out.append)
    terms.grant({1: 3}, TTL, asked_at=95.0)
    terms.grant({2: 4}, TTL, asked_at=99.0)
    assert terms.epoch(1) == 3
    assert terms.holds_any([9, 1])
    now[0] = 106.0  # 1's deadline (95 + TTL) has passed, 2's (99 + TTL) has not
    assert terms.epoch(2) == 4
    assert ran_out == []  # a term within its deadline looked up alone expires nothing
    assert terms.epoch(1) is None
    assert ran_out == [[1]]
    assert terms.expired == 1
    assert not terms.holds_any([1, 9])
    assert terms.held() == {2: 4}


def test_a_session_lease_check_seen_at_the_current_database_version_runs_no_statement(
    sqlite_store: Store, db_path: Path, clock: FakeClock
) -> None:
    store = sqlite_store
    epoch, seen = _checked_lease(store)
    ends = store.sql.value("SELECT expires_at FROM leases WHERE session_id = 's1'")
    clock.advance(1)
    with store.transaction():
        assert store.leases.fence("s1", "a", epoch, TTL, seen=seen) == seen
    # Answered without a statement: the lease was not extended (the heartbeat does that).
    assert store.sql.value("SELECT expires_at FROM leases WHERE session_id = 's1'") == ends
    with Store.open(db_path, clock=clock) as other:  # another process commits something, of any table
        other.create_session("telegram", session_id="s2")
    with store.transaction():
        again = store.leases.fence("s1", "a", epoch, TTL, seen=seen)
    assert isinstance(again, int)
    assert again != seen
    assert store.sql.value("SELECT expires_at FROM leases WHERE session_id = 's1'") == ends + 1  # checked and extended


def test_a_lease_taken_by_another_process_before_it_expired_fails_a_check_seen_before(
    sqlite_store: Store, db_path: Path, clock: FakeClock
) -> None:
    store = sqlite_store
    epoch, seen = _checked_lease(store)
    with Store.open(db_path, clock=clock) as other, other.transaction():  # it took "a" for dead
        assert other.leases.release("s1", "a")  # a holder of its host that is gone
        assert isinstance(other.leases.grant("s1", "b", TTL), int)
    with pytest.raises(LeaseLostError), store.transaction():
        store.leases.fence("s1", "a", epoch, TTL, seen=seen)


def _checked_lease(store: Store) -> tuple[int, int]:
    """Session "s1" leased to "a" and checked once in a committed transaction: its epoch and the version seen."""
    store.create_session("telegram", session_id="s1")
    epoch = store.leases.grant("s1", "a", TTL)
    assert isinstance(epoch, int)
    with store.transaction():
        seen = store.leases.fence("s1", "a", epoch, TTL)
    assert isinstance(seen, int)
    return epoch, seen
