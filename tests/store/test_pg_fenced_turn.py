"""A shard host's turn in one statement (``Leases.fence`` with several writes): the shard's check, the lease's
renewal, the rows' completion, the messages with their session's counters, and the reply with its notice; and
nothing of it when a term was lost. The same writes run one after another where no shard guards the lease."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from hermes_actors.errors import LeaseLostError, SessionClosedError, ShardLostError
from hermes_actors.store import StoreInterface
from hermes_actors.store.inbox import Completion
from hermes_actors.store.outbox_queue import QueuedReply
from hermes_actors.store.pg import PostgresStore
from hermes_actors.store.pg.notices import wait_notices
from hermes_actors.store.pg.shards import ShardFence, shard_of
from hermes_actors.store.pg.text import index_text
from hermes_actors.store.pg.turn_relay import reply_notice
from hermes_actors.store.records import EndReason, NewMessage, Role
from hermes_actors.store.sql import tracing
from hermes_actors.store.transcript import AppendWrite
from tests.store.test_pg_shards import Skew

TTL = 10.0


@pytest.fixture
def skew() -> Skew:
    return Skew()


@pytest.fixture
def shard_store(postgres_dsn: str, skew: Skew) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, lease_skew=skew, migrate_schema=False) as store:
        store.shards.ensure(8)
        yield store
        store.fence_shards(None)


@pytest.fixture
def outbox_notices(postgres_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(postgres_dsn, autocommit=True) as connection:
        connection.execute("LISTEN hermes_outbox")
        yield connection


def _held(store: PostgresStore, session_id: str, *messages: str) -> tuple[int, list[int]]:
    """Hold ``session_id``'s shard as host "a" and its lease as "owner"; add ``messages`` to the inbox."""
    fence = ShardFence("a", 8)
    fence.grant(store.shards.acquire("a", [shard_of(session_id, 8)], TTL), TTL, asked_at=float("inf"))
    store.fence_shards(fence)
    epoch = store.leases.grant(session_id, "owner", TTL)
    assert isinstance(epoch, int)
    added = [
        store.inbox.add(platform="t", account_id="", platform_message_id=m, routing_key="k", payload=b"")
        for m in messages
    ]
    return epoch, [i for i in added if i is not None]


_TURN = [
    NewMessage(role=Role.USER, content="hello\x00there 你好世界", platform_message_id="m1"),
    NewMessage(role=Role.ASSISTANT, content="back", input_tokens=7, output_tokens=3),
]


def _writes(store: StoreInterface, session_id: str, rows: list[int]) -> tuple[Completion, AppendWrite, QueuedReply]:
    return (
        store.inbox.completion(rows, session_id=session_id),
        store.appending_messages(session_id, _TURN),
        store.outbox.adding(
            session_id=session_id,
            platform="t",
            account_id="",
            chat_id="c1",
            thread_id=None,
            payload=b"\x00reply",
            attempts=1,
        ),
    )


def _notices(connection: psycopg.Connection[Any], count: int, wait_s: float = 5.0) -> list[tuple[str, str]]:
    """The notices ``connection`` gets until ``count`` came or ``wait_s`` passed."""
    found: list[tuple[str, str]] = []
    deadline = time.monotonic() + wait_s
    while len(found) < count and time.monotonic() < deadline:
        found.extend(wait_notices(connection, 0.5))
    return found


def test_a_turn_s_completion_messages_and_reply_go_in_its_fence_s_one_statement(
    shard_store: PostgresStore, outbox_notices: psycopg.Connection[Any]
) -> None:
    session = shard_store.create_session("telegram", session_id="s-turn")
    epoch, rows = _held(shard_store, session.id, "m1")
    completion, appended, queued = _writes(shard_store, session.id, rows)
    with tracing(shard_store.sql) as trace, shard_store.transaction():
        shard_store.leases.fence(session.id, "owner", epoch, TTL, then=[completion, appended, queued])
    (statement,) = [sql for sql, _ in trace.statements if sql not in ("BEGIN", "SAVEPOINT")]
    for write in ("UPDATE leases", "UPDATE inbox", "UPDATE sessions", "INSERT INTO messages", "INSERT INTO outbox"):
        assert write in statement
    assert completion.done == set(rows)
    ids = appended.ids
    loaded = shard_store.load_transcript(session.id)
    assert [m.id for m in loaded] == ids
    assert len(ids) == 2
    assert [(m.role, m.content) for m in loaded] == [(m.role, m.content) for m in _TURN]
    assert loaded[0].platform_message_id == "m1"
    found = shard_store.find_session(session.id)
    assert found is not None
    assert (found.message_count, found.input_tokens, found.output_tokens) == (2, 7, 3)
    indexed = shard_store.database.execute(
        "SELECT words::text, cjk::text, n_tokens FROM messages WHERE id = %s", (ids[0],)
    )
    expected = index_text(_TURN[0].content)
    assert indexed == [(expected.words, expected.cjk, expected.n_tokens)]
    (row,) = shard_store.outbox.unsent("t")
    assert (row.id, row.chat_id, row.payload, row.attempts) == (queued.id, "c1", b"\x00reply", 1)
    ((channel, payload),) = _notices(outbox_notices, 1)
    platform, notified = reply_notice(payload)
    assert (channel, platform) == ("hermes_outbox", "t")
    assert notified is not None
    assert (notified.id, notified.payload, notified.created_at) == (row.id, row.payload, row.created_at)


