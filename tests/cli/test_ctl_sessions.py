from __future__ import annotations

import errno
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import click
import msgspec
import pytest
from click.testing import CliRunner, Result

from hermes_actors.cli import ctl_backup, ctl_db, ctl_sessions, ctl_sessions_admin, ctl_sessions_io
from hermes_actors.cli.ctl_sessions import parse_age
from hermes_actors.cli.formatting import (
    display_width,
    format_bytes,
    one_line,
    plural,
    relative_time,
    render_table,
    truncate,
)
from hermes_actors.cli.hermesctl import main
from hermes_actors.cli.session_text import lineage_text
from hermes_actors.store import EndReason, NewMessage, Role, SessionRecord, Store
from hermes_actors.store.export import SessionExport, decode_export_line, encode_export_line

MINUTE = 60.0
HOUR = 3_600.0
DAY = 86_400.0
NOW = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC

ODD_TEXTS = (
    "plain ascii",
    "你好，世界。日本語のテキスト、한국어 문장",
    "line\nbreaks\r\nand\ttabs",
    "separators\u2028inside\u2029text",
    "emoji 🧪👩‍🔬 and combining e\u0301",
    "right-to-left \u202eevil\u202c and zero\u200bwidth \ufeff",
    "escape \x1b[31mred\x1b[0m and bell \x07",
    '{"looks": "like json"}\\n',
)


def run(home: Path, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(main, [*args, "--home", str(home)], input=input)


def user(text: str) -> NewMessage:
    return NewMessage(role=Role.USER, content=text)


def make_session(
    store: Store,
    *,
    active_ago: float,
    source: str = "telegram",
    title: str | None = None,
    texts: tuple[str, ...] = ("hello",),
    ended_ago: float | None = None,
    reason: EndReason = EndReason.IDLE,
    parent: str | None = None,
) -> SessionRecord:
    """A session last active ``active_ago`` seconds ago, ended ``ended_ago`` seconds ago when given."""
    now = time.time()
    record = store.create_session(source, title=title, started_at=now - active_ago - MINUTE, parent_session_id=parent)
    if texts:
        store.append_messages(record.id, [user(t) for t in texts], at=now - active_ago)
    if ended_ago is not None:
        store.end_session(record.id, reason, at=now - ended_ago)
    return store.get_session(record.id)


def ids(store: Store) -> set[str]:
    return {r.id for r in store.list_sessions(limit=None)}


def message_count(store: Store) -> int:
    value = store._connection.execute("SELECT count(*) FROM messages").get
    assert isinstance(value, int)
    return value


# -- formatting --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ago", "expected"),
    [
        (0, "just now"),
        (59, "just now"),
        (-30, "just now"),
        (60, "1m ago"),
        (5 * MINUTE + 59, "5m ago"),
        (59 * MINUTE, "59m ago"),
        (HOUR, "1h ago"),
        (3 * HOUR + 59 * MINUTE, "3h ago"),
        (DAY - 1, "23h ago"),
        (DAY, "yesterday"),
        (2 * DAY - 1, "yesterday"),
        (2 * DAY, "2d ago"),
        (4 * DAY + 5 * HOUR, "4d ago"),
        (7 * DAY - 1, "6d ago"),
        (7 * DAY, "2027-01-08"),
        (400 * DAY, "2025-12-11"),
        (-2 * MINUTE, "2027-01-15"),  # from the future (a skewed clock): the date, not a negative age
    ],
)
def test_relative_time_follows_the_hermes_buckets(ago: float, expected: str) -> None:
    assert relative_time(NOW - ago, now=NOW, tz=UTC) == expected


def test_truncate_and_tables_measure_wide_characters_in_columns() -> None:
    assert display_width("abc") == 3
    assert display_width("你好") == 4
    assert display_width("e\u0301") == 1
    assert truncate("hello world", 20) == "hello world"
    assert truncate("hello world", 8) == "hello w…"
    assert truncate("你好世界你好", 7) == "你好世…"
    assert display_width(truncate("你好世界你好", 6)) <= 6
    lines = render_table(["ID", "N", "NAME"], [["a", "5", "你好"], ["bbb", "12", "x"]], right_aligned=(1,))
    assert lines == ["ID    N  NAME", "a     5  你好", "bbb  12  x"]


def test_one_line_removes_what_could_repaint_a_terminal() -> None:
    assert one_line("a\x1b[31mred\x1b[0m\nnext\u202eline\x07") == "a[31mred[0m nextline"


