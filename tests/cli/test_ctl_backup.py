"""``hermesctl db backup`` and ``db restore``: a home out to one file and a media directory, and back."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import apsw
import openai
import pytest
from click.testing import CliRunner, Result

from hermes_actors.cli.hermesctl import main
from hermes_actors.daemon.pid_lock import DaemonRunningError, PidLock
from hermes_actors.media import MediaStore
from hermes_actors.store import SCHEMA_VERSION, NewMessage, Role, Store
from tests.daemon.test_daemon import CONFIG, Daemon, start_daemon


def run(home: Path, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(main, [*args, "--home", str(home)], input=input)


def seed(store: Store, home: Path) -> tuple[str, str]:
    """A session with a message and an attachment's file in the home's media; its id and the file's media path."""
    session = store.create_session("cli", title="Zebra facts")
    saved = MediaStore(home / "media").save(b"GIF89a a zebra", name="zebra.gif")
    [message_id] = store.append_messages(session.id, [NewMessage(role=Role.USER, content="stripes are unique")])
    store.attachments.add(message_id, saved)
    assert saved.path is not None
    return session.id, Path(saved.path).relative_to((home / "media").resolve()).as_posix()


def stopped_home(home: Path) -> tuple[str, str]:
    """A home whose database is closed (as when hermesd is stopped), seeded by :func:`seed`."""
    home.mkdir(exist_ok=True)
    with Store.open(home / "state.db") as store:
        return seed(store, home)


def untouched(home: Path) -> list[str]:
    """The home's files that a refused restore must leave alone (readers may add a -wal and -shm)."""
    return sorted(p.name for p in home.iterdir() if not p.name.endswith(("-wal", "-shm")))


def test_a_backup_copied_by_hand_to_a_new_home_serves_the_sessions_search_and_files(
    home: Path, store: Store, tmp_path: Path
) -> None:
    session_id, media_file = seed(store, home)
    dest = tmp_path / "backups" / "hermes.db"
    dest.parent.mkdir()

    result = run(home, "db", "backup", str(dest))

    assert result.exit_code == 0, result.output
    first, *rest = result.stdout.splitlines()
    assert re.fullmatch(
        rf"Backed up {re.escape(str(home / 'state.db'))} to {re.escape(str(dest))}: 1 session, 1 message, "
        r"[\d.]+ KB, in \d+\.\d s\.",
        first,
    )
    assert rest == [
        "quick_check of the copy: ok",
        f"Media: 1 file (14 B) copied from {home / 'media'} to {dest}.media.",
        f"To restore: hermesctl db restore {dest} --home {home}",
    ]
    assert result.stderr.splitlines()[-2].startswith("copying the database: ")
    assert result.stderr.splitlines()[-2].endswith(" pages (100%)")
    assert result.stderr.splitlines()[-1] == "copying media: 1/1 files (100%)"
    # Copy what the backup wrote, as a user would: the file alone (no -wal) and its media directory.
    copy_home = tmp_path / "copy-home"
    copy_home.mkdir()
    shutil.copy(dest, copy_home / "state.db")
    shutil.copytree(f"{dest}.media", copy_home / "media")
    listed = run(copy_home, "sessions", "list")
    assert listed.exit_code == 0, listed.output
    assert "Zebra facts" in listed.stdout
    found = run(copy_home, "sessions", "search", "stripes")
    assert found.exit_code == 0, found.output
    assert session_id in found.stdout
    assert (copy_home / "media" / media_file).read_bytes() == b"GIF89a a zebra"


def test_backup_refuses_a_directory_and_an_existing_file_unless_forced(
    home: Path, store: Store, tmp_path: Path
) -> None:
    seed(store, home)
    into_directory = run(home, "db", "backup", str(tmp_path))
    assert into_directory.exit_code == 2
    assert into_directory.stderr.endswith(
        f"Error: Invalid value for DEST: {tmp_path} is a directory; name the backup file inside it, "
        f"e.g. {tmp_path / 'state.db'}\n"
    )
    dest = tmp_path / "hermes.db"
    dest.write_bytes(b"last week's backup")
    existing = run(home, "db", "backup", str(dest))
    assert existing.exit_code == 2
    assert existing.stderr.endswith(
        f"Error: Invalid value for DEST: {dest} already exists; choose another name, or pass --force to replace it\n"
    )
    assert dest.read_bytes() == b"last week's backup"
    forced = run(home, "db", "backup", str(dest), "--force")
    assert forced.exit_code == 0, forced.output
    with Store.open(dest, readonly=True) as copy:
        assert copy.stats().messages == 1


