"""``hermesctl db copy``: a SQLite home into an empty PostgreSQL database of the test cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from hermes_actors.cli.hermesctl import main
from hermes_actors.messages import Attachment, AttachmentKind, ResponseRecord
from hermes_actors.store import EndReason, NewMessage, Role, Store
from hermes_actors.store.records import HomeChannel
from tests.postgres import Cluster

pytest.importorskip("psycopg")

from hermes_actors.store.pg import PostgresStore


@pytest.fixture
def empty_dsn(postgres_cluster: Cluster) -> Iterator[str]:
    """A database without any table: what an operator's ``createdb`` gives."""
    name = postgres_cluster.create_database(empty=True)
    try:
        yield postgres_cluster.dsn(name)
    finally:
        postgres_cluster.drop_database(name)


def run(home: Path, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--home", str(home)])


def seed(store: Store) -> tuple[str, str]:
    parent = store.create_session("telegram", title="deploy notes", routing_key="agent:main:telegram:dm:1")
    ids = store.append_messages(
        parent.id,
        [
            NewMessage(role=Role.USER, content="how do I deploy the docker image"),
            NewMessage(role=Role.ASSISTANT, content="我们来讨论中文分词和全文搜索的问题"),
            NewMessage(role=Role.TOOL, content=None, tool_calls='[{"id": "1"}]'),
        ],
    )
    store.attachments.add(ids[0], Attachment(kind=AttachmentKind.IMAGE, mime_type="image/png", name="shot.png"))
    store.end_session(parent.id, EndReason.COMPRESSION)
    child = store.create_session("telegram", parent_session_id=parent.id, title="deploy notes #2")
    store.append_messages(child.id, [NewMessage(role=Role.USER, content="continued")])
    store.set_route("agent:main:telegram:dm:1", child.id)
    inbox = store.inbox.add(
        platform="telegram", account_id="", platform_message_id="m1", routing_key="k", payload=b"\x00\x01"
    )
    assert inbox is not None
    store.inbox.complete(inbox, session_id=child.id)
    store.outbox.add(session_id=child.id, platform="telegram", account_id="", chat_id="1", thread_id=None, payload=b"r")
    store.memories.add("telegram:1", ["likes docker"], source_session_id=parent.id)
    store.timers.set("reset:" + child.id, 123.0, b"p")
    store.kv.set_cursor("telegram", "42")
    store.kv.set_meta("last_auto_prune", "1.0")
    store.homes.set(HomeChannel(platform="telegram", account_id="", chat_id="1"))
    for rid in ("resp_b", "resp_a"):  # the same second: the one saved last is the newest
        store.responses.save(
            ResponseRecord(
                id=rid, session_id=child.id, scope="k", status="completed", body=b"{}", created_at=1.0, conversation="c"
            )
        )
    return parent.id, child.id


def test_a_home_is_copied_with_its_ids_and_is_searchable_there(home: Path, store: Store, empty_dsn: str) -> None:
    parent, child = seed(store)

    result = run(home, "db", "copy", "--to", empty_dsn, "--batch-size", "2")

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].startswith("Copied 2 sessions to ")
    assert "messages 4, attachments 1, routes 1, inbox 1, outbox 1, poll_cursors 1, home_channels 1" in result.stdout
    assert "copying messages: 4/4 rows (100%)" in result.stderr
    with PostgresStore.open(empty_dsn) as pg:
        for session_id in (parent, child):
            assert pg.get_session(session_id) == store.get_session(session_id)
            assert pg.load_transcript(session_id) == store.load_transcript(session_id)
        assert pg.lineage_chain(child) == [parent, child]
        assert pg.get_route("agent:main:telegram:dm:1") == child
        assert pg.attachments.for_session(parent) == store.attachments.for_session(parent)
        assert [h.message_id for h in pg.fts_query("分词").hits] == [h.message_id for h in store.fts_query("分词").hits]
        assert pg.memories.for_user("telegram:1") == ["likes docker"]
        assert [(t.name, t.payload) for t in pg.timers.all()] == [("reset:" + child, b"p")]
        assert pg.kv.get_cursor("telegram") == "42"
        assert pg.inbox.get(1) == store.inbox.get(1)
        assert pg.outbox.unsent() == store.outbox.unsent()
        assert pg.responses.get("resp_b", "k") == store.responses.get("resp_b", "k")
        latest = pg.responses.latest_in("k", "c")
        assert latest is not None
        assert latest.id == "resp_a"
        # The identities continue after the copied ids.
        later = pg.create_session("cli")
        assert pg.append_messages(later.id, [NewMessage(role=Role.USER, content="x")]) == [5]


def test_a_target_that_holds_rows_is_refused_naming_the_fix(home: Path, store: Store, empty_dsn: str) -> None:
    seed(store)
    with PostgresStore.open(empty_dsn) as pg:
        pg.create_session("cli")

    result = run(home, "db", "copy", "--to", empty_dsn)

    assert result.exit_code == 1
    assert "is not empty (it holds 1 sessions); copy into an empty database" in result.output
    assert "createdb" in result.output


def test_a_home_without_a_database_is_an_error_naming_the_fix(home: Path, empty_dsn: str) -> None:
    result = run(home, "db", "copy", "--to", empty_dsn)
    assert result.exit_code == 1
    assert "no database at" in result.output


def test_a_database_that_cannot_be_reached_is_named_with_the_servers_refusal(
    home: Path, store: Store, postgres_cluster: Cluster
) -> None:
    seed(store)
    result = run(home, "db", "copy", "--to", postgres_cluster.dsn("no_such_database"))
    assert result.exit_code == 1
    assert "cannot connect to PostgreSQL at " in result.output
    assert 'database "no_such_database" does not exist' in result.output