def test_sizes_and_plurals_read_naturally() -> None:
    assert [format_bytes(n) for n in (0, 999, 1000, 1_250_000, 3_400_000_000)] == [
        "0 B",
        "999 B",
        "1.0 KB",
        "1.2 MB",
        "3.4 GB",
    ]
    assert (plural(1, "session"), plural(0, "session"), plural(2, "message")) == (
        "1 session",
        "0 sessions",
        "2 messages",
    )


@pytest.mark.parametrize(
    ("text", "seconds", "shown"),
    [
        ("30m", 1800.0, "30m"),
        ("12h", 43_200.0, "12h"),
        ("90d", 90 * DAY, "90d"),
        ("2w", 14 * DAY, "2w"),
        ("1.5D", 1.5 * DAY, "1.5d"),
        ("90", 90 * DAY, "90d"),
    ],
)
def test_ages_take_minutes_hours_days_weeks_and_plain_days(text: str, seconds: float, shown: str) -> None:
    assert (parse_age(text).seconds, parse_age(text).text) == (seconds, shown)


@pytest.mark.parametrize("text", ["", "d", "9x", "-3d", "3 days", "1e3d", "٣d", "٣"])
def test_other_ages_are_refused_naming_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match=r"30m \(minutes\), 12h \(hours\), 90d \(days\) or 2w \(weeks\)"):
        parse_age(text)


# -- list --------------------------------------------------------------------------------------------------------


def test_list_puts_the_newest_activity_first_with_relative_times(home: Path, store: Store) -> None:
    old = make_session(store, active_ago=40 * DAY, title="old one", ended_ago=39 * DAY)
    hours = make_session(store, active_ago=3.5 * HOUR, title="three hours", source="cli")
    fresh = make_session(store, active_ago=5, title="fresh")
    result = run(home, "sessions", "list")
    assert result.exit_code == 0, result.output
    header, *rows = result.stdout.splitlines()
    assert header.split() == [
        "ID",
        "TITLE",
        "PREVIEW",
        "SOURCE",
        "MESSAGES",
        "COMPRESSIONS",
        "LAST",
        "ACTIVE",
        "STATUS",
    ]
    assert [row.split()[0] for row in rows] == [fresh.id, hours.id, old.id]
    assert "just now" in rows[0]
    assert rows[0].rstrip().endswith("live")
    assert "3h ago" in rows[1]
    assert " cli " in rows[1]
    old_date = datetime.fromtimestamp(old.last_active_at).strftime("%Y-%m-%d")
    assert old_date in rows[2]
    assert rows[2].rstrip().endswith("ended (idle)")


def test_list_filters_by_source_and_limits(home: Path, store: Store) -> None:
    made = [make_session(store, active_ago=HOUR * (10 - i), source="cli" if i % 2 else "telegram") for i in range(6)]
    newest_cli = [r.id for r in reversed(made) if r.source == "cli"]
    result = run(home, "sessions", "list", "--source", "cli", "--limit", "2")
    assert result.exit_code == 0, result.output
    *table, note = result.stdout.splitlines()
    assert [row.split()[0] for row in table[1:]] == newest_cli[:2]
    assert note == "2 of 3 (--limit N for more, --limit 0 for all)"
    everything = run(home, "sessions", "list", "--limit", "0")
    assert len(everything.stdout.splitlines()) == 1 + 6
    assert run(home, "sessions", "list", "--source", "slack").stdout == "No sessions from slack.\n"


def test_list_json_prints_the_full_records(home: Path, store: Store) -> None:
    made = make_session(store, active_ago=HOUR, title="a title", texts=("one", "two"))
    result = run(home, "sessions", "list", "--json")
    assert result.exit_code == 0, result.output
    records = msgspec.json.decode(result.stdout, type=list[SessionRecord])
    assert records == [made]
    assert json.loads(result.stdout)[0]["message_count"] == 2


def make_lineage(store: Store, segments: int, *, title: str, first: str, active_ago: float) -> list[SessionRecord]:
    """A conversation compressed ``segments - 1`` times, its tip last active ``active_ago`` seconds ago."""
    chain = [make_session(store, active_ago=active_ago + segments * MINUTE, title=title, texts=(first, "more"))]
    for number in range(2, segments + 1):
        store.end_session(chain[-1].id, EndReason.COMPRESSION, at=time.time() - active_ago - (segments - number) * 10)
        child = make_session(
            store,
            active_ago=active_ago + (segments - number) * 10,
            title=f"{title} #{number}",
            texts=(f"step {number}",),
            parent=chain[-1].id,
        )
        chain.append(child)
    return [store.get_session(r.id) for r in chain]