def test_backup_of_a_home_without_a_database_names_the_fix(home: Path, tmp_path: Path) -> None:
    result = run(home, "db", "backup", str(tmp_path / "b.db"))
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: no database at {home / 'state.db'}; run 'hermesd' or 'hermesctl db migrate' to create it\n"
    )
    assert not (tmp_path / "b.db").exists()


def test_restore_puts_the_backup_in_place_keeps_the_old_database_and_says_how_to_undo(
    home: Path, tmp_path: Path
) -> None:
    session_id, media_file = stopped_home(home)
    dest = tmp_path / "hermes.db"
    assert run(home, "db", "backup", str(dest)).exit_code == 0
    with Store.open(home / "state.db") as store:
        later = store.create_session("cli", title="Written after the backup")
    shutil.rmtree(home / "media")

    result = run(home, "db", "restore", str(dest), "--yes")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    aside = next(Path(line.split(" -> ")[1]) for line in lines if line.startswith("Moved aside: "))
    assert aside.name.startswith("state.db.before-restore-")
    assert lines[0] == f"Restored {dest} to {home / 'state.db'}: 1 session, 1 message."
    assert f"Media: 1 file (14 B) copied from {dest}.media to {home / 'media'}." in lines
    assert lines[-4:] == [
        "To undo, with hermesd stopped:",
        f"  rm -f {home}/state.db {home}/state.db-wal {home}/state.db-shm",
        f"  mv {aside} {home / 'state.db'}",
        f"Start hermesd on it: hermesd --home {home}",
    ]
    assert stat.S_IMODE((home / "state.db").stat().st_mode) == 0o600
    assert not (home / "hermesd.pid").exists()
    shown = run(home, "sessions", "show", session_id)
    assert shown.exit_code == 0, shown.output
    assert "stripes are unique" in shown.stdout
    assert (home / "media" / media_file).read_bytes() == b"GIF89a a zebra"
    with Store.open(aside, readonly=True) as old:
        assert later.id in {s.id for s in old.list_sessions()}


def test_restore_asks_first_and_a_no_changes_nothing(home: Path, tmp_path: Path) -> None:
    stopped_home(home)
    dest = tmp_path / "hermes.db"
    assert run(home, "db", "backup", str(dest)).exit_code == 0
    before = untouched(home)
    result = run(home, "db", "restore", str(dest), input="n\n")
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith(
        f"Replace {home / 'state.db'} (1 session, 1 message) with {dest} (1 session, 1 message)? The current "
        "database is kept beside it. [y/N]"
    )
    assert result.stdout == "Nothing restored.\n"
    assert untouched(home) == before


def test_restore_is_refused_while_hermesd_holds_the_home(home: Path, store: Store, tmp_path: Path) -> None:
    seed(store, home)
    dest = tmp_path / "hermes.db"
    assert run(home, "db", "backup", str(dest)).exit_code == 0
    daemon_lock = PidLock(home)  # what a running hermesd holds; this process's pid stands in for the daemon's
    daemon_lock.acquire()
    try:
        result = run(home, "db", "restore", str(dest), "--yes")
    finally:
        daemon_lock.release()
    pid = os.getpid()
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: hermesd (pid {pid}) is running on {home}; stop it first (kill -TERM {pid}), then restore again\n"
    )
    assert not any(p.name.startswith("state.db.before-restore-") for p in home.iterdir())


