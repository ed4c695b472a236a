"""Every ``hermesctl sessions`` command on both stores: the home's SQLite store, and a cluster's PostgreSQL store
named by ``--dsn``. Each test runs once per store and expects the same output (the PostgreSQL store's own words
only where a notion differs: what ``prune --vacuum`` did). Changes to a session live in a shard host are in
``tests/cluster/test_shard_admin.py``; here no host runs."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from hermes_actors.cli.hermesctl import main
from hermes_actors.cluster import admin_requests
from hermes_actors.store import EndReason, InboxState, NewMessage, Role, SessionRecord, Store, StoreInterface
from hermes_actors.store.export import decode_export_line
from hermes_actors.store.records import InboxKind
from tests.stores import IMPLEMENTATIONS

DAY = 86_400.0


@dataclass
class Place:
    """A store and the ``hermesctl`` arguments that reach it."""

    kind: str
    store: StoreInterface
    home: Path
    dsn: str | None

    def run(self, *args: str, input: str | None = None) -> Result:
        where = ["--home", str(self.home), *(["--dsn", self.dsn] if self.dsn else [])]
        return CliRunner().invoke(main, ["sessions", *args, *where], input=input)


@pytest.fixture(params=IMPLEMENTATIONS)
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Place]:
    home = tmp_path / "home"
    home.mkdir()
    if request.param == "sqlite":
        with Store.open(home / "state.db") as store:
            yield Place("sqlite", store, home, None)
        return
    from hermes_actors.store.pg import PostgresStore

    dsn = request.getfixturevalue("postgres_dsn")
    with PostgresStore.open(dsn, migrate_schema=False) as pg:
        yield Place("postgres", pg, home, dsn)


def make(
    store: StoreInterface,
    *texts: str,
    title: str | None = None,
    source: str = "telegram",
    ended_ago: float | None = None,
) -> SessionRecord:
    now = time.time()
    started = now - (ended_ago or 0) - 60
    record = store.create_session(source, title=title, started_at=started)
    if texts:
        store.append_messages(record.id, [NewMessage(role=Role.USER, content=t) for t in texts], at=started + 1)
    if ended_ago is not None:
        store.end_session(record.id, EndReason.IDLE, at=now - ended_ago)
    return store.get_session(record.id)


def test_browse_offers_the_conversations_and_prints_how_to_resume(place: Place) -> None:
    record = make(place.store, "deploy the image", title="deploy")
    result = place.run("browse", input="1\n")
    assert result.exit_code == 0, result.output
    how = "Resume it with: hermesctl chat --resume" if place.kind == "sqlite" else "Resume it from a chat with: /resume"
    assert result.stdout.endswith(f"\n{how} {record.id}\n")
    assert "deploy" in result.stdout


def test_search_finds_by_title_and_by_message_and_refuses_a_malformed_query(place: Place) -> None:
    titled = make(place.store, "nothing here", title="docker notes")
    said = make(place.store, "how do I run docker compose")
    result = place.run("search", "docker")
    assert result.exit_code == 0, result.output
    hits = [line.split()[0] for line in result.stdout.splitlines() if not line.startswith(" ")]
    assert hits == [titled.id, said.id]  # titles first, then messages
    assert place.run("search", "kubernetes").stdout == "no matches\n"
    bad = place.run("search", '"unclosed')
    assert bad.exit_code == 1
    assert bad.output.startswith("Error: ")


def test_export_then_import_brings_a_deleted_session_back_unchanged(place: Place, tmp_path: Path) -> None:
    record = make(place.store, "one", "two", title="round trip")
    exported = place.run("export", "-", "--session-id", "round trip")
    assert exported.exit_code == 0, exported.output
    (line,) = exported.stdout_bytes.splitlines(keepends=True)
    assert decode_export_line(line).id == record.id
    path = tmp_path / "backup.jsonl"
    path.write_bytes(exported.stdout_bytes)
    assert place.store.delete_session(record.id)
    imported = place.run("import", str(path))
    assert imported.exit_code == 0, imported.output
    assert imported.stdout == "Imported 1 session and 2 messages of 1 session in the file.\n"
    again = place.run("import", str(path))
    assert again.stdout.splitlines()[1] == "Skipped 1 session already here (same id)."
    assert place.run("export", "-", "--session-id", record.id).stdout_bytes == exported.stdout_bytes


def test_stats_counts_sessions_messages_and_the_database_size(place: Place) -> None:
    make(place.store, "a", "b")
    make(place.store, "c", source="cli", ended_ago=DAY)
    result = place.run("stats")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[:5] == [
        "Total sessions: 2",
        "Total messages: 3",
        "  cli: 1 sessions",
        "  telegram: 1 sessions",
        "Live sessions: 1 (1 ended)",
    ]
    assert re.fullmatch(r"Database size: \d+\.\d MB", lines[5])
    assert json.loads(place.run("stats", "--json").stdout)["database_bytes"] > 0


def test_prune_previews_deletes_and_vacuums(place: Place) -> None:
    old = make(place.store, "x" * 2000, ended_ago=100 * DAY)
    live = make(place.store, "still here")
    preview = place.run("prune", "--dry-run")
    assert preview.stdout == f"Would delete 1 ended session older than 90d (1 message).\n  {old.id}\n"
    result = place.run("prune", "--yes", "--vacuum")
    assert result.exit_code == 0, result.output
    first, second = result.stdout.splitlines()
    assert first == "Deleted 1 ended session older than 90d and 1 message."
    if place.kind == "sqlite":
        assert second.startswith("Freed ")
    else:
        assert second.startswith("Vacuumed and analyzed the pruned tables; the database is ")
    assert [r.id for r in place.store.list_sessions(limit=None)] == [live.id]
    assert place.run("prune", "--yes").stdout == "No ended sessions older than 90d to delete.\n"


def test_changes_to_an_unknown_or_ambiguous_session_are_refused_alike(place: Place) -> None:
    for args in (("rename", "nope", "x"), ("end", "nope"), ("delete", "nope", "--yes")):
        result = place.run(*args)
        assert result.exit_code == 1, args
        assert (
            result.output
            == "Error: no session matches 'nope' by id, id prefix or title; list them with 'hermesctl sessions list'\n"
        )
    first = place.store.create_session("cli", session_id="20260101_000000_aaaaaa")
    second = place.store.create_session("cli", session_id="20260101_000000_aaaaab")
    result = place.run("end", "20260101_000000_aaaa")
    assert result.exit_code == 1
    assert f"matches 2 sessions: {first.id}, {second.id}" in result.output
    assert _admin_rows(place) == []


def test_an_over_long_title_is_refused_before_anything_is_asked(place: Place) -> None:
    record = make(place.store, title="before")
    result = place.run("rename", record.id, "x" * 101)
    assert result.exit_code == 1
    assert result.output == "Error: title is 101 characters long; the limit is 100, so shorten it\n"
    assert place.store.get_session(record.id).title == "before"
    assert _admin_rows(place) == []


def test_ending_an_ended_session_and_declining_a_delete_change_nothing(place: Place) -> None:
    record = make(place.store, "hi", ended_ago=60)
    result = place.run("end", record.id)
    assert result.stdout == f"Session {record.id} has already ended (idle); nothing to do.\n"
    declined = place.run("delete", record.id, input="n\n")
    assert declined.exit_code == 0, declined.output
    assert declined.stdout == "Nothing deleted.\n"
    assert place.store.find_session(record.id) is not None


def _admin_rows(place: Place) -> list[InboxState]:
    if place.kind == "sqlite":
        return []
    from hermes_actors.store.pg import PostgresStore

    assert isinstance(place.store, PostgresStore)
    rows = place.store.database.execute("SELECT state FROM inbox WHERE kind = %s", (InboxKind.ADMIN,))
    return [InboxState(state) for (state,) in rows]


# -- a cluster without a host to apply the change ---------------------------------------------------------------


@pytest.fixture
def cluster(postgres_dsn: str, tmp_path: Path) -> Iterator[Place]:
    from hermes_actors.store.pg import PostgresStore

    with PostgresStore.open(postgres_dsn, migrate_schema=False) as pg:
        yield Place("postgres", pg, tmp_path, postgres_dsn)


def test_a_change_before_any_host_ran_is_refused_naming_the_fix(cluster: Place) -> None:
    record = make(cluster.store, "hi")
    result = cluster.run("end", record.id)
    assert result.exit_code == 1
    assert "no shard host has ever run on " in result.output
    assert "start the cluster ('hermesd --cluster') and check it with 'hermesctl cluster status'" in result.output
    assert cluster.store.get_session(record.id).is_live


def test_a_change_no_host_picks_up_is_withdrawn_after_the_wait(cluster: Place, monkeypatch: pytest.MonkeyPatch) -> None:
    from hermes_actors.store.pg import PostgresStore

    assert isinstance(cluster.store, PostgresStore)
    cluster.store.shards.ensure(4)  # hosts ran once; none runs now
    monkeypatch.setattr(admin_requests, "CHANGE_TIMEOUT_S", 0.3)
    record = make(cluster.store, "hi", title="before")
    started = time.monotonic()
    result = cluster.run("rename", record.id, "after")
    assert time.monotonic() - started < 5
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: no shard host applied the change to session {record.id} within 0.3 s")
    assert "withdrawn and nothing changed; check that a host holds the shard with 'hermesctl cluster status'" in (
        result.output
    )
    assert _admin_rows(cluster) == [InboxState.REJECTED]  # a host started later does not apply it
    assert cluster.store.get_session(record.id).title == "before"


def test_a_change_a_host_took_but_did_not_finish_in_time_is_not_withdrawn(
    cluster: Place, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hermes_actors.store.pg import PostgresStore

    pg = cluster.store
    assert isinstance(pg, PostgresStore)
    pg.shards.ensure(4)
    monkeypatch.setattr(admin_requests, "CHANGE_TIMEOUT_S", 2.0)
    record = make(pg, "hi")
    stop = threading.Event()

    def slow_host() -> None:  # takes the row, then never completes it (a turn of the session runs long)
        while not stop.wait(0.01):
            for _, row in pg.shard_queue.pending(range(4)):
                if row.kind is InboxKind.ADMIN and pg.shard_queue.take(row.id, "host-1:7:1"):
                    return

    taker = threading.Thread(target=slow_host)
    taker.start()
    try:
        result = cluster.run("end", record.id)
    finally:
        stop.set()
        taker.join()
    assert result.exit_code == 1
    assert result.output == (
        f"Error: host-1:7:1 took the change to session {record.id} but has not finished it within 2 s (a turn of the "
        "session may still be running); it applies when that turn ends. Check it with 'hermesctl sessions show', "
        "and the hosts with 'hermesctl cluster status'\n"
    )
    assert _admin_rows(cluster) == [InboxState.PENDING]  # still the host's to complete