def test_list_shows_a_compressed_conversation_as_one_row_with_its_totals(home: Path, store: Store) -> None:
    chain = make_lineage(store, 15, title="deploy", first="how do I deploy the cluster?", active_ago=HOUR)
    alone = make_session(store, active_ago=2 * HOUR, title="alone", texts=("just one",))
    result = run(home, "sessions", "list")
    assert result.exit_code == 0, result.output
    header, *rows = result.stdout.splitlines()
    assert [row.split()[0] for row in rows] == [chain[-1].id, alone.id]
    columns = ["ID", "TITLE", "PREVIEW", "SOURCE", "MESSAGES", "COMPRESSIONS"]
    starts = [header.index(name) for name in columns]
    cells = [rows[0][a:b].strip() for a, b in zip(starts, [*starts[1:], header.index("LAST ACTIVE")], strict=True)]
    assert cells == [chain[-1].id, "deploy #15", "how do I deploy the cluster?", "telegram", "16", "14"]
    assert sum(r.message_count for r in chain) == 16
    assert "just one" in rows[1]
    segments = run(home, "sessions", "list", "--segments")
    assert segments.exit_code == 0, segments.output
    _, *member_rows = segments.stdout.splitlines()
    assert [row.split()[0] for row in member_rows] == [r.id for r in reversed(chain)] + [alone.id]
    assert f"{chain[0].id}  15 of 15" in member_rows[0]
    assert f"{chain[0].id}  1 of 15" in member_rows[14]


def test_list_says_how_many_more_there_are_when_the_limit_cuts_it(home: Path, store: Store) -> None:
    for i in range(25):
        make_session(store, active_ago=HOUR + i * MINUTE)
    result = run(home, "sessions", "list")
    lines = result.stdout.splitlines()
    assert len(lines) == 1 + 20 + 1
    assert lines[-1] == "20 of 25 (--limit N for more, --limit 0 for all)"
    everything = run(home, "sessions", "list", "--limit", "0")
    assert len(everything.stdout.splitlines()) == 1 + 25
    exact = run(home, "sessions", "list", "--limit", "25")
    assert "of 25" not in exact.stdout


def test_list_json_carries_each_lineage(home: Path, store: Store) -> None:
    chain = make_lineage(store, 3, title="json", first="first words", active_ago=HOUR)
    result = run(home, "sessions", "list", "--json")
    assert result.exit_code == 0, result.output
    (entry,) = json.loads(result.stdout)
    assert entry["id"] == chain[-1].id
    assert entry["lineage"] == {
        "root_id": chain[0].id,
        "members": [r.id for r in chain],
        "message_count": 4,
        "compressions": 2,
        "preview": "first words",
    }
    with_segments = json.loads(run(home, "sessions", "list", "--json", "--segments").stdout)
    assert [s["id"] for s in with_segments[0]["segments"]] == [r.id for r in chain]


def test_list_keeps_hostile_titles_on_one_line(home: Path, store: Store) -> None:
    make_session(store, active_ago=HOUR, title="x" * 30 + "你好" * 20)
    store._connection.execute("UPDATE sessions SET title = 'evil\x1b[2J title'")  # written around the sanitiser
    result = run(home, "sessions", "list")
    assert "\x1b" not in result.stdout
    assert "evil[2J title" in result.stdout


# -- browse ------------------------------------------------------------------------------------------------------


def test_browse_picks_by_number_and_prints_the_resume_command(home: Path, store: Store) -> None:
    older = make_session(store, active_ago=2 * HOUR, title="older")
    make_session(store, active_ago=HOUR, title="newer")
    result = run(home, "sessions", "browse", input="2\n")
    assert result.exit_code == 0, result.output
    assert "\n1  " in result.stdout
    assert "\n2  " in result.stdout
    assert f"Session:  {older.id}" in result.stdout
    assert "Title:    older" in result.stdout
    assert result.stdout.endswith(f"Resume it with: hermesctl chat --resume {older.id}\n")


def test_browse_filters_by_title_or_id_then_numbers_the_matches(home: Path, store: Store) -> None:
    wanted = make_session(store, active_ago=3 * HOUR, title="Deploy notes")
    make_session(store, active_ago=2 * HOUR, title="groceries")
    make_session(store, active_ago=HOUR, title="deploy log")
    result = run(home, "sessions", "browse", input="NOTES\n1\n")
    assert result.exit_code == 0, result.output
    assert result.stdout.endswith(f"hermesctl chat --resume {wanted.id}\n")
    by_id = run(home, "sessions", "browse", input=f"{wanted.id[-5:]}\n1\n")
    assert by_id.stdout.endswith(f"hermesctl chat --resume {wanted.id}\n")
    digits = make_session(store, active_ago=4 * HOUR, title="numbered")
    store._connection.execute("UPDATE sessions SET id = '20260101_000000_00012345' WHERE id = ?", (digits.id,))
    by_digits = run(home, "sessions", "browse", input="12345\n1\n")  # not item 12345 of a 4-item list
    assert by_digits.stdout.endswith("hermesctl chat --resume 20260101_000000_00012345\n")


