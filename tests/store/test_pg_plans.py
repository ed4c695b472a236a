"""Which statements PostgreSQL plans for their values and which keep one generic plan: a keyed statement
(``SqlDb.execute(..., keyed=True)``) is planned once per connection, every other statement for its values each time
(a search's plan depends on how rare its terms are). ``pg_prepared_statements`` counts each prepared statement's
generic and custom plans on its own connection, so these stores have one connection per pool."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hermes_actors.testing import FakeClock

pytest.importorskip("psycopg")

from hermes_actors.store.pg import PostgresStore
from hermes_actors.store.pg.db import Database

_PLANS = "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = %s"


@pytest.fixture
def pg(postgres_dsn: str, clock: FakeClock) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, clock=clock, pool_size=1) as opened:
        yield opened


def _plans(database: Database, sql: str, *, keyed: bool) -> tuple[int, int]:
    """(generic, custom) plans of the prepared statement ``sql`` on the pool's one connection."""
    rows = database.execute(_PLANS, (sql,), keyed=keyed)
    assert len(rows) == 1, f"{sql!r} is not prepared on the connection: {rows}"
    generic, custom = rows[0]
    return int(generic), int(custom)


def test_a_keyed_statement_keeps_one_generic_plan_and_others_are_planned_for_their_values(pg: PostgresStore) -> None:
    database = pg.database
    lookup = "SELECT session_id FROM routes WHERE routing_key = %s"
    valued = "SELECT id FROM sessions WHERE id = %s"
    for i in range(12):  # psycopg prepares a statement on its sixth run on a connection
        database.execute(lookup, (f"key-{i}",), keyed=True)
        database.execute(valued, (f"s-{i}",))
    generic, custom = _plans(database, lookup.replace("%s", "$1"), keyed=True)
    assert (generic, custom) == (7, 0)  # prepared on its sixth run: its seven runs since on the one generic plan
    generic, custom = _plans(database, valued.replace("%s", "$1"), keyed=False)
    assert (generic, custom) == (0, 7)  # each run planned for its value


def test_a_keyed_statement_inside_a_transaction_is_one_of_its_statements(pg: PostgresStore) -> None:
    database = pg.database
    with database.transaction():
        database.execute("CREATE TEMP TABLE only_here (n int) ON COMMIT DROP")
        database.execute("INSERT INTO only_here VALUES (7)")
        assert database.execute("SELECT n FROM only_here", keyed=True) == [(7,)]  # the transaction's connection
    assert database.execute("SELECT count(*) FROM pg_class WHERE relname = 'only_here'") == [(0,)]


def test_the_hot_keyed_reads_of_the_store_keep_generic_plans_that_use_their_indexes(pg: PostgresStore) -> None:
    session = pg.create_session("cli")
    pg.database.execute(  # many finished rows and a few pending: only an index finds the pending ones cheaply
        "INSERT INTO inbox (platform, platform_message_id, routing_key, payload, received_at, state) "
        "SELECT 'old', n::text, 'k', '\\x00', 0, 'done' FROM generate_series(1, 20000) AS n"
    )
    added = [
        pg.inbox.add(platform="cli", account_id="", platform_message_id=str(i), routing_key="k", payload=b"x")
        for i in range(8)
    ]
    ids = [inbox_id for inbox_id in added if inbox_id is not None]
    pg.database.execute("ANALYZE inbox")
    for inbox_id in ids:
        assert pg.inbox.pending_among([inbox_id, 1]) == {inbox_id}  # row 1 is done
        assert pg.sessions.find(session.id) == pg.sessions.get(session.id)
    rows = pg.database.execute(
        "SELECT name, statement, generic_plans, custom_plans FROM pg_prepared_statements "
        "WHERE statement LIKE 'SELECT id FROM inbox WHERE %%' OR statement LIKE 'SELECT % FROM sessions WHERE id = $1'",
        keyed=True,
    )
    plans = {("inbox" if "inbox" in str(statement) else "sessions"): (g, c) for _, statement, g, c in rows}
    assert plans["inbox"] == (3, 0)  # eight runs: prepared on the sixth, on its generic plan since
    assert plans["sessions"] == (11, 0)  # sixteen runs (get finds too)
    name = next(str(name) for name, statement, _, _ in rows if "inbox" in str(statement))
    # The generic plan of the pending check: by the primary key or the pending rows' partial index (which it sees
    # only because 'pending' is a literal), never a scan of the whole table.
    plan = "\n".join(str(row[0]) for row in pg.database.execute(f"EXPLAIN EXECUTE {name}('{{{ids[0]}}}')", keyed=True))
    assert "Seq Scan" not in plan, plan
    assert "inbox_pkey" in plan or "inbox_pending" in plan, plan
