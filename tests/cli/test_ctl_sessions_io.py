"""``hermesctl sessions export`` in the reference layout, and ``hermesctl sessions import`` reading it back."""

from __future__ import annotations

import json
import time
from pathlib import Path

from click.testing import CliRunner, Result

from hermes_actors.cli.hermesctl import main
from hermes_actors.messages import Attachment, AttachmentKind
from hermes_actors.routing import SessionSource
from hermes_actors.store import EndReason, NewMessage, Role, Store
from hermes_actors.store.content import store_content

MULTIMODAL = [{"type": "text", "text": "what is in this picture?"}, {"type": "image_url", "image_url": {"url": "x"}}]
ODD = ("line\nbreaks\r\nand \u2028 separators \u2029", "emoji 🧪 and NUL \x00 inside", '{"looks": "like json"}')


def run(home: Path, *args: str, input: bytes | str | None = None) -> Result:
    return CliRunner().invoke(main, [*args, "--home", str(home)], input=input)


def seed(store: Store) -> None:
    """Sessions with everything an export carries: odd text, tool calls, multimodal content, files, a parent."""
    now = time.time()
    source = SessionSource(platform="telegram", chat_id="42", user_id="u1", user_name="alice")
    first = store.create_session(source, title="trip planning", routing_key="k1", started_at=now - 100)
    store.append_messages(first.id, [NewMessage(role=Role.USER, content=text) for text in ODD], at=now - 90)
    calls = [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q": "x"}'}}]
    store.append_messages(
        first.id,
        [
            NewMessage(role=Role.ASSISTANT, tool_calls=json.dumps(calls), input_tokens=10, output_tokens=5),
            NewMessage(role=Role.TOOL, content="found", tool_name="search", tool_call_id="c1", token_count=3),
        ],
        at=now - 80,
    )
    store.end_session(first.id, EndReason.COMPRESSION, at=now - 70)
    child = store.create_session("telegram", parent_session_id=first.id, started_at=now - 70)
    # Imported from the reference system: the text rendering, then the structured value (our stored encoding).
    stored = store_content("\x00json:" + json.dumps(MULTIMODAL))
    with store.transaction():
        (message_id,) = store.append_messages(child.id, [NewMessage(role=Role.USER, content=stored)], at=now - 60)
        store.attachments.add(
            message_id, Attachment(kind=AttachmentKind.IMAGE, name="cat.png", size=72, sha256="ab" * 32)
        )
    store.append_messages(child.id, [NewMessage(role=Role.ASSISTANT, content="a cat")], at=now - 50)


def export(home: Path) -> bytes:
    result = run(home, "sessions", "export")
    assert result.exit_code == 0, result.output
    return result.stdout_bytes


def test_export_writes_the_reference_layout_with_content_as_the_agent_saw_it(home: Path, store: Store) -> None:
    seed(store)
    data = export(home)
    assert b"\\u0000json" not in data
    assert b"\x00json" not in data
    first, child = (json.loads(line) for line in data.splitlines())
    assert "session" not in first  # the session's fields at the top level, beside "messages"
    assert (first["title"], first["end_reason"], first["user_id"]) == ("trip planning", "compression", "u1")
    assert (first["message_count"], first["tool_call_count"], first["input_tokens"]) == (5, 1, 10)
    assert [m["content"] for m in first["messages"][:3]] == list(ODD)
    assert first["messages"][3]["tool_calls"][0]["function"]["name"] == "search"
    assert (first["messages"][4]["tool_name"], first["messages"][4]["token_count"]) == ("search", 3)
    assert child["parent_session_id"] == first["id"]
    assert child["messages"][0]["content"] == MULTIMODAL
    assert [a["name"] for a in child["messages"][0]["attachments"]] == ["cat.png"]


def test_export_import_export_is_byte_equal_and_a_second_import_changes_nothing(home: Path, store: Store) -> None:
    seed(store)
    before = export(home)
    backup = home / "backup.jsonl"
    backup.write_bytes(before)
    fresh = home.parent / "fresh"
    imported = run(fresh, "sessions", "import", str(backup))
    assert imported.exit_code == 0, imported.output
    assert "Imported 2 sessions and 7 messages of 2 sessions in the file." in imported.stdout
    assert "Importing" in imported.stderr  # progress goes to stderr
    assert export(fresh) == before
    again = run(fresh, "sessions", "import", str(backup))
    assert again.exit_code == 0, again.output
    assert "Imported 0 sessions and 0 messages" in again.stdout
    assert "Skipped 2 sessions already here (same id)." in again.stdout
    assert export(fresh) == before
    with Store.open(fresh / "state.db", readonly=True) as restored:
        (session,) = [s for s in restored.list_sessions(limit=None) if s.parent_session_id]
        # The agent sees the text of the multimodal message, as before the round trip.
        text = restored.load_transcript(session.id)[0].content
        assert text is not None
        assert text.startswith("what is in this picture?\n[image_url]\x00json:")


def test_import_reads_standard_input(home: Path, store: Store) -> None:
    seed(store)
    data = export(home)
    fresh = home.parent / "fresh"
    result = run(fresh, "sessions", "import", "-", input=data)
    assert result.exit_code == 0, result.output
    assert export(fresh) == data


def reference_line() -> dict[str, object]:
    """A session as the reference system's ``sessions export`` writes it (field names of its state.db)."""
    return {
        "id": "20250305_091523_a1b2c3d4",
        "source": "telegram",
        "user_id": "42",
        "session_key": "agent:main:telegram:dm:42",
        "chat_id": "42",
        "chat_type": "dm",
        "display_name": "Alice",
        "origin_json": json.dumps({"platform": "telegram", "chat_id": "42", "user_name": "alice"}),
        "model": "gpt-x",
        "started_at": 1741166123.0,
        "ended_at": 1741169000.0,
        "end_reason": "branched",
        "message_count": 9,
        "input_tokens": 120,
        "output_tokens": 30,
        "title": "refactoring auth",
        "billing_provider": "openrouter",
        "messages": [
            {"id": 1, "session_id": "x", "role": "user", "content": "hello", "timestamp": 1741166124.0, "active": 1},
            {"id": 2, "role": "user", "content": "rewound", "timestamp": 1741166125.0, "active": 0},
            {"id": 3, "role": "user", "content": MULTIMODAL, "timestamp": 1741166126.0, "active": 1},
            {
                "id": 4,
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "function": {"name": "web", "arguments": "{}"}}],
                "timestamp": 1741166127.0,
                "finish_reason": "tool_calls",
            },
        ],
    }