def test_a_lost_lease_or_shard_writes_nothing_of_the_turn(
    shard_store: PostgresStore, skew: Skew, outbox_notices: psycopg.Connection[Any]
) -> None:
    session = shard_store.create_session("telegram", session_id="s-lost")
    epoch, rows = _held(shard_store, session.id, "m1")
    with pytest.raises(LeaseLostError), shard_store.transaction():
        shard_store.leases.fence(session.id, "owner", epoch + 1, TTL, then=list(_writes(shard_store, session.id, rows)))
    skew.seconds = TTL + 1
    assert shard_store.shards.acquire("b", [shard_of(session.id, 8)], TTL) == {shard_of(session.id, 8): 2}
    with pytest.raises(ShardLostError), shard_store.transaction():
        shard_store.leases.fence(session.id, "owner", epoch, TTL, then=list(_writes(shard_store, session.id, rows)))
    assert shard_store.inbox.pending_among(rows) == set(rows)
    assert shard_store.load_transcript(session.id) == []
    assert shard_store.outbox.unsent() == []
    assert _notices(outbox_notices, 1, wait_s=1.0) == []  # each notice would have come with its commit


def test_an_ended_session_refuses_the_fused_append_and_the_turn_rolls_back(shard_store: PostgresStore) -> None:
    session = shard_store.create_session("telegram", session_id="s-ended")
    epoch, rows = _held(shard_store, session.id, "m1")
    shard_store.end_session(session.id, EndReason.SESSION_RESET)
    with pytest.raises(SessionClosedError, match="has ended"), shard_store.transaction():
        shard_store.leases.fence(session.id, "owner", epoch, TTL, then=list(_writes(shard_store, session.id, rows)))
    assert shard_store.inbox.pending_among(rows) == set(rows)
    assert shard_store.outbox.unsent() == []


def test_a_session_deleted_under_the_turn_takes_its_lease_along_and_nothing_is_written(
    shard_store: PostgresStore,
) -> None:
    session = shard_store.create_session("telegram", session_id="s-gone")
    epoch, rows = _held(shard_store, session.id, "m1")
    shard_store.database.execute("DELETE FROM sessions WHERE id = %s", (session.id,))
    with pytest.raises(LeaseLostError), shard_store.transaction():  # not the outbox's foreign key
        shard_store.leases.fence(session.id, "owner", epoch, TTL, then=list(_writes(shard_store, session.id, rows)))
    assert shard_store.inbox.pending_among(rows) == set(rows)
    assert shard_store.outbox.unsent() == []


def test_without_a_shard_guard_the_writes_run_one_after_another_after_the_check(store: StoreInterface) -> None:
    session = store.create_session("telegram", session_id="s-apart")
    epoch = store.leases.grant(session.id, "owner", TTL)
    assert isinstance(epoch, int)
    row = store.inbox.add(platform="t", account_id="", platform_message_id="m1", routing_key="k", payload=b"")
    assert row is not None
    completion, appended, queued = _writes(store, session.id, [row])
    with tracing(store.sql) as trace, store.transaction():
        store.leases.fence(session.id, "owner", epoch, TTL, then=[completion, appended, queued])
    sent = [sql for sql, _ in trace.statements]
    assert not any("UPDATE inbox" in sql and "UPDATE leases" in sql for sql in sent)
    assert completion.done == {row}
    assert [m.id for m in store.load_transcript(session.id)] == appended.ids
    assert [r.id for r in store.outbox.unsent()] == [queued.id]
    with pytest.raises(LeaseLostError), store.transaction():
        store.leases.fence(session.id, "owner", epoch + 1, TTL, then=list(_writes(store, session.id, [row])))
    assert len(store.load_transcript(session.id)) == 2
