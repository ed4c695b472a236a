from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import apsw
import msgspec
import pytest

from hermes_actors.importer import (
    COMPACTED_SUFFIX,
    LEDGER_PREFIX,
    ImportReport,
    RouteAction,
    SourceDatabaseError,
    hermes_content,
    import_hermes,
    split_content,
)
from hermes_actors.routing import LegacyKeyAction, migrate_legacy_slack_key
from hermes_actors.store import NewMessage, Role, Store
from hermes_actors.store.lineage import lineage_chain, lineage_root, lineage_tip
from tests.importer.conftest import Imported
from tests.importer.hermes_v22 import HermesDb, fts_ids, fts_trigram_ids
from tests.importer.hostile import BIG_SESSION_MESSAGES, SLACK_TEAM, Hostile, decoded, id_map, source_rows

OUR_ROLES = {"system": "system", "user": "user", "assistant": "assistant", "tool": "tool", "developer": "system"}


def fixed_clock() -> float:
    return 1_800_000_000.0


def source_session_ids(path: Path) -> list[str]:
    db = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [str(sid) for (sid,) in db.execute("SELECT id FROM sessions ORDER BY id")]
    finally:
        db.close()


def dump(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    """Every row an import writes, for comparing two stores."""
    db = store._connection
    return {
        "sessions": db.execute("SELECT * FROM sessions ORDER BY id").fetchall(),
        "messages": db.execute("SELECT * FROM messages ORDER BY id").fetchall(),
        "routes": db.execute("SELECT * FROM routes ORDER BY routing_key").fetchall(),
        "meta": db.execute("SELECT * FROM meta ORDER BY key").fetchall(),
    }


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_every_live_message_arrives_in_order_byte_for_byte(imported: Imported) -> None:
    hostile, target = imported.fx, imported.store
    report = imported.report

    sessions = source_session_ids(hostile.path)
    assert report.sessions_imported == len(sessions) == report.sessions_in_source
    total = 0
    for session_id in sessions:
        rows = [r for r in source_rows(hostile.path, session_id) if r["role"] in OUR_ROLES]
        ours = target.load_transcript(session_id)
        assert len(ours) == len(rows), session_id
        assert target.get_session(session_id).message_count == len(rows)
        total += len(rows)
        for row, message in zip(rows, ours, strict=True):
            assert message.role == OUR_ROLES[str(row["role"])]
            if row["id"] != hostile.cesu_message:
                assert hermes_content(message.content) == decoded(row["content"]), row["id"]
            assert (message.tool_calls, message.tool_name, message.tool_call_id) == (
                row["tool_calls"],
                row["tool_name"],
                row["tool_call_id"],
            )
            assert message.created_at == row["timestamp"]
            assert (message.token_count, message.platform_message_id) == (row["token_count"], row["pmid"])
    assert report.messages_imported == total
    assert len(target.load_transcript(hostile.big)) == BIG_SESSION_MESSAGES


@pytest.mark.slow
def test_content_that_is_not_utf8_is_repaired_and_its_bytes_kept(imported: Imported) -> None:
    hostile, target = imported.fx, imported.store
    report = imported.report

    (row,) = [r for r in source_rows(hostile.path, hostile.hostile) if r["id"] == hostile.cesu_message]
    (note,) = report.repaired_values
    assert (note.table, note.row, note.column) == ("messages", str(hostile.cesu_message), "content")
    assert note.meta_key is not None
    kept = target.kv.get_meta(note.meta_key)
    assert kept is not None
    assert base64.b64decode(kept) == row["content"]
    contents = [m.content for m in target.load_transcript(hostile.hostile)]
    # The CESU-8 pair is the emoji it encodes; the lone surrogate and the stray byte are U+FFFD.
    assert "cesu 😀 lone \ufffd raw \ufffd end" in contents


def test_structured_content_keeps_its_value_and_leads_with_its_text(imported: Imported) -> None:
    hostile, target = imported.fx, imported.store

    stored = [m.content or "" for m in target.load_transcript(hostile.hostile)]
    split = [split_content(c) for c in stored]
    texts = {text for text, value in split if value is not None}
    assert "describe this wombatword 中文字幕测试\n[image_url]" in texts
    assert "broken emoji \ufffd here okapiword" in texts  # a JSON lone surrogate, rendered; the JSON is kept
    assert "" in texts  # "\x00json:{not json at all" stays exactly as it was
    plain = [c for c in stored if "lemurword" in c]
    assert plain == ["abc\x00json:xyz lemurword"]  # plain content that merely contains the prefix is untouched
    assert split_content(plain[0]) == (plain[0], None)


def test_a_search_that_finds_a_message_there_finds_it_here(imported: Imported) -> None:
    hostile, target = imported.fx, imported.store
    mapping = id_map(target, hostile.path, source_session_ids(hostile.path))

    source = apsw.Connection(str(hostile.path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        # What the reference system offers: live rows and rows compacted away (rewound rows are not searched).
        visible = {int(i) for (i,) in source.execute("SELECT id FROM messages WHERE active = 1 OR compacted = 1")}
        found = [(q, fts_ids(source, q)) for q in hostile.queries]
        found += [(q, fts_trigram_ids(source, q)) for q in hostile.cjk_queries]
    finally:
        source.close()
    for query, there in found:
        there &= visible
        assert there, f"the fixture's query {query!r} should find something there"
        result = target.fts_query(query, limit=1000)
        assert result.ok, result.error
        here = {hit.message_id for hit in result.hits}
        assert {mapping[i] for i in there} <= here, query


def test_the_text_of_structured_content_is_found_even_where_the_source_escaped_it(imported: Imported) -> None:
    hostile, target = imported.fx, imported.store

    source = apsw.Connection(str(hostile.path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert not fts_trigram_ids(source, "中文字幕")  # stored as \u escapes there
    finally:
        source.close()
    hits = target.fts_query("中文字幕").hits
    assert [h.session_id for h in hits] == [hostile.hostile]


def test_a_compression_chain_stays_one_lineage_with_its_titles(imported: Imported) -> None:
    hostile, target = imported.fx, imported.store

    root, middle, tip = hostile.chain
    for member in hostile.chain:
        assert lineage_chain(target, member) == hostile.chain
        assert lineage_root(target, member) == root
        assert lineage_tip(target, member) == tip
    assert [target.get_session(s).title for s in hostile.chain] == ["project", "project #2", "project #3"]
    assert target.resolve_session("project").id == tip
    assert [target.get_session(s).end_reason for s in hostile.chain] == ["compression", "compression", None]
    assert target.get_session(tip).parent_session_id == middle


def test_session_fields_times_and_counters_come_across(imported: Imported) -> None:
    hostile, target = imported.fx, imported.store

    root = target.get_session(hostile.chain[0])
    assert (root.source, root.chat_id, root.chat_type, root.user_id, root.user_name) == (
        "telegram",
        "4242",
        "dm",
        "alice",
        "Alice",
    )
    assert (root.model, root.system_prompt, root.routing_key) == (
        "hermes-4",
        "You are Hermes.",
        "agent:main:telegram:dm:4242",
    )
    assert (root.started_at, root.ended_at) == (1_780_000_001.0, 1_780_000_100.0)
    assert (root.input_tokens, root.output_tokens, root.message_count) == (1200, 340, 2)
    assert root.last_active_at == target.load_transcript(root.id)[-1].created_at
    hostile_session = target.get_session(hostile.hostile)
    assert hostile_session.tool_call_count == 1
    assert hostile_session.is_live


def test_other_children_and_end_reasons_are_kept_and_mapped(imported: Imported) -> None:
    hostile, target = imported.fx, imported.store
    report = imported.report

    assert target.get_session(hostile.delegate).parent_session_id == hostile.branched
    assert target.get_session(hostile.branched).end_reason == "session_switch"
    assert lineage_chain(target, hostile.delegate) == [hostile.delegate]  # a branch is not a continuation
    assert target.get_session(hostile.odd_end).end_reason == "imported"
    assert report.end_reasons == {"branched": "session_switch", "mystery": "imported"}
    ledger = json.loads(target.kv.get_meta(LEDGER_PREFIX + hostile.odd_end) or "{}")
    assert ledger["source_end_reason"] == "mystery"


def test_routes_follow_the_slack_rules_and_our_escaping(imported: Imported) -> None:
    hostile, target = imported.fx, imported.store
    report = imported.report

    assert target.get_route("agent:main:telegram:dm:4242") == hostile.chain[2]
    assert target.get_route(f"agent:main:slack.{SLACK_TEAM}:group:C1:U1") == hostile.slack_moved
    assert target.get_route("agent:main:slack:group:C1:U1") is None
    assert target.get_session(hostile.slack_moved).routing_key == f"agent:main:slack.{SLACK_TEAM}:group:C1:U1"
    # A DM of unknown workspace waits under its old key; the first workspace to see it can claim it.
    assert target.get_route("agent:main:slack:dm:D1") == hostile.slack_dm
    claim = migrate_legacy_slack_key(
        "agent:main:slack:dm:D1", recorded_scope_id=None, observed_scope_id="T5", dm_already_claimed=False
    )
    assert (claim.action, claim.new_key) == (LegacyKeyAction.CLAIM, "agent:main:slack.T5:dm:D1")
    # A channel of unknown workspace is not routed and stays reachable by its id.
    assert target.routes_to(hostile.slack_refused) == []
    assert target.resolve_session(hostile.slack_refused).id == hostile.slack_refused
    assert target.get_route("agent:main:matrix:dm:!room%3Ahs.org") == hostile.matrix
    assert target.get_route("agent:main:whatsapp:dm:15550001") == hostile.odd_end  # from sessions.json

    actions = {(note.key, note.action) for note in report.routes}
    assert actions == {
        ("agent:main:telegram:dm:4242", RouteAction.ADDED),
        ("agent:main:telegram:dm:4242", RouteAction.SUPERSEDED),  # the older sessions.json entry
        ("agent:main:slack:dm:D1", RouteAction.KEPT_FOR_CLAIM),
        ("agent:main:slack:group:C1:U1", RouteAction.MOVED),
        ("agent:main:slack:channel:C2:U2", RouteAction.REFUSED),
        ("agent:main:matrix:dm:!room:hs.org", RouteAction.ADDED),
        ("agent:main:whatsapp:dm:15550001", RouteAction.ADDED),
    }
    assert report.routes_migrated == 5
    (refused,) = [n for n in report.routes if n.action is RouteAction.REFUSED]
    assert refused.session_id == hostile.slack_refused
    assert "leaking one tenant's transcript" in refused.reason


def test_rows_compacted_away_stay_searchable_outside_the_live_transcript(imported: Imported) -> None:
    hostile, target = imported.fx, imported.store
    report = imported.report

    live = [m.content for m in target.load_transcript(hostile.compacted)]
    assert live == ["[CONTEXT COMPACTION] summary of the marmot talk", "carry on"]
    archive = target.get_session(hostile.compacted + COMPACTED_SUFFIX)
    assert (archive.parent_session_id, archive.end_reason, archive.title) == (hostile.compacted, "imported", None)
    assert [m.content for m in target.load_transcript(archive.id)] == [
        "old question about marmotword",
        "old answer 旧的压缩内容",
    ]
    assert report.compacted_imported == 2
    assert {h.session_id for h in target.fts_query("marmotword").hits} == {archive.id}
    # Rewound rows are not searched there either; they are counted, not imported.
    assert target.fts_query("ocelotword").hits == []
    assert sum(n for reason, n in report.skipped_messages.items() if reason.startswith("rewound")) == 1


def test_what_has_no_place_here_is_named_not_lost_silently(imported: Imported) -> None:
    hostile, target = imported.fx, imported.store
    report = imported.report

    assert report.not_carried["sessions.cwd"] == 1
    assert report.not_carried["sessions.model_config"] == 1
    assert report.not_carried["messages.reasoning"] == 1
    assert "sessions.archived" not in report.not_carried  # all zero: nothing to carry
    (odd,) = [n for n in report.message_notes if n.source_message_id == hostile.odd_role_message]
    assert "'session_meta'" in odd.reason
    assert [m.content for m in target.load_transcript(hostile.hostile) if m.role == "system"] == [
        "You are Hermes. Treat \x00 NUL bytes with care.",
        "developer instructions become system",
    ]


@pytest.mark.slow
def test_a_title_held_here_gets_a_distinct_suffix_and_is_reported(hostile: Hostile, target: Store) -> None:
    """Not ``"dup #2"``: ``#N`` is lineage numbering, and the imported session does not continue the local one."""
    holder = target.create_session("cli", title="dup")
    target.create_session("cli", title="dup (2)")  # taken too: the next free number

    report = import_hermes(hostile.path, target)

    assert target.get_session(hostile.duplicate_title).title == "dup (3)"
    notes = {n.session_id: n for n in report.titles}
    assert notes[hostile.duplicate_title].reason == f"Title 'dup' is already in use by session {holder.id}"
    assert notes[hostile.dirty_title].title == "hostile [31mred[0m"
    assert notes[hostile.dirty_title].reason.startswith("sanitised")


@pytest.mark.slow
def test_a_second_run_imports_nothing_twice(hostile: Hostile, target: Store) -> None:
    first = import_hermes(hostile.path, target)
    before = dump(target)

    second = import_hermes(hostile.path, target)

    assert dump(target) == before
    assert (second.sessions_imported, second.sessions_updated, second.messages_imported) == (0, 0, 0)
    assert second.sessions_unchanged == first.sessions_imported
    assert second.routes_migrated == 0
    assert {n.action for n in second.routes} == {
        RouteAction.PRESENT,
        RouteAction.SUPERSEDED,
        RouteAction.REFUSED,
    }


@pytest.mark.slow
def test_a_dry_run_reports_exactly_what_the_import_does_and_writes_nothing(
    hostile: Hostile, target: Store, tmp_path: Path
) -> None:
    target.create_session("cli", title="dup", session_id="20260101_000000_11111111")
    before = dump(target)

    preview = import_hermes(hostile.path, target, dry_run=True, clock=fixed_clock)

    assert dump(target) == before
    real = import_hermes(hostile.path, target, clock=fixed_clock)
    assert preview == msgspec.structs.replace(real, dry_run=True)
    with Store.open(tmp_path / "empty.db") as empty:
        assert import_hermes(hostile.path, None, dry_run=True, clock=fixed_clock) == import_hermes(
            hostile.path, empty, dry_run=True, clock=fixed_clock
        )


@pytest.mark.slow
def test_a_run_that_failed_midway_completes_on_the_next_run(hostile: Hostile, target: Store, tmp_path: Path) -> None:
    calls = 0

    def fail_later(done: int, total: int) -> None:
        nonlocal calls
        calls += 1
        if calls == 12:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        import_hermes(hostile.path, target, progress=fail_later, batch_messages=3, clock=fixed_clock)
    partial = target._connection.execute("SELECT count(*) FROM sessions").get
    assert 0 < partial < len(source_session_ids(hostile.path))

    import_hermes(hostile.path, target, clock=fixed_clock)

    with Store.open(tmp_path / "clean.db") as clean:
        import_hermes(hostile.path, clean, clock=fixed_clock)
        assert dump(target) == dump(clean)


@pytest.mark.slow
def test_the_source_is_read_while_another_writer_holds_it_and_never_changes(hostile: Hostile, target: Store) -> None:
    before = file_hash(hostile.path)
    writer = apsw.Connection(str(hostile.path))
    try:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', 'uncommitted yakword', 1)",
            (hostile.chain[2],),
        )
        report = import_hermes(hostile.path, target)
        writer.execute("ROLLBACK")
    finally:
        writer.close()

    assert report.sessions_imported == report.sessions_in_source
    assert target.fts_query("yakword").hits == []
    assert file_hash(hostile.path) == before
    assert sorted(p.name for p in hostile.path.parent.iterdir()) == ["sessions.json", "state.db"]


def append_source(path: Path, session_id: str, text: str, at: float) -> int:
    db = apsw.Connection(str(path))
    try:
        db.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
            (session_id, text, at),
        )
        return int(db.last_insert_rowid())
    finally:
        db.close()


@pytest.mark.slow
def test_a_later_run_adds_what_the_source_wrote_since(hostile: Hostile, target: Store) -> None:
    import_hermes(hostile.path, target)
    root, tip = hostile.chain[0], hostile.chain[2]
    append_source(hostile.path, tip, "one more quokka question", 1_780_000_300.0)
    db = apsw.Connection(str(hostile.path))
    try:
        with db:  # the reference system compresses the tip into a new child and re-points the key
            db.execute(
                "UPDATE sessions SET ended_at = 1780000400, end_reason = 'compression', input_tokens = 99 WHERE id = ?",
                (tip,),
            )
            db.execute(
                "INSERT INTO sessions (id, source, started_at, parent_session_id, title) "
                "VALUES ('20260528_100700_aaaa0004', 'telegram', 1780000401, ?, 'project #4')",
                (tip,),
            )
            db.execute(
                "UPDATE gateway_routing SET entry_json = json_set(entry_json, '$.session_id', "
                "'20260528_100700_aaaa0004'), updated_at = 1780000401 WHERE session_key = 'agent:main:telegram:dm:4242'"
            )
    finally:
        db.close()

    report = import_hermes(hostile.path, target)

    assert (report.sessions_imported, report.sessions_updated, report.messages_imported) == (1, 1, 1)
    assert target.load_transcript(tip)[-1].content == "one more quokka question"
    ended = target.get_session(tip)
    assert (ended.end_reason, ended.ended_at, ended.input_tokens, ended.message_count) == (
        "compression",
        1_780_000_400.0,
        99,
        3,
    )
    assert lineage_tip(target, root) == "20260528_100700_aaaa0004"
    assert target.get_route("agent:main:telegram:dm:4242") == "20260528_100700_aaaa0004"
    (moved,) = [n for n in report.routes if n.action is RouteAction.REPLACED]
    assert moved.reason == f"the key reached {tip}, which has ended here"


@pytest.mark.slow
def test_a_session_continued_here_does_not_take_the_sources_new_messages(hostile: Hostile, target: Store) -> None:
    import_hermes(hostile.path, target)
    tip = hostile.chain[2]
    target.append_messages(tip, [NewMessage(role=Role.USER, content="written here")])
    append_source(hostile.path, tip, "written there", 1_780_000_300.0)

    report = import_hermes(hostile.path, target)

    assert [m.content for m in target.load_transcript(tip)][-1] == "written here"
    (note,) = report.skipped_sessions
    assert note.session_id == tip
    assert "new messages both here and in the source" in note.reason


@pytest.mark.slow
def test_sessions_deleted_or_taken_here_are_left_alone(hostile: Hostile, target: Store) -> None:
    target.create_session("cli", session_id=hostile.branched)  # an unrelated session with the same id
    first = import_hermes(hostile.path, target)
    target.delete_session(hostile.matrix)

    report = import_hermes(hostile.path, target)

    assert target.find_session(hostile.matrix) is None
    reasons = {n.session_id: n.reason for n in report.skipped_sessions}
    assert reasons[hostile.matrix] == "it was imported earlier and deleted here since; it is not imported again"
    assert reasons[hostile.branched] == "a session with this id already exists here and was not imported"
    assert target.get_session(hostile.branched).source == "cli"
    dropped = {n.session_id: n.reason for n in first.parent_links_dropped}
    assert dropped == {
        hostile.delegate: f"its parent {hostile.branched} was not imported (see the skipped sessions); "
        "the link was dropped"
    }
    assert target.get_session(hostile.delegate).parent_session_id is None


def test_dangling_and_cyclic_parent_links_are_dropped_and_reported(tmp_path: Path, target: Store) -> None:
    path = tmp_path / "loops.db"
    with HermesDb(path) as h:
        h.db.execute("PRAGMA foreign_keys = OFF")
        h.session("a", parent="b")
        h.session("b", parent="a")
        h.session("c", parent="gone")

    report = import_hermes(path, target)

    assert report.sessions_imported == 3
    dropped = {n.session_id: n.reason for n in report.parent_links_dropped}
    assert dropped["c"] == "its parent gone is not in the source database; the link was dropped"
    assert len(dropped) == 2
    ((cut, reason),) = [(s, r) for s, r in dropped.items() if s != "c"]
    assert "cycle" in reason
    other = "b" if cut == "a" else "a"
    assert target.get_session(other).parent_session_id == cut


@pytest.mark.parametrize(
    ("version", "fix"),
    [(23, "upgrade hermes-actors to import it"), (21, "open it once with the reference system (hermes)")],
)
def test_another_schema_version_is_refused_naming_it(tmp_path: Path, target: Store, version: int, fix: str) -> None:
    path = tmp_path / "state.db"
    HermesDb(path, version=version).close()

    with pytest.raises(SourceDatabaseError) as raised:
        import_hermes(path, target)

    assert raised.value.found_version == version
    assert str(raised.value).startswith(f"{path} has schema version {version}; this hermes-actors understands 22: ")
    assert fix in str(raised.value)
    assert target.list_sessions() == []


def foreign_sqlite(path: Path) -> None:
    db = apsw.Connection(str(path))
    db.execute("CREATE TABLE notes (body TEXT)")
    db.close()


def not_sqlite(path: Path) -> None:
    path.write_bytes(b"this is not a database at all\n" * 200)


def damaged(path: Path) -> None:
    HermesDb(path).close()
    db = apsw.Connection(str(path))
    db.execute("ALTER TABLE messages DROP COLUMN compacted")
    db.close()


def ours(path: Path) -> None:
    Store.open(path).close()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (None, "no file at {path}; pass the reference system's state.db (~/.hermes/state.db)"),
        (Path.mkdir, "{path} is a directory; pass the state.db file inside it"),
        (not_sqlite, "{path} is not a SQLite database; pass the reference system's state.db (~/.hermes/state.db)"),
        (foreign_sqlite, "{path} is not the reference system's state.db: it has no schema_version table"),
        (ours, "{path} is a hermes-actors database, not the reference system's"),
        (damaged, "{path} says schema version 22 but its messages table lacks compacted"),
    ],
)
def test_a_file_that_is_not_a_reference_database_is_refused(
    tmp_path: Path, target: Store, make: Any, message: str
) -> None:
    path = tmp_path / "state.db"
    if make is not None:
        make(path)

    with pytest.raises(SourceDatabaseError) as raised:
        import_hermes(path, target)

    assert str(raised.value).startswith(message.format(path=path))


def test_an_empty_reference_database_imports_nothing(tmp_path: Path, target: Store) -> None:
    path = tmp_path / "state.db"
    HermesDb(path).close()

    report = import_hermes(path, target)

    assert report == ImportReport(source=str(path), schema_version=22, dry_run=False)
    assert not report.changed


def test_the_imported_store_passes_its_integrity_checks(imported: Imported) -> None:
    db = imported.store._connection
    assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert db.execute("PRAGMA foreign_key_check").fetchall() == []
    # The word index matches the messages table row for row (rank 1; a NULL content is an empty document), and
    # the CJK index, which holds CJK messages only, is consistent in itself (rank 0).
    db.execute("INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1)")
    db.execute("INSERT INTO messages_fts_cjk (messages_fts_cjk, rank) VALUES ('integrity-check', 0)")
    indexed = db.execute("SELECT count(*) FROM messages_fts_docsize").get
    assert indexed == db.execute("SELECT count(*) FROM messages").get