@pytest.mark.slow
def test_a_start_while_a_restore_waits_for_its_answer_names_the_restore_not_a_hermesd(
    home: Path, store: Store, tmp_path: Path
) -> None:
    seed(store, home)
    dest = tmp_path / "hermes.db"
    assert run(home, "db", "backup", str(dest)).exit_code == 0
    hermesctl = Path(sys.executable).parent / "hermesctl"
    restore = subprocess.Popen(
        [sys.executable, str(hermesctl), "db", "restore", str(dest), "--home", str(home)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # The restore takes the lock before it asks; until then the home is unlocked, so wait for its question.
        assert restore.stderr is not None
        asked = b""
        while b"[y/N]" not in asked:
            chunk = restore.stderr.read1(4096)  # type: ignore[attr-defined]
            assert chunk, f"hermesctl ended without asking: {asked!r}"
            asked += chunk
        with pytest.raises(DaemonRunningError) as refused:
            PidLock(home).acquire()  # what hermesd does first
        error = refused.value
        assert error.holder == "hermesctl db restore"
        assert error.pid == str(restore.pid)
        assert str(error) == (
            f"'hermesctl db restore' (pid {restore.pid}) holds {home} while it works; let it finish (or answer its "
            "question), then start again"
        )
    finally:
        restore.communicate(input=b"n\n", timeout=30)
    assert restore.returncode == 0


def test_restore_refuses_a_terminal_chat_holding_a_session_of_the_home(
    home: Path, store: Store, tmp_path: Path
) -> None:
    session_id, _ = seed(store, home)
    dest = tmp_path / "hermes.db"
    assert run(home, "db", "backup", str(dest)).exit_code == 0
    store.leases.acquire(session_id, f"{os.uname().nodename}:{os.getpid()}:1", 600)
    result = run(home, "db", "restore", str(dest), "--yes")
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: process {os.getpid()} on {os.uname().nodename} (a terminal chat?) has {home / 'state.db'} open; "
        "close it, then restore again\n"
    )


def write_database(path: Path, sql: str) -> None:
    db = apsw.Connection(str(path))
    db.execute(sql)
    db.close()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda p: p.write_bytes(b"hello " * 200),
            "{p} is not an SQLite database; name a file 'hermesctl db backup' wrote",
        ),
        (
            lambda p: write_database(p, "CREATE TABLE recipes (name TEXT)"),
            "{p} is another program's database, not a hermes-actors database (a copy of state.db taken without its "
            "-wal looks like this); name a file 'hermesctl db backup' wrote",
        ),
        (
            lambda p: write_database(p, ""),
            "{p} has no tables, not a hermes-actors database (a copy of state.db taken without its -wal looks like "
            "this); name a file 'hermesctl db backup' wrote",
        ),
    ],
    ids=["text", "foreign", "empty"],
)
def test_restore_refuses_a_file_that_is_not_one_of_our_databases(
    home: Path, tmp_path: Path, make: Callable[[Path], object], message: str
) -> None:
    stopped_home(home)
    src = tmp_path / "candidate.db"
    make(src)
    result = run(home, "db", "restore", str(src), "--yes")
    assert result.exit_code == 1
    assert result.stderr == f"Error: {message.format(p=src)}\n"
    assert untouched(home) == ["media", "state.db"]


def test_restore_refuses_a_backup_from_a_newer_hermes_actors(home: Path, store: Store, tmp_path: Path) -> None:
    newer = tmp_path / "newer.db"
    with Store.open(newer) as other:
        other._connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    result = run(home, "db", "restore", str(newer), "--yes")
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: {newer} has schema version {SCHEMA_VERSION + 1}, but this hermes-actors supports up to "
        f"{SCHEMA_VERSION}; upgrade hermes-actors (the database was left untouched)\n"
    )


def test_restore_into_an_empty_home_moves_nothing_aside(tmp_path: Path) -> None:
    source_home = tmp_path / "old"
    session_id, _ = stopped_home(source_home)
    dest = tmp_path / "hermes.db"
    assert run(source_home, "db", "backup", str(dest)).exit_code == 0
    fresh = tmp_path / "new-home"
    result = run(fresh, "db", "restore", str(dest), "--yes")
    assert result.exit_code == 0, result.output
    assert not any(line.startswith("Moved aside") for line in result.stdout.splitlines())
    assert f"  rm -f {fresh}/state.db {fresh}/state.db-wal {fresh}/state.db-shm" in result.stdout
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700
    assert session_id in run(fresh, "sessions", "show", session_id).stdout