def test_browse_says_so_when_a_filter_or_number_matches_nothing(home: Path, store: Store) -> None:
    only = make_session(store, active_ago=HOUR, title="only")
    result = run(home, "sessions", "browse", input="zzz\n7\n1\n")
    assert result.exit_code == 0, result.output
    assert "No session here has 'zzz' in its title or id." in result.stdout
    assert "Pick a number from 1 to 1." in result.stdout
    assert result.stdout.endswith(f"hermesctl chat --resume {only.id}\n")


def test_browse_quits_on_q(home: Path, store: Store) -> None:
    make_session(store, active_ago=HOUR)
    result = run(home, "sessions", "browse", input="q\n")
    assert result.exit_code == 0, result.output
    assert "Resume" not in result.output


def test_browse_without_input_fails_with_what_to_do(home: Path, store: Store) -> None:
    make_session(store, active_ago=HOUR)
    result = run(home, "sessions", "browse", input="")
    assert result.exit_code == 1
    assert result.stderr.endswith(
        "Error: no choice was read: standard input ended; run 'hermesctl sessions browse' in a terminal, or use "
        "'hermesctl sessions list' and 'hermesctl sessions show ID'\n"
    )


def test_browse_of_an_empty_database_asks_nothing(home: Path, store: Store) -> None:
    result = run(home, "sessions", "browse", input="")
    assert (result.exit_code, result.output) == (0, "No sessions.\n")


# -- show --------------------------------------------------------------------------------------------------------


