from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_actors.importer import LEDGER_PREFIX, import_hermes
from hermes_actors.store import Store
from tests.importer.hermes_v22 import HermesDb

REPO = Path(__file__).resolve().parents[2]
SESSIONS = 40
MESSAGES_PER_SESSION = 30

# Imports in batches of about 50 source rows and, once KILL_AT rows are done, says so and waits for a line that
# never comes: the test kills it there, with a batch's write transaction open and earlier batches committed.
CHILD = """
import sys
from hermes_actors.importer import import_hermes
from hermes_actors.store import Store

source, target, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])

def progress(done, total):
    if done >= kill_at:
        print("ready", flush=True)
        sys.stdin.readline()

with Store.open(target) as store:
    import_hermes(source, store, progress=progress, batch_messages=50)
"""


def build(path: Path) -> None:
    with HermesDb(path) as h:
        for n in range(SESSIONS):
            session_id = f"20260528_10{n:04d}_abcd{n:04d}"
            h.session(session_id, session_key=f"agent:main:telegram:dm:{n}", chat_id=str(n))
            h.messages(session_id, [f"session {n} message {i} capybara{n}x{i}" for i in range(MESSAGES_PER_SESSION)])
            h.route(f"agent:main:telegram:dm:{n}", session_id)


def rows(store: Store) -> tuple[list[tuple[object, ...]], ...]:
    db = store._connection
    return (
        db.execute("SELECT * FROM sessions ORDER BY id").fetchall(),
        db.execute("SELECT * FROM messages ORDER BY id").fetchall(),
        db.execute("SELECT routing_key, session_id, updated_at FROM routes ORDER BY routing_key").fetchall(),
        db.execute("SELECT key FROM meta WHERE key LIKE ? ORDER BY key", (LEDGER_PREFIX + "%",)).fetchall(),
    )


@pytest.mark.slow
def test_an_import_killed_midway_is_completed_by_running_it_again(tmp_path: Path) -> None:
    source = tmp_path / "reference" / "state.db"
    source.parent.mkdir()
    build(source)
    target = tmp_path / "ours.db"
    Store.open(target).close()
    kill_at = SESSIONS * MESSAGES_PER_SESSION // 2
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, str(source), str(target), str(kill_at)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    ) as child:
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n"
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL

    with Store.open(target) as store:
        sessions = store._connection.execute("SELECT count(*) FROM sessions").get
        assert 0 < sessions < SESSIONS  # whole batches committed, the open one rolled back
        assert store._connection.execute("SELECT count(*) FROM messages").get == sessions * MESSAGES_PER_SESSION
        report = import_hermes(source, store)
        assert report.sessions_unchanged == sessions
        assert report.sessions_imported == SESSIONS - sessions
        assert report.routes_migrated == SESSIONS
        resumed = rows(store)
        hits = store.fts_query("capybara39x29").hits
        assert [h.session_id for h in hits] == ["20260528_100039_abcd0039"]
    with Store.open(tmp_path / "clean.db") as clean:
        import_hermes(source, clean)
        assert rows(clean) == resumed  # the same rows, ids included, as one uninterrupted run
