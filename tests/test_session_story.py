"""One conversation told end to end against a scripted OpenAI-compatible model that logs what it receives.

A terminal user plans a trip: the first exchange titles it, three ``/compress`` make a lineage of four segments, the
third segment is passivated and the gateway restarted under it, the fourth is handed off to a Telegram home
channel and goes on there. Then the checks a user of the system would make: the listing shows one conversation,
each segment recorded its model, its frozen system prompt and the model's token counts, every call of a segment
sent the same system bytes (memories saved meanwhile wait for the next segment), and an export imported into a
fresh home exports byte for byte the same.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hermes_actors.agents.openai_chat import OpenAIAgent
from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.config import RuntimeConfig
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.prefix import user_key
from hermes_actors.runtime.records import source_of
from hermes_actors.store import Store
from hermes_actors.testing import FakeClock, FakePlatform, FakeThreadedPlatform
from tests.agents.chat_server import ChatServer, Scripted, completion, open_chat_server

pytestmark = pytest.mark.slow

PROMPT = "You are a careful travel planner."
TITLE = "Lisbon trip planning"
PADDING = " with every train, hotel and museum of it checked twice" * 3  # histories /compress gains on
CLI_KEY = "agent:main:cli:dm:terminal"
PROMPT_TOKENS, COMPLETION_TOKENS = 120, 9  # what the model reports for every turn call


def model(body: Any) -> Scripted:
    """Answers as a model would, by what is asked: a title, a summary, memories, or the conversation's turn."""
    last = body["messages"][-1]["content"]
    if last.startswith("Write a short descriptive title"):
        return completion(TITLE)
    if last.startswith("Summarise the conversation above"):
        return completion("We are planning a Lisbon trip: trains, hotels and museums so far.")
    if last.startswith("List what is worth remembering"):
        return completion("[]")
    return completion(f"Noted: {last[:30]}", prompt_tokens=PROMPT_TOKENS, completion_tokens=COMPLETION_TOKENS)


def is_turn(body: Any) -> bool:
    last = str(body["messages"][-1]["content"])
    return not last.startswith(("Write a short descriptive title", "Summarise the conversation", "List what is"))


def system_bytes(body: Any) -> bytes:
    """What goes before the conversation in a request, as the exact bytes sent: system message and tool list."""
    first = body["messages"][0]
    assert first["role"] == "system"
    return json.dumps([first["content"], body["tools"]], ensure_ascii=False).encode()


class Story:
    """The gateway (restartable on the same file), the terminal, the Telegram home channel and the model."""

    def __init__(self, db_path: Path, server: ChatServer) -> None:
        self.db_path = db_path
        self.server = server
        self.clock = FakeClock()
        self.ids = itertools.count(1)  # message ids stay unique across restarts (a new fake counts from m1)
        self.gateway, self.cli, self.telegram = self._start()

    def _start(self) -> tuple[Gateway, FakePlatform, FakeThreadedPlatform]:
        agent = OpenAIAgent(
            base_url=self.server.base_url, model="test-model", api_key="sk-test", max_retries=0, system_prompt=PROMPT
        )
        cli, telegram = FakePlatform("cli"), FakeThreadedPlatform("telegram")
        config = RuntimeConfig(protected_recent_messages=2, passivate_after_s=60, agent_timeout_s=10)
        gateway = Gateway(self.db_path, config=config, agent=agent, senders=[cli, telegram], clock=self.clock)
        cli.attach(gateway)
        telegram.attach(gateway)
        return gateway, cli, telegram

    def restart(self) -> None:
        self.gateway.stop(timeout=10)
        self.gateway, self.cli, self.telegram = self._start()

    def say(self, text: str) -> str:
        self.cli.push(text, chat_id="terminal", message_id=f"story-{next(self.ids)}")
        reply = self.cli.pop(timeout=10).text
        assert self.gateway.wait_idle()
        return reply

    def session(self) -> str:
        session = self.gateway.session_for(CLI_KEY)
        assert session is not None
        return session

    def turns_sent(self) -> list[Any]:
        return [body for body in self.server.completion_bodies if is_turn(body)]


@pytest.fixture
def story(tmp_path: Path) -> Iterator[Story]:
    with open_chat_server() as server:
        server.respond_with(model)
        told = Story(tmp_path / "state.db", server)
        try:
            yield told
        finally:
            told.gateway.stop(timeout=10)


