"""``hermesctl sessions export --format md|html``: one document per conversation, on a real SQLite home."""

from __future__ import annotations

import json
import time
from html.parser import HTMLParser
from pathlib import Path

from click.testing import CliRunner, Result

from hermes_actors.agents.history import SUMMARY_HEADER
from hermes_actors.cli.hermesctl import main
from hermes_actors.messages import Attachment, AttachmentKind
from hermes_actors.routing import SessionSource
from hermes_actors.store import EndReason, NewMessage, Role, Store

SCRIPT = "<script>document.title='pwned'</script><img src=x onerror=alert(1)>"


def run(home: Path, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--home", str(home)])


def seed(store: Store, home: Path) -> tuple[str, str]:
    """A conversation of two segments (tool call, tool result, a picture, a hostile text, a compression summary
    carrying one message over) and a second conversation; returns the first one's root and tip."""
    now = time.time()
    source = SessionSource(platform="telegram", chat_id="42", user_id="u1")
    root = store.create_session(source, title="Trip plans", routing_key="k1", started_at=now - 100)
    picture = home / "media" / "ab" / ("ab" * 32 + ".png")
    picture.parent.mkdir(parents=True)
    picture.write_bytes(b"\x89PNG fake")
    calls = [{"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}]
    with store.transaction():
        (asked,) = store.append_messages(
            root.id, [NewMessage(role=Role.USER, content="Weather in Oslo? ```odd``` fence")], at=now - 90
        )
        store.attachments.add(
            asked, Attachment(kind=AttachmentKind.IMAGE, name="map.png", mime_type="image/png", path=str(picture))
        )
    store.append_messages(
        root.id,
        [
            NewMessage(role=Role.ASSISTANT, content="Let me look.", tool_calls=json.dumps(calls)),
            NewMessage(role=Role.TOOL, content="rain, 4 C", tool_name="weather", tool_call_id="c1"),
            NewMessage(role=Role.ASSISTANT, content="Rainy, 4 degrees."),
            NewMessage(role=Role.USER, content=SCRIPT),
        ],
        at=now - 80,
    )
    store.end_session(root.id, EndReason.COMPRESSION, at=now - 70)
    child = store.create_session(source, parent_session_id=root.id, title="Trip plans #2", started_at=now - 70)
    store.append_messages(
        child.id,
        [
            NewMessage(role=Role.SYSTEM, content=f"{SUMMARY_HEADER}\nThey asked about Oslo's weather."),
            NewMessage(role=Role.USER, content=SCRIPT),  # carried over: shown once, in the first part
            NewMessage(role=Role.USER, content="And tomorrow?"),
            NewMessage(role=Role.ASSISTANT, content="Sunny tomorrow."),
        ],
        at=now - 60,
    )
    other = store.create_session(SessionSource(platform="slack", chat_id="C1", user_id="u2"), started_at=now - 50)
    store.append_messages(other.id, [NewMessage(role=Role.USER, content="hello from slack")], at=now - 40)
    return root.id, child.id


class _Elements(HTMLParser):
    """Every start tag with its attributes, and the text between tags."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(page: str) -> _Elements:
    elements = _Elements()
    elements.feed(page)
    elements.close()
    return elements


def test_markdown_to_stdout_holds_the_lineage_in_order_with_tools_folded_and_carried_messages_once(
    home: Path, store: Store
) -> None:
    root, tip = seed(store, home)
    result = run(home, "sessions", "export", "--format", "md", "--session-id", tip, "-")
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert text.startswith("# Trip plans #2\n")
    order = ["Weather in Oslo?", "**Tool call** `weather`", "**Tool result** `weather`", "Rainy, 4 degrees."]
    order += ["## Part 2", "Summary of the earlier conversation", "And tomorrow?", "Sunny tomorrow."]
    positions = [text.index(piece) for piece in order]
    assert positions == sorted(positions)
    assert f"session {root}" in text
    assert f"session {tip}" in text
    assert text.count(SCRIPT) == 1  # the carried-over copy is not repeated
    assert '> ```json\n> {"city": "Oslo"}\n> ```' in text  # the call is a quoted block
    picture = (home / "media" / "ab" / ("ab" * 32 + ".png")).resolve()
    assert f"(<{picture.as_uri()}>)" in text  # standard output links by file:// URL
    assert "hello from slack" not in text


def test_html_file_is_self_contained_escaped_and_runs_no_script(home: Path, store: Store) -> None:
    _, tip = seed(store, home)
    out = home.parent / "out" / "trip.html"
    out.parent.mkdir()
    result = run(home, "sessions", "export", "--format", "html", "--session-id", "Trip plans", str(out))
    assert result.exit_code == 0, result.output
    assert "Exported 1 conversation to" in result.stderr
    page = out.read_text(encoding="utf-8")
    elements = parse(page)
    tags = [tag for tag, _ in elements.tags]
    assert "script" not in tags
    assert "img" not in tags
    assert "iframe" not in tags
    assert not [attrs for _, attrs in elements.tags if any(name.startswith("on") for name in attrs)]
    assert SCRIPT in "".join(elements.text)  # shown as text
    policy = next(a["content"] for t, a in elements.tags if t == "meta" and a.get("http-equiv"))
    assert policy is not None
    assert "default-src 'none'" in policy
    assert "script-src" not in policy
    assert not [a for t, a in elements.tags if t in ("link", "script") or (t == "img" and a.get("src"))]
    assert tags.count("details") == 3  # the tool call, its result and the summary, folded
    links = [a["href"] for t, a in elements.tags if t == "a"]
    assert links == [f"../home/media/ab/{'ab' * 32}.png"]  # relative to the written file
    assert (out.parent / str(links[0])).resolve().read_bytes() == b"\x89PNG fake"
    assert f"Conversation {tip}" in page


def test_a_directory_gets_one_file_per_conversation_and_jsonl_stays_the_default(home: Path, store: Store) -> None:
    _, tip = seed(store, home)
    out = home.parent / "docs"
    result = run(home, "sessions", "export", "--format", "md", str(out))
    assert result.exit_code == 0, result.output
    files = sorted(p.name for p in out.iterdir())
    assert len(files) == 2
    assert f"Trip-plans-2-{tip}.md" in files
    slack = next(p for p in out.iterdir() if p.name != f"Trip-plans-2-{tip}.md").read_text()
    assert "hello from slack" in slack
    assert "Oslo" not in slack
    default = run(home, "sessions", "export")
    assert default.exit_code == 0
    assert [json.loads(line)["source"] for line in default.stdout_bytes.splitlines()] == [
        "telegram",
        "telegram",
        "slack",
    ]


def test_many_conversations_into_one_html_output_is_an_error_naming_the_fix(home: Path, store: Store) -> None:
    seed(store, home)
    result = run(home, "sessions", "export", "--format", "html", "-")
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "Error: 2 conversations to export, and standard output takes one HTML page; name one with --session-id, "
        "or give a directory as OUT for one file each"
    )
    single = run(home, "sessions", "export", "--format", "md", str(home.parent / "all.md"))
    assert single.exit_code == 1
    assert "all.md is one file" in single.stderr
    assert not (home.parent / "all.md").exists()