def tool_turn(store: Store, session_id: str) -> None:
    call = [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q": "docker"}'}}]
    store.append_messages(
        session_id,
        [
            user("find docker notes"),
            NewMessage(role=Role.ASSISTANT, tool_calls=json.dumps(call)),
            NewMessage(role=Role.TOOL, content="result one\nresult two", tool_name="search", tool_call_id="c1"),
            NewMessage(role=Role.ASSISTANT, content="Found two."),
        ],
    )


def test_show_prints_metadata_and_the_transcript(home: Path, store: Store) -> None:
    record = store.create_session("telegram", title="docker", model="m-1")
    tool_turn(store, record.id)
    result = run(home, "sessions", "show", record.id)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[:4] == [f"Session:  {record.id}", "Title:    docker", "Source:   telegram · dm", "Model:    m-1"]
    assert "Messages: 4 (1 tool call)" in lines
    transcript = [line.split("] ", 1)[-1].strip() for line in lines[lines.index("") + 1 :]]
    assert transcript == [
        "user: find docker notes",
        'assistant: [tool call: search({"q": "docker"})]',
        "[tool result: search]",
        "result one",
        "result two",
        "assistant: Found two.",
    ]
    assert lines[-4].startswith("    ↳ [")
    assert lines[-3] == "      result one"


def test_show_finds_a_session_by_prefix_and_by_title(home: Path, store: Store) -> None:
    record = make_session(store, active_ago=HOUR, title="my project")
    by_prefix = run(home, "sessions", "show", record.id[:-2])
    by_title = run(home, "sessions", "show", "my project")
    assert by_prefix.exit_code == by_title.exit_code == 0
    assert by_prefix.stdout == by_title.stdout
    assert by_title.stdout.startswith(f"Session:  {record.id}\n")


def test_show_refuses_an_ambiguous_prefix_naming_the_candidates(home: Path, store: Store) -> None:
    one = store.create_session("cli", session_id="20260101_000000_aaaa01")
    two = store.create_session("cli", session_id="20260101_000000_aaaa02")
    result = run(home, "sessions", "show", "20260101_000000_aaaa")
    assert result.exit_code == 1
    assert result.output == (
        f"Error: '20260101_000000_aaaa' matches 2 sessions: {one.id}, {two.id}; type more of the id\n"
    )


def test_show_of_an_unknown_session_names_the_fix(home: Path, store: Store) -> None:
    result = run(home, "sessions", "show", "nothing-like-it")
    assert result.exit_code == 1
    assert result.output == (
        "Error: no session matches 'nothing-like-it' by id, id prefix or title; "
        "list them with 'hermesctl sessions list'\n"
    )


def test_show_names_parent_children_and_the_lineage(home: Path, store: Store) -> None:
    root = make_session(store, active_ago=3 * HOUR, title="t", ended_ago=2 * HOUR, reason=EndReason.COMPRESSION)
    child = make_session(store, active_ago=HOUR, title="t #2", parent=root.id)
    result = run(home, "sessions", "show", root.id)
    assert f"Children: {child.id}" in result.stdout
    assert f"Lineage:  segment 1 of 2 of lineage {root.id}; the conversation continues in {child.id}" in (result.stdout)
    assert f"Segments: {root.id} → {child.id}" in result.stdout
    shown_child = run(home, "sessions", "show", child.id)
    assert f"Parent:   {root.id}" in shown_child.stdout
    assert f"Lineage:  segment 2 of 2 (the newest) of lineage {root.id}" in shown_child.stdout


def test_browse_offers_one_row_per_conversation_and_resumes_its_tip(home: Path, store: Store) -> None:
    chain = make_lineage(store, 4, title="long talk", first="let us talk", active_ago=HOUR)
    result = run(home, "sessions", "browse", input="1\n")
    assert result.exit_code == 0, result.output
    assert "\n2  " not in result.stdout
    assert result.stdout.endswith(f"Resume it with: hermesctl chat --resume {chain[-1].id}\n")
    by_root = run(home, "sessions", "browse", input=f"{chain[0].id}\n1\n")  # a segment's id finds its conversation
    assert by_root.stdout.endswith(f"hermesctl chat --resume {chain[-1].id}\n")


def test_the_lineage_text_names_root_tip_and_position(store: Store) -> None:
    chain = make_lineage(store, 3, title="t", first="hi", active_ago=HOUR)
    alone = make_session(store, active_ago=HOUR)
    root, middle, tip = chain
    assert lineage_text(store, middle) == (
        f"segment 2 of 3 of lineage {root.id}; the conversation continues in {tip.id}"
    )
    assert lineage_text(store, tip) == f"segment 3 of 3 (the newest) of lineage {root.id}"
    assert lineage_text(store, alone) is None


def test_show_limit_keeps_the_last_messages(home: Path, store: Store) -> None:
    record = make_session(store, active_ago=HOUR, texts=tuple(f"message {i}" for i in range(5)))
    result = run(home, "sessions", "show", record.id, "--limit", "2")
    transcript = result.stdout.split("\n\n", 1)[1].splitlines()
    assert transcript[0] == "… 3 earlier messages …"
    assert [line.split("] ", 1)[1] for line in transcript[1:]] == ["user: message 3", "user: message 4"]


def test_show_json_has_the_session_lineage_and_messages(home: Path, store: Store) -> None:
    record = make_session(store, active_ago=HOUR, texts=("a", "b", "c"))
    result = run(home, "sessions", "show", record.id, "--json", "--limit", "2")
    view = json.loads(result.stdout)
    assert view["session"]["id"] == record.id
    assert view["lineage"] == [record.id]
    assert view["children"] == []
    assert view["omitted_messages"] == 1
    assert [m["content"] for m in view["messages"]] == ["b", "c"]


# -- export ------------------------------------------------------------------------------------------------------


def seed_for_export(store: Store) -> list[SessionRecord]:
    first = make_session(store, active_ago=2 * HOUR, source="telegram", texts=ODD_TEXTS, ended_ago=HOUR)
    second = make_session(store, active_ago=HOUR, source="cli", texts=())
    tool_turn(store, second.id)
    third = make_session(store, active_ago=MINUTE, source="telegram", texts=())
    return [store.get_session(r.id) for r in (first, second, third)]


def check_export_lines(store: Store, data: bytes, expected: list[SessionRecord]) -> None:
    raw_lines = data.split(b"\n")
    assert raw_lines[-1] == b""
    lines = [json.loads(line) for line in raw_lines[:-1]]
    # The reference layout: the session's fields at the top level, beside "messages".
    assert [{k: v for k, v in line.items() if k != "messages"} for line in lines] == [
        msgspec.structs.asdict(r) for r in expected
    ]
    for line in lines:
        transcript = store.load_transcript(line["id"])
        assert [(m["role"], m["content"], m["created_at"]) for m in line["messages"]] == [
            (m.role, m.content, m.created_at) for m in transcript
        ]
    # Every line is one line to readers that split on more than "\n" (Python's splitlines among them).
    assert len(data.decode().splitlines()) == len(expected)


def test_export_writes_one_session_per_line_with_every_message(home: Path, store: Store) -> None:
    expected = seed_for_export(store)
    out = home / "backup.jsonl"
    result = run(home, "sessions", "export", str(out))
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert f"Exported 3 sessions to {out}." in result.stderr
    check_export_lines(store, out.read_bytes(), expected)
    contents = [m["content"] for m in json.loads(out.read_bytes().split(b"\n")[0])["messages"]]
    assert contents == list(ODD_TEXTS)
    assert [p.name for p in home.iterdir() if p.name.startswith(".")] == []


def test_export_to_stdout_filters_by_source_or_session(home: Path, store: Store) -> None:
    first, second, third = seed_for_export(store)
    everything = run(home, "sessions", "export")
    assert everything.exit_code == 0, everything.output
    check_export_lines(store, everything.stdout_bytes, [first, second, third])
    dash = run(home, "sessions", "export", "-", "--source", "telegram")
    check_export_lines(store, dash.stdout_bytes, [first, third])
    one = run(home, "sessions", "export", "--session-id", second.id[:-1])
    check_export_lines(store, one.stdout_bytes, [second])
    tool_calls = [m["tool_calls"] for m in json.loads(one.stdout_bytes)["messages"]]
    assert tool_calls[1][0]["function"]["name"] == "search"  # the JSON array itself, as the reference writes it


def test_export_lines_round_trip_through_the_codec(store: Store) -> None:
    seed_for_export(store)
    record = store.list_sessions(limit=None)[-1]
    export = SessionExport(session=record, messages=store.load_transcript(record.id))
    line = encode_export_line(export)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert b"\xe2\x80\xa8" not in line
    assert b"\\u2028" in line
    decoded = decode_export_line(line)
    assert (decoded.id, decoded.title, decoded.last_active_at) == (record.id, record.title, record.last_active_at)
    assert [m.role for m in decoded.messages] == [m.role for m in export.messages]


def test_export_to_a_bad_path_fails_and_writes_nothing(home: Path, store: Store) -> None:
    seed_for_export(store)
    out = home / "missing-dir" / "backup.jsonl"
    result = run(home, "sessions", "export", str(out))
    assert result.exit_code == 1
    assert result.output == f"Error: cannot write {out}: No such file or directory; choose a writable path\n"
    assert not out.parent.exists()


def test_export_failing_midway_leaves_no_partial_file(
    home: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed_for_export(store)
    out = home / "backup.jsonl"
    out.write_text("the previous backup\n")
    calls = iter(range(10))

    def fill_the_disk(export: SessionExport) -> bytes:
        if next(calls) == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return encode_export_line(export)

    monkeypatch.setattr(ctl_sessions_io, "encode_export_line", fill_the_disk)
    result = run(home, "sessions", "export", str(out))
    assert result.exit_code == 1
    assert result.stderr.endswith(
        f"Error: writing {out} failed: No space left on device; nothing was written "
        "(free space or choose another path)\n"
    )
    assert out.read_text() == "the previous backup\n"
    assert sorted(p.name for p in home.iterdir()) == ["backup.jsonl", "state.db", "state.db-shm", "state.db-wal"]


# -- delete ------------------------------------------------------------------------------------------------------


def test_delete_with_yes_removes_the_session_and_its_messages(home: Path, store: Store) -> None:
    doomed = make_session(store, active_ago=HOUR, texts=("searchable needle", "two"))
    kept = make_session(store, active_ago=HOUR, texts=("other",))
    result = run(home, "sessions", "delete", doomed.id, "--yes")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"Deleted session {doomed.id} and 2 messages.\n"
    assert ids(store) == {kept.id}
    assert message_count(store) == 1
    assert store.fts_query("needle").hits == []


def test_delete_asks_first_and_a_no_keeps_the_session(home: Path, store: Store) -> None:
    record = make_session(store, active_ago=HOUR, title="keep me", texts=("a", "b", "c"))
    declined = run(home, "sessions", "delete", record.id, input="n\n")
    assert declined.exit_code == 0, declined.output
    assert f"Delete session {record.id} 'keep me' (3 messages, live)? [y/N]" in declined.stderr
    assert declined.stdout == "Nothing deleted.\n"
    assert ids(store) == {record.id}
    accepted = run(home, "sessions", "delete", "keep me", input="y\n")
    assert accepted.exit_code == 0, accepted.output
    assert ids(store) == set()


def test_delete_without_an_answer_or_of_an_unknown_session_fails(home: Path, store: Store) -> None:
    record = make_session(store, active_ago=HOUR)
    silent = run(home, "sessions", "delete", record.id, input="")
    assert silent.exit_code == 1
    assert silent.stderr.endswith(
        "Error: no answer was read from standard input; pass --yes to go ahead without asking\n"
    )
    assert ids(store) == {record.id}
    unknown = run(home, "sessions", "delete", "no-such-session", "--yes")
    assert unknown.exit_code == 1
    assert unknown.output.startswith("Error: no session matches 'no-such-session'")


def test_delete_refuses_a_session_another_process_is_running(home: Path, store: Store) -> None:
    record = make_session(store, active_ago=MINUTE)
    assert store.leases.acquire(record.id, "otherhost:42:abc", ttl_s=60) is None
    result = run(home, "sessions", "delete", record.id, "--yes")
    assert result.exit_code == 1
    assert result.output == (
        f"Error: session {record.id} is open in a process (pid 42) on host otherhost, so nothing was changed; "
        "stop it there, or wait until its lease expires, then try again\n"
    )
    assert ids(store) == {record.id}


def test_delete_of_a_missing_database_creates_nothing(home: Path) -> None:
    result = run(home, "sessions", "delete", "x", "--yes")
    assert result.exit_code == 1
    assert not (home / "state.db").exists()


# -- rename ------------------------------------------------------------------------------------------------------


def test_rename_joins_the_words_into_the_title(home: Path, store: Store) -> None:
    record = make_session(store, active_ago=HOUR)
    result = run(home, "sessions", "rename", record.id, "deploy", "notes  2026")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"Session {record.id} is now titled 'deploy notes 2026'.\n"
    assert store.get_session(record.id).title == "deploy notes 2026"


def test_rename_to_a_title_in_use_names_its_holder(home: Path, store: Store) -> None:
    holder = make_session(store, active_ago=HOUR, title="taken")
    record = make_session(store, active_ago=HOUR)
    result = run(home, "sessions", "rename", record.id, "taken")
    assert result.exit_code == 1
    assert result.output == f"Error: Title 'taken' is already in use by session {holder.id}\n"
    assert store.get_session(record.id).title is None


def test_rename_to_a_too_long_title_says_why(home: Path, store: Store) -> None:
    record = make_session(store, active_ago=HOUR, title="before")
    result = run(home, "sessions", "rename", record.id, "x" * 101)
    assert result.exit_code == 1
    assert result.output == "Error: title is 101 characters long; the limit is 100, so shorten it\n"
    assert store.get_session(record.id).title == "before"


def test_rename_needs_a_title(home: Path, store: Store) -> None:
    record = make_session(store, active_ago=HOUR)
    assert run(home, "sessions", "rename", record.id).exit_code == 2


# -- prune -------------------------------------------------------------------------------------------------------


def seed_for_prune(store: Store) -> dict[str, str]:
    """Sessions that tell the prune filters apart, by name."""
    made = {
        "old_ended": make_session(store, active_ago=100 * DAY, ended_ago=100 * DAY),
        "old_ended_cli": make_session(store, active_ago=95 * DAY, ended_ago=95 * DAY, source="cli"),
        "old_live": make_session(store, active_ago=200 * DAY),
        "recent_ended_cli": make_session(store, active_ago=2 * DAY, ended_ago=DAY, source="cli"),
        "hours_ended": make_session(store, active_ago=13 * HOUR, ended_ago=13 * HOUR),
        "live_cli": make_session(store, active_ago=HOUR, source="cli"),
    }
    return {name: record.id for name, record in made.items()}


def test_bare_prune_deletes_sessions_ended_more_than_90_days_ago(home: Path, store: Store) -> None:
    made = seed_for_prune(store)
    result = run(home, "sessions", "prune", "--yes")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("Deleted 2 ended sessions older than 90d and 2 messages.\n")
    assert ids(store) == {made[n] for n in ("old_live", "recent_ended_cli", "hours_ended", "live_cli")}


def test_a_source_alone_replaces_the_age_default(home: Path, store: Store) -> None:
    made = seed_for_prune(store)
    result = run(home, "sessions", "prune", "--source", "cli", "--yes")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("Deleted 2 ended cli sessions and 2 messages.\n")
    assert ids(store) == {made[n] for n in ("old_ended", "old_live", "hours_ended", "live_cli")}


def test_older_than_alone_covers_every_source(home: Path, store: Store) -> None:
    made = seed_for_prune(store)
    result = run(home, "sessions", "prune", "--older-than", "12h", "--yes")
    assert result.exit_code == 0, result.output
    assert ids(store) == {made["old_live"], made["live_cli"]}
    both = run(home, "sessions", "prune", "--older-than", "1w", "--source", "cli", "--yes")
    assert both.stdout == "No ended cli sessions older than 1w to delete.\n"


def test_a_plain_number_of_days_is_accepted_as_the_reference_accepts_it(home: Path, store: Store) -> None:
    made = seed_for_prune(store)
    result = run(home, "sessions", "prune", "--older-than", "30", "--dry-run")
    assert result.exit_code == 0, result.output
    assert result.stdout == run(home, "sessions", "prune", "--older-than", "30d", "--dry-run").stdout
    assert "older than 30d" in result.stdout
    assert len(ids(store)) == len(made)


def test_dry_run_lists_what_would_go_and_changes_nothing(home: Path, store: Store) -> None:
    made = seed_for_prune(store)
    before = (ids(store), message_count(store))
    result = run(home, "sessions", "prune", "--source", "cli", "--dry-run")
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        f"Would delete 2 ended cli sessions (2 messages).\n  {made['old_ended_cli']}\n  {made['recent_ended_cli']}\n"
    )
    as_json = json.loads(run(home, "sessions", "prune", "--dry-run", "--json").stdout)
    assert as_json["dry_run"] is True
    assert as_json["session_ids"] == [made["old_ended"], made["old_ended_cli"]]  # oldest first
    assert (ids(store), message_count(store)) == before


def test_prune_asks_first_and_a_no_keeps_everything(home: Path, store: Store) -> None:
    seed_for_prune(store)
    before = ids(store)
    result = run(home, "sessions", "prune", input="n\n")
    assert result.exit_code == 0, result.output
    assert "Delete 2 ended sessions older than 90d (2 messages)? [y/N]" in result.stderr
    assert result.stdout == "Nothing deleted.\n"
    assert ids(store) == before


def test_prune_json_reports_the_result_and_vacuum_shrinks_the_file(home: Path, store: Store) -> None:
    store.create_session("cli")  # a session survives, so the file keeps its schema and more
    for _ in range(3):
        make_session(store, active_ago=100 * DAY, ended_ago=100 * DAY, texts=("x" * 2000,) * 50)
    result = run(home, "sessions", "prune", "--yes", "--vacuum", "--json")
    assert result.exit_code == 0, result.output
    outcome = json.loads(result.stdout)
    assert (outcome["sessions_deleted"], outcome["messages_deleted"], outcome["vacuumed"]) == (3, 150, True)
    assert outcome["bytes_after"] < outcome["bytes_before"]
    assert "Pruning" in result.stderr


def test_a_bad_age_is_a_usage_error_naming_the_forms(home: Path, store: Store) -> None:
    result = run(home, "sessions", "prune", "--older-than", "ninety")
    assert result.exit_code == 2
    assert "Invalid value for '--older-than': 'ninety' is not an age; give days (30) or a number and a unit: 30m" in (
        result.stderr
    )


# -- stats and help ----------------------------------------------------------------------------------------------


def test_stats_counts_live_and_ended_sessions(home: Path, store: Store) -> None:
    make_session(store, active_ago=HOUR)
    make_session(store, active_ago=HOUR, ended_ago=MINUTE)
    result = run(home, "sessions", "stats")
    assert "Live sessions: 1 (1 ended)\n" in result.stdout


def own_commands() -> list[tuple[str, click.Command]]:
    found: list[tuple[str, click.Command]] = []
    for group in (ctl_sessions.sessions, ctl_db.db):
        for name, command in group.commands.items():
            # `sessions search` is registered from another module and documented there.
            modules = (
                ctl_sessions.__name__,
                ctl_sessions_admin.__name__,
                ctl_sessions_io.__name__,
                ctl_db.__name__,
                ctl_backup.__name__,
            )
            if command.callback is not None and command.callback.__module__ in modules:
                found.append((f"{group.name} {name}", command))
    return found


def test_every_command_has_help_with_an_example() -> None:
    commands = own_commands()
    assert {name for name, _ in commands} >= {
        "sessions list",
        "sessions browse",
        "sessions show",
        "sessions export",
        "sessions import",
        "sessions delete",
        "sessions end",
        "sessions rename",
        "sessions prune",
        "sessions stats",
        "db optimize",
        "db backup",
        "db restore",
    }
    for name, command in commands:
        assert command.help is not None, name
        assert "Example: hermesctl " + name in command.help, name
        shown = CliRunner().invoke(main, [*name.split(), "--help"])
        assert shown.exit_code == 0, name
        assert "Example:" in shown.stdout, name
