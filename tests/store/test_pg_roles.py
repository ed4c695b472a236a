"""Role leases in PostgreSQL (hermes_actors.store.pg.roles) and a replica's term of one (cluster.roles.RoleTerm)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import pytest

from hermes_actors.cluster.replica.roles import RoleTerm
from hermes_actors.errors import RoleLostError
from hermes_actors.store.pg import PostgresStore
from tests.store.test_pg_shards import Skew

TTL = 10.0
ROLE = "adapter:telegram:main"


@pytest.fixture
def skew() -> Skew:
    return Skew()


@pytest.fixture
def roles_store(postgres_dsn: str, skew: Skew) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, lease_skew=skew, migrate_schema=False) as store:
        yield store


def test_a_free_role_is_taken_at_epoch_1_and_a_held_one_is_not(roles_store: PostgresStore) -> None:
    roles = roles_store.roles
    assert roles.acquire(ROLE, "a", TTL) == 1
    assert roles.acquire(ROLE, "b", TTL) is None
    assert roles.acquire(ROLE, "a", TTL) is None  # not even by its holder: it renews
    assert roles.renew(ROLE, "a", 1, TTL)
    assert not roles.renew(ROLE, "b", 1, TTL)
    assert roles.acquire("send:telegram", "b", TTL) == 1  # another role is another row
    [lease, _] = roles.leases()
    assert (lease.role, lease.holder, lease.epoch) == (ROLE, "a", 1)
    assert 0 < lease.remaining_s <= TTL


def test_an_expired_role_is_taken_under_a_new_epoch_and_the_old_holder_can_neither_renew_nor_check(
    roles_store: PostgresStore, skew: Skew
) -> None:
    roles = roles_store.roles
    assert roles.acquire(ROLE, "a", TTL) == 1
    skew.seconds = TTL + 1  # the database clock moved past a's term
    assert not roles.renew(ROLE, "a", 1, TTL)  # expired: must be acquired again, like by anyone
    assert roles.acquire(ROLE, "b", TTL) == 2
    with (
        pytest.raises(RoleLostError, match="no longer holds the role adapter:telegram:main at epoch 1"),
        roles_store.transaction(),
    ):
        roles.check(ROLE, "a", 1)
    with roles_store.transaction():
        roles.check(ROLE, "b", 2)
    assert not roles.release(ROLE, "a", 1)  # a stale release frees nothing
    assert roles.leases()[0].holder == "b"


def test_a_released_role_is_free_at_once(roles_store: PostgresStore) -> None:
    roles = roles_store.roles
    assert roles.acquire(ROLE, "a", TTL) == 1
    assert roles.release(ROLE, "a", 1)
    assert roles.leases()[0].remaining_s == float("-inf")
    assert roles.acquire(ROLE, "b", TTL) == 2


@contextlib.contextmanager
def _a_write_in_flight(store: PostgresStore) -> Iterator[threading.Event]:
    """A transaction of holder ``a`` (epoch 1) that has checked its role and waits to commit until the event
    yielded is set (at the latest when the block ends)."""
    checked, release = threading.Event(), threading.Event()

    def commit() -> None:
        with store.transaction():
            store.roles.check(ROLE, "a", 1)
            checked.set()
            release.wait(5)

    worker = threading.Thread(target=commit)
    worker.start()
    try:
        assert checked.wait(5)
        yield release
    finally:
        release.set()
        worker.join(5)


def test_a_takeover_waits_for_a_commit_that_holds_the_role_row(roles_store: PostgresStore, skew: Skew) -> None:
    roles = roles_store.roles
    assert roles.acquire(ROLE, "a", 1.0) == 1
    taken: list[int | None] = []
    with _a_write_in_flight(roles_store) as release:
        skew.seconds = 2.0
        taker = threading.Thread(target=lambda: taken.append(roles.acquire(ROLE, "b", TTL)))
        taker.start()
        taker.join(timeout=0.3)
        assert taker.is_alive()  # blocked on the row the commit holds
        assert taken == []
        release.set()
    taker.join(5)
    assert taken == [2]


def test_the_holder_renews_its_term_without_waiting_for_its_writes_in_flight(roles_store: PostgresStore) -> None:
    """A send role's writes overlap (a lane per chat): a renewal that waited for their locks could be starved."""
    roles = roles_store.roles
    assert roles.acquire(ROLE, "a", TTL) == 1
    renewed: list[bool] = []
    with _a_write_in_flight(roles_store):
        renewer = threading.Thread(target=lambda: renewed.append(roles.renew(ROLE, "a", 1, TTL)))
        renewer.start()
        renewer.join(timeout=2)
        assert renewed == [True]  # at once, while the write still holds the row


class Monotonic:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_term_fences_itself_at_its_local_deadline_without_asking_the_database(roles_store: PostgresStore) -> None:
    clock = Monotonic()
    term = RoleTerm(roles_store.roles, ROLE, "a", ttl_s=TTL, monotonic=clock)
    other = RoleTerm(roles_store.roles, ROLE, "b", ttl_s=TTL, monotonic=clock)
    assert term.keep()
    assert term.epoch() == 1
    assert not other.keep()
    assert other.epoch() is None
    with roles_store.transaction():
        term.check()
    clock.now += TTL  # by its own clock the term is over; the database's is not
    assert term.epoch() is None
    with pytest.raises(RoleLostError, match="ran out locally"), roles_store.transaction():
        term.check()
    assert not term.keep()  # it asks to take the role again: still held in the database (by a's old term)
    term.release()  # nothing held locally, nothing released
    assert roles_store.roles.leases()[0].holder == "a"


def test_a_released_term_lets_the_other_replica_take_over_at_once(roles_store: PostgresStore) -> None:
    term = RoleTerm(roles_store.roles, ROLE, "a", ttl_s=TTL)
    other = RoleTerm(roles_store.roles, ROLE, "b", ttl_s=TTL)
    assert term.keep()
    term.release()
    assert term.epoch() is None
    assert other.keep()
    assert other.epoch() == 2
    assert other.keep()
    assert other.epoch() == 2
