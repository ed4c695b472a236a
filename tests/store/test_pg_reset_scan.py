"""The reset scan's reads (hermes_actors.store.pg.reset_scan), on the throw-away cluster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hermes_actors.ids import SessionKind, new_session_id
from hermes_actors.store.pg import PostgresStore
from hermes_actors.store.pg.shards import shard_of


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as store:
        yield store


def test_the_shard_computed_in_sql_is_the_shard_of_in_python_for_every_id(pg: PostgresStore) -> None:
    ids = [new_session_id(SessionKind.GATEWAY) for _ in range(300)] + ["x", "é-ü", "sess-1"]
    for index, session_id in enumerate(ids):
        pg.create_session("fake", session_id=session_id, started_at=float(index))
    for shards in (1, 7, 64, 256, 1000):
        for wanted in ([0], [1, 2, 3], list(range(shards))):
            found = {r.id for r in pg.reset_scan.candidates(wanted, shards, active_before=1e12)}
            assert found == {s for s in ids if shard_of(s, shards) in wanted}, (shards, wanted)


def test_candidates_are_the_live_sessions_of_the_shards_last_active_by_the_cutoff(pg: PostgresStore) -> None:
    for n in range(40):
        pg.create_session("fake", session_id=f"s{n}", started_at=float(n))
    pg.end_session("s5", "idle")
    shard = shard_of("s7", 4)
    found = {r.id for r in pg.reset_scan.candidates([shard], 4, active_before=20.0)}
    assert found == {f"s{n}" for n in range(21) if n != 5 and shard_of(f"s{n}", 4) == shard}
    assert "s7" in found
    assert pg.reset_scan.candidates([], 4, active_before=20.0) == []


def test_a_background_process_is_recorded_per_session_and_forgotten_by_its_reporter(pg: PostgresStore) -> None:
    pg.create_session("fake", session_id="a")
    pg.create_session("fake", session_id="b")
    pg.reset_scan.hold("a", 10.0, "h0")
    pg.reset_scan.hold("a", 12.0, "h1")  # the newest report wins
    pg.reset_scan.hold("gone", 1.0, "h0")  # no such session: nothing recorded
    holds = pg.reset_scan.holds(["a", "b", "gone"])
    assert list(holds) == ["a"]
    assert (holds["a"].started_at, holds["a"].reporter) == (12.0, "h1")
    assert not pg.reset_scan.release("a", "h0")  # not h0's any more
    assert pg.reset_scan.release("a", "h1")
    assert pg.reset_scan.holds(["a"]) == {}
    pg.reset_scan.hold("b", 3.0, "h0")
    pg.delete_session("b")
    assert pg.reset_scan.holds(["b"]) == {}
