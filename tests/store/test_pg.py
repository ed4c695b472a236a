"""The PostgreSQL store below the interface: its schema versions, its indexes and plans, its clock, what PostgreSQL
cannot hold, and that nothing of it loads unless asked for. (The interface itself: every other test of tests/store
and tests/search, on both stores.)"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_actors.errors import SchemaVersionError, SessionClosedError, SessionNotFoundError, StoreError
from hermes_actors.store import EndReason, NewMessage, Role, SessionFilter, Store, StoreInterface
from hermes_actors.store.search_reads import SearchReads
from hermes_actors.store.table_interface import (
    AttachmentIndex,
    CursorTable,
    HomeChannelTable,
    InboxQueue,
    LeaseTable,
    MemoryTable,
    OutboxQueue,
    TimerTable,
)
from hermes_actors.testing import FakeClock
from tests.postgres import Cluster

pytest.importorskip("psycopg")

from hermes_actors.store.pg import PostgresStore
from hermes_actors.store.pg.db import Database
from hermes_actors.store.pg.match import condition
from hermes_actors.store.pg.migrations import SCHEMA_VERSION, schema_sql
from hermes_actors.store.pg.text import tokenize
from hermes_actors.store.search_query import SearchQuery, parse_search_query


@pytest.fixture
def pg(postgres_dsn: str, clock: FakeClock) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, clock=clock) as opened:
        yield opened


def test_the_postgres_store_is_a_store_interface_to_the_type_checker(pg: PostgresStore) -> None:
    whole: StoreInterface = pg  # mypy rejects this line if PostgresStore misses or mistypes a member
    tables: tuple[object, ...] = (
        pg.inbox,
        pg.outbox,
        pg.leases,
        pg.timers,
        pg.kv,
        pg.homes,
        pg.memories,
        pg.attachments,
    )
    inbox: InboxQueue = pg.inbox
    outbox: OutboxQueue = pg.outbox
    leases: LeaseTable = pg.leases
    timers: TimerTable = pg.timers
    kv: CursorTable = pg.kv
    homes: HomeChannelTable = pg.homes
    memories: MemoryTable = pg.memories
    attachments: AttachmentIndex = pg.attachments
    reads: SearchReads = pg.search_reads()
    assert isinstance(whole, StoreInterface)
    assert tables == (inbox, outbox, leases, timers, kv, homes, memories, attachments)
    assert reads is not None


def test_the_daemon_and_hermesctl_start_without_importing_psycopg() -> None:
    probe = (
        "import sys, hermes_actors.cli.hermesctl, hermes_actors.cli.hermesd, hermes_actors.daemon; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('psycopg', 'psycopg_pool')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "[]"


def test_packaged_schema_equals_the_top_level_schema_pg_sql() -> None:
    top = Path(__file__).resolve().parents[2] / "schema_pg.sql"
    assert schema_sql() == top.read_text(encoding="utf-8")


def test_an_empty_database_gets_the_schema_and_a_second_open_changes_nothing(postgres_cluster: Cluster) -> None:
    name = postgres_cluster.create_database(empty=True)
    try:
        with PostgresStore.open(postgres_cluster.dsn(name)) as first:
            assert first.schema_version() == SCHEMA_VERSION
            assert first.kv.get_meta("schema_version") == str(SCHEMA_VERSION)
            assert first.database.value("SELECT count(*) FROM shard_leases") == 0
            first.create_session("cli", session_id="kept")
        with PostgresStore.open(postgres_cluster.dsn(name)) as second:
            assert second.find_session("kept") is not None
    finally:
        postgres_cluster.drop_database(name)


def _schema(pg: PostgresStore) -> list[tuple[object, ...]]:
    """Every column and index of the database, as PostgreSQL describes them."""
    columns = pg.database.execute(
        "SELECT table_name, column_name, data_type, is_nullable, column_default, collation_name "
        "FROM information_schema.columns WHERE table_schema = 'public' ORDER BY 1, 2"
    )
    indexes = pg.database.execute("SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1")
    return [*columns, *indexes]


def test_every_step_from_version_1_ends_in_the_schema_a_fresh_database_gets(
    pg: PostgresStore, postgres_cluster: Cluster
) -> None:
    name = postgres_cluster.create_database(empty=True)
    try:
        with PostgresStore.open(postgres_cluster.dsn(name)) as old:
            # Version 1 was the current file without what later versions added.
            old.database.execute("DROP TABLE api_responses")
            old.database.execute("DROP TABLE background_processes")
            old.database.execute("ALTER TABLE inbox DROP COLUMN shard")
            old.database.execute("DROP TABLE shard_hosts")
            old.database.execute("DROP TABLE role_leases")
            old.database.execute("DROP TABLE cluster_replicas")
            old.database.execute("ALTER TABLE outbox DROP COLUMN claimed_by, DROP COLUMN claimed_until")
            old.create_session("cli", session_id="kept")
            old.database.execute("ALTER TABLE sessions DROP COLUMN agent")
            old.kv.set_meta("schema_version", "1")
        with PostgresStore.open(postgres_cluster.dsn(name)) as upgraded:
            assert upgraded.schema_version() == SCHEMA_VERSION
            assert upgraded.find_session("kept") is not None
            assert _schema(upgraded) == _schema(pg)
    finally:
        postgres_cluster.drop_database(name)


def test_a_database_from_a_newer_hermes_actors_is_refused_untouched(pg: PostgresStore, postgres_dsn: str) -> None:
    pg.kv.set_meta("schema_version", str(SCHEMA_VERSION + 1))
    with pytest.raises(SchemaVersionError, match="upgrade hermes-actors"):
        PostgresStore.open(postgres_dsn)
    assert pg.schema_version() == SCHEMA_VERSION + 1


def plan(pg: PostgresStore, text: str) -> str:
    query = parse_search_query(text, tokenize)
    assert isinstance(query, SearchQuery)
    params: list[object] = []
    where = condition(query.root, params)
    with pg.transaction():
        # Bitmap scans only: a small table is cheaper to scan whole, and what is checked here is that the
        # condition is one an index can answer (bench/pg_search.py measures the planner's own choice at 200k rows).
        pg.database.execute("SET LOCAL enable_seqscan = off")
        pg.database.execute("SET LOCAL enable_indexscan = off")
        rows = pg.database.execute(
            f"EXPLAIN SELECT m.id FROM messages AS m WHERE {where} ORDER BY m.id DESC LIMIT 10", params
        )
    return "\n".join(str(row[0]) for row in rows)


def test_the_title_query_reads_the_titled_sessions_index_not_every_session(
    pg: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pg.transaction():
        for i in range(3000):
            pg.create_session("cli", session_id=f"s{i:05d}", title=f"garden notes {i}" if i % 100 == 0 else None)
    pg.database.execute("ANALYZE sessions")
    reads = pg.search_reads()
    query = reads.parse_query("garden")
    assert isinstance(query, SearchQuery)
    seen: list[tuple[str, object]] = []
    run = Database.execute

    def capture(db: Database, sql: str, params: object = None, *, keyed: bool = False) -> list[tuple[object, ...]]:
        seen.append((sql, params))
        return run(db, sql, params, keyed=keyed)  # type: ignore[arg-type]

    monkeypatch.setattr(Database, "execute", capture)
    rows = list(reads.titled_sessions(query, oldest_first=False, scope=SessionFilter()))
    monkeypatch.undo()
    assert [row[1] for row in rows] == [f"s{i:05d}" for i in range(2900, -1, -100)]
    (sql, params), *_ = [s for s in seen if "title IS NOT NULL" in s[0]]
    plan = "\n".join(str(row[0]) for row in pg.database.execute(f"EXPLAIN {sql}", params))  # type: ignore[arg-type]
    # The titled sessions' entries alone (a bitmap of them, or the index in order); what is left to sort is their
    # matches, never the untitled sessions.
    assert "sessions_titled" in plan, plan
    assert "Seq Scan" not in plan, plan
    assert "sessions_last_active" not in plan, plan


def test_a_turn_s_messages_go_in_with_their_session_s_counters_in_one_statement_in_order(
    pg: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = pg.create_session("cli")
    seen: list[str] = []
    run = Database.execute

    def capture(db: Database, sql: str, params: object = None, *, keyed: bool = False) -> list[tuple[object, ...]]:
        seen.append(sql)
        return run(db, sql, params, keyed=keyed)  # type: ignore[arg-type]

    monkeypatch.setattr(Database, "execute", capture)
    texts = [f"message {n}" for n in range(12)]
    ids = pg.append_messages(session.id, [NewMessage(role=Role.USER, content=t, input_tokens=2) for t in texts])
    monkeypatch.undo()
    assert len(seen) == 1
    assert "UPDATE sessions" in seen[0]
    assert "INSERT INTO messages" in seen[0]
    assert ids == sorted(ids)
    assert [(m.id, m.content) for m in pg.load_transcript(session.id)] == list(zip(ids, texts, strict=True))
    record = pg.get_session(session.id)
    assert (record.message_count, record.input_tokens) == (12, 24)
    assert pg.fts_query("message").ok
    pg.end_session(session.id, EndReason.NEW_SESSION)
    with pytest.raises(SessionClosedError):
        pg.append_messages(session.id, [NewMessage(role=Role.USER, content="late")])
    with pytest.raises(SessionNotFoundError):
        pg.append_messages("no-such-session", [NewMessage(role=Role.USER, content="lost")])
    assert len(pg.load_transcript(session.id)) == 12


def test_rare_cjk_and_word_queries_are_answered_from_the_gin_indexes(pg: PostgresStore) -> None:
    session = pg.create_session("cli")
    filler = [NewMessage(role=Role.USER, content=f"天气很好我们去公园散步 number {i} lorem") for i in range(300)]
    pg.append_messages(session.id, [*filler, NewMessage(role=Role.USER, content="分词 kubernetes 搜")])
    pg.database.execute("ANALYZE messages")
    assert "messages_cjk" in plan(pg, "分词")  # two characters: their bigram
    assert "messages_cjk" in plan(pg, "搜")  # one character: its unigram lexeme, the same index
    assert "messages_words" in plan(pg, "kubernetes")
    assert [h.snippet for h in pg.fts_query("分词").hits] == [">>>分词<<< kubernetes 搜"]
    assert len(pg.fts_query("天气").hits) == 20


def test_a_cjk_phrase_needs_its_characters_adjacent_in_the_text(pg: PostgresStore) -> None:
    session = pg.create_session("cli")
    pg.append_messages(
        session.id,
        [NewMessage(role=Role.USER, content="全文 搜索"), NewMessage(role=Role.USER, content="文搜索全")],
    )
    assert pg.fts_query("全文搜索").hits == []  # every bigram is there, never as one substring


def test_content_holding_a_nul_loads_back_unchanged(pg: PostgresStore) -> None:
    session = pg.create_session("cli")
    text = 'look at this\x00[{"type": "image_url"}]'
    pg.append_messages(session.id, [NewMessage(role=Role.USER, content=text)])
    assert [m.content for m in pg.load_transcript(session.id)] == [text]
    assert pg.fts_query("look").hits[0].snippet.startswith(">>>look<<< at this")


def test_leases_expire_by_the_database_clock_not_the_hosts(pg: PostgresStore, clock: FakeClock) -> None:
    pg.create_session("cli", session_id="s1")
    assert isinstance(pg.leases.grant("s1", "a", 60), int)
    clock.advance(3600)  # this host's clock jumps; the database's does not
    assert pg.leases.holder("s1") == "a"
    assert pg.leases.grant("s1", "b", 60) == "a"
    expires, now = pg.database.execute(
        "SELECT expires_at, extract(epoch FROM clock_timestamp()) FROM leases WHERE session_id = 's1'"
    )[0]
    assert 55 < expires - float(now) <= 60


def test_a_parent_cycle_ends_the_walks_instead_of_hanging(pg: PostgresStore, clock: FakeClock) -> None:
    first = pg.create_session("cli").id
    pg.end_session(first, EndReason.COMPRESSION)
    clock.advance(1)
    second = pg.create_session("cli", parent_session_id=first).id
    pg.end_session(second, EndReason.COMPRESSION)
    pg.database.execute("UPDATE sessions SET parent_session_id = %s WHERE id = %s", (second, first))
    assert pg.lineage_chain(first) in ([second, first], [first, second])
    assert pg.lineage_root(first) in (first, second)
    assert pg.list_lineages().total >= 0


def test_stale_search_columns_are_found_and_optimize_rebuilds_them(pg: PostgresStore) -> None:
    session = pg.create_session("cli")
    pg.append_messages(session.id, [NewMessage(role=Role.USER, content=t) for t in ("hello world", "你好世界")])
    assert pg.check_integrity() == []
    assert pg.check_search_indexes() == []
    # Change the text behind the search columns' back, as a foreign tool writing SQL would.
    pg.database.execute("UPDATE messages SET content = 'something else' WHERE content = 'hello world'")
    assert pg.fts_query("something").hits == []
    assert pg.check_search_indexes() == [
        "messages search columns: 1 of the newest 2 are stale; run 'hermesctl db optimize'"
    ]
    phases: list[str] = []
    result = pg.optimize(progress=phases.append)
    assert (result.messages_indexed, result.cjk_indexed, phases) == (2, 1, ["search columns", "vacuum"])
    assert pg.check_search_indexes() == []
    assert [h.snippet for h in pg.fts_query("something").hits] == [">>>something<<< else"]


class _Dropped(Exception):
    """Raised to roll one thread's transaction back."""