def test_a_reference_export_imports_with_its_fields_mapped(home: Path) -> None:
    path = home.parent / "hermes.jsonl"
    path.write_text(json.dumps(reference_line(), ensure_ascii=False) + "\n")
    result = run(home, "sessions", "import", str(path))
    assert result.exit_code == 0, result.output
    assert "Imported 1 session and 3 messages" in result.stdout
    assert "Left out 1 message the reference system had compacted or rewound away" in result.stdout
    with Store.open(home / "state.db", readonly=True) as store:
        record = store.get_session("20250305_091523_a1b2c3d4")
        messages = store.load_transcript(record.id)
    assert (record.title, record.chat_name, record.user_name, record.model) == (
        "refactoring auth",
        "Alice",
        "alice",
        "gpt-x",
    )
    assert (record.end_reason, record.ended_at) == (EndReason.SESSION_SWITCH.value, 1741169000.0)
    assert (record.message_count, record.tool_call_count, record.input_tokens) == (3, 1, 120)
    assert record.last_active_at == 1741166127.0
    assert record.routing_key is not None
    assert [m.created_at for m in messages] == [1741166124.0, 1741166126.0, 1741166127.0]
    assert messages[1].content == store_content("\x00json:" + json.dumps(MULTIMODAL))
    assert messages[2].tool_calls is not None
    assert json.loads(messages[2].tool_calls)[0]["function"]["name"] == "web"
    exported = json.loads(export(home))
    assert exported["messages"][1]["content"] == MULTIMODAL


def test_a_malformed_line_is_an_error_naming_it_and_nothing_is_imported(home: Path, store: Store) -> None:
    seed(store)
    good = export(home).splitlines(keepends=True)
    target = home.parent / "target"
    target.mkdir()
    with Store.open(target / "state.db") as existing:
        existing.create_session("cli", title="kept")
    for broken, complaint in [
        (b'{"id": "s-1", "source": "cli"\n', "line 2 is not one JSON object"),
        (b'{"id": 7, "source": "cli", "started_at": 1.0, "messages": []}\n', "line 2: Expected `str`, got `int`"),
        (
            b'{"id": "s", "source": "cli", "started_at": 1.0, "messages": [{"role": "robot", "timestamp": 1}]}\n',
            "line 2: messages[0].role 'robot' is none of system, user, assistant, tool",
        ),
    ]:
        path = home.parent / "broken.jsonl"
        path.write_bytes(good[0] + broken + good[1])
        result = run(target, "sessions", "import", str(path))
        assert result.exit_code == 1
        assert complaint in result.stderr
        assert "nothing was imported" in result.stderr
        with Store.open(target / "state.db", readonly=True) as after:
            assert [s.title for s in after.list_sessions(limit=None)] == ["kept"]


def test_a_title_held_here_is_made_unique_with_a_number_in_parentheses(home: Path, store: Store) -> None:
    seed(store)
    data = export(home)
    target = home.parent / "target"
    target.mkdir()
    with Store.open(target / "state.db") as existing:
        holder = existing.create_session("cli", title="trip planning")
    result = run(target, "sessions", "import", "-", input=data)
    assert result.exit_code == 0, result.output
    assert f"-> 'trip planning (2)' (Title 'trip planning' is already in use by session {holder.id})" in result.stdout
    with Store.open(target / "state.db", readonly=True) as after:
        assert {s.title for s in after.list_sessions(limit=None)} == {"trip planning", "trip planning (2)", None}


def test_import_of_a_missing_file_names_the_fix(home: Path) -> None:
    result = run(home, "sessions", "import", str(home / "nope.jsonl"))
    assert result.exit_code == 1
    assert "no file" in result.stderr
    assert "'hermesctl sessions export'" in result.stderr


def test_export_of_one_lineage_segment_says_which_lineage_it_belongs_to(home: Path, store: Store) -> None:
    root = store.create_session("cli", title="long talk")
    store.end_session(root.id, EndReason.COMPRESSION)
    tip = store.create_session("cli", title="long talk #2", parent_session_id=root.id)
    result = run(home, "sessions", "export", "--session-id", root.id)
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["id"] for line in result.stdout.splitlines()] == [root.id]  # that segment only
    assert f"segment 1 of 2 of lineage {root.id}; the conversation continues in {tip.id}" in result.stderr
