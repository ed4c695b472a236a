"""``hermesctl sessions rename/end/delete --dsn`` against a shard host running in this process (no Ray): the change
reaches the session's live actor through the shard inbox, and the actor and the store agree."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from hermes_actors.cli.hermesctl import main
from hermes_actors.cluster import admin_requests
from hermes_actors.cluster.admin_requests import AdminOp, decode_request
from hermes_actors.cluster.host.runtime import HostRuntime
from hermes_actors.cluster.host.settings import HostSettings
from hermes_actors.cluster.replica.ingress import ClusterIngress
from hermes_actors.errors import HermesError, TitleInUseError
from hermes_actors.messages import decode_outbound
from hermes_actors.store import InboxState
from hermes_actors.store.pg import PostgresStore
from hermes_actors.store.records import InboxKind
from hermes_actors.testing import FakePlatform, poll_until

SHARDS = 4


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as store:
        yield store


@pytest.fixture
def host(postgres_dsn: str) -> Iterator[HostRuntime]:
    settings = HostSettings(
        name="h0", postgres_dsn=postgres_dsn, hosts=("h0",), shards=SHARDS, lease_ttl_s=3.0, grace_s=0.5
    )
    runtime = HostRuntime(settings)
    runtime.start()
    try:
        poll_until(lambda: len(runtime.fence.held()) == SHARDS, what="the host holding every shard")
        yield runtime
    finally:
        runtime.stop()


class Chat:
    """One chat's messages into the cluster, and the replies to it."""

    def __init__(self, pg: PostgresStore, chat_id: str = "c1") -> None:
        self._pg = pg
        self._ingress = ClusterIngress(pg, shards=SHARDS)
        self._platform = FakePlatform("fake")
        self._chat = chat_id

    def say(self, text: str) -> str:
        """Send ``text`` and wait for its reply; the reply's text."""
        before = len(self.replies())
        assert self._ingress.accept(self._platform.message(text, chat_id=self._chat, user_id="u1")) is not None
        poll_until(lambda: len(self.replies()) > before, timeout=20, what=f"the reply to {text!r}")
        return self.replies()[before][1]

    def replies(self) -> list[tuple[str, str]]:
        """(session id, text) of every reply, oldest first."""
        rows = self._pg.database.execute("SELECT payload FROM outbox ORDER BY id")
        replies = [decode_outbound(bytes(payload)) for (payload,) in rows]
        return [(r.session_id or "", r.text) for r in replies if r.chat_id == self._chat]


def run(dsn: str, tmp_path: Path, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(main, ["sessions", *args, "--home", str(tmp_path), "--dsn", dsn], input=input)


def admin_rows(pg: PostgresStore) -> list[tuple[InboxState, AdminOp]]:
    rows = pg.database.execute("SELECT state, payload FROM inbox WHERE kind = %s ORDER BY id", (InboxKind.ADMIN,))
    return [(InboxState(state), decode_request(bytes(payload)).op) for state, payload in rows]


def test_a_rename_reaches_the_live_actor_and_the_store(
    postgres_dsn: str, pg: PostgresStore, host: HostRuntime, tmp_path: Path
) -> None:
    chat = Chat(pg)
    assert chat.say("hello") == "echo: hello"
    session_id = chat.replies()[0][0]
    assert chat.say("/title") != "Title: deploy notes"  # no title yet, or the automatic one
    result = run(postgres_dsn, tmp_path, "rename", session_id, "deploy", "notes")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"Session {session_id} is now titled 'deploy notes'.\n"
    assert pg.get_session(session_id).title == "deploy notes"
    assert chat.say("/title") == "Title: deploy notes"  # the live actor took it, not only the store
    assert admin_rows(pg) == [(InboxState.DONE, AdminOp.RENAME)]


def test_an_end_ends_the_live_session_and_the_chat_starts_a_new_one(
    postgres_dsn: str, pg: PostgresStore, host: HostRuntime, tmp_path: Path
) -> None:
    chat = Chat(pg)
    chat.say("first")
    session_id = chat.replies()[0][0]
    result = run(postgres_dsn, tmp_path, "end", session_id[:14])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"Ended session {session_id}; its chats start a new session with their next message.\n"
    ended = pg.get_session(session_id)
    assert (ended.is_live, ended.end_reason) == (False, "operator")
    chat.say("second")
    assert chat.replies()[-1][0] != session_id
    assert pg.get_session(chat.replies()[-1][0]).is_live
    again = run(postgres_dsn, tmp_path, "end", session_id)
    assert again.stdout == f"Session {session_id} has already ended (operator); nothing to do.\n"


def test_a_delete_of_a_live_session_ends_it_first_once_confirmed(
    postgres_dsn: str, pg: PostgresStore, host: HostRuntime, tmp_path: Path
) -> None:
    chat = Chat(pg)
    chat.say("keep me?")
    session_id = chat.replies()[0][0]
    refused = run(postgres_dsn, tmp_path, "delete", session_id, input="n\n")
    assert refused.stdout == "Nothing deleted.\n"
    assert f"Session {session_id} is live in the cluster: deleting ends it first." in refused.stderr
    assert admin_rows(pg) == []  # nothing was asked of the host
    result = run(postgres_dsn, tmp_path, "delete", session_id, "--yes")
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        f"Ended session {session_id} first (it was live).\nDeleted session {session_id} and 2 messages.\n"
    )
    assert pg.find_session(session_id) is None
    assert chat.say("after") == "echo: after"
    assert chat.replies()[-1][0] != session_id