def test_each_thread_has_its_own_transaction_on_one_store(pg: PostgresStore) -> None:
    kept, dropped = pg.create_session("cli"), pg.create_session("cli")
    inside = threading.Barrier(2, timeout=10)
    failures: list[BaseException] = []

    def write(session_id: str) -> None:
        try:
            with pg.transaction():
                pg.append_messages(session_id, [NewMessage(role=Role.USER, content="text")])
                inside.wait()  # both transactions open at once, each on its own connection
                if session_id == dropped.id:
                    raise _Dropped
        except _Dropped:
            pass
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(s.id,)) for s in (kept, dropped)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert failures == []
    assert [m.content for m in pg.load_transcript(kept.id)] == ["text"]
    assert pg.load_transcript(dropped.id) == []
    assert (pg.get_session(kept.id).message_count, pg.get_session(dropped.id).message_count) == (1, 0)


def test_concurrent_grants_of_one_lease_give_it_to_exactly_one_owner(pg: PostgresStore) -> None:
    pg.create_session("cli", session_id="contested")
    start = threading.Barrier(4, timeout=10)
    results: dict[str, int | str] = {}

    def grant(owner: str) -> None:
        start.wait()
        results[owner] = pg.leases.grant("contested", owner, 30)

    threads = [threading.Thread(target=grant, args=(f"owner-{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    winners = [owner for owner, result in results.items() if isinstance(result, int)]
    assert len(winners) == 1
    assert {result for owner, result in results.items() if owner not in winners} == {winners[0]}
    assert pg.leases.holder("contested") == winners[0]


@pytest.mark.slow
def test_a_huge_message_of_distinct_tokens_is_stored_and_found_by_its_first_words(pg: PostgresStore) -> None:
    session = pg.create_session("cli")
    words = " ".join(f"w{i:07d}" for i in range(150_000))
    chinese = "".join(chr(0x4E00 + (i * 7919) % 20_000) for i in range(150_000))
    pg.append_messages(session.id, [NewMessage(role=Role.USER, content=words + " " + chinese)])
    assert len(pg.fts_query("w0000001").hits) == 1
    assert len(pg.fts_query(chinese[:2]).hits) == 1


def test_the_postgres_schema_has_every_table_and_column_of_schema_sql(pg: PostgresStore, tmp_path: Path) -> None:
    with Store.open(tmp_path / "state.db") as sqlite:
        connection = sqlite._connection
        names = [str(n) for (n,) in connection.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")]
        sqlite_tables = {
            name: {str(row[1]) for row in connection.execute(f"PRAGMA table_info({name})")}
            for name in names
            if not name.startswith(("messages_fts", "sqlite_"))
        }
    rows = pg.database.execute(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public'"
    )
    pg_tables: dict[str, set[str]] = {}
    for table, column in rows:
        pg_tables.setdefault(str(table), set()).add(str(column))
    assert set(pg_tables) == {
        *sqlite_tables,
        "shard_leases",
        "shard_hosts",
        "role_leases",
        "search_totals",
        "background_processes",
        "cluster_replicas",
    }
    extras = {
        "messages": {"words", "cjk", "n_tokens"},
        "api_responses": {"seq"},
        "inbox": {"shard"},
        "outbox": {"claimed_by", "claimed_until"},
    }
    for table, columns in sqlite_tables.items():
        assert pg_tables[table] == columns | extras.get(table, set()), table
    assert pg_tables["shard_leases"] == {"shard", "holder", "epoch", "expires_at"}


def test_check_writable_passes_on_a_healthy_database_and_leaves_nothing(pg: PostgresStore) -> None:
    pg.check_writable()
    assert pg.database.value("SELECT to_regclass('hermes_probe')") is None


def test_a_snapshot_sees_none_of_what_other_connections_commit_meanwhile(pg: PostgresStore) -> None:
    first = pg.create_session("cli")
    committed = threading.Event()

    def elsewhere() -> None:  # another thread: another pooled connection, committing at once
        pg.create_session("cli")
        committed.set()

    with pg.snapshot():
        assert [r.id for r in pg.list_sessions(limit=None)] == [first.id]
        writer = threading.Thread(target=elsewhere)
        writer.start()
        assert committed.wait(10)
        writer.join()
        assert [r.id for r in pg.list_sessions(limit=None)] == [first.id]
        with pytest.raises(StoreError, match="read-only transaction"):
            pg.create_session("cli")
    assert len(pg.list_sessions(limit=None)) == 2
    with pg.transaction(), pytest.raises(StoreError, match="outermost transaction"), pg.snapshot():
        pass
