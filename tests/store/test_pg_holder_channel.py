"""A message's notification goes to its shard's holder alone (``shard_queue.holder_channel``): the host holding the
shard wakes, no other host does; a shard without a holder and a control row still reach every listener."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from hermes_actors.store.pg import PostgresStore
from hermes_actors.store.pg.shard_queue import InboxListener, Notices, holder_channel
from hermes_actors.store.pg.shards import shard_of

SHARDS = 4


@pytest.fixture
def store(postgres_dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as opened:
        opened.shards.ensure(SHARDS)
        yield opened


@pytest.fixture
def listeners(postgres_dsn: str) -> Iterator[dict[str, InboxListener]]:
    opened = {
        "host-a": InboxListener(postgres_dsn, holder="host-a"),
        "host-b": InboxListener(postgres_dsn, holder="host-b"),
        "every": InboxListener(postgres_dsn),
    }
    try:
        yield opened
    finally:
        for listener in opened.values():
            listener.close()


def _heard(listener: InboxListener, *, expected: int, quiet_s: float = 0.3) -> Notices:
    """What ``listener`` hears: until ``expected`` notifications came (5 s at most), then ``quiet_s`` more."""
    gathered = Notices()
    deadline = time.monotonic() + 5.0
    while len(gathered.rows) + len(gathered.shards) < expected and time.monotonic() < deadline:
        got = listener.wait(deadline - time.monotonic())
        gathered.rows.extend(got.rows)
        gathered.shards.update(got.shards)
        gathered.epochs.update(got.epochs)
    got = listener.wait(quiet_s)
    gathered.rows.extend(got.rows)
    gathered.shards.update(got.shards)
    gathered.epochs.update(got.epochs)
    return gathered


def _add(store: PostgresStore, key: str) -> tuple[int, int]:
    added = store.shard_queue.add_routed(
        SHARDS, platform="t", account_id="", platform_message_id=f"m-{key}", routing_key=key, payload=b"x"
    )
    assert added is not None
    return added


def test_a_message_wakes_its_shard_s_holder_and_no_other_host(
    store: PostgresStore, listeners: dict[str, InboxListener]
) -> None:
    store.shards.acquire("host-a", {0, 1}, 30.0)
    store.shards.acquire("host-b", {2}, 30.0)  # shard 3 has no holder
    keys = [f"key-{n}" for n in range(24)]
    assert {shard_of(key, SHARDS) for key in keys} == {0, 1, 2, 3}
    added = {key: _add(store, key) for key in keys}
    by_shard = {shard: sorted(i for i, s in added.values() if s == shard) for shard in range(SHARDS)}
    unheld = len(by_shard[3])

    a = _heard(listeners["host-a"], expected=len(by_shard[0]) + len(by_shard[1]) + unheld)
    assert sorted(row.id for _, row, _ in a.rows) == sorted(by_shard[0] + by_shard[1] + by_shard[3])
    b = _heard(listeners["host-b"], expected=len(by_shard[2]) + unheld)
    assert sorted(row.id for _, row, _ in b.rows) == sorted(by_shard[2] + by_shard[3])
    every = _heard(listeners["every"], expected=unheld)
    assert sorted(row.id for _, row, _ in every.rows) == by_shard[3]  # only the shard nobody holds
    # Each held shard's row says under which epoch its holder held the shard when it was added; no holder, none.
    assert a.epochs == dict.fromkeys(by_shard[0] + by_shard[1], 1)
    assert b.epochs == dict.fromkeys(by_shard[2], 1)
    assert every.epochs == {}


def test_a_shard_that_changed_hands_notifies_its_new_holder_and_control_rows_reach_everyone(
    store: PostgresStore, listeners: dict[str, InboxListener]
) -> None:
    key, other = [f"key-{n}" for n in range(100) if shard_of(f"key-{n}", SHARDS) == 1][:2]
    held = store.shards.acquire("host-a", {1}, 30.0)
    first, _ = _add(store, key)
    assert [row.id for _, row, _ in _heard(listeners["host-a"], expected=1).rows] == [first]
    assert _heard(listeners["host-b"], expected=0, quiet_s=0.2) == Notices()

    store.shards.release("host-a", held)
    assert store.shards.acquire("host-b", {1}, 30.0)
    second, _ = _add(store, other)
    heard = _heard(listeners["host-b"], expected=1)
    assert [row.id for _, row, _ in heard.rows] == [second]
    assert heard.epochs == {second: 2}  # the new holder's term
    assert _heard(listeners["host-a"], expected=0, quiet_s=0.2) == Notices()

    store.shard_queue.add(1, platform="t", account_id="", platform_message_id="ctl", routing_key=key, payload=b"c")
    for listener in listeners.values():
        assert _heard(listener, expected=1).shards == {1}


def test_the_channel_is_an_identifier_of_the_holder_s_own() -> None:
    channel = holder_channel("host-0")
    assert channel == holder_channel("host-0") != holder_channel("host-1")
    assert channel.startswith("hermes_inbox_")
    assert channel.isidentifier()
    assert len(channel) <= 63
