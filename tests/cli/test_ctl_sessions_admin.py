"""``hermesctl sessions rename/end/delete`` without a daemon: the change is made under the session's lease, and a
reference that does not name exactly one session changes nothing."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from hermes_actors.cli.hermesctl import main
from hermes_actors.runtime.admin import describe_holder, process_kind
from hermes_actors.runtime.leases import new_lease_owner
from hermes_actors.store import EndReason, Store

HOST = socket.gethostname()


def run(home: Path, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(main, ["sessions", *args, "--home", str(home)], input=input)


def test_rename_takes_the_lease_and_gives_it_back(home: Path, store: Store) -> None:
    record = store.create_session("telegram", title="before")
    dead = f"{HOST}:999999999:1"  # a process of this host that is gone: its lease is taken over at once
    assert store.leases.acquire(record.id, dead, ttl_s=600) is None
    result = run(home, "rename", "before", "after", "all")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"Session {record.id} is now titled 'after all'.\n"
    assert store.get_session(record.id).title == "after all"
    assert store.leases.holder(record.id) is None


def test_a_change_of_a_session_another_live_process_holds_is_refused_naming_it(home: Path, store: Store) -> None:
    record = store.create_session("telegram", title="theirs")
    owner = new_lease_owner()  # this very process (pytest): alive, and not hermesd or a terminal chat
    assert store.leases.acquire(record.id, owner, ttl_s=600) is None
    expected = f"Error: session {record.id} is open in process {os.getpid()} ("
    for args in (("rename", record.id, "mine"), ("end", record.id), ("delete", record.id, "--yes")):
        result = run(home, *args)
        assert result.exit_code == 1, args
        assert result.output.startswith(expected), result.output
        assert "so nothing was changed; stop that process, or wait until its lease expires" in result.output
    after = store.get_session(record.id)
    assert (after.title, after.is_live) == ("theirs", True)
    assert store.leases.holder(record.id) == owner


def test_end_ends_as_an_operator_and_unbinds_the_chats(home: Path, store: Store) -> None:
    record = store.create_session("telegram", routing_key="agent:main:telegram:dm:1")
    store.set_route("agent:main:telegram:dm:1", record.id)
    result = run(home, "end", record.id[:12])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"Ended session {record.id}; its chats start a new session with their next message.\n"
    ended = store.get_session(record.id)
    assert (ended.is_live, ended.end_reason) == (False, "operator")
    assert store.get_route("agent:main:telegram:dm:1") is None
    again = run(home, "end", record.id)
    assert again.exit_code == 0
    assert again.stdout == f"Session {record.id} has already ended (operator); nothing to do.\n"


def test_references_that_name_several_sessions_are_refused_listing_them(home: Path, store: Store) -> None:
    first = store.create_session("cli", session_id="20260101_000000_aaaaaa")
    second = store.create_session("cli", session_id="20260101_000000_aaaaab")
    numbered = [store.create_session("cli", title=f"plan #{n}") for n in (2, 3)]
    for args in (
        ("rename", "20260101_000000_aaaa", "x"),
        ("end", "20260101_000000_aaaa"),
        ("delete", "20260101_000000_aaaa", "--yes"),
    ):
        result = run(home, *args)
        assert result.exit_code == 1, args
        assert f"matches 2 sessions: {first.id}, {second.id}" in result.output
    for args in (("rename", "plan", "x"), ("end", "plan"), ("delete", "plan", "--yes")):
        result = run(home, *args)
        assert result.exit_code == 1, args
        assert numbered[0].id in result.output
        assert numbered[1].id in result.output
    records = store.list_sessions(limit=None)
    assert len(records) == 4
    assert all(r.is_live for r in records)
    assert sorted(r.title or "" for r in records) == ["", "", "plan #2", "plan #3"]


def test_delete_without_a_daemon_deletes_under_the_lease(home: Path, store: Store) -> None:
    record = store.create_session("telegram", title="doomed")
    result = run(home, "delete", "doomed", "--yes")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"Deleted session {record.id} and 0 messages.\n"
    assert store.find_session(record.id) is None
    assert store.leases.holder(record.id) is None


@pytest.mark.parametrize(
    ("argv", "kind"),
    [
        (["/usr/bin/python3", "/venv/bin/hermesd", "--home", "/h"], "hermesd"),
        (["/venv/bin/python", "-m", "hermes_actors.cli.hermesd"], "hermesd"),
        (["/venv/bin/python", "/venv/bin/hermesctl", "chat", "--home", "/h"], "chat"),
        (["/venv/bin/hermesctl", "sessions", "rename", "x", "y"], "hermesctl"),
        (["/usr/bin/python3", "-m", "pytest"], "other"),
        ([], "other"),
    ],
)
def test_a_lease_holder_is_told_apart_by_its_command_line(argv: list[str], kind: str) -> None:
    assert process_kind(argv) == kind


def test_a_holder_on_another_host_or_of_no_known_kind_is_named_with_its_pid() -> None:
    what, fix = describe_holder("elsewhere:4242:1")
    assert what == "a process (pid 4242) on host elsewhere"
    assert "wait until its lease expires" in fix
    what, _ = describe_holder(new_lease_owner())
    assert what.startswith(f"process {os.getpid()} (")


def test_delete_of_a_lineage_member_says_which_lineage_it_belongs_to(home: Path, store: Store) -> None:
    root = store.create_session("cli", title="long talk")
    store.end_session(root.id, EndReason.COMPRESSION)
    tip = store.create_session("cli", title="long talk #2", parent_session_id=root.id)
    result = run(home, "delete", root.id, input="n\n")
    assert result.exit_code == 0, result.output
    assert f"segment 1 of 2 of lineage {root.id}; the conversation continues in {tip.id}" in result.stderr
    assert result.stdout == "Nothing deleted.\n"
    assert store.find_session(root.id) is not None
