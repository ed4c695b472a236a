"""Outbox dispatchers sharing the PostgreSQL outbox: every reply sent once, each chat's in commit order."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from hermes_actors.cluster.dispatch import OutboxDispatcher
from hermes_actors.messages import OutboundMessage, encode
from hermes_actors.ports import SendError
from hermes_actors.store.pg import PostgresStore
from hermes_actors.testing import FakePlatform


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as store:
        yield store


def _queue(pg: PostgresStore, chat: str, text: str) -> int:
    message = OutboundMessage(platform="fake", chat_id=chat, text=text)
    return pg.outbox.add(
        session_id=None, platform="fake", account_id="", chat_id=chat, thread_id=None, payload=encode(message)
    )


def test_only_the_head_of_each_chat_is_claimed_and_a_claim_keeps_others_off(pg: PostgresStore) -> None:
    first, second, other = _queue(pg, "a", "1"), _queue(pg, "a", "2"), _queue(pg, "b", "x")
    assert [row.id for row in pg.outbox_claims.claim("d1")] == [first, other]
    assert pg.outbox_claims.claim("d2") == []  # heads claimed; "2" waits behind "1"
    pg.outbox.mark_sent(first, None)
    assert pg.outbox_claims.unclaim("d1", [first]) == 1
    assert [row.id for row in pg.outbox_claims.claim("d2")] == [second]


def test_two_dispatchers_send_every_reply_once_and_each_chat_in_order(pg: PostgresStore) -> None:
    for n in range(60):
        _queue(pg, f"c{n % 5}", str(n))
    platform = FakePlatform("fake")
    platform.fail_next(3)
    dispatchers = [OutboxDispatcher(pg, {"fake": platform}, name=f"d{i}", retry_base_s=0.0) for i in range(2)]
    with ThreadPoolExecutor(2) as pool:
        for _ in range(60):  # bounded: 60 rows, 5 a round, 3 failures retried at once
            list(pool.map(lambda d: d.dispatch_once(5), dispatchers))
            if not pg.outbox.backlog():
                break
    assert pg.outbox.backlog() == 0
    sent = [m.text for m in platform.sent]
    assert sorted(sent, key=int) == [str(n) for n in range(60)]
    for chat in range(5):
        texts = [m.text for m in platform.sent if m.chat_id == f"c{chat}"]
        assert texts == sorted(texts, key=int)


def test_a_permanent_failure_abandons_the_row_and_frees_the_chat(pg: PostgresStore) -> None:
    class Refusing:
        platform = "fake"
        idempotent_sends = False

        def send(self, message: OutboundMessage) -> str | None:
            raise SendError("the chat is gone", permanent=True)

    _queue(pg, "a", "1")
    assert OutboxDispatcher(pg, {"fake": Refusing()}, name="d").dispatch_once() == 1  # one row handled
    assert pg.outbox.backlog() == 0
    assert pg.database.value("SELECT last_error FROM outbox") == "the chat is gone"