def test_a_title_held_by_another_session_is_refused_by_the_host_with_the_store_s_words(
    postgres_dsn: str, pg: PostgresStore, host: HostRuntime, tmp_path: Path
) -> None:
    holder = pg.create_session("cli", title="taken")
    chat = Chat(pg)
    chat.say("hi")
    session_id = chat.replies()[0][0]
    result = run(postgres_dsn, tmp_path, "rename", session_id, "taken")
    assert result.exit_code == 1
    assert result.output == f"Error: {TitleInUseError('taken', holder.id)}\n"
    assert pg.get_session(session_id).title != "taken"
    assert admin_rows(pg) == [(InboxState.REJECTED, AdminOp.RENAME)]


def test_a_change_of_a_session_deleted_meanwhile_is_refused_as_unknown(
    postgres_dsn: str, pg: PostgresStore, host: HostRuntime
) -> None:
    gone = pg.create_session("cli")
    pg.delete_session(gone.id)  # after hermesctl resolved it, before the host applied it
    with pytest.raises(HermesError) as refused:
        admin_requests.request_change(pg, AdminOp.END, gone.id, timeout_s=20)
    assert str(refused.value) == f"no session has id {gone.id!r}; list them with 'hermesctl sessions list'"
    assert admin_rows(pg) == [(InboxState.REJECTED, AdminOp.END)]


def test_an_ended_session_is_renamed_and_deleted_through_the_host_too(
    postgres_dsn: str, pg: PostgresStore, host: HostRuntime, tmp_path: Path
) -> None:
    chat = Chat(pg)
    chat.say("once")
    session_id = chat.replies()[0][0]
    assert run(postgres_dsn, tmp_path, "end", session_id).exit_code == 0
    renamed = run(postgres_dsn, tmp_path, "rename", session_id, "archived")
    assert renamed.exit_code == 0, renamed.output
    assert renamed.stdout == f"Session {session_id} is now titled 'archived'.\n"
    assert pg.get_session(session_id).title == "archived"
    cleared = run(postgres_dsn, tmp_path, "rename", session_id, " ")
    assert cleared.stdout == f"Cleared the title of session {session_id}.\n"
    deleted = run(postgres_dsn, tmp_path, "delete", "--yes", session_id)
    assert deleted.exit_code == 0, deleted.output
    assert deleted.stdout == f"Deleted session {session_id} and 2 messages.\n"
    assert pg.find_session(session_id) is None
    assert [op for _, op in admin_rows(pg)] == [AdminOp.END, AdminOp.RENAME, AdminOp.RENAME, AdminOp.DELETE]


def test_a_row_that_is_not_an_operator_s_change_is_refused_once(pg: PostgresStore, host: HostRuntime) -> None:
    inbox_id = pg.shard_queue.add(
        0,
        kind=InboxKind.ADMIN,
        platform="",
        account_id="",
        platform_message_id="junk",
        routing_key="x",
        payload=b"{not json",
    )
    assert inbox_id is not None
    host.poke()
    poll_until(lambda: pg.inbox.pending_among([inbox_id]) == set(), what="the junk row settled")
    row = pg.inbox.get(inbox_id)
    assert row is not None
    assert row.state is InboxState.REJECTED


def test_a_change_found_off_its_session_s_shard_goes_back_there(
    pg: PostgresStore, postgres_dsn: str, tmp_path: Path
) -> None:
    """A host holding only some shards finds a change of a session in another shard (moved by a host of an older
    version, which took it for a message): it moves it back, where the session's holder applies it."""
    from hermes_actors.cluster.admin_requests import AdminRequest, encode_request
    from hermes_actors.store.pg.shards import home_shards, shard_of

    hosts = ("h0", "h1")
    mine = home_shards("h0", hosts, SHARDS)
    record = next(r for r in (pg.create_session("cli") for _ in range(50)) if shard_of(r.id, SHARDS) not in mine)
    request = AdminRequest(op=AdminOp.RENAME, session_id=record.id, request_id="r1", title="moved back")
    inbox_id = pg.shard_queue.add(
        min(mine),
        kind=InboxKind.ADMIN,
        platform="",
        account_id="",
        platform_message_id="r1",
        routing_key="x",
        payload=encode_request(request),
    )
    assert inbox_id is not None
    home = shard_of(record.id, SHARDS)
    pg.shards.ensure(SHARDS)
    assert pg.shards.acquire("h1", [home], ttl_s=600) == {home: 1}  # the session's shard is another host's
    settings = HostSettings(name="h0", postgres_dsn=postgres_dsn, hosts=hosts, shards=SHARDS)
    runtime = HostRuntime(settings)
    runtime.start()
    try:
        poll_until(
            lambda: pg.database.value("SELECT shard FROM inbox WHERE id = %s", (inbox_id,)) == home,
            what="the change moved to its session's shard",
        )
        assert pg.inbox.pending_among([inbox_id]) == {inbox_id}  # left for that shard's holder, untaken
        assert pg.get_session(record.id).title is None
    finally:
        runtime.stop()
