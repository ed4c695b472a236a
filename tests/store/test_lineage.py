from __future__ import annotations

import pytest

from hermes_actors.errors import SessionNotFoundError
from hermes_actors.store import EndReason, Store
from hermes_actors.store.lineage import lineage_chain, lineage_root, lineage_tip
from hermes_actors.testing import FakeClock


def start(store: Store, clock: FakeClock, parent: str | None = None) -> str:
    clock.advance(60)
    return store.create_session("telegram", parent_session_id=parent).id


def compress(store: Store, clock: FakeClock, session_id: str) -> str:
    """End ``session_id`` by compression and return its continuing child."""
    store.end_session(session_id, EndReason.COMPRESSION)
    return start(store, clock, parent=session_id)


@pytest.fixture
def lineage(store: Store, clock: FakeClock) -> list[str]:
    first = start(store, clock)
    second = compress(store, clock, first)
    third = compress(store, clock, second)
    return [first, second, third]


def test_every_member_of_a_lineage_finds_the_same_root_tip_and_chain(store: Store, lineage: list[str]) -> None:
    for member in lineage:
        assert lineage_root(store, member) == lineage[0]
        assert lineage_tip(store, member) == lineage[2]
        assert lineage_chain(store, member) == lineage


def test_a_session_without_relatives_is_its_own_lineage(store: Store, clock: FakeClock) -> None:
    alone = start(store, clock)

    assert lineage_root(store, alone) == alone
    assert lineage_tip(store, alone) == alone
    assert lineage_chain(store, alone) == [alone]


def test_a_child_of_a_parent_that_ended_otherwise_starts_its_own_lineage(
    store: Store, clock: FakeClock, lineage: list[str]
) -> None:
    store.end_session(lineage[2], EndReason.NEW_SESSION)
    branched = start(store, clock, parent=lineage[2])

    assert lineage_root(store, branched) == branched
    assert lineage_chain(store, branched) == [branched]
    assert lineage_tip(store, lineage[0]) == lineage[2]
    assert lineage_chain(store, lineage[1]) == lineage


def test_the_newest_child_of_a_compressed_session_continues_it(store: Store, clock: FakeClock) -> None:
    parent = start(store, clock)
    older = compress(store, clock, parent)
    newer = start(store, clock, parent=parent)

    assert lineage_tip(store, parent) == newer
    assert lineage_root(store, older) == parent
    assert lineage_chain(store, parent) == [parent, newer]
    assert lineage_chain(store, older) == [parent, older]


def test_a_parent_cycle_ends_the_walk_instead_of_hanging(store: Store, lineage: list[str]) -> None:
    first, second, third = lineage
    store.end_session(third, EndReason.COMPRESSION)
    store._connection.execute("UPDATE sessions SET parent_session_id = ? WHERE id = ?", (third, first))

    assert lineage_chain(store, second) == [third, first, second]
    assert lineage_root(store, second) == third
    assert lineage_tip(store, second) == first


def test_an_unknown_id_raises(store: Store) -> None:
    for helper in (lineage_root, lineage_tip, lineage_chain):
        with pytest.raises(SessionNotFoundError, match="no session has id 'nope'"):
            helper(store, "nope")
