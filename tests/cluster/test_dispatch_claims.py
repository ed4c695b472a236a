"""A dispatcher's claim under its role terms (``OutboxClaims.claim(under=...)``): the rows of targets whose term the
database says is held are claimed and each one's send attempt counted, in one statement; a row claimed but not sent
has its attempt taken back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hermes_actors.cluster.replica.dispatch import OutboxDispatcher
from hermes_actors.messages import OutboundMessage, encode
from hermes_actors.store.pg import PostgresStore
from hermes_actors.store.sql import tracing
from hermes_actors.testing import FakePlatform


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as store:
        yield store


def _queue(pg: PostgresStore, platform: str, chat: str, *, account: str = "") -> int:
    payload = encode(OutboundMessage(platform=platform, chat_id=chat, text=chat))
    return pg.outbox.add(
        session_id=None, platform=platform, account_id=account, chat_id=chat, thread_id=None, payload=payload
    )


def _attempts(pg: PostgresStore) -> dict[int, tuple[int, str | None]]:
    rows = pg.database.execute("SELECT id, attempts, claimed_by FROM outbox ORDER BY id")
    return {int(i): (int(n), who) for i, n, who in rows}


def test_only_rows_of_held_terms_are_claimed_and_each_has_its_attempt_counted(pg: PostgresStore) -> None:
    mine = pg.roles.acquire("send:fake", "d", 10.0)
    theirs = pg.roles.acquire("send:other", "e", 10.0)
    assert mine is not None
    assert theirs is not None
    fake, other = _queue(pg, "fake", "a"), _queue(pg, "other", "b")
    under = pg.roles.held_among_query([("send:fake", "d", mine), ("send:other", "d", theirs)])  # not d's
    claimed = pg.outbox_claims.claim("d", targets=[("fake", None), ("other", None)], under=under)
    assert [row.id for row in claimed.rows] == [fake]
    assert claimed.rows[0].attempts == 0  # the count before this claim's attempt
    assert claimed.via == {fake: 0}
    assert _attempts(pg) == {fake: (1, "d"), other: (0, None)}


def test_a_term_that_ended_in_the_database_claims_nothing_and_counts_nothing(pg: PostgresStore) -> None:
    epoch = pg.roles.acquire("send:fake", "d", 10.0)
    assert epoch is not None
    row = _queue(pg, "fake", "a")
    pg.database.execute("UPDATE role_leases SET holder = 'e', epoch = epoch + 1 WHERE role = 'send:fake'")
    under = pg.roles.held_among_query([("send:fake", "d", epoch)])
    assert pg.outbox_claims.claim("d", targets=[("fake", None)], under=under).rows == []
    assert _attempts(pg) == {row: (0, None)}


def test_a_row_is_claimed_through_its_account_s_own_target_when_that_term_is_held(pg: PostgresStore) -> None:
    every = pg.roles.acquire("send:fake", "d", 10.0)
    own = pg.roles.acquire("adapter:fake:acct", "d", 10.0)
    assert every is not None
    assert own is not None
    plain, accounts = _queue(pg, "fake", "a"), _queue(pg, "fake", "b", account="acct")
    targets: list[tuple[str, str | None]] = [("fake", None), ("fake", "acct")]
    under = pg.roles.held_among_query([("send:fake", "d", every), ("adapter:fake:acct", "d", own)])
    assert pg.outbox_claims.claim("d", targets=targets, under=under).via == {plain: 0, accounts: 1}
    pg.outbox_claims.uncount("d", [plain, accounts], unclaim=True)
    lost = pg.roles.held_among_query([("send:fake", "d", every), ("adapter:fake:acct", "d", own + 1)])
    assert pg.outbox_claims.claim("d", targets=targets, under=lost).via == {plain: 0, accounts: 0}


def test_a_row_claimed_but_not_sent_has_its_attempt_taken_back(pg: PostgresStore) -> None:
    epoch = pg.roles.acquire("send:fake", "d", 10.0)
    assert epoch is not None
    first, second = _queue(pg, "fake", "a"), _queue(pg, "fake", "b")
    under = pg.roles.held_among_query([("send:fake", "d", epoch)])
    pg.outbox_claims.claim("d", targets=[("fake", None)], under=under)
    assert pg.outbox_claims.uncount("d", [first], unclaim=True) == 1  # dropped: given back
    assert pg.outbox_claims.uncount("d", [second], unclaim=False) == 1  # still being sent: kept, counted once
    assert pg.outbox_claims.uncount("e", [second], unclaim=True) == 0  # not e's claim
    assert _attempts(pg) == {first: (0, None), second: (0, "d")}


def test_a_reply_is_sent_with_two_statements_its_claim_with_the_attempt_and_its_sent_mark(pg: PostgresStore) -> None:
    platform = FakePlatform("fake")
    dispatcher = OutboxDispatcher(pg, {"fake": platform}, name="d", retry_base_s=0.0, role_ttl_s=120.0)
    assert dispatcher.dispatch_once() == 0  # takes send:fake (renewed 40 s later: not in this test)
    row = _queue(pg, "fake", "a")
    with tracing(pg.sql) as trace:
        assert dispatcher.dispatch_once() == 1
    assert [m.outbox_id for m in platform.sent] == [row]
    claim, mark = (sql for sql, _ in trace.statements)  # two statements, no attempt of its own
    assert claim.startswith("WITH held AS")
    assert "attempts = u.attempts +" in claim
    assert mark.startswith("UPDATE outbox SET sent_at")
    assert _attempts(pg) == {row: (1, None)}
    dispatcher.stop()