def user_messages(database: Path) -> list[str]:
    """The user messages of the API sessions in ``database``, oldest first."""
    with Store.open(database, readonly=True) as store:
        rows = store._connection.execute(
            "SELECT m.content FROM messages m JOIN sessions s ON s.ref = m.session_ref "
            "WHERE m.role = 'user' AND s.source = 'api_server' ORDER BY m.id"
        ).fetchall()
    return [str(content) for (content,) in rows]


@pytest.mark.slow
def test_a_backup_taken_while_hermesd_writes_is_consistent_and_the_restored_home_serves_it(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.yaml").write_text(CONFIG)
    with Store.open(home / "state.db") as store:  # enough pages that the copy takes many steps
        bulk = store.create_session("cli", title="Bulk")
        store.append_messages(
            bulk.id, [NewMessage(role=Role.USER, content=f"bulk {i} " + "x" * 2000) for i in range(200)]
        )
    process = start_daemon(home)
    try:
        daemon = Daemon(home, process)

        def say(text: str) -> None:
            with openai.OpenAI(base_url=daemon.api + "/v1", api_key="unused", max_retries=0) as client:
                answer = client.chat.completions.create(
                    model="hermes-agent",
                    messages=[{"role": "user", "content": text}],
                    extra_headers={"X-Hermes-Session-Id": "backup-test"},
                )
            assert answer.choices[0].message.content == f"echo: {text}"  # answered: its turn has committed

        before = [f"before {i}" for i in range(5)]
        for text in before:
            say(text)
        during: list[str] = []

        def write_meanwhile(done: int, total: int) -> None:
            if len(during) < 5:
                during.append(f"during {len(during)}")
                say(during[-1])

        live = tmp_path / "live.db"
        with Store.open(home / "state.db", readonly=True) as reader:
            result = reader.backup(live, pages_per_step=16, pause_s=0.0, progress=write_meanwhile)
        assert len(during) == 5  # the daemon committed between the steps of the copy
        assert result.problems == []
        assert user_messages(live) == before  # everything committed before it started, and one snapshot only
        assert user_messages(home / "state.db") == before + during

        by_cli = CliRunner().invoke(main, ["db", "backup", str(tmp_path / "cli.db"), "--home", str(home)])
        assert by_cli.exit_code == 0, by_cli.output
        assert "quick_check of the copy: ok" in by_cli.stdout
        assert user_messages(tmp_path / "cli.db") == before + during

        refused = CliRunner().invoke(main, ["db", "restore", str(live), "--yes", "--home", str(home)])
        pid = daemon.status.pid
        assert refused.exit_code == 1
        assert refused.stderr == (
            f"Error: hermesd (pid {pid}) is running on {home}; stop it first (kill -TERM {pid}), then restore again\n"
        )
        code, _, err = daemon.stop()
        assert code == 0, err

        restored = CliRunner().invoke(main, ["db", "restore", str(live), "--yes", "--home", str(home)])
        assert restored.exit_code == 0, restored.output
        process = start_daemon(home)
        daemon = Daemon(home, process)
        say("after the restore")  # the same API session continues from the backed-up conversation
        code, _, err = daemon.stop()
        assert code == 0, err
        assert user_messages(home / "state.db") == [*before, "after the restore"]
        [aside] = home.glob("state.db.before-restore-*")
        assert user_messages(aside) == before + during
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)


def test_restore_replaces_a_damaged_database_it_cannot_read(home: Path, tmp_path: Path) -> None:
    session_id, _ = stopped_home(home)
    dest = tmp_path / "hermes.db"
    assert run(home, "db", "backup", str(dest)).exit_code == 0
    (home / "state.db").write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    result = run(home, "db", "restore", str(dest), input="y\n")
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith(f"Replace {home / 'state.db'} (which cannot be read: ")
    assert session_id in run(home, "sessions", "show", session_id).stdout
