"""``hermesctl sessions list`` and ``show`` name each session's agent: an ``AGENT`` column once a named agent other
than the default answers a listed session, an ``Agent:`` line in ``show``, and the field in ``--json``."""

from __future__ import annotations

import json
import time
from pathlib import Path

from click.testing import CliRunner, Result

from hermes_actors.cli.hermesctl import main
from hermes_actors.store import EndReason, NewMessage, Role, SessionRecord, Store


def run(home: Path, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--home", str(home)])


def session(store: Store, *, agent: str | None, ago: float, parent: str | None = None) -> SessionRecord:
    now = time.time()
    record = store.create_session("webhook", agent=agent, started_at=now - ago - 60, parent_session_id=parent)
    store.append_messages(record.id, [NewMessage(role=Role.USER, content="hello")], at=now - ago)
    return store.get_session(record.id)


def column(result: Result, name: str) -> list[str]:
    header, *rows = result.stdout.splitlines()
    start = header.index(name)
    end = start + len(name)
    while end < len(header) and header[end] == " ":
        end += 1
    return [row[start:end].strip() for row in rows]


def test_list_has_an_agent_column_once_a_named_agent_answers_a_listed_session(home: Path, store: Store) -> None:
    support = session(store, agent="support", ago=60)
    plain = session(store, agent="default", ago=120)
    older = session(store, agent=None, ago=180)  # from before agents had names: the default's
    result = run(home, "sessions", "list")
    assert result.exit_code == 0, result.output
    assert [row.split()[0] for row in result.stdout.splitlines()[1:]] == [support.id, plain.id, older.id]
    assert column(result, "AGENT") == ["support", "default", "default"]
    segments = run(home, "sessions", "list", "--segments")
    assert segments.exit_code == 0, segments.output
    assert column(segments, "AGENT") == ["support", "default", "default"]


def test_list_without_named_agents_keeps_its_columns(home: Path, store: Store) -> None:
    session(store, agent="default", ago=60)
    session(store, agent=None, ago=120)
    result = run(home, "sessions", "list")
    assert result.exit_code == 0, result.output
    assert "AGENT" not in result.stdout.splitlines()[0]


def test_a_compressed_conversation_is_listed_with_its_tips_agent(home: Path, store: Store) -> None:
    root = session(store, agent="sales", ago=600)
    store.end_session(root.id, EndReason.COMPRESSION)
    tip = session(store, agent="sales", ago=60, parent=root.id)
    result = run(home, "sessions", "list")
    assert result.exit_code == 0, result.output
    assert [row.split()[0] for row in result.stdout.splitlines()[1:]] == [tip.id]
    assert column(result, "AGENT") == ["sales"]


def test_show_names_the_agent_and_json_carries_it(home: Path, store: Store) -> None:
    support = session(store, agent="support", ago=60)
    older = session(store, agent=None, ago=120)
    shown = run(home, "sessions", "show", support.id)
    assert shown.exit_code == 0, shown.output
    assert "Agent:    support" in shown.stdout.splitlines()
    assert "Agent:    default" in run(home, "sessions", "show", older.id).stdout.splitlines()
    listed = run(home, "sessions", "list", "--json")
    assert listed.exit_code == 0, listed.output
    assert {entry["id"]: entry["agent"] for entry in json.loads(listed.stdout)} == {
        support.id: "support",
        older.id: None,
    }
