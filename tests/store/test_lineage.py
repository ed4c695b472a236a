from __future__ import annotations

import pytest

from hermes_actors.errors import SessionNotFoundError
from hermes_actors.store import EndReason, Store, StoreInterface
from hermes_actors.store.lineage import lineage_chain, lineage_root, lineage_tip
from hermes_actors.testing import FakeClock


def start(store: StoreInterface, clock: FakeClock, parent: str | None = None) -> str:
    clock.advance(60)
    return store.create_session("telegram", parent_session_id=parent).id


def compress(store: StoreInterface, clock: FakeClock, session_id: str) -> str:
    """End ``session_id`` by compression and return its continuing child."""
    store.end_session(session_id, EndReason.COMPRESSION)
    return start(store, clock, parent=session_id)


@pytest.fixture
def lineage(store: StoreInterface, clock: FakeClock) -> list[str]:
    first = start(store, clock)
    second = compress(store, clock, first)
    third = compress(store, clock, second)
    return [first, second, third]


def test_every_member_of_a_lineage_finds_the_same_root_tip_and_chain(store: StoreInterface, lineage: list[str]) -> None:
    for member in lineage:
        assert store.lineage_root(member) == lineage[0]
        assert store.lineage_tip(member) == lineage[2]
        assert store.lineage_chain(member) == lineage


def test_a_session_without_relatives_is_its_own_lineage(store: StoreInterface, clock: FakeClock) -> None:
    alone = start(store, clock)

    assert store.lineage_root(alone) == alone
    assert store.lineage_tip(alone) == alone
    assert store.lineage_chain(alone) == [alone]


def test_a_child_of_a_parent_that_ended_otherwise_starts_its_own_lineage(
    store: StoreInterface, clock: FakeClock, lineage: list[str]
) -> None:
    store.end_session(lineage[2], EndReason.NEW_SESSION)
    branched = start(store, clock, parent=lineage[2])

    assert store.lineage_root(branched) == branched
    assert store.lineage_chain(branched) == [branched]
    assert store.lineage_tip(lineage[0]) == lineage[2]
    assert store.lineage_chain(lineage[1]) == lineage


def test_the_newest_child_of_a_compressed_session_continues_it(store: StoreInterface, clock: FakeClock) -> None:
    parent = start(store, clock)
    older = compress(store, clock, parent)
    newer = start(store, clock, parent=parent)

    assert store.lineage_tip(parent) == newer
    assert store.lineage_root(older) == parent
    assert store.lineage_chain(parent) == [parent, newer]
    assert store.lineage_chain(older) == [parent, older]


def test_a_parent_cycle_ends_the_walk_instead_of_hanging(sqlite_store: Store, lineage: list[str]) -> None:
    first, second, third = lineage
    sqlite_store.end_session(third, EndReason.COMPRESSION)
    sqlite_store._connection.execute("UPDATE sessions SET parent_session_id = ? WHERE id = ?", (third, first))

    assert lineage_chain(sqlite_store, second) == [third, first, second]
    assert lineage_root(sqlite_store, second) == third
    assert lineage_tip(sqlite_store, second) == first


def test_an_unknown_id_raises(store: StoreInterface) -> None:
    for helper in (store.lineage_root, store.lineage_tip, store.lineage_chain):
        with pytest.raises(SessionNotFoundError, match="no session has id 'nope'"):
            helper("nope")
