"""Backups: one self-contained file read from one snapshot, checked; a copy inspected and put back in place."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import apsw
import pytest

from hermes_actors.errors import SchemaVersionError, StoreError
from hermes_actors.media import MediaStore
from hermes_actors.store import SCHEMA_VERSION, NewMessage, Role, Store, StoreInterface
from hermes_actors.store.attachments import media_dir_for
from hermes_actors.store.backup_media import copy_media, media_backup_dir
from hermes_actors.store.restore import inspect_database, read_replaced, restore_database
from tests.stores import skip_unless_sqlite

HELLO = [
    NewMessage(role=Role.USER, content="the quick brown fox"),
    NewMessage(role=Role.ASSISTANT, content="你好世界朋友"),
]


@pytest.fixture(autouse=True)
def _sqlite_only(request: pytest.FixtureRequest) -> None:
    skip_unless_sqlite(request, "backups, restores and their checks are SQLite files; pg_dump backs up PostgreSQL")


def seed(store: StoreInterface, sessions: int = 2) -> list[str]:
    ids = []
    for _ in range(sessions):
        session = store.create_session("cli")
        store.append_messages(session.id, HELLO)
        ids.append(session.id)
    return ids


def test_a_backup_copied_alone_holds_every_session_message_and_search_hit(
    store: StoreInterface, tmp_path: Path
) -> None:
    ids = seed(store)
    dest = tmp_path / "backups" / "hermes.db"
    dest.parent.mkdir()
    seen: list[tuple[int, int]] = []

    result = store.backup(dest, progress=lambda done, total: seen.append((done, total)))

    assert (result.copy.sessions, result.copy.messages, result.problems) == (2, 4, [])
    assert seen[-1][0] == seen[-1][1] == result.pages
    assert sorted(p.name for p in dest.parent.iterdir()) == ["hermes.db"]  # no -wal, -shm or .partial beside it
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(dest, elsewhere / "state.db")
    with Store.open(elsewhere / "state.db", readonly=True) as copy:
        assert sorted(s.id for s in copy.list_sessions()) == sorted(ids)
        assert [m.content for m in copy.load_transcript(ids[0])] == [m.content for m in HELLO]
        assert len(copy.fts_query("brown fox").hits) == 2
        assert len(copy.fts_query("世界朋").hits) == 2
        assert copy.check_integrity() == []


def test_the_copy_is_in_rollback_journal_mode_so_no_reader_ever_needs_a_wal(
    store: StoreInterface, tmp_path: Path
) -> None:
    seed(store)
    dest = tmp_path / "copy.db"
    store.backup(dest)
    reader = apsw.Connection(str(dest), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert reader.execute("PRAGMA journal_mode").get == "delete"
    finally:
        reader.close()


def test_a_backup_reads_one_snapshot_while_another_connection_commits_between_its_steps(
    sqlite_store: Store, db_path: Path, tmp_path: Path
) -> None:
    session = sqlite_store.create_session("cli")
    sqlite_store.append_messages(session.id, [NewMessage(role=Role.USER, content="x" * 3000)] * 60)
    steps: list[int] = []
    with Store.open(db_path) as other, Store.open(db_path, readonly=True) as reader:

        def commit_elsewhere(done: int, total: int) -> None:
            steps.append(done)
            other.append_messages(session.id, [NewMessage(role=Role.USER, content=f"during step {len(steps)}")])

        result = reader.backup(tmp_path / "copy.db", pages_per_step=4, pause_s=0.0, progress=commit_elsewhere)

    assert len(steps) > 10
    assert steps == sorted(steps)  # the copy never started over, though every step saw a new commit
    assert (result.copy.messages, result.problems) == (60, [])
    assert len(sqlite_store.load_transcript(session.id)) == 60 + len(steps)


def test_a_backup_refuses_a_directory_an_existing_file_and_a_missing_parent(
    store: StoreInterface, tmp_path: Path
) -> None:
    seed(store, 1)
    with pytest.raises(StoreError, match=r"is a directory; name the backup file inside it, e\.g\. .*/state\.db$"):
        store.backup(tmp_path)
    with pytest.raises(StoreError, match=r"nowhere does not exist; create that directory first$"):
        store.backup(tmp_path / "nowhere" / "copy.db")
    existing = tmp_path / "copy.db"
    existing.write_bytes(b"an older backup")
    with pytest.raises(StoreError, match=r"copy\.db already exists; choose another name, or pass --force"):
        store.backup(existing)
    assert existing.read_bytes() == b"an older backup"
    assert store.backup(existing, overwrite=True).copy.sessions == 1


def test_inspect_names_what_a_file_is_when_it_is_not_one_of_our_databases(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_bytes(b"not a database at all, just some words that go on for a while" * 20)
    with pytest.raises(StoreError, match=r"notes\.txt is not an SQLite database"):
        inspect_database(text)
    empty = tmp_path / "empty.db"
    apsw.Connection(str(empty)).close()
    with pytest.raises(StoreError, match=r"empty\.db has no tables, not a hermes-actors database"):
        inspect_database(empty)
    foreign = tmp_path / "foreign.db"
    other = apsw.Connection(str(foreign))
    other.execute("CREATE TABLE sessions (id); PRAGMA user_version = 3")
    other.close()
    with pytest.raises(StoreError, match=r"foreign\.db is another program's database"):
        inspect_database(foreign)


def test_inspect_refuses_a_database_from_a_newer_hermes_actors(db_path: Path) -> None:
    with Store.open(db_path) as newer:
        newer._connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(SchemaVersionError, match=f"schema version {SCHEMA_VERSION + 1}, but this hermes-actors"):
        inspect_database(db_path)


def test_restore_moves_the_current_database_aside_and_puts_the_copy_in_place(
    sqlite_store: Store, db_path: Path, tmp_path: Path
) -> None:
    kept = seed(sqlite_store, 1)
    backup = tmp_path / "backup.db"
    sqlite_store.backup(backup)
    later = seed(sqlite_store, 1)  # written after the backup, still in the WAL: it must travel with the old file
    home = tmp_path / "home"
    home.mkdir()
    for suffix in ("", "-wal"):
        shutil.copy(f"{db_path}{suffix}", home / f"state.db{suffix}")

    result = restore_database(backup, home / "state.db", stamp="20261202T120000Z")

    aside = home / "state.db.before-restore-20261202T120000Z"
    assert result.moved_aside == [(str(home / "state.db"), str(aside)), (f"{home}/state.db-wal", f"{aside}-wal")]
    assert sorted(p.name for p in home.iterdir()) == sorted([aside.name, f"{aside.name}-wal", "state.db"])
    assert stat.S_IMODE((home / "state.db").stat().st_mode) == 0o600
    with Store.open(home / "state.db", readonly=True) as restored:
        assert [s.id for s in restored.list_sessions()] == kept
    with Store.open(aside, readonly=True) as old:
        assert sorted(s.id for s in old.list_sessions()) == sorted(kept + later)

    again = restore_database(backup, home / "state.db", stamp="20261202T120000Z")  # within the same second
    assert again.moved_aside == [(str(home / "state.db"), f"{aside}-2")]


def test_a_refused_restore_leaves_the_home_as_it_was(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "state.db").write_bytes(b"whatever was there")
    foreign = tmp_path / "foreign.db"
    foreign.write_bytes(b"")
    with pytest.raises(StoreError, match="has no tables"):
        restore_database(foreign, home / "state.db", stamp="20261202T120000Z")
    assert sorted(p.name for p in home.iterdir()) == ["state.db"]
    assert (home / "state.db").read_bytes() == b"whatever was there"


def test_media_files_are_copied_beside_the_backup_once_and_privately(sqlite_store: Store, tmp_path: Path) -> None:
    media_dir = media_dir_for(sqlite_store.path)
    assert media_dir is not None
    saved = MediaStore(media_dir).save(b"\x89PNG picture bytes", name="cat.png")
    session = sqlite_store.create_session("cli")
    [message_id] = sqlite_store.append_messages(session.id, [NewMessage(role=Role.USER, content="a cat")])
    sqlite_store.attachments.add(message_id, saved)
    (media_dir / ".incoming-half-written").write_bytes(b"partial")
    dest = tmp_path / "b" / "hermes.db"
    dest.parent.mkdir()
    result = sqlite_store.backup(dest)
    assert saved.path is not None
    relative = Path(saved.path).relative_to(media_dir).as_posix()
    assert result.media_paths == [relative]

    copied = copy_media(media_dir, media_backup_dir(dest), expected=[*result.media_paths, "ab/gone.png"])

    assert media_backup_dir(dest) == tmp_path / "b" / "hermes.db.media"
    assert (copied.copied, copied.kept, copied.missing) == (1, 0, ["ab/gone.png"])
    target = media_backup_dir(dest) / relative
    assert target.read_bytes() == b"\x89PNG picture bytes"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert stat.S_IMODE(target.parent.stat().st_mode) == 0o700
    assert not any(p.name.startswith(".incoming-") for p in media_backup_dir(dest).rglob("*"))
    again = copy_media(media_dir, media_backup_dir(dest))
    assert (again.copied, again.kept) == (0, 1)


def test_check_and_optimize_name_each_phase_as_it_starts(store: StoreInterface) -> None:
    seed(store, 1)
    phases: list[str] = []
    assert store.check_integrity(progress=phases.append) == []
    assert store.check_search_indexes(progress=phases.append) == []
    store.optimize(progress=phases.append)
    assert phases == [
        "integrity check",
        "foreign key check",
        "search index messages_fts",
        "search index messages_fts_cjk",
        "waiting for the write lock",
        "rebuilding the search indexes",
        "analyzing",
        "vacuuming",
        "checkpointing",
    ]


def test_a_backup_that_fails_midway_leaves_no_file_behind(store: StoreInterface, tmp_path: Path) -> None:
    seed(store)
    dest = tmp_path / "copy.db"

    def interrupt(done: int, total: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        store.backup(dest, pages_per_step=1, progress=interrupt)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("copy.db")] == []


def test_what_a_restore_replaces_is_read_without_failing_even_when_damaged(
    sqlite_store: Store, db_path: Path, tmp_path: Path
) -> None:
    [session_id] = seed(sqlite_store, 1)
    sqlite_store.leases.acquire(session_id, "host:123:1", 60)
    current = read_replaced(db_path)
    assert (current.sessions, current.messages, current.lease_owners, current.problem) == (1, 2, ["host:123:1"], None)
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"SQLite format 3\x00" + b"\xff" * 200)
    damaged = read_replaced(garbage)
    assert (damaged.sessions, damaged.lease_owners) == (None, [])
    assert damaged.problem is not None
    assert str(garbage) in damaged.problem


def test_a_backup_over_the_database_it_reads_is_refused(store: StoreInterface) -> None:
    seed(store, 1)
    with pytest.raises(StoreError, match=r"is the database being backed up; name a file outside the home$"):
        store.backup(store.path, overwrite=True)
    assert store.stats().sessions == 1