def ctl(home: Path, *args: str) -> str:
    result = CliRunner().invoke(hermesctl, [*args, "--home", str(home)])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_one_conversation_through_titles_compressions_passivation_restart_handoff_and_an_export(
    story: Story, tmp_path: Path
) -> None:
    segments: list[str] = []
    sent_by_segment: list[list[Any]] = []

    def segment(*texts: str) -> None:
        before = len(story.turns_sent())
        for text in texts:
            assert story.say(text + PADDING).startswith("Noted: ")
        segments.append(story.session())
        sent_by_segment.append(story.turns_sent()[before:])

    # Segment 1, titled by its first exchange; then compressed.
    segment("plan a trip to Lisbon", "book the trains", "pick the hotels")
    assert story.say("/title") == f"Title: {TITLE}"
    assert story.say("/compress").endswith(f"the conversation continues as {TITLE} #2.")
    segment("list the museums", "book the tickets")
    assert story.say("/compress").endswith(f"the conversation continues as {TITLE} #3.")

    # Segment 3: a memory saved meanwhile (by another session's reset, say), a passivation, a restart.
    before = len(story.turns_sent())
    assert story.say("find a day trip" + PADDING).startswith("Noted: ")
    with Store.open(story.db_path) as store:
        key = user_key(source_of(store.get_session(story.session())))
        assert key is not None
        store.memories.add(key, ["travels by train only"], source_session_id=None)
    story.clock.advance(61)
    story.gateway.tick()
    assert story.gateway.wait_idle()
    assert story.gateway.statistics().live_actors == 0  # passivated: the next turn builds the actor again
    assert story.say("and a day in Sintra" + PADDING).startswith("Noted: ")
    story.restart()
    assert story.say("what about Porto" + PADDING).startswith("Noted: ")
    segments.append(story.session())
    sent_by_segment.append(story.turns_sent()[before:])
    assert story.say("/compress").endswith(f"the conversation continues as {TITLE} #4.")

    # Segment 4 goes to Telegram's home channel and on there.
    story.telegram.push("/sethome", chat_id="-100200", chat_type="group", user_id="alice")
    assert story.telegram.pop().text == "This chat is now the home channel for telegram."
    before = len(story.turns_sent())
    handed = story.say("/handoff telegram")
    assert handed.startswith("Handed off to telegram (chat -100200, thread thread-1)")
    assert story.telegram.pop().text.startswith("Noted: ")  # the agent's first word in the new place
    story.telegram.push("and from the phone?", chat_id="-100200", chat_type="group", thread_id="thread-1")
    assert story.telegram.pop().text.startswith("Noted: ")
    assert story.gateway.wait_idle()
    tip = story.gateway.session_for("agent:main:telegram:group:-100200:thread-1")
    assert tip is not None
    segments.append(tip)
    sent_by_segment.append(story.turns_sent()[before:])
    story.gateway.stop(timeout=10)

    assert len(set(segments)) == 4
    with Store.open(story.db_path, readonly=True) as store:
        records = [store.get_session(s) for s in segments]
        page = store.list_lineages(limit=None)
        transcripts = [store.load_transcript(s) for s in segments]

    # The listing: one conversation, its newest segment, with the lineage's totals.
    (row,) = page.rows
    assert (row.tip.id, row.tip.title, row.compressions, row.members) == (segments[-1], f"{TITLE} #4", 3, segments)
    assert row.message_count == sum(r.message_count for r in records)
    assert (row.preview or "").startswith("plan a trip to Lisbon")
    home = story.db_path.parent
    assert len([line for line in ctl(home, "sessions", "list").splitlines() if TITLE in line]) == 1
    assert len([line for line in ctl(home, "sessions", "list", "--segments").splitlines() if TITLE in line]) == 4

    # What each segment recorded: the model, its frozen system prompt, the model's own token counts.
    assert [r.title for r in records] == [TITLE, f"{TITLE} #2", f"{TITLE} #3", f"{TITLE} #4"]
    assert [r.end_reason for r in records] == ["compression"] * 3 + [None]
    for record, sent, transcript in zip(records, sent_by_segment, transcripts, strict=True):
        assert record.model == "test-model"
        assert (record.system_prompt or "").startswith(PROMPT)
        assert record.tokens_estimated == 0
        assert (record.input_tokens, record.output_tokens) == (PROMPT_TOKENS * len(sent), COMPLETION_TOKENS * len(sent))
        replies = [m for m in transcript if m.role == "assistant" and (m.content or "").startswith("Noted: ")]
        answered = replies[len(replies) - len(sent) :]  # after those a compression carried over from the parent
        assert [m.token_count for m in answered] == [COMPLETION_TOKENS] * len(sent)

    # The same system bytes on every call of a segment, across the passivation and the restart; the memory saved
    # during segment 3 first reaches the model with segment 4, frozen at its start.
    for record, sent in zip(records, sent_by_segment, strict=True):
        assert len({system_bytes(body) for body in sent}) == 1
        assert json.loads(system_bytes(sent[0]))[0] == record.system_prompt
    assert len(sent_by_segment[2]) == 3  # before the passivation, after it, after the restart
    assert "travels by train only" not in (records[2].system_prompt or "")
    assert "travels by train only" in (records[3].system_prompt or "")

    # Export, import into a fresh home, export again: the same bytes.
    exported = ctl(home, "sessions", "export")
    assert len(exported.splitlines()) == 4
    dump = tmp_path / "story.jsonl"
    dump.write_text(exported, encoding="utf-8")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    Store.open(fresh / "state.db").close()
    ctl(fresh, "sessions", "import", str(dump))
    assert ctl(fresh, "sessions", "export") == exported
